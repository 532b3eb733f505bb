// Parameter registry: names, shapes, layout and initialisation.
#include "model/params.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/philox.hpp"

namespace trident::model {

std::string layer_prefix(const ModelConfig& cfg, int64_t layer) {
  return cfg.arch == "gpt2" ? fmt::format("transformer.h.{}.", layer) : fmt::format("model.layers.{}.", layer);
}

void ParamRegistry::add(std::string name, Shape shape, ParamKind kind, InitKind init, double std) {
  ParamSpec p;
  p.name = std::move(name), p.shape = std::move(shape), p.offset = total_;
  p.kind = kind, p.init = init, p.init_std = std;
  p.numel = shape_numel(p.shape);
  total_ += p.numel;
  params_.push_back(std::move(p));
}

ParamRegistry::ParamRegistry(const ModelConfig& m, TensorShard shard, std::vector<ChunkSpec> chunks)
    : shard_(shard), chunks_(std::move(chunks)) {
  if (chunks_.empty()) chunks_.push_back({0, m.layers, true, true});
  const int64_t C = m.hidden, F = m.ffn_hidden, V = m.padded_vocab(shard.size), D = m.head_dim();
  const int64_t H = m.heads, KV = m.kv_heads;
  const double s = m.init_std;
  const double s_resid = s / std::sqrt(2.0 * double(m.layers));  // GPT-2 scaled residual projections
  const bool gpt2 = m.arch == "gpt2";
  bool has_embedding = false;
  for (const auto& c : chunks_) has_embedding |= c.embedding;
  for (const auto& chunk : chunks_) {
    if (chunk.embedding) {
      add(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", {V, C}, ParamKind::embedding,
          InitKind::normal, s);
      if (gpt2) add("transformer.wpe.weight", {m.seq_len, C}, ParamKind::embedding, InitKind::normal, s);
    }
    for (int64_t l = chunk.first_layer; l < chunk.first_layer + chunk.layers; ++l) {
      std::string p = layer_prefix(m, l);
      if (gpt2) {
        add(p + "ln_1.weight", {C}, ParamKind::norm, InitKind::ones);
        add(p + "ln_1.bias", {C}, ParamKind::bias, InitKind::zeros);
        add(p + "attn.c_attn.weight", {3 * C, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "attn.c_attn.bias", {3 * C}, ParamKind::bias, InitKind::zeros);
        add(p + "attn.c_proj.weight", {C, C}, ParamKind::weight, InitKind::normal, s_resid);
        add(p + "attn.c_proj.bias", {C}, ParamKind::bias, InitKind::zeros);
        add(p + "ln_2.weight", {C}, ParamKind::norm, InitKind::ones);
        add(p + "ln_2.bias", {C}, ParamKind::bias, InitKind::zeros);
        add(p + "mlp.c_fc.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "mlp.c_fc.bias", {F}, ParamKind::bias, InitKind::zeros);
        add(p + "mlp.c_proj.weight", {C, F}, ParamKind::weight, InitKind::normal, s_resid);
        add(p + "mlp.c_proj.bias", {C}, ParamKind::bias, InitKind::zeros);
      } else {
        add(p + "input_layernorm.weight", {C}, ParamKind::norm, InitKind::ones);
        add(p + "self_attn.q_proj.weight", {H * D, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "self_attn.k_proj.weight", {KV * D, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "self_attn.v_proj.weight", {KV * D, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "self_attn.o_proj.weight", {C, H * D}, ParamKind::weight, InitKind::normal, s);
        add(p + "post_attention_layernorm.weight", {C}, ParamKind::norm, InitKind::ones);
        add(p + "mlp.gate_proj.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "mlp.up_proj.weight", {F, C}, ParamKind::weight, InitKind::normal, s);
        add(p + "mlp.down_proj.weight", {C, F}, ParamKind::weight, InitKind::normal, s);
      }
    }
    if (chunk.head) {
      if (gpt2) {
        add("transformer.ln_f.weight", {C}, ParamKind::norm, InitKind::ones);
        add("transformer.ln_f.bias", {C}, ParamKind::bias, InitKind::zeros);
      } else {
        add("model.norm.weight", {C}, ParamKind::norm, InitKind::ones);
      }
      if (!m.tie_embeddings) {
        add("lm_head.weight", {V, C}, ParamKind::weight, InitKind::normal, s);
      } else if (!has_embedding) {  // the head's own copy of the tied embedding
        add(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", {V, C}, ParamKind::embedding,
            InitKind::normal, s);
        params_.back().tied_copy = true;
      }
    }
  }
  apply_plan(m);
}

const ParamSpec& ParamRegistry::find(const std::string& name, int64_t begin, int64_t end) const {
  for (const auto& p : params_)
    if (p.name == name && p.offset >= begin && p.offset < end) return p;
  throw Error(fmt::format("no parameter named '{}' in elements [{}, {})", name, begin, end));
}

// Global shapes -> this rank's slices, offsets in the local flat buffer.
void ParamRegistry::apply_plan(const ModelConfig& m) {
  const int r = shard_.rank, t = shard_.size;
  total_ = 0;
  for (ParamSpec& p : params_) {
    p.global_shape = p.shape;
    const int64_t rows = p.shape[0], cols = p.global_cols();
    const bool vocab_rows = p.name.find("wte") != std::string::npos || p.name.find("embed_tokens") != std::string::npos ||
                            p.name == "lm_head.weight";
    p.valid_rows = vocab_rows ? m.vocab : rows;
    const PlanEntry e = tensor_plan(m, p.name);
    p.style = e.style;
    int64_t local_rows = rows, local_cols = cols;
    p.row_ranges = {{0, rows}};
    p.col_begin = 0;
    p.replication = t > 1 ? Replication::tensor : Replication::none;
    switch (e.style) {
      case ShardStyle::replicate: break;
      case ShardStyle::column:
      case ShardStyle::vocab: {
        const int64_t part = rows / e.parts, per = part / t;
        p.row_ranges.clear();
        for (int k = 0; k < e.parts; ++k) p.row_ranges.push_back({k * part + r * per, k * part + (r + 1) * per});
        local_rows = per * e.parts;
        p.replication = Replication::none;
        break;
      }
      case ShardStyle::column_kv: {
        const int64_t D = m.head_dim(), heads = std::max<int64_t>(m.kv_heads / t, 1);
        const int64_t first = int64_t(r) * m.kv_heads / t;
        p.row_ranges = {{first * D, (first + heads) * D}};
        local_rows = heads * D;
        p.replication = m.kv_heads < t ? Replication::kv_group : Replication::none;
        break;
      }
      case ShardStyle::row:
        local_cols = cols / t;
        p.col_begin = r * local_cols;
        p.replication = Replication::none;
        break;
    }
    p.shape = p.global_shape.size() > 1 ? Shape{local_rows, local_cols} : Shape{local_rows};
    p.numel = local_rows * local_cols;
    p.offset = total_;
    total_ += p.numel;
    p.counts_in_norm = !p.tied_copy && (p.replication == Replication::none ||
                       (p.replication == Replication::tensor && r == 0) ||
                       (p.replication == Replication::kv_group && r % (t / m.kv_heads) == 0));
  }
}

int64_t ParamSpec::global_index(int64_t e) const {
  const int64_t lc = cols(), lr = e / lc, c = e % lc;
  int64_t row = lr;
  for (auto [b, end] : row_ranges) {
    if (row < end - b) return (b + row) * global_cols() + col_begin + c;
    row -= end - b;
  }
  throw Error(fmt::format("{}: local element {} outside the slice", name, e));
}

int64_t consolidated_numel(const ModelConfig& cfg) {
  int64_t n = 0;
  const ParamRegistry reg(cfg);
  for (const auto& p : reg.params()) n += p.valid_rows * p.global_cols();
  return n;
}

template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<std::pair<const ParamRegistry*, const T*>>& parts) {
  std::map<std::string, int64_t> base;  // each parameter's offset in the consolidated layout
  {
    const ParamRegistry whole(cfg);
    int64_t n = 0;
    for (const auto& p : whole.params()) base[p.name] = n, n += p.valid_rows * p.global_cols();
  }
  for (const auto& [reg, buf] : parts)
    for (const auto& p : reg->params()) {
      if (p.tied_copy) continue;
      const T* src = buf + p.offset;
      const int64_t lc = p.cols(), gc = p.global_cols(), b = base.at(p.name);
      for (int64_t lr = 0; lr < p.rows(); ++lr) {
        const int64_t g = p.global_index(lr * lc);  // first element of the local row
        if (g / gc >= p.valid_rows) continue;       // vocabulary padding
        std::copy(src + lr * lc, src + (lr + 1) * lc, out + b + g);
      }
    }
}

template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<const T*>& rank_buffers) {
  const int t = int(rank_buffers.size());
  std::vector<ParamRegistry> regs;
  for (int r = 0; r < t; ++r) regs.emplace_back(cfg, TensorShard{r, t});
  std::vector<std::pair<const ParamRegistry*, const T*>> parts;
  for (int r = 0; r < t; ++r) parts.push_back({&regs[size_t(r)], rank_buffers[size_t(r)]});
  consolidate(out, cfg, parts);
}

template void consolidate<float>(float*, const ModelConfig&, const std::vector<const float*>&);
template void consolidate<double>(double*, const ModelConfig&, const std::vector<const double*>&);
template void consolidate<float>(float*, const ModelConfig&,
                                 const std::vector<std::pair<const ParamRegistry*, const float*>>&);
template void consolidate<double>(double*, const ModelConfig&,
                                  const std::vector<std::pair<const ParamRegistry*, const double*>>&);

const ParamSpec& ParamRegistry::at(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw Error(fmt::format("no parameter named '{}'", name));
}

template <typename T>
void ParamRegistry::initialize_range(T* out, int64_t begin, int64_t end, uint64_t seed) const {
  for (const auto& p : params_) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (hi <= lo) continue;
    T* dst = out + (lo - begin);
    switch (p.init) {
      case InitKind::zeros: std::fill(dst, dst + (hi - lo), T(0)); break;
      case InitKind::ones: std::fill(dst, dst + (hi - lo), T(1)); break;
      case InitKind::normal: {
        // Philox by global index: runs of this rank's slice that are
        // contiguous in the global tensor (at most one local row each).
        const PhiloxKey key = philox_key(seed, p.name);
        const int64_t lc = p.cols();
        for (int64_t e = lo - p.offset; e < hi - p.offset;) {
          const int64_t limit = hi - p.offset, g = p.global_index(e);
          int64_t run = std::min(lc - e % lc, limit - e);
          while (e + run < limit && p.global_index(e + run) == g + run) run += std::min(lc, limit - e - run);
          philox_fill_normal(out + (p.offset + e - begin), uint64_t(g), run, key, 0.0, p.init_std);
          e += run;
        }
        break;
      }
    }
  }
}

template void ParamRegistry::initialize_range<float>(float*, int64_t, int64_t, uint64_t) const;
template void ParamRegistry::initialize_range<double>(double*, int64_t, int64_t, uint64_t) const;

}  // namespace trident::model
