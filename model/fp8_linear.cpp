// FP8 GEMM operands (see model/fp8_linear.hpp).
#include "model/fp8_linear.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "kernels/buffer.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::model {

namespace f8 = trident::kernels::fp8;

namespace {

Fp8Module module_of(Linear l) {
  switch (l) {
    case Linear::fc:
    case Linear::fc2:
      return Fp8Module::mlp;
    case Linear::experts_in:
    case Linear::experts_out:
    case Linear::shared_in:
    case Linear::shared_out:
      return Fp8Module::experts;
    default:
      return Fp8Module::attention;
  }
}

int64_t key(int layer, Linear l, Operand op) { return (int64_t(layer) * kLinears + int64_t(l)) * 3 + int64_t(op); }

}  // namespace

Fp8Linears::Fp8Linears(const Fp8Config& cfg, int64_t layers, std::vector<int64_t> global_layers,
                       parallel::TensorParallel& tp, parallel::ContextParallel& cp)
    : cfg_(cfg),
      frozen_(fault::broken(fault::Break::fp8_frozen_scales)),
      e5m2_forward_(fault::broken(fault::Break::fp8_e5m2_forward)),
      layers_(layers),
      global_(std::move(global_layers)),
      tp_(tp),
      cp_(cp) {
  step_.assign(global_.size(), {});
  stats_.assign(global_.size(), {});
  if (cfg_.recipe != Fp8Recipe::delayed) return;
  // every rank of a stage holds the same entries in the same order (end_step reduces them as one vector)
  for (int l = 0; l < int(global_.size()); ++l)
    for (int i = 0; i < kLinears; ++i)
      for (int op = 0; op < 3; ++op) {
        Delayed& d = delayed_[key(l, Linear(i), Operand(op))];
        d.scale.history = cfg_.amax_history, d.scale.margin = cfg_.margin, d.scale.format = format(Operand(op));
      }
}

bool fp8_applies(const Fp8Config& f, int64_t layers, int64_t g, Linear linear) {
  if (!f.on()) return false;
  if (g >= layers && f.keeps(Fp8Module::mtp)) return false;  // a multi-token prediction depth's block
  if (f.keeps(module_of(linear))) return false;
  if (f.keeps(Fp8Module::first_layer) && g == 0) return false;
  if (f.keeps(Fp8Module::last_layer) && g == layers - 1) return false;
  return true;
}

std::array<bool, 3> fp8_kept_inputs(const ModelConfig& cfg, const Fp8Config& f, int64_t g) {
  if (!f.saved_inputs || (f.recipe != Fp8Recipe::tensorwise && f.recipe != Fp8Recipe::delayed))
    return {false, false, false};
  const bool dense = !cfg.moe.is_moe(g);
  return {cfg.attention != AttentionKind::mla && fp8_applies(f, cfg.layers, g, Linear::qkv),
          dense && fp8_applies(f, cfg.layers, g, Linear::fc), dense && fp8_applies(f, cfg.layers, g, Linear::fc2)};
}

bool Fp8Linears::applies(LinearSite s) const {
  return s.layer >= 0 && fp8_applies(cfg_, layers_, global_[size_t(s.layer)], s.linear);
}

f8::Format Fp8Linears::format(Operand op) const {
  if (e5m2_forward_ && op != Operand::grad) return f8::Format::e5m2;
  return op == Operand::grad && cfg_.format == Fp8Format::hybrid ? f8::Format::e5m2 : f8::Format::e4m3;
}

void Fp8Linears::reduce_max(std::vector<float>& v, Operand op, Spread over) const {
  std::vector<double> d(v.begin(), v.end());
  if (over.tensor) d = parallel::max_over(tp_.group(), std::move(d));
  if (over.context && op != Operand::weight) d = parallel::max_over(cp_.group(), std::move(d));
  std::copy(d.begin(), d.end(), v.begin());
}

float Fp8Linears::reduced_amax(Operand op, const float* x, int64_t n) const {
  std::vector<float> a{f8::amax(x, n)};
  reduce_max(a, op);
  return a[0];
}

