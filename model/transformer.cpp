// The transformer over the kernels of kernels/ (each runs its CPU code or its
// CUDA twin, by where the buffers live; see transformer.hpp): its segments
// and their binding, a chunk's forward and backward (one layer's: layer.cpp).
#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/activation.hpp"
#include "kernels/attention.hpp"
#include "kernels/buffer.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/norm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rotary.hpp"
#include "kernels/rows.hpp"

namespace trident::model {

namespace k = trident::kernels;

double flops_per_token(const ModelConfig& m) {
  const double C = double(m.hidden), F = double(m.ffn_hidden), H = double(m.heads);
  const double mlp = C * F * double(1 + architecture(m.arch).mlp_in_width(1));  // in and out weights
  const MoeConfig& e = m.moe;
  const double moe = C * double(e.experts) + 3 * C * double(e.top_k * e.ffn_hidden + e.shared_width()) +
                     (e.shared_expert_gate ? C : 0);
  const double attn = attention_weights(m);
  // multi-token prediction: each depth's block, eh_proj [C, 2C] and the LM head again
  const int64_t depth = m.mtp.depth;
  double matmul_params = double(m.layers + depth) * attn + double(1 + depth) * double(m.vocab) * C;
  for (int64_t l = 0; l < m.layers + depth; ++l) matmul_params += e.is_moe(l) ? moe : mlp;
  matmul_params += double(depth) * 2 * C * C;
  // scores and weighted values: 2 T H (Dq + Dv) per token forward, x3 (2 H D = 2 C: 12 L C T), the causal
  // mask not counted (PaLM's convention); a sliding-window layer's queries span min(T, window) keys
  double keys = 0;
  for (int64_t l = 0; l < m.layers + depth; ++l)
    keys += double(m.window(l) > 0 ? std::min(m.window(l), m.seq_len) : m.seq_len);
  return 6 * matmul_params + 6 * keys * H * double(m.q_head_dim() + m.v_head_dim());
}

template <typename T>
Transformer<T>::Transformer(const ModelConfig& cfg, uint64_t seed, Placement where)
    : cfg_(cfg),
      device_(where.device),
      precision_(where.precision),
      tp_(where.tp ? where.tp : &single_),
      single_cp_(nullptr, ContextMode::ring, cfg.seq_len),
      cp_(where.cp ? where.cp : &single_cp_),
      reg_(cfg, {tp_->rank(), tp_->size()}, std::move(where.chunks),
           ExpertShard{where.ep ? where.ep->rank() : 0, where.ep ? where.ep->size() : 1,
                       where.whole_experts && tp_->size() > 1}),
      dims_(local_dims(cfg, {tp_->rank(), tp_->size()})),
      arch_(architecture(cfg.arch)),
      ops_(cfg_, dims_, *tp_, *cp_, device_, precision_),
      attention_(make_attention(ops_)),
      dense_(std::make_unique<DenseMlp<T>>(ops_)) {
  if (cfg.moe.enabled) moe_ = std::make_unique<MoeLayer<T>>(ops_, where.ep, reg_.experts().whole);
  if (cfg.mtp.depth > 0) mtp_ = std::make_unique<Mtp<T>>(ops_);
  pool_ = std::make_unique<ActivationPool<T>>(ops_, *attention_, moe_ ? &moe_->experts() : nullptr);
  make_segments();
  if constexpr (std::is_same_v<T, float>)
    if (where.fp8.on()) {
      ops_.fp8 = std::make_unique<Fp8Linears>(where.fp8, cfg.layers, global_, *tp_, *cp_);
      if (moe_) moe_->experts().fp8 = ops_.fp8.get();
    }
  TRIDENT_CHECK(cp_->local_len() * cp_->size() == cfg_.seq_len, "context split of {} rows x {} ranks, seq_len {}",
                cp_->local_len(), cp_->size(), cfg_.seq_len);
  if (where.full_buffers) allocate(seed);
}

// Segments, in registry order: each chunk's embedding, its layers, its
// head, as many parameters each as the architecture's table gives them;
// with split experts, each MoE layer's routed experts after every other.
// Each local layer's MLP part.
template <typename T>
void Transformer<T>::make_segments() {
  const ModelConfig& cfg = cfg_;
  const auto& params = reg_.params();
  size_t i = 0;
  auto take = [&](size_t count, SegKind kind, int64_t local, int64_t global) {
    SegInfo info{kind, local, global, {}, {}};
    for (size_t j = i; j < i + count; ++j) {
      const ParamRow* row = arch_.find(params[j].name);
      TRIDENT_CHECK(row, "parameter {} is not in the {} table", params[j].name, cfg.arch);
      if (row->slot != Slot::fused)
        info.slots.push_back({row->slot, params[j].offset - params[i].offset}), info.numel.push_back(params[j].numel);
      else
        info.numel.back() += params[j].numel;
    }
    segments_.push_back({params[i].offset, params[i + count - 1].offset + params[i + count - 1].numel});
    seg_info_.push_back(std::move(info));
    i += count;
  };
  bool has_embedding = false, has_head = false;
  for (const auto& c : reg_.chunks()) has_embedding |= c.embedding, has_head |= c.head;
  tied_local_ = cfg.tie_embeddings && has_embedding && has_head;
  head_here_ = has_head;
  if (mtp_)
    for (const auto& c : reg_.chunks()) mtp_->shares_table |= c.head && !c.embedding && has_embedding;
  const size_t embedding_rows = arch_.part(Part::embedding).size();
  // the embedding's copy (tied, or multi-token prediction's)
  size_t head_rows = (cfg.tie_embeddings || cfg.mtp.depth > 0) && !has_embedding ? 1 : 0;
  for (const ParamRow* row : arch_.part(Part::head)) head_rows += !row->untied_only || !cfg.tie_embeddings;
  // Split experts (ExpertShard size > 1): each MoE layer's routed experts
  // are a segment of their own, after every other (ParamRegistry::expert_begin).
  const bool split_experts = reg_.expert_begin() < reg_.total();
  auto expert_rows = [&](int64_t global) {
    size_t n = 0;
    for (const ParamRow* row : arch_.layer_rows(cfg, global)) n += is_expert_major(*row);
    return split_experts ? n : 0;
  };
  for (const ChunkSpec& spec : reg_.chunks()) {
    Chunk ch;
    ch.spec = spec;
    if (spec.embedding) {
      ch.emb_seg = emb_seg_ = int(segments_.size());
      take(embedding_rows, SegKind::embedding, -1, -1);
    }
    ch.first_layer_seg = int(segments_.size());
    ch.first_local = int64_t(layers_.size());
    for (int64_t l = 0; l < spec.layers; ++l) {
      const int64_t global = spec.first_layer + l;
      take(arch_.layer_rows(cfg, global).size() - expert_rows(global), SegKind::layer, int64_t(layers_.size()), global);
      layers_.emplace_back();
      layers_.back().layer = int(layers_.size()) - 1;
      global_.push_back(global);
    }
    if (spec.head) {
      ch.head_seg = int(segments_.size());
      take(head_rows, SegKind::head, -1, -1);
      // multi-token prediction's modules: layers after the chunk's, a segment each after the head's
      ch.mtp_first_seg = int(segments_.size());
      for (int64_t k = 0; k < cfg.mtp.depth; ++k) {
        const int64_t global = cfg.layers + k;
        take(arch_.layer_rows(cfg, global).size() - expert_rows(global), SegKind::layer, int64_t(layers_.size()),
             global);
        layers_.emplace_back();
        layers_.back().layer = int(layers_.size()) - 1;
        global_.push_back(global);
      }
    }
    chunks_.push_back(ch);
  }
  for (int64_t global : global_)
    mlp_.push_back(cfg.moe.is_moe(global) ? static_cast<Mlp<T>*>(moe_.get()) : dense_.get());
  expert_seg_.assign(layers_.size(), -1);
  for (size_t l = 0; l < layers_.size(); ++l)
    if (const size_t n = expert_rows(global_[l]); n > 0) {
      expert_seg_[l] = int(segments_.size());
      take(n, SegKind::experts, int64_t(l), global_[l]);
    }
  TRIDENT_CHECK(i == params.size(), "segments cover {} of {} parameters", i, params.size());
}

// The model's own flat buffers (no ZeRO 3 storage), initialised from seed
// and bound.
template <typename T>
void Transformer<T>::allocate(uint64_t seed) {
  params_ = Tensor::empty({reg_.total()}, dtype_of<T>(), MemCategory::params, device_);
  grads_ = Tensor::zeros({reg_.total()}, dtype_of<T>(), MemCategory::grads, device_);
  if (device_.type == DeviceType::cpu) {
    reg_.initialize(params_.data<T>(), seed);
  } else {  // drawn on the host, copied once
    std::vector<T> host(static_cast<size_t>(reg_.total()));
    reg_.initialize(host.data(), seed);
    k::copy(params_.data<T>(), host.data(), reg_.total());
  }
  for (int s = 0; s < int(segments_.size()); ++s)
    bind(s, params_.data<T>() + segments_[size_t(s)].begin, grads_.data<T>() + segments_[size_t(s)].begin);
}

// Points the parameter (pbase) and/or gradient (gbase) pointers of segment s
// at storage whose first element is the segment's first element, slot by slot.
template <typename T>
void Transformer<T>::bind(int s, T* pbase, T* gbase) {
  const SegInfo& info = seg_info_[size_t(s)];
  const bool layer = info.kind == SegKind::layer || info.kind == SegKind::experts;
  LayerParams<T>* lp = layer ? &layers_[size_t(info.layer)] : nullptr;
  T** layer_params = lp ? lp->param.data() : nullptr;  // indexed by Slot
  T** layer_grads = lp ? lp->grad.data() : nullptr;
  if (info.kind == SegKind::layer)
    for (int j = 0; j < kLayerSlots; ++j) {  // slots the architecture lacks (LLaMA's biases) stay null
      if (expert_seg_[size_t(info.layer)] >= 0 &&
          (j == int(Slot::experts_in_weight) || j == int(Slot::experts_out_weight)))
        continue;  // bound by the layer's expert segment
      if (pbase) layer_params[j] = nullptr;
      if (gbase) layer_grads[j] = nullptr;
    }
  auto set = [&](T*& param_ptr, T*& grad_ptr, int64_t offset) {
    if (pbase) param_ptr = pbase + offset;
    if (gbase) grad_ptr = gbase + offset;
  };
  for (const auto& [slot, offset] : info.slots) {
    switch (slot) {
      case Slot::token_table:  // the embedding's table, or the head's copy (tied, or multi-token prediction's)
        if (info.kind == SegKind::embedding)
          set(wte_, dwte_, offset);
        else if (cfg_.tie_embeddings)
          set(head_, dhead_, offset);
        else
          set(mtp_->table, mtp_->dtable, offset);
        break;
      case Slot::positions:
        set(wpe_, dwpe_, offset);
        break;
      case Slot::final_norm_weight:
        set(nfw_, dnfw_, offset);
        break;
      case Slot::final_norm_bias:
        set(nfb_, dnfb_, offset);
        break;
      case Slot::lm_head:
        set(head_, dhead_, offset);
        break;
      case Slot::fused:
        break;
      default:
        set(layer_params[int(slot)], layer_grads[int(slot)], offset);
    }
  }
  if (info.kind == SegKind::embedding && tied_local_) {  // the head reads the embedding's table
    if (pbase) head_ = wte_;
    if (gbase) dhead_ = dwte_;
  }
}

template <typename T>
void Transformer<T>::use_params(int s, int next) {
  if (store_) bind(s, store_->acquire_params(s, next), nullptr);
}
template <typename T>
void Transformer<T>::done_params(int s) {
  if (store_) store_->release_params(s);
}
template <typename T>
void Transformer<T>::use_grads(int s) {
  if (store_) bind(s, nullptr, store_->acquire_grads(s));
}
template <typename T>
void Transformer<T>::done_grads(int s) {
  if (store_) store_->grads_done(s);
}

template <typename T>
double Transformer<T>::forward_chunk(Activations<T>& ctx, const int32_t* tokens, const T* x_in, const int32_t* targets,
                                     T dscale) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t B = ctx.B, Tn = seq(), C = cfg_.hidden, N = B * Tn, R = tp_->rows(N);
  const int L = int(ch.spec.layers);
  Workspace<T>& w = begin_pass(ctx);
  if (ops_.fp8) ops_.fp8->set_training(dscale != T(0));  // delayed scaling records the training forwards' amaxes
  ctx.aux_scale = dscale * T(B * cfg_.seq_len);          // the loss's weight of this micro-batch's tokens
  T* first_in = L > 0 ? ctx.layers[0].x_in : ctx.x_final;
  // the segment after s in this chunk's forward order (-1: none)
  auto next_seg = [&](int s) { return s + 1 < ch.first_layer_seg + L + (ch.head_seg >= 0 ? 1 : 0) ? s + 1 : -1; };
  if (ch.spec.embedding) {
    ctx.tokens = tokens;
    use_params(ch.emb_seg, next_seg(ch.emb_seg));
    k::embedding_forward(w.partial, tokens, wte_, N, C, dims_.vocab_begin, dims_.vocab);
    const T* emb = tp_->exit(w.reduced, w.partial, N, C);
    k::position_forward(first_in, emb, wpe_, tp_->row_begin(N), R, Tn, C, w.origin);
    store(first_in, R * C);
    done_params(ch.emb_seg);
  } else {
    k::copy(first_in, x_in, R * C);
  }
  // the expert segment of the next MoE layer after local layer l of this chunk (-1: none)
  auto next_experts = [&](int l) {
    for (int j = l + 1; j < L; ++j)
      if (const int es = expert_seg_[size_t(ch.first_local + j)]; es >= 0) return es;
    return -1;
  };
  for (int l = 0; l < L; ++l) {
    const int s = ch.first_layer_seg + l, es = expert_seg_[size_t(ch.first_local + l)];
    use_params(s, next_seg(s));
    if (es >= 0) use_params(es, next_experts(l));
    T* x_out = l + 1 < L ? ctx.layers[size_t(l + 1)].x_in : ctx.x_final;
    // packed: the input first (the output may go to the same working buffer), the rest after
    if (ctx.is_packed()) ops_.pack(ctx, l, 0, 1);
    layer_forward(ctx, l, int(ch.first_local) + l, x_out, dscale != T(0) ? Run::training : Run::eval, w);
    if (ctx.is_packed()) ops_.pack(ctx, l, 1, SIZE_MAX);
    if (es >= 0) done_params(es);
    done_params(s);
  }
  if (moe_ && cfg_.moe.balance == Balance::hf) {  // the cross-layer form, once every layer has routed
    std::vector<MoeActs<T>*> layers;
    for (int l = 0; l < L; ++l)
      if (MoeActs<T>* m = moe_acts(ctx, l)) layers.push_back(m);
    moe_->experts().finish_hf(layers, N);
  }
  if (moe_ && dscale != T(0)) {
    const auto [aux, z] = balance_losses(ctx);
    moe_->step().aux_loss += aux, moe_->step().z_loss += z;
  }
  return ch.spec.head ? head_forward(ctx, targets, dscale) : 0;
}

