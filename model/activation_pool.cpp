// The activation pool (model/activation_pool.hpp): contexts, the chunks'
// shared sets, the workspaces' layer buffers.
#include "model/activation_pool.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/precision.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
T* ActivationPool<T>::Alloc::operator()(int64_t n) const {
  storage.push_back(Tensor::empty({n}, dtype_of<T>(), MemCategory::activations, pool.ops_.device()));
  return storage.back().template data<T>();
}

template <typename T>
void ActivationPool<T>::Alloc::norm_out(T*& local, T*& full) const {
  const parallel::TensorParallel& tp = pool.ops_.tp();
  full = (*this)(z.norm_full);
  local = tp.gathers() ? full + tp.row_begin(z.N) * z.C : full;
}

template <typename T>
void ActivationPool<T>::Alloc::layer_set(LayerActs<T>& a, bool with_lse) const {
  const Alloc& alloc = *this;
  norm_out(a.ln1, a.ln1_full);
  a.ln1_mean = alloc(z.stats), a.ln1_rstd = alloc(z.stats), a.qkv = alloc(z.qkv);
  a.lse = with_lse ? alloc(z.attention_state) : nullptr;
  a.atty = alloc(z.atty), a.x_mid = alloc(z.R * z.C);
  norm_out(a.ln2, a.ln2_full);
  a.ln2_mean = alloc(z.stats), a.ln2_rstd = alloc(z.stats), a.fc = alloc(z.fc);
  a.act = alloc(z.act);
}

template <typename T>
std::unique_ptr<Activations<T>> ActivationPool<T>::make(int64_t B, Recompute recompute, int chunk,
                                                        const ChunkSpec& spec, bool split_backward) {
  const parallel::TensorParallel& tp = ops_.tp();
  // the one layout the planner's formulas use too (model/memory.hpp)
  const ActivationSizes z =
      activation_sizes(ops_.cfg(), {B, tp.size(), tp.gathers(), recompute, split_backward, ops_.cp().size()});
  // the head chunk with model.mtp: each depth's block after the chunk's layers
  const int64_t depth = spec.head ? ops_.cfg().mtp.depth : 0, L = spec.layers + depth;
  TRIDENT_CHECK(z.R == tp.rows(z.N), "activation layout: {} rows, the region has {}", z.R, tp.rows(z.N));
  auto ctx = std::make_unique<Activations<T>>();
  ctx->B = B;
  ctx->chunk = chunk;
  ctx->recompute = recompute;
  ctx->layers.resize(size_t(L));
  const bool packed = pack && ops_.precision() != k::Precision::fp32 && L > 0;
  make_layers(*ctx, spec, z, packed);
  const Alloc alloc{*this, z, ctx->storage};
  if (split_backward)
    for (int64_t l = 0; l < L; ++l)
      ctx->saved.push_back({alloc(z.qkv), alloc(z.N * z.C), alloc(z.fc), alloc(z.N * z.C)});
  make_head(*ctx, spec.head ? depth : -1, z, alloc);
  return ctx;
}

// What recomputation rebuilds (and, packed, the fp32 working set): one set
// per chunk, shared by its contexts
template <typename T>
const typename ActivationPool<T>::Shared& ActivationPool<T>::shared(int chunk, const ChunkSpec& spec, int64_t L,
                                                                    const ActivationSizes& z, Recompute recompute,
                                                                    bool packed) {
  for (const Shared& s : shared_)
    if (s.chunk == chunk && s.B == z.N / ops_.seq() && s.recompute == recompute && s.packed == packed) return s;
  Shared set{chunk, z.N / ops_.seq(), recompute, packed, {}, {}, nullptr, {}};
  const Alloc alloc{*this, z, set.storage};
  if (recompute == Recompute::full || packed) alloc.layer_set(set.acts, recompute == Recompute::full);
  if (recompute == Recompute::full && moe_) {  // rebuilt by the layer's recomputation before its backward
    set.moe.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l)
      if (ops_.cfg().moe.is_moe(spec.first_layer + l)) set.moe[size_t(l)] = moe_->make_acts(z.N, set.storage);
  }
  if (packed) set.acts.x_in = alloc(z.R * z.C);
  if (recompute == Recompute::selective) set.lse = alloc(z.attention_state);
  shared_.push_back(std::move(set));
  return shared_.back();
}

