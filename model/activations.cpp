// Where the Transformer keeps its activations (see transformer.hpp): the
// per-micro-batch contexts and the chunk's shared working set, the 2-byte
// packing of saved activations under bf16/fp16, the CPU bf16 path's GEMM
// operands (docs/precision.md), and the scratch shared by all layers.
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
          if (cfg_.moe.is_moe(ch.spec.first_layer + l)) set.moe[size_t(l)] = moe_->make_acts(N, ctx->storage);
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
      for (const auto& [p, count] : saved_buffers(a, B, recompute)) n += count;
      ctx->storage.push_back(Tensor::empty({n}, half, MemCategory::activations, device_));
      ctx->packed.push_back(static_cast<uint16_t*>(ctx->storage.back().raw()));
    }
  }
  if (cfg_.qk_norm)  // the heads before QK-norm and their statistics, per layer in every mode
    for (auto& a : ctx->layers) {
      const int64_t rows = N * (dims_.heads + dims_.kv_heads);
      a.qk_pre = alloc(rows * cfg_.head_dim()), a.qk_rstd = alloc(rows);
    }
  if (cfg_.is_mla())  // the latents before and after their norms, and the statistics, per layer in every mode
    for (auto& a : ctx->layers) {
      const int64_t QL = cfg_.mla.q_lora_rank, KL = cfg_.mla.kv_lora_rank;
      if (QL > 0) a.mla.q_lat = alloc(N * QL), a.mla.q_rstd = alloc(N), a.mla.q_norm = alloc(N * QL);
      a.mla.kv_lat = alloc(N * KL), a.mla.kv_rstd = alloc(N), a.mla.kv_norm = alloc(N * KL);
    }
  if (moe_) {
    ctx->moe.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l)
      if (cfg_.moe.is_moe(ch.spec.first_layer + l))
        ctx->moe[size_t(l)] = recompute == Recompute::full ? shared_moe[size_t(l)] : moe_->make_acts(N, ctx->storage);
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
std::vector<std::pair<T*, int64_t>> Transformer<T>::saved_buffers(const LayerActs<T>& a, int64_t B, Recompute r) const {
  const ActivationSizes z = activation_sizes(cfg_, {B, tp_->size(), tp_->gathers(), r, false, cp_->size()});
  const int64_t x = z.R * z.C;
  if (r == Recompute::full) return {{a.x_in, x}};
  return {{a.x_in, x},  {a.ln1_full, z.norm_full}, {a.qkv, z.qkv}, {a.atty, z.atty},
          {a.x_mid, x}, {a.ln2_full, z.norm_full}, {a.fc, z.fc},   {a.act, z.act}};
}

template <typename T>
void Transformer<T>::pack(Activations<T>& ctx, int l, size_t first, size_t last) const {
  const auto bufs = saved_buffers(ctx.layers[size_t(l)], ctx.B, ctx.recompute);
  uint16_t* dst = ctx.packed[size_t(l)];
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (i >= first && i < last) k::pack_16(dst, bufs[i].first, bufs[i].second, precision_);
    dst += bufs[i].second;
  }
}

template <typename T>
void Transformer<T>::unpack(Activations<T>& ctx, int l) const {
  const uint16_t* src = ctx.packed[size_t(l)];
  const auto bufs = saved_buffers(ctx.layers[size_t(l)], ctx.B, ctx.recompute);
  // an MoE layer's backward reads its MLP input (ln2_full) itself, not only through GEMMs
  const bool moe = size_t(l) < ctx.moe.size() && ctx.moe[size_t(l)].logits;
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (!gemm_only(ctx, i) || (moe && i == 5)) k::unpack_16(bufs[i].first, src, bufs[i].second, precision_);
    src += bufs[i].second;
  }
}

template <typename T>
bool Transformer<T>::gemm_reads_16bit() const {
  return copies_ && std::is_same_v<T, float> && precision_ == k::Precision::bf16 && device_.type == DeviceType::cpu;
}

// ln1_full, ln2_full and act (saved_buffers order) feed only the dweight GEMMs
template <typename T>
bool Transformer<T>::gemm_only(const Activations<T>& ctx, size_t i) const {
  return gemm_reads_16bit() && ctx.is_packed() && ctx.recompute != Recompute::full && (i == 1 || i == 5 || i == 7);
}