// The final norm, the LM head and the loss (dlogits left in ctx.logits for
// backward), and multi-token prediction's depths after them.
template <typename T>
double Transformer<T>::head_forward(Activations<T>& ctx, const int32_t* targets, T dscale) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t C = cfg_.hidden, N = ctx.B * seq(), R = tp_->rows(N);
  const int head = ch.head_seg;
  use_params(head, tied_local_ ? emb_seg_ : -1);
  if (tied_local_) use_params(emb_seg_, -1);
  ops_.norm_forward(ctx.lnf, ctx.lnf_mean, ctx.lnf_rstd, ctx.x_final, nfw_, nfb_, R);
  store(ctx.lnf, R * C);
  const T* h = tp_->enter(ctx.lnf_full, ctx.lnf, N, C);
  ops_.linear_fwd(ctx.logits, {h}, {head_}, nullptr, N, C, dims_.vocab);
  store(ctx.logits, N * dims_.vocab);
  // A forward for training (dscale != 0) keeps the head's parameters for
  // backward(); otherwise they are released here.
  if (!targets || dscale == T(0)) {
    done_params(head);
    if (tied_local_) done_params(emb_seg_);
  }
  ctx.mtp_ran = false;
  if (!targets) return 0;
  const auto grad = dscale != T(0) ? k::LossGrad<T>::scaled(dscale) : k::LossGrad<T>::forward_only();
  tp_->cross_entropy(ctx.losses, ctx.logits, targets, N, dims_.vocab, dims_.vocab_valid, dims_.vocab_begin, grad);
  if (dscale != T(0)) store(ctx.logits, N * dims_.vocab);  // dlogits
  const double loss = k::sum(ctx.losses, N);
  if (cfg_.mtp.depth > 0 && dscale != T(0)) mtp_forward(ctx, targets, dscale);  // their losses: mtp_losses()
  return loss;
}