Fp8Linears::Delayed& Fp8Linears::delayed(LinearSite s, Operand op) const {
  auto it = delayed_.find(key(s.layer, s.linear, op));
  TRIDENT_CHECK(it != delayed_.end(), "no delayed scaling state for layer {}", s.layer);
  return it->second;
}

float Fp8Linears::scale_of(LinearSite s, Operand op, float amax) const {
  if (cfg_.recipe == Fp8Recipe::delayed) {
    Delayed& d = delayed(s, op);
    if (training_ && !std::isnan(amax)) d.step_amax = std::max(d.step_amax, amax);
    return d.scale.scale;
  }
  return f8::tensorwise_scale(format(op), amax, cfg_.power_of_two);
}

void Fp8Linears::note(LinearSite s, float amax, float scale, int64_t saturated) const {
  if (!training_) return;
  Fp8LayerStats& st = step_[size_t(s.layer)];
  st.amax = std::max(st.amax, amax);
  if (scale > 0) st.scale = st.scale == 0 ? scale : std::min(st.scale, scale);
  st.saturated += saturated;
}

std::vector<float> Fp8Linears::gather_scales(const std::vector<LinearSite>& sites, std::vector<float>& amaxes,
                                             const std::vector<bool>& over_tensor,
                                             parallel::Communicator* group) const {
  std::vector<float> scales(sites.size(), 1.0f);
  if (frozen_) return scales;
  if (cfg_.recipe == Fp8Recipe::delayed) {
    for (size_t i = 0; i < sites.size(); ++i) scales[i] = scale_of(sites[i], Operand::weight, amaxes[i]);
    return scales;
  }
  std::vector<double> whole(amaxes.begin(), amaxes.end()), split;  // split: the tensor group's share of it
  whole = parallel::max_over(group, std::move(whole));
  for (size_t i = 0; i < sites.size(); ++i)
    if (over_tensor[i]) split.push_back(whole[i]);
  split = parallel::max_over(tp_.group(), std::move(split));
  for (size_t i = 0, j = 0; i < sites.size(); ++i) {
    amaxes[i] = float(over_tensor[i] ? split[j++] : whole[i]);
    scales[i] = f8::tensorwise_scale(format(Operand::weight), amaxes[i], cfg_.power_of_two);
  }
  return scales;
}

void Fp8Linears::quantize(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols, bool along_tokens,
                          float* y) const {
  const int64_t n = rows * cols;
  if (tiled() && !frozen_) {
    const f8::Tile t = op == Operand::weight ? f8::kSquareBlock : along_tokens ? f8::kColumnTile : f8::kRowTile;
    f8::quantize_tiled(x, rows, cols, t, cfg_.power_of_two, nullptr, y, nullptr);
    if (training_) {
      const float a = f8::amax(x, n);
      note(s, a, a > 0 ? f8::kMaxE4m3 / a : 0, 0);
    }
    return;
  }
  const float scale = cast_scale(s, op, x, n);
  f8::fake_quantize(format(op), x, n, scale, y);
}

f8::Tiled8 Fp8Linears::quantize_tiled_codes(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols,
                                            bool along_tokens, uint8_t* q, float* factors) const {
  TRIDENT_CHECK(tiled_codes(), "FP8 codes with a factor per tile: blockwise scaling");
  const f8::Tile t = op == Operand::weight ? f8::kSquareBlock : along_tokens ? f8::kColumnTile : f8::kRowTile;
  f8::quantize_tiled(x, rows, cols, t, cfg_.power_of_two, q, nullptr, factors);
  if (training_) {  // as quantize()
    const float a = f8::amax(x, rows * cols);
    note(s, a, a > 0 ? f8::kMaxE4m3 / a : 0, 0);
  }
  return {q, factors};
}

