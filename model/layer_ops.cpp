// The services of model/layer_ops.hpp: the GEMMs (with the CPU bf16 path's
// 2-byte operands), the model's norm, and the packing of saved activations.
#include "model/layer_ops.hpp"

#include <type_traits>

#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "model/memory.hpp"

namespace trident::model {

namespace f8 = trident::kernels::fp8;

namespace k = trident::kernels;

template <typename T>
LayerOps<T>::LayerOps(const ModelConfig& cfg, const LocalDims& dims, parallel::TensorParallel& tp,
                      parallel::ContextParallel& cp, Device device, kernels::Precision precision)
    : cfg_(cfg),
      dims_(dims),
      arch_(architecture(cfg.arch)),
      tp_(tp),
      cp_(cp),
      device_(device),
      precision_(precision),
      dq_(cfg.q_head_dim()),
      dv_(cfg.v_head_dim()),
      qkv_width_(k::attention_qkv_width(dims.heads, dims.kv_heads, dq_, dv_)),
      fc_width_(arch_.mlp_in_width(dims.ffn)) {}

template <typename T>
bool LayerOps<T>::gemm_reads_16bit() const {
  return copies && !fp8 && std::is_same_v<T, float> && precision_ == k::Precision::bf16 &&
         device_.type == DeviceType::cpu;
}

template <typename T>
void LayerOps<T>::store_grad(T* p, uint16_t* copy16, int64_t n) const {
  if (gemm_reads_16bit())
    k::store_16(p, copy16, n, precision_);
  else
    store(p, n);
}

template <typename T>
T* LayerOps<T>::scratch(Tensor& t, int64_t n) const {
  if (t.numel() < n) t = Tensor::empty({n}, dtype_of<T>(), MemCategory::activations, device_);
  return t.template data<T>();
}

template <typename T>
float* LayerOps<T>::fp8_scratch(int slot, int64_t n) const {
  Tensor& t = fp8_scratch_[slot];
  if (t.numel() < n) t = Tensor::empty({n}, DType::f32, MemCategory::activations, device_);
  return t.template data<float>();
}

template <typename T>
uint8_t* LayerOps<T>::fp8_codes(int slot, int64_t n) const {
  Tensor& t = fp8_codes_[slot];
  if (t.numel() < n) t = Tensor::empty({n}, DType::u8, MemCategory::activations, device_);
  return t.template data<uint8_t>();
}

// FP8: tensorwise and delayed scaling cast each operand to its codes and
// one scale, blockwise to its codes and a factor per tile, and the FP8
// GEMMs of kernels/fp8.hpp run (cuBLASLt's on CUDA; on the CPU the fp32
// GEMM of the decoded values). The outputs are rounded by the callers.
template <typename T>
void LayerOps<T>::linear_fwd(T* out, GemmIn<T> inp, GemmIn<T> w, const T* bias, int64_t N, int64_t C, int64_t OC,
                             LinearSite site, Fp8Input* keep) const {
  if constexpr (std::is_same_v<T, float>) {
    if (fp8_applies(site) && fp8->config().recipe != Fp8Recipe::blockwise) {
      const f8::Operand8 x =
          fp8->quantize_codes(site, Operand::input, inp.f32, N, C, keep ? keep->q : fp8_codes(0, N * C));
      if (keep) keep->op = x;
      const f8::Operand8 wq = fp8->quantize_codes(site, Operand::weight, w.f32, OC, C, fp8_codes(1, OC * C));
      return f8::linear_forward8(out, x, wq, bias, N, C, OC);
    }
    if (fp8_applies(site) && fp8->tiled_codes()) {
      const f8::Tiled8 x = fp8->quantize_tiled_codes(site, Operand::input, inp.f32, N, C, false, fp8_codes(0, N * C),
                                                     fp8_scratch(0, f8::tile_count(N, C, f8::kRowTile)));
      const f8::Tiled8 wq = fp8->quantize_tiled_codes(site, Operand::weight, w.f32, OC, C, false, fp8_codes(1, OC * C),
                                                      fp8_scratch(1, f8::tile_count(OC, C, f8::kSquareBlock)));
      return f8::linear_forward8b(out, x, wq, bias, N, C, OC);
    }
    if (fp8_applies(site)) {  // the scales frozen on purpose (TRIDENT_FAULT=fp8_frozen_scales)
      float *xq = fp8_scratch(0, N * C), *wq = fp8_scratch(1, OC * C);
      fp8->quantize(site, Operand::input, inp.f32, N, C, false, xq);
      fp8->quantize(site, Operand::weight, w.f32, OC, C, false, wq);
      return k::linear_forward(out, xq, wq, bias, N, C, OC, k::Precision::fp32);
    }
    if (gemm_reads_16bit())
      return k::linear_forward16(out, {inp.f32, inp.b16}, {w.f32, w.b16}, bias, N, C, OC, precision_);
  }
  k::linear_forward(out, inp.f32, w.f32, bias, N, C, OC, precision_);
}

template <typename T>
void LayerOps<T>::linear_bwd(T* dinp, T* dw, T* db, GemmIn<T> dout, GemmIn<T> inp, GemmIn<T> w, int64_t N, int64_t C,
                             int64_t OC, bool acc, LinearSite site) const {
  if constexpr (std::is_same_v<T, float>) {
    if (fp8_applies(site) && fp8->config().recipe != Fp8Recipe::blockwise) {  // one cast of dY serves both
      const f8::Operand8 g = fp8->quantize_codes(site, Operand::grad, dout.f32, N, OC, fp8_codes(2, N * OC));
      if (dinp)
        f8::linear_dgrad8(dinp, g, fp8->quantize_codes(site, Operand::weight, w.f32, OC, C, fp8_codes(1, OC * C)), N, C,
                          OC);
      if (dw)  // the forward's codes where they were kept (the same cast)
        f8::linear_wgrad8(
            dw, g, inp.q8 ? *inp.q8 : fp8->quantize_codes(site, Operand::input, inp.f32, N, C, fp8_codes(0, N * C)), N,
            C, OC, acc);
      if (db)  // the bias gradient from the high-precision output gradient (Transformer Engine's)
        k::linear_backward(static_cast<float*>(nullptr), static_cast<float*>(nullptr), db, dout.f32,
                           static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), N, C, OC, acc,
                           k::Precision::fp32);
      return;
    }
    if (fp8_applies(site) && fp8->tiled_codes()) {  // dY in tiles along OC for dX, along the tokens for dW
      if (dinp) {
        const f8::Tiled8 g =
            fp8->quantize_tiled_codes(site, Operand::grad, dout.f32, N, OC, false, fp8_codes(2, N * OC),
                                      fp8_scratch(2, f8::tile_count(N, OC, f8::kRowTile)));
        const f8::Tiled8 wq =
            fp8->quantize_tiled_codes(site, Operand::weight, w.f32, OC, C, false, fp8_codes(1, OC * C),
                                      fp8_scratch(1, f8::tile_count(OC, C, f8::kSquareBlock)));
        f8::linear_dgrad8b(dinp, g, wq, N, C, OC);
      }
      if (dw) {
        const f8::Tiled8 g = fp8->quantize_tiled_codes(site, Operand::grad, dout.f32, N, OC, true, fp8_codes(2, N * OC),
                                                       fp8_scratch(2, f8::tile_count(N, OC, f8::kColumnTile)));
        const f8::Tiled8 x = fp8->quantize_tiled_codes(site, Operand::input, inp.f32, N, C, true, fp8_codes(0, N * C),
                                                       fp8_scratch(0, f8::tile_count(N, C, f8::kColumnTile)));
        f8::linear_wgrad8b(dw, g, x, N, C, OC, acc);
      }
      if (db)  // the bias gradient from the high-precision output gradient (Transformer Engine's)
        k::linear_backward(static_cast<float*>(nullptr), static_cast<float*>(nullptr), db, dout.f32,
                           static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), N, C, OC, acc,
                           k::Precision::fp32);
      return;
    }
    if (fp8_applies(site)) {  // the scales frozen on purpose
      float* gq = fp8_scratch(2, N * OC);
      if (dinp) {
        float* wq = fp8_scratch(1, OC * C);
        fp8->quantize(site, Operand::grad, dout.f32, N, OC, false, gq);
        fp8->quantize(site, Operand::weight, w.f32, OC, C, false, wq);
        k::linear_backward(dinp, static_cast<float*>(nullptr), static_cast<float*>(nullptr), gq,
                           static_cast<const float*>(nullptr), wq, N, C, OC, acc, k::Precision::fp32);
      }
      if (dw) {  // blockwise tiles along the tokens; one tensorwise quantisation serves both
        float* xq = fp8_scratch(0, N * C);
        if (!dinp || fp8->config().recipe == Fp8Recipe::blockwise)
          fp8->quantize(site, Operand::grad, dout.f32, N, OC, true, gq);
        fp8->quantize(site, Operand::input, inp.f32, N, C, true, xq);
        k::linear_backward(static_cast<float*>(nullptr), dw, static_cast<float*>(nullptr), gq, xq,
                           static_cast<const float*>(nullptr), N, C, OC, acc, k::Precision::fp32);
      }
      if (db)  // the bias gradient from the high-precision output gradient (Transformer Engine's)
        k::linear_backward(static_cast<float*>(nullptr), static_cast<float*>(nullptr), db, dout.f32,
                           static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), N, C, OC, acc,
                           k::Precision::fp32);
      return;
    }
    if (gemm_reads_16bit())
      return k::linear_backward16(dinp, dw, db, {dout.f32, dout.b16}, {inp.f32, inp.b16}, {w.f32, w.b16}, N, C, OC, acc,
                                  precision_);
  }
  k::linear_backward(dinp, dw, db, dout.f32, inp.f32, w.f32, N, C, OC, acc, precision_);
}