template <typename T>
void Transformer<T>::backward_chunk(Activations<T>& ctx, const T* d_out, Recompute recompute, bool accumulate,
                                    BackwardPart part, const std::function<void(int64_t)>& on_ready) {
  auto ready = [&](int s) {
    if (on_ready) on_ready(segments_[size_t(s)].begin);
  };
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t R = tp_->rows(ctx.B * seq()), C = cfg_.hidden;
  if (ops_.fp8) ops_.fp8->set_training(true);
  Workspace<T>& w = begin_pass(ctx);
  const int L = int(ch.spec.layers);
  const bool split = part != BackwardPart::all;
  if (part == BackwardPart::weight) return weight_pass(ctx, accumulate);
  TRIDENT_CHECK(!split || ctx.saved.size() >= size_t(L), "split backward needs make_activations(split_backward)");
  if (ch.spec.head)
    head_backward(ctx, w, recompute, accumulate, split, ready);
  else
    k::copy(w.d_res, d_out, R * C);
  // the expert segment of the next MoE layer before local layer l of this chunk (-1: none)
  auto prev_experts = [&](int l) {
    for (int j = l - 1; j >= 0; --j)
      if (const int es = expert_seg_[size_t(ch.first_local + j)]; es >= 0) return es;
    return -1;
  };
  for (int l = L - 1; l >= 0; --l) {
    const int s = ch.first_layer_seg + l;
    layer_backward(ctx, l, ch.first_local + l, s, l > 0 ? s - 1 : -1, prev_experts(l), recompute, accumulate, split,
                   ready);
  }
  if (!ch.spec.embedding) return;  // w.d_res is the gradient of the chunk's input
  embedding_backward(ctx, w, accumulate, split);
  ready(ch.emb_seg);
}