float Fp8Linears::cast_scale(LinearSite s, Operand op, const float* x, int64_t n) const {
  if (frozen_) return 1.0f;  // broken on purpose: every tensor cast as it is
  if (op == Operand::weight && !precast_.empty())
    if (auto it = precast_.find(x); it != precast_.end()) {  // a gathered FP8 weight: the gather's cast
      TRIDENT_CHECK(it->second.n == n, "layer {} {}: a gathered FP8 weight of {} values read as {}", s.layer,
                    linear_name(s.linear), it->second.n, n);
      if (training_) {
        if (cfg_.recipe == Fp8Recipe::delayed) scale_of(s, op, it->second.amax);
        note(s, it->second.amax, it->second.scale, it->second.saturated);
        it->second.saturated = 0;
      }
      return it->second.scale;
    }
  // delayed scaling casts with the state's scale: the local amax is recorded, reduced once a step
  const float a = cfg_.recipe == Fp8Recipe::delayed ? f8::amax(x, n) : reduced_amax(op, x, n);
  const float scale = scale_of(s, op, a);
  if (training_) note(s, a, scale, f8::count_saturated(format(op), x, n, scale));
  return scale;
}

f8::Operand8 Fp8Linears::quantize_codes(LinearSite s, Operand op, const float* x, int64_t rows, int64_t cols,
                                        uint8_t* q) const {
  TRIDENT_CHECK(!tiled(), "FP8 codes with one scale: tensorwise or delayed scaling, not blockwise");
  const int64_t n = rows * cols;
  const float scale = cast_scale(s, op, x, n);
  f8::quantize(format(op), x, n, scale, q);
  return {q, format(op), scale};
}

void Fp8Linears::quantize_groups(LinearSite s, Operand op, const float* x, const int64_t* offsets, int64_t G,
                                 int64_t cols, bool along_tokens, Spread over, float* y) const {
  if (cfg_.recipe == Fp8Recipe::delayed || tiled() || frozen_ || precast_.count(x)) {  // a group at a time
    for (int64_t g = 0; g < G; ++g) {
      const int64_t r0 = offsets[g], r1 = offsets[g + 1];
      if (r1 > r0) quantize(s, op, x + r0 * cols, r1 - r0, cols, along_tokens, y + r0 * cols);
    }
    return;
  }
  // tensorwise: each group's amax (the same vector of G on every rank of the groups)
  std::vector<float> a(size_t(G), 0.0f);
  for (int64_t g = 0; g < G; ++g) a[size_t(g)] = f8::amax(x + offsets[g] * cols, (offsets[g + 1] - offsets[g]) * cols);
  reduce_max(a, op, over);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], n = (offsets[g + 1] - r0) * cols;
    if (n == 0) continue;
    const float scale = f8::tensorwise_scale(format(op), a[size_t(g)], cfg_.power_of_two);
    f8::fake_quantize(format(op), x + r0 * cols, n, scale, y + r0 * cols);
    if (training_) note(s, a[size_t(g)], scale, f8::count_saturated(format(op), x + r0 * cols, n, scale));
  }
}

void Fp8Linears::quantize_weights(LinearSite s, const float* w, int64_t G, int64_t rows, int64_t cols, Spread over,
                                  float* y) const {
  const std::vector<int64_t> offsets = [&] {
    std::vector<int64_t> o(size_t(G + 1));
    for (int64_t g = 0; g <= G; ++g) o[size_t(g)] = g * rows;
    return o;
  }();
  quantize_groups(s, Operand::weight, w, offsets.data(), G, cols, false, over, y);
}

void Fp8Linears::quantize_groups_codes(LinearSite s, Operand op, const float* x, const int64_t* offsets, int64_t G,
                                       int64_t cols, Spread over, uint8_t* q, float* scales) const {
  TRIDENT_CHECK(!tiled(), "FP8 codes with one scale a group: tensorwise or delayed scaling, not blockwise");
  std::vector<float> a(size_t(G), 0.0f);
  const bool each = cfg_.recipe == Fp8Recipe::delayed || frozen_ || (op == Operand::weight && precast_.count(x));
  if (!each) {  // tensorwise: each group's amax (the same vector of G on every rank of the groups)
    for (int64_t g = 0; g < G; ++g)
      a[size_t(g)] = f8::amax(x + offsets[g] * cols, (offsets[g + 1] - offsets[g]) * cols);
    reduce_max(a, op, over);
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], n = (offsets[g + 1] - r0) * cols;
    scales[g] = 1.0f;
    if (n == 0) continue;
    if (each) {
      scales[g] = cast_scale(s, op, x + r0 * cols, n);
    } else {
      scales[g] = f8::tensorwise_scale(format(op), a[size_t(g)], cfg_.power_of_two);
      if (training_) note(s, a[size_t(g)], scales[g], f8::count_saturated(format(op), x + r0 * cols, n, scales[g]));
    }
    f8::quantize(format(op), x + r0 * cols, n, scales[g], q + r0 * cols);
  }
}