template <typename T>
typename Transformer<T>::GemmIn Transformer<T>::saved_in(const Activations<T>& ctx, int l, size_t i,
                                                         const T* f32) const {
  if (!gemm_reads_16bit() || !ctx.is_packed() || ctx.recompute == Recompute::full) return {f32, nullptr};
  const auto bufs = saved_buffers(ctx.layers[size_t(l)], ctx.B, ctx.recompute);
  const uint16_t* at = ctx.packed[size_t(l)];
  for (size_t j = 0; j < i; ++j) at += bufs[j].second;
  return {gemm_only(ctx, i) ? nullptr : f32, at};
}

template <typename T>
void Transformer<T>::linear_fwd(T* out, GemmIn inp, GemmIn w, const T* bias, int64_t N, int64_t C, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_reads_16bit())
      return k::linear_forward16(out, {inp.f32, inp.b16}, {w.f32, w.b16}, bias, N, C, OC, precision_);
  }
  k::linear_forward(out, inp.f32, w.f32, bias, N, C, OC, precision_);
}

template <typename T>
void Transformer<T>::linear_bwd(T* dinp, T* dw, T* db, GemmIn dout, GemmIn inp, GemmIn w, int64_t N, int64_t C,
                                int64_t OC, bool acc) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_reads_16bit())
      return k::linear_backward16(dinp, dw, db, {dout.f32, dout.b16}, {inp.f32, inp.b16}, {w.f32, w.b16}, N, C, OC, acc,
                                  precision_);
  }
  k::linear_backward(dinp, dw, db, dout.f32, inp.f32, w.f32, N, C, OC, acc, precision_);
}

template <typename T>
void Transformer<T>::ensure_scratch(Workspace<T>& w, int64_t B) const {
  const int64_t N = B * cp_->local_len(), C = cfg_.hidden, R = tp_->rows(N);
  if (gemm_reads_16bit() && B > w.B16) {  // dy [N,C], d_fc, d_qkv, and dlogits [N,V] with a head
    bool head = false;
    for (const Chunk& ch : chunks_) head |= ch.spec.head;
    const int64_t dlogits = head ? N * dims_.vocab : 0;
    w.buffers16 =
        Tensor::empty({N * (C + fc_width_ + qkv_width_) + dlogits}, DType::bf16, MemCategory::activations, device_);
    w.dy16 = static_cast<uint16_t*>(w.buffers16.raw());
    w.dfc16 = w.dy16 + N * C, w.dqkv16 = w.dfc16 + N * fc_width_, w.dlogits16 = w.dqkv16 + N * qkv_width_;
    w.B16 = B;
  }
  if (B <= w.B) return;
  const int64_t sizes[10] = {
      N * C, R * C, R * C, N * C, N * C, R * C, N * qkv_width_, N * dims_.heads * dv_, N * fc_width_, N * dims_.ffn};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  w.buffers = Tensor::empty({total}, dtype_of<T>(), MemCategory::activations, device_);
  T* p = w.buffers.template data<T>();
  T** outs[10] = {&w.partial, &w.reduced, &w.d_res,  &w.d_full, &w.d_ln,
                  &w.d_local, &w.d_qkv,   &w.d_atty, &w.d_fc,   &w.d_act};
  for (int i = 0; i < 10; ++i) *outs[i] = p, p += sizes[i];
  w.B = B;
}

// The members defined here, for the two instantiations of transformer.cpp.
#define INSTANTIATE(T)                                                                                                \
  template std::unique_ptr<Activations<T>> Transformer<T>::make_activations(int64_t, Recompute, int, bool) const;     \
  template std::vector<std::pair<T*, int64_t>> Transformer<T>::saved_buffers(const LayerActs<T>&, int64_t, Recompute) \
      const;                                                                                                          \
  template void Transformer<T>::pack(Activations<T>&, int, size_t, size_t) const;                                     \
  template void Transformer<T>::unpack(Activations<T>&, int) const;                                                   \
  template bool Transformer<T>::gemm_reads_16bit() const;                                                             \
  template bool Transformer<T>::gemm_only(const Activations<T>&, size_t) const;                                       \
  template Transformer<T>::GemmIn Transformer<T>::saved_in(const Activations<T>&, int, size_t, const T*) const;       \
  template void Transformer<T>::linear_fwd(T*, GemmIn, GemmIn, const T*, int64_t, int64_t, int64_t);                  \
  template void Transformer<T>::linear_bwd(T*, T*, T*, GemmIn, GemmIn, GemmIn, int64_t, int64_t, int64_t, bool);      \
  template void Transformer<T>::ensure_scratch(Workspace<T>&, int64_t) const;
INSTANTIATE(float)
INSTANTIATE(double)

}  // namespace trident::model