// BackwardPart::weight: the linears' weight gradients, from what the input pass kept
template <typename T>
void Transformer<T>::weight_pass(Activations<T>& ctx, bool acc) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t N = ctx.B * seq(), C = cfg_.hidden, V = dims_.vocab;
  if (ch.spec.head) {
    use_grads(ch.head_seg);
    if (tied_local_) use_grads(emb_seg_);
    // a tied table already holds this micro-batch's embedding gradient: add to it (as to multi-token
    // prediction's head gradient)
    ops_.linear_bwd(nullptr, dhead_, nullptr, {ctx.logits}, {ctx.lnf_full}, {head_}, N, C, V,
                    acc || tied_local_ || ctx.mtp_ran);
    done_grads(ch.head_seg);
    if (tied_local_) done_grads(emb_seg_);
  }
  for (int l = int(ch.spec.layers) - 1; l >= 0; --l) {
    use_grads(ch.first_layer_seg + l);
    if (ctx.is_packed()) ops_.unpack(ctx, l);
    layer_weight_grads(ctx, l, int(ch.first_local) + l, acc);
    done_grads(ch.first_layer_seg + l);
  }
}

// The LM head and the final norm (their parameters still held from the
// forward, which left dlogits in ctx.logits), multi-token prediction's
// depths included: w.d_res becomes the gradient of the chunk's last layer's
// output.
template <typename T>
void Transformer<T>::head_backward(Activations<T>& ctx, Workspace<T>& w, Recompute recompute, bool acc, bool split,
                                   const std::function<void(int)>& ready) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t N = ctx.B * seq(), C = cfg_.hidden, R = tp_->rows(N), V = dims_.vocab;
  const int head = ch.head_seg;
  use_grads(head);
  if (tied_local_) use_grads(emb_seg_);
  // dlogits were rounded in forward: their copy is exact
  if (ops_.gemm_reads_16bit()) k::pack_16(w.dlogits16, ctx.logits, N * V, precision_);
  ops_.linear_bwd(w.d_ln, split ? nullptr : dhead_, nullptr,
                  {ctx.logits, ops_.gemm_reads_16bit() ? w.dlogits16 : nullptr}, {ctx.lnf_full}, {head_}, N, C, V, acc);
  store(w.d_ln, N * C);
  const T* d = tp_->enter_backward(w.d_local, w.d_ln, N, C);
  if (ctx.mtp_ran) {  // multi-token prediction's depths add to the final norm's output gradient
    T* d_lnf = mtp_lnf_grad(w, R);
    k::copy(d_lnf, d, R * C);
    // the head's weight: after the main head's (or, split, first: the weight pass adds the main head's)
    mtp_backward(ctx, d_lnf, recompute, acc, split ? acc : true, ready);
    d = d_lnf;
  }
  k::fill_zero(w.d_res, R * C);
  ops_.norm_backward(w.d_res, dnfw_, dnfb_, d, ctx.x_final, nfw_, ctx.lnf_mean, ctx.lnf_rstd, R, acc);
  store(w.d_res, R * C);
  done_params(head);
  if (tied_local_) done_params(emb_seg_);
  done_grads(head);
  // a tied head also writes the table, which is final only at the end
  ready(head);
}