// Each layer's buffers (its own, the chunk's shared set's, or the working
// set's with the 2-byte copy), the attention variant's, the MoE layers'.
template <typename T>
void ActivationPool<T>::make_layers(Activations<T>& ctx, const ChunkSpec& spec, const ActivationSizes& z, bool packed) {
  const int64_t L = int64_t(ctx.layers.size());
  const Recompute recompute = ctx.recompute;
  static const Shared none{};
  const Shared& s =
      (recompute != Recompute::none || packed) && L > 0 ? shared(ctx.chunk, spec, L, z, recompute, packed) : none;
  const Alloc alloc{*this, z, ctx.storage};
  for (auto& a : ctx.layers) {
    if (packed) {
      // the working set's buffers; statistics and log-sum-exp of its own
      a = s.acts;
      if (recompute != Recompute::full) {
        a.ln1_mean = alloc(z.stats), a.ln1_rstd = alloc(z.stats), a.ln2_mean = alloc(z.stats);
        a.ln2_rstd = alloc(z.stats);
        a.lse = recompute == Recompute::none ? alloc(z.attention_state) : s.lse;
      }
      continue;
    }
    if (recompute == Recompute::full) {
      a = s.acts;
    } else {
      alloc.layer_set(a, recompute == Recompute::none);
      if (recompute == Recompute::selective) a.lse = s.lse;
    }
    a.x_in = alloc(z.R * z.C);
  }
  if (packed) {
    const DType half = ops_.precision() == k::Precision::bf16 ? DType::bf16 : DType::f16;
    keep_fp8_inputs(ctx, spec);
    for (const auto& a : ctx.layers) {
      int64_t n = 0;
      const auto bufs = ops_.saved_buffers(a, ctx.B, recompute);
      for (size_t i = 0; i < bufs.size(); ++i) n += ops_.fp8_input(a, i) ? 0 : bufs[i].second;
      ctx.storage.push_back(Tensor::empty({n}, half, MemCategory::activations, ops_.device()));
      ctx.packed.push_back(static_cast<uint16_t*>(ctx.storage.back().raw()));
    }
  }
  // the attention's own buffers (QK-norm's heads, MLA's latents), per layer in every mode
  for (auto& a : ctx.layers) attention_.make_saved(a, z.N, alloc);
  if (!moe_) return;
  ctx.moe.resize(size_t(L));
  for (int64_t l = 0; l < L; ++l)
    if (ops_.cfg().moe.is_moe(spec.first_layer + l))
      ctx.moe[size_t(l)] = recompute == Recompute::full ? s.moe[size_t(l)] : moe_->make_acts(z.N, ctx.storage);
}

// train.fp8.saved_inputs: the codes' buffers of the inputs each layer keeps
// in FP8 (LayerOps::fp8_saved_inputs), a byte a value, for the packed copy
// to leave out. The chunk's layers, then its multi-token prediction depths.
template <typename T>
void ActivationPool<T>::keep_fp8_inputs(Activations<T>& ctx, const ChunkSpec& spec) const {
  const int64_t L = int64_t(ctx.layers.size());
  if (ctx.recompute == Recompute::full || !ops_.fp8 || !ops_.fp8->config().saved_inputs) return;
  ctx.fp8_inputs.resize(size_t(L));
  for (int64_t l = 0; l < L; ++l) {
    LayerActs<T>& a = ctx.layers[size_t(l)];
    const int64_t g = l < spec.layers ? spec.first_layer + l : ops_.cfg().layers + (l - spec.layers);
    const std::array<bool, 3> kept = fp8_kept_inputs(ops_.cfg(), ops_.fp8->config(), g);
    const auto bufs = ops_.saved_buffers(a, ctx.B, ctx.recompute);
    const size_t which[3] = {LayerOps<T>::ln1_full, LayerOps<T>::ln2_full, LayerOps<T>::act};
    for (size_t j = 0; j < 3; ++j) {
      if (!kept[j]) continue;
      ctx.storage.push_back(Tensor::empty({bufs[which[j]].second}, DType::u8, MemCategory::activations, ops_.device()));
      ctx.fp8_inputs[size_t(l)][j].q = ctx.storage.back().template data<uint8_t>();
    }
    a.fp8_inputs = ctx.fp8_inputs[size_t(l)].data();
  }
}