template <typename T>
void LayerOps<T>::norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N) const {
  if (arch_.norm == NormKind::rms_norm)
    k::rmsnorm_forward(out, rstd, inp, w, N, cfg_.hidden, cfg_.norm_eps);
  else
    k::layernorm_forward(out, mean, rstd, inp, w, b, N, cfg_.hidden, cfg_.norm_eps);
}

template <typename T>
void LayerOps<T>::norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                                const T* rstd, int64_t N, bool accumulate) const {
  if (arch_.norm == NormKind::rms_norm)
    k::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, cfg_.hidden, accumulate);
  else
    k::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, cfg_.hidden, accumulate);
}

template <typename T>
std::vector<std::pair<T*, int64_t>> LayerOps<T>::saved_buffers(const LayerActs<T>& a, int64_t B, Recompute r) const {
  const ActivationSizes z = activation_sizes(cfg_, {B, tp_.size(), tp_.gathers(), r, false, cp_.size()});
  const int64_t x = z.R * z.C;
  if (r == Recompute::full) return {{a.x_in, x}};
  return {{a.x_in, x},  {a.ln1_full, z.norm_full}, {a.qkv, z.qkv}, {a.atty, z.atty},
          {a.x_mid, x}, {a.ln2_full, z.norm_full}, {a.fc, z.fc},   {a.act, z.act}};
}