// The embeddings' gradients from w.d_res (the token table's a scatter-add,
// multi-token prediction's lookups of the same table included).
template <typename T>
void Transformer<T>::embedding_backward(Activations<T>& ctx, Workspace<T>& w, bool acc, bool split) {
  const Chunk& ch = chunks_[size_t(ctx.chunk)];
  const int64_t Tn = seq(), N = ctx.B * Tn, C = cfg_.hidden, R = tp_->rows(N), V = dims_.vocab;
  const int emb = ch.emb_seg;
  if (!tied_local_) use_grads(emb);  // a tied head on this rank acquired it already
  // Start from zero when not accumulating, unless the tied LM head has just
  // written the same buffer. (Split backward: the head's weight pass comes
  // later and accumulates, so the table starts from zero here.)
  if (mtp_ && mtp_->shares_table) {  // the head's chunk on this rank may have added its modules' lookups already
    if (mtp_->first_table_write()) k::fill_zero(dwte_, V * C);
  } else if (!acc) {
    if (!tied_local_ || split) k::fill_zero(dwte_, V * C);
  }
  if (!acc && dwpe_) k::fill_zero(dwpe_, cfg_.seq_len * C);  // the table has a row per global position
  if (dwpe_) k::position_backward(dwpe_, w.d_res, tp_->row_begin(N), R, Tn, C, w.origin);
  const T* demb = tp_->exit_backward(w.d_full, w.d_res, N, C);
  k::embedding_backward(dwte_, demb, ctx.tokens, N, C, dims_.vocab_begin, V);
  if (ctx.mtp_ran && ch.spec.head)  // multi-token prediction's lookups of the same table
    for (const MtpActs<T>& a : ctx.mtp) mtp_->table_backward(a, dwte_, ctx.B, w);
  done_grads(emb);
}