// The chunk's output, and on the head chunk (depth >= 0) the final norm,
// logits and losses, with each multi-token prediction depth's buffers.
template <typename T>
void ActivationPool<T>::make_head(Activations<T>& ctx, int64_t depth, const ActivationSizes& z,
                                  const Alloc& alloc) const {
  const int64_t N = z.N, RC = z.R * z.C;
  ctx.mtp.resize(size_t(std::max<int64_t>(depth, 0)));
  for (MtpActs<T>& a : ctx.mtp) {
    a.tokens.assign(size_t(N), 0), a.targets.assign(size_t(N), -1);
    a.emb = alloc(RC), a.e_norm = alloc(RC), a.e_rstd = alloc(z.stats), a.h_norm = alloc(RC);
    a.h_rstd = alloc(z.stats), a.cat = alloc(2 * RC), a.x_out = alloc(RC);
    alloc.norm_out(a.o, a.o_full);
    a.o_rstd = alloc(z.stats), a.logits = alloc(z.logits), a.losses = alloc(z.losses), a.d_emb = alloc(RC);
  }
  ctx.x_final = alloc(RC);
  if (depth < 0) return;
  alloc.norm_out(ctx.lnf, ctx.lnf_full);
  ctx.lnf_mean = alloc(z.stats), ctx.lnf_rstd = alloc(z.stats);
  ctx.logits = alloc(z.logits);
  ctx.losses = alloc(z.losses);
}

template <typename T>
void ActivationPool<T>::size_workspace(Workspace<T>& w, int64_t B, bool head) const {
  const parallel::TensorParallel& tp = ops_.tp();
  const ActivationSizes z =
      activation_sizes(ops_.cfg(), {B, tp.size(), tp.gathers(), Recompute::none, false, ops_.cp().size()});
  if (ops_.gemm_reads_16bit() && B > w.B16) {  // dy [N,C], d_fc, d_qkv, and dlogits [N,V] with a head
    const int64_t N = z.N, dlogits = head ? z.logits : 0;
    w.buffers16 =
        Tensor::empty({N * z.C + z.fc + z.qkv + dlogits}, DType::bf16, MemCategory::activations, ops_.device());
    w.dy16 = static_cast<uint16_t*>(w.buffers16.raw());
    w.dfc16 = w.dy16 + N * z.C, w.dqkv16 = w.dfc16 + z.fc, w.dlogits16 = w.dqkv16 + z.qkv;
    w.B16 = B;
  }
  if (B <= w.B) return;
  const auto sizes = workspace_sizes(z);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  w.buffers = Tensor::empty({total}, dtype_of<T>(), MemCategory::activations, ops_.device());
  T* p = w.buffers.template data<T>();
  T** outs[10] = {&w.partial, &w.reduced, &w.d_res,  &w.d_full, &w.d_ln,
                  &w.d_local, &w.d_qkv,   &w.d_atty, &w.d_fc,   &w.d_act};
  for (size_t i = 0; i < sizes.size(); ++i) *outs[i] = p, p += sizes[i];
  w.B = B;
}

template class ActivationPool<float>;
template class ActivationPool<double>;

}  // namespace trident::model