// (the inputs kept as FP8 codes are not in the packed copy)
template <typename T>
void LayerOps<T>::pack(Activations<T>& ctx, int l, size_t first, size_t last) const {
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const auto bufs = saved_buffers(a, ctx.B, ctx.recompute);
  uint16_t* dst = ctx.packed[size_t(l)];
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (fp8_input(a, i)) continue;
    if (i >= first && i < last) k::pack_16(dst, bufs[i].first, bufs[i].second, precision_);
    dst += bufs[i].second;
  }
}

template <typename T>
void LayerOps<T>::unpack(Activations<T>& ctx, int l) const {
  const uint16_t* src = ctx.packed[size_t(l)];
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const auto bufs = saved_buffers(a, ctx.B, ctx.recompute);
  // an MoE layer's backward reads its MLP input (ln2_full) itself, not only through GEMMs
  const bool moe = size_t(l) < ctx.moe.size() && ctx.moe[size_t(l)].logits;
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (fp8_input(a, i)) continue;
    if (!gemm_only(ctx, i) || (moe && i == ln2_full)) k::unpack_16(bufs[i].first, src, bufs[i].second, precision_);
    src += bufs[i].second;
  }
}

template <typename T>
Fp8Input* LayerOps<T>::fp8_input(const LayerActs<T>& a, size_t i) const {
  if (!a.fp8_inputs) return nullptr;
  const int k = i == ln1_full ? 0 : i == ln2_full ? 1 : i == act ? 2 : -1;
  return k >= 0 && a.fp8_inputs[k].q ? &a.fp8_inputs[k] : nullptr;
}

// ln1_full, ln2_full and act feed only the dweight GEMMs
template <typename T>
bool LayerOps<T>::gemm_only(const Activations<T>& ctx, size_t i) const {
  return gemm_reads_16bit() && ctx.is_packed() && ctx.recompute != Recompute::full &&
         (i == ln1_full || i == ln2_full || i == act);
}

template <typename T>
GemmIn<T> LayerOps<T>::saved_in(const Activations<T>& ctx, int l, size_t i, const T* f32) const {
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  if (const Fp8Input* kept = fp8_input(a, i)) return {nullptr, nullptr, &kept->op};
  if (!gemm_reads_16bit() || !ctx.is_packed() || ctx.recompute == Recompute::full) return {f32, nullptr};
  const auto bufs = saved_buffers(a, ctx.B, ctx.recompute);
  const uint16_t* at = ctx.packed[size_t(l)];
  for (size_t j = 0; j < i; ++j) at += fp8_input(a, j) ? 0 : bufs[j].second;
  return {gemm_only(ctx, i) ? nullptr : f32, at};
}

template class LayerOps<float>;
template class LayerOps<double>;

}  // namespace trident::model