template <typename T>
void Transformer<T>::reset_moe_step() {
  if (moe_) moe_->reset_step();
  if (mtp_) mtp_->reset_step();
  std::fill(max_logits_.begin(), max_logits_.end(), T(-INFINITY));
}

template <typename T>
void Transformer<T>::track_max_logits() {
  TRIDENT_CHECK(device_.type == DeviceType::cpu, "QK-clip's largest logits are tracked on the CPU in this version");
  const int64_t H = dims_.heads;
  max_logits_.assign(size_t(int64_t(layers_.size()) * H), T(-INFINITY));
  for (size_t l = 0; l < layers_.size(); ++l) layers_[l].max_logit = max_logits_.data() + int64_t(l) * H;
}

template <typename T>
const MoeStep& Transformer<T>::moe_step() const {
  static const MoeStep none;
  return moe_ ? moe_->step() : none;
}

template <typename T>
const std::vector<double>& Transformer<T>::mtp_losses() const {
  static const std::vector<double> none;
  return mtp_ ? mtp_->losses() : none;
}

template <typename T>
std::pair<double, double> Transformer<T>::balance_losses(const Activations<T>& ctx) const {
  double aux = 0, z = 0;  // the chunk's layers (not multi-token prediction's blocks, after them)
  const size_t L = size_t(chunks_[size_t(ctx.chunk)].spec.layers);
  for (size_t l = 0; l < std::min(L, ctx.moe.size()); ++l) aux += ctx.moe[l].aux_loss, z += ctx.moe[l].z_loss;
  return {aux, z};
}

