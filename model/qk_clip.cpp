// QK-clip: which rows of which parameters, and their factors (qk_clip.hpp).
#include "model/qk_clip.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace trident::model {

namespace {

// What a parameter's rows are: GPT-2's fused c_attn (q, k, v blocks of C
// rows), a query or key projection (heads of D rows), MLA's query
// projection (per head qk_nope then qk_rope rows) or kv_b_proj (per head
// qk_nope key rows then v_head_dim value rows).
enum Kind { kFusedQkv, kQuery, kKey, kMlaQuery, kMlaKeyValue };

}  // namespace

QkClip::QkClip(const ParamRegistry& reg, const ModelConfig& cfg, double threshold) : cfg_(cfg), threshold_(threshold) {
  TRIDENT_CHECK(threshold > 0, "QK-clip: a threshold of {} (must be > 0)", threshold);
  const bool mla = cfg.is_mla();
  for (int64_t g = 0; g < cfg.layers + cfg.mtp.depth; ++g) {
    const std::string prefix = layer_prefix(cfg, g);
    for (const ParamSpec& p : reg.params()) {
      if (p.name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string tail = p.name.substr(prefix.size());
      int kind = -1;
      if (tail == "attn.c_attn.weight" || tail == "attn.c_attn.bias") kind = kFusedQkv;
      if (tail == "self_attn.q_proj.weight" || tail == "self_attn.q_proj.bias" || tail == "self_attn.q_b_proj.weight")
        kind = mla ? kMlaQuery : kQuery;
      if (tail == "self_attn.k_proj.weight" || tail == "self_attn.k_proj.bias") kind = kKey;
      if (tail == "self_attn.kv_b_proj.weight") kind = kMlaKeyValue;
      if (kind >= 0) targets_.push_back({&p, g, kind});
    }
  }
}

QkClip::Role QkClip::role(const Target& t, int64_t row, int64_t& head) const {
  const int64_t D = cfg_.head_dim(), C = cfg_.hidden;
  switch (t.kind) {
    case kFusedQkv:
      head = (row % C) / D;
      return row / C == 0 ? Role::q : row / C == 1 ? Role::k : Role::none;
    case kQuery:
      head = row / D;
      return Role::q;
    case kKey:
      head = row / D;  // the KV head
      return Role::k;
    case kMlaQuery: {
      const int64_t qd = cfg_.mla.qk_head_dim();
      head = row / qd;
      return row % qd < cfg_.mla.qk_nope_head_dim ? Role::q : Role::q_rope;
    }
    case kMlaKeyValue: {
      const int64_t kvd = cfg_.mla.qk_nope_head_dim + cfg_.mla.v_head_dim;
      head = row / kvd;  // MLA: a key per head
      return row % kvd < cfg_.mla.qk_nope_head_dim ? Role::k : Role::none;
    }
  }
  return Role::none;
}

std::vector<double> QkClip::gammas(const std::vector<double>& max_logit) const {
  std::vector<double> g(max_logit.size(), 1.0);
  for (size_t i = 0; i < g.size(); ++i)
    if (max_logit[i] > threshold_) g[i] = threshold_ / max_logit[i];
  return g;
}

template <typename T>
int64_t QkClip::apply(T* params, int64_t begin, int64_t end, const std::vector<double>& max_logit) const {
  const int64_t H = cfg_.heads, L = cfg_.layers + cfg_.mtp.depth;
  TRIDENT_CHECK(int64_t(max_logit.size()) == L * H, "QK-clip: {} largest logits for {} layers x {} heads",
                max_logit.size(), L, H);
  const std::vector<double> gamma = gammas(max_logit);
  const int64_t clipped = std::count_if(gamma.begin(), gamma.end(), [](double x) { return x < 1; });
  if (clipped == 0) return 0;
  // the key factor of each (layer, KV head): the square root of its query heads' smallest gamma
  const bool mla = cfg_.is_mla();
  const int64_t KV = mla ? H : cfg_.kv_heads, group = H / KV;
  std::vector<double> key(size_t(L * KV), 1.0);
  for (int64_t g = 0; g < L; ++g)
    for (int64_t h = 0; h < H; ++h) {
      double& k = key[size_t(g * KV + h / group)];
      k = std::min(k, gamma[size_t(g * H + h)]);
    }
  for (double& k : key) k = std::sqrt(k);
  for (const Target& t : targets_) {
    const ParamSpec& p = *t.param;
    const int64_t cols = p.cols(), gcols = p.global_cols();
    for (int64_t lr = 0; lr < p.rows(); ++lr) {
      const int64_t lo = std::max(begin, p.offset + lr * cols), hi = std::min(end, p.offset + (lr + 1) * cols);
      if (lo >= hi) continue;
      int64_t head = 0;
      const Role r = role(t, p.global_index(lr * cols) / gcols, head);
      double f = 1;
      if (r == Role::k) f = key[size_t(t.layer * KV + head)];
      if (r == Role::q) f = gamma[size_t(t.layer * H + head)] / key[size_t(t.layer * KV + head / group)];
      if (r == Role::q_rope) f = gamma[size_t(t.layer * H + head)];
      if (f == 1) continue;
      for (int64_t e = lo; e < hi; ++e) params[e - begin] = T(double(params[e - begin]) * f);
    }
  }
  return clipped;
}

template int64_t QkClip::apply<float>(float*, int64_t, int64_t, const std::vector<double>&) const;
template int64_t QkClip::apply<double>(double*, int64_t, int64_t, const std::vector<double>&) const;

}  // namespace trident::model