void Fp8Linears::quantize_weights_codes(LinearSite s, const float* w, int64_t G, int64_t rows, int64_t cols,
                                        Spread over, uint8_t* q, float* scales) const {
  std::vector<int64_t> offsets(size_t(G + 1));
  for (int64_t g = 0; g <= G; ++g) offsets[size_t(g)] = g * rows;
  quantize_groups_codes(s, Operand::weight, w, offsets.data(), G, cols, over, q, scales);
}

void Fp8Linears::end_step(parallel::Communicator* data) {
  // one vector: the delayed amaxes, then each layer's amax and -scale (max-reduced), then the saturated counts (summed)
  std::vector<double> mx, sum;
  for (const auto& [k, d] : delayed_) mx.push_back(d.step_amax);
  for (const Fp8LayerStats& st : step_) mx.push_back(st.amax), mx.push_back(st.scale > 0 ? -st.scale : -1e30);
  for (const Fp8LayerStats& st : step_) sum.push_back(double(st.saturated));
  for (parallel::Communicator* g : {tp_.group(), cp_.group(), data}) mx = parallel::max_over(g, std::move(mx));
  for (parallel::Communicator* g : {cp_.group(), data}) sum = parallel::sum_over(g, std::move(sum));
  size_t i = 0;
  for (auto& [k, d] : delayed_) {
    if (mx[i] >= 0 && std::isfinite(mx[i])) d.scale.update(float(mx[i]));  // never an overflowed step's amax
    d.step_amax = -1, ++i;
  }
  for (size_t l = 0; l < step_.size(); ++l, i += 2)
    stats_[l] = {float(mx[i]), mx[i + 1] <= -1e30 ? 0.0f : float(-mx[i + 1]), int64_t(sum[l])};
  step_.assign(step_.size(), {});
}

std::vector<Fp8Linears::TensorState> Fp8Linears::state() const {
  std::vector<TensorState> out;
  for (const auto& [k, d] : delayed_) {
    if (d.scale.amaxes.empty()) continue;
    const int64_t l = k / (3 * kLinears);
    out.push_back({global_[size_t(l)], Linear(k / 3 % kLinears), Operand(k % 3), d.scale.scale, d.scale.amaxes});
  }
  return out;
}

void Fp8Linears::load_state(const std::vector<TensorState>& all) {
  for (const TensorState& t : all)
    for (size_t l = 0; l < global_.size(); ++l) {
      if (global_[l] != t.layer) continue;
      auto it = delayed_.find(key(int(l), t.linear, t.operand));
      if (it == delayed_.end()) continue;
      kernels::fp8::DelayedScale& d = it->second.scale;
      d.scale = t.scale;
      const size_t keep = std::min(t.amaxes.size(), size_t(d.history));  // the newest, under a shorter history
      d.amaxes.assign(t.amaxes.end() - int64_t(keep), t.amaxes.end());
    }
}

const char* linear_name(Linear l) {
  static const char* names[] = {"qkv",     "proj", "fc",         "fc2",         "q_a",       "q_b",       "kv_a",
                                "kv_rope", "kv_b", "experts_in", "experts_out", "shared_in", "shared_out"};
  return names[int(l)];
}

const char* operand_name(Operand o) {
  static const char* names[] = {"input", "weight", "grad"};
  return names[int(o)];
}

}  // namespace trident::model