template <typename T>
T* Transformer<T>::mtp_lnf_grad(Workspace<T>& w, int64_t R) {
  return ops_.scratch(w.mtp_lnf_grad, R * cfg_.hidden);
}

// Each segment's weights whose GEMMs run in FP8, one scale each: MLA's
// kv_a weight is two (the latent's rows, the rotary key's), a routed
// experts' weight one per local expert.
template <typename T>
parallel::GatherCast* Transformer<T>::fp8_param_gather() {
  if (!ops_.fp8 || !std::is_same_v<T, float>) return nullptr;
  if (fp8_gather_) return fp8_gather_.get();
  const Fp8Linears& fp8 = *ops_.fp8;
  std::vector<std::vector<Fp8ParamGather::Weight>> all;
  for (const SegInfo& info : seg_info_) {
    std::vector<Fp8ParamGather::Weight>& ws = all.emplace_back();
    if (info.kind != SegKind::layer && info.kind != SegKind::experts) continue;
    const int layer = int(info.layer);
    const bool moe = cfg_.moe.is_moe(info.global);
    auto add = [&](int64_t begin, int64_t n, Linear l, bool over_tensor = true) {
      if (fp8.applies({layer, l})) ws.push_back({begin, begin + n, {layer, l}, over_tensor});
    };
    for (size_t j = 0; j < info.slots.size(); ++j) {
      const auto [slot, at] = info.slots[j];
      const int64_t n = info.numel[j];
      switch (slot) {
        case Slot::qkv_weight:
          add(at, n, cfg_.is_mla() ? Linear::q_b : Linear::qkv);
          break;
        case Slot::attn_out_weight:
          add(at, n, Linear::proj);
          break;
        case Slot::mlp_in_weight:
          add(at, n, moe ? Linear::shared_in : Linear::fc);
          break;
        case Slot::mlp_out_weight:
          add(at, n, moe ? Linear::shared_out : Linear::fc2);
          break;
        case Slot::q_down_weight:
          add(at, n, Linear::q_a);
          break;
        case Slot::kv_up_weight:
          add(at, n, Linear::kv_b);
          break;
        case Slot::kv_down_weight: {
          const int64_t latent = cfg_.mla.kv_lora_rank * cfg_.hidden;
          add(at, latent, Linear::kv_a);
          add(at + latent, n - latent, Linear::kv_rope);
          break;
        }
        case Slot::experts_in_weight:
        case Slot::experts_out_weight: {
          const MoeMlp<T>& experts = moe_->experts();
          const int64_t G = experts.local_experts(), each = n / G;
          TRIDENT_CHECK(each * G == n, "layer {}: {} expert weights of {} values", info.global, G, n);
          for (int64_t g = 0; g < G; ++g)
            add(at + g * each, each, slot == Slot::experts_in_weight ? Linear::experts_in : Linear::experts_out,
                experts.routed_spread().tensor);
          break;
        }
        default:
          break;
      }
    }
    std::sort(ws.begin(), ws.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  }
  fp8_gather_ = std::make_unique<Fp8ParamGather>(fp8, std::move(all));
  return fp8_gather_.get();
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace trident::model
