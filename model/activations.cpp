// Where the Transformer keeps its activations (model/activations.hpp): the
// per-micro-batch contexts and the chunk's shared working set, and a pass's
// workspace buffers (model/workspace.hpp). The packing of saved activations
// under bf16/fp16 is model/layer_ops.cpp's.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
std::unique_ptr<Activations<T>> Transformer<T>::make_activations(int64_t B, Recompute recompute, int chunk,
                                                                 bool split_backward) const {
  const Chunk& ch = chunks_[size_t(chunk)];
  // the one layout the planner's formulas use too (model/memory.hpp)
  const ActivationSizes z =
      activation_sizes(cfg_, {B, tp_->size(), tp_->gathers(), recompute, split_backward, cp_->size()});
  // the head chunk with model.mtp: each depth's block after the chunk's layers
  const int64_t depth = ch.spec.head ? cfg_.mtp.depth : 0;
  const int64_t C = z.C, N = z.N, L = ch.spec.layers + depth, R = z.R, row0 = tp_->row_begin(N);
  TRIDENT_CHECK(R == tp_->rows(N), "activation layout: {} rows, the region has {}", R, tp_->rows(N));
  auto ctx = std::make_unique<Activations<T>>();
  ctx->B = B;
  ctx->chunk = chunk;
  ctx->recompute = recompute;
  const bool packed = pack_ && precision_ != k::Precision::fp32 && L > 0;
  auto alloc = [&](int64_t n) {
    ctx->storage.push_back(Tensor::empty({n}, dtype_of<T>(), MemCategory::activations, device_));
    return ctx->storage.back().template data<T>();
  };
  // A norm's output [R,C] and the full input [N,C] of the linear after it:
  // when the region gathers, the local rows are this rank's part of the full.
  auto norm_out = [&](T*& local, T*& full) {
    full = alloc(z.norm_full);
    local = tp_->gathers() ? full + row0 * C : full;
  };
  // One layer's worth of buffers; per layer or shared, depending on recompute.
  auto layer_set = [&](LayerActs<T>& a, bool with_lse) {
    norm_out(a.ln1, a.ln1_full);
    a.ln1_mean = alloc(z.stats), a.ln1_rstd = alloc(z.stats), a.qkv = alloc(z.qkv);
    a.lse = with_lse ? alloc(z.attention_state) : nullptr;
    a.atty = alloc(z.atty), a.x_mid = alloc(R * C);
    norm_out(a.ln2, a.ln2_full);
    a.ln2_mean = alloc(z.stats), a.ln2_rstd = alloc(z.stats), a.fc = alloc(z.fc);
    a.act = alloc(z.act);
  };
  ctx->layers.resize(size_t(L));
  // What recomputation rebuilds (and, packed, the fp32 working set): one
  // set per chunk, shared by its contexts
  LayerActs<T> shared{};
  T* shared_lse = nullptr;
  std::vector<MoeActs<T>> shared_moe;
  if ((recompute != Recompute::none || packed) && L > 0) {
    auto it = std::find_if(shared_recompute_.begin(), shared_recompute_.end(), [&](const SharedRecompute& x) {
      return x.chunk == chunk && x.B == B && x.recompute == recompute && x.packed == packed;
    });
    if (it == shared_recompute_.end()) {
      SharedRecompute set{chunk, B, recompute, packed, {}, {}, nullptr, {}};
      std::swap(ctx->storage, set.storage);  // allocate into the shared set's storage
      if (recompute == Recompute::full || packed) layer_set(set.acts, recompute == Recompute::full);
      if (recompute == Recompute::full && moe_) {  // rebuilt by the layer's recomputation before its backward
        set.moe.resize(size_t(L));
        for (int64_t l = 0; l < L; ++l)
          if (cfg_.moe.is_moe(ch.spec.first_layer + l)) set.moe[size_t(l)] = moe_->experts().make_acts(N, ctx->storage);
      }
      if (packed) set.acts.x_in = alloc(R * C);
      if (recompute == Recompute::selective) set.lse = alloc(z.attention_state);
      std::swap(ctx->storage, set.storage);
      shared_recompute_.push_back(std::move(set));
      it = shared_recompute_.end() - 1;
    }
    shared = it->acts, shared_lse = it->lse, shared_moe = it->moe;
  }
  for (auto& a : ctx->layers) {
    if (packed) {
      // the working set's buffers; statistics and log-sum-exp of its own
      a = shared;
      if (recompute != Recompute::full) {
        a.ln1_mean = alloc(z.stats), a.ln1_rstd = alloc(z.stats), a.ln2_mean = alloc(z.stats);
        a.ln2_rstd = alloc(z.stats);
        a.lse = recompute == Recompute::none ? alloc(z.attention_state) : shared_lse;
      }
      continue;
    }
    if (recompute == Recompute::full) {
      a = shared;
    } else {
      layer_set(a, recompute == Recompute::none);
      if (recompute == Recompute::selective) a.lse = shared_lse;
    }
    a.x_in = alloc(R * C);
  }
  if (packed) {
    const DType half = precision_ == k::Precision::bf16 ? DType::bf16 : DType::f16;
    for (const auto& a : ctx->layers) {
      int64_t n = 0;
      for (const auto& [p, count] : ops_.saved_buffers(a, B, recompute)) n += count;
      ctx->storage.push_back(Tensor::empty({n}, half, MemCategory::activations, device_));
      ctx->packed.push_back(static_cast<uint16_t*>(ctx->storage.back().raw()));
    }
  }
  // the attention's own buffers (QK-norm's heads, MLA's latents), per layer in every mode
  for (auto& a : ctx->layers) attention_->make_saved(a, N, alloc);
  if (moe_) {
    ctx->moe.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l)
      if (cfg_.moe.is_moe(ch.spec.first_layer + l))
        ctx->moe[size_t(l)] =
            recompute == Recompute::full ? shared_moe[size_t(l)] : moe_->experts().make_acts(N, ctx->storage);
  }
  if (split_backward)
    for (int64_t l = 0; l < L; ++l) ctx->saved.push_back({alloc(z.qkv), alloc(N * C), alloc(z.fc), alloc(N * C)});
  ctx->mtp.resize(size_t(depth));
  for (MtpActs<T>& a : ctx->mtp) {
    a.tokens.assign(size_t(N), 0), a.targets.assign(size_t(N), -1);
    a.emb = alloc(R * C), a.e_norm = alloc(R * C), a.e_rstd = alloc(z.stats), a.h_norm = alloc(R * C);
    a.h_rstd = alloc(z.stats), a.cat = alloc(2 * R * C), a.x_out = alloc(R * C);
    norm_out(a.o, a.o_full);
    a.o_rstd = alloc(z.stats), a.logits = alloc(z.logits), a.losses = alloc(z.losses), a.d_emb = alloc(R * C);
  }
  ctx->x_final = alloc(R * C);
  if (ch.spec.head) {
    norm_out(ctx->lnf, ctx->lnf_full);
    ctx->lnf_mean = alloc(z.stats), ctx->lnf_rstd = alloc(z.stats);
    ctx->logits = alloc(z.logits);
    ctx->losses = alloc(z.losses);
  }
  return ctx;
}

template <typename T>
void Transformer<T>::ensure_scratch(Workspace<T>& w, int64_t B) const {
  const int64_t N = B * cp_->local_len(), C = cfg_.hidden;
  const int64_t fc_width = ops_.fc_width(), qkv_width = ops_.qkv_width();
  if (ops_.gemm_reads_16bit() && B > w.B16) {  // dy [N,C], d_fc, d_qkv, and dlogits [N,V] with a head
    bool head = false;
    for (const Chunk& ch : chunks_) head |= ch.spec.head;
    const int64_t dlogits = head ? N * dims_.vocab : 0;
    w.buffers16 =
        Tensor::empty({N * (C + fc_width + qkv_width) + dlogits}, DType::bf16, MemCategory::activations, device_);
    w.dy16 = static_cast<uint16_t*>(w.buffers16.raw());
    w.dfc16 = w.dy16 + N * C, w.dqkv16 = w.dfc16 + N * fc_width, w.dlogits16 = w.dqkv16 + N * qkv_width;
    w.B16 = B;
  }
  if (B <= w.B) return;
  const auto sizes =
      workspace_sizes(activation_sizes(cfg_, {B, tp_->size(), tp_->gathers(), Recompute::none, false, cp_->size()}));
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  w.buffers = Tensor::empty({total}, dtype_of<T>(), MemCategory::activations, device_);
  T* p = w.buffers.template data<T>();
  T** outs[10] = {&w.partial, &w.reduced, &w.d_res,  &w.d_full, &w.d_ln,
                  &w.d_local, &w.d_qkv,   &w.d_atty, &w.d_fc,   &w.d_act};
  for (size_t i = 0; i < sizes.size(); ++i) *outs[i] = p, p += sizes[i];
  w.B = B;
}

// The members defined here, for the two instantiations of transformer.cpp.
#define INSTANTIATE(T)                                                                                            \
  template std::unique_ptr<Activations<T>> Transformer<T>::make_activations(int64_t, Recompute, int, bool) const; \
  template void Transformer<T>::ensure_scratch(Workspace<T>&, int64_t) const;
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

}  // namespace trident::model
