// The mixture-of-experts MLP (see moe.hpp).
#include "model/moe.hpp"

#include <algorithm>
#include <cmath>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/rows.hpp"

namespace trident::model {

namespace k = trident::kernels;

namespace {

// dst <- src (n elements) unless they are the same buffer: the router's
// mirrors, between device and host memory (copy_bytes waits when dst is host).
template <typename T>
void mirror(T* dst, const T* src, int64_t n) {
  if (dst != src && n > 0) copy_bytes(dst, src, size_t(n) * sizeof(T));
}

}  // namespace

template <typename T>
MoeMlp<T>::MoeMlp(const MoeConfig& cfg, int64_t hidden, int64_t ffn, int64_t shared, parallel::TensorParallel* tp,
                  parallel::ContextParallel* cp, parallel::ExpertParallel* ep, Device device, bool whole_experts,
                  kernels::Precision math)
    : cfg_(cfg),
      C_(hidden),
      I_(ffn),
      S_(shared),
      tp_(tp),
      cp_(cp),
      ep_(ep && ep->size() > 1 ? ep : nullptr),
      device_(device),
      math_(math),
      on_host_(device.type == DeviceType::cpu),
      slice_(whole_experts && tp->size() > 1) {
  TRIDENT_CHECK(!ep_ || ep_->experts() == cfg.experts, "the expert group splits {} experts, the layer has {}",
                ep_ ? ep_->experts() : 0, cfg.experts);
  spec_.experts = cfg.experts, spec_.top_k = cfg.top_k, spec_.score = cfg.score, spec_.norm_topk = cfg.norm_topk;
  spec_.groups = cfg.groups, spec_.group_topk = cfg.group_topk, spec_.scaling = cfg.scaling;
  k::check_router(spec_);
}

template <typename T>
MoeActs<T> MoeMlp<T>::make_acts(int64_t N, std::vector<Tensor>& storage) const {
  const int64_t E = spec_.experts, K = spec_.top_k, M = N * K;
  auto alloc_on = [&](int64_t n, DType dtype, Device where) {
    storage.push_back(Tensor::empty({std::max<int64_t>(n, 1)}, dtype, MemCategory::activations, where));
    return storage.back().raw();
  };
  auto alloc = [&](int64_t n) { return static_cast<T*>(alloc_on(n, dtype_of<T>(), device_)); };
  auto ints = [&](int64_t n) { return static_cast<int32_t*>(alloc_on(n, DType::i32, device_)); };
  // the router's host side: its own buffers on a GPU, the layer's on the CPU
  auto host = [&](T* same, int64_t n) { return on_host_ ? same : static_cast<T*>(alloc_on(n, dtype_of<T>(), {})); };
  MoeActs<T> a;
  a.logits = alloc(N * E), a.weight = alloc(M);
  a.scores = on_host_ ? alloc(N * E) : host(nullptr, N * E);
  a.expert = ints(M), a.row = ints(M), a.token = ints(M);
  a.logits_h = host(a.logits, N * E), a.weight_h = host(a.weight, M);
  a.expert_h = on_host_ ? a.expert : static_cast<int32_t*>(alloc_on(M, DType::i32, {}));
  // under expert parallelism the experts' rows are the received ones (forward)
  if (!ep_) a.fc = alloc(M * 2 * I_), a.act = alloc(M * I_);
  a.y = alloc(M * C_);
  if (S_ > 0) {
    a.shared_fc = alloc(N * 2 * S_), a.shared_act = alloc(N * S_);
    if (cfg_.shared_expert_gate) a.shared_out = alloc(N * C_), a.gate = alloc(N), a.gate_h = host(a.gate, N);
  }
  a.offsets.assign(size_t(E + 1), 0);
  return a;
}

template <typename T>
void MoeMlp<T>::forward(T* out, const T* h, MoeActs<T>& a, const MoeWeights<T>& w, int64_t N_all, int64_t B,
                        MoeScratch<T>& s) {
  ensure_scratch(s, N_all);
  // the rows routed here: all of them, or (whole experts) this tensor rank's slice
  const int64_t N = slice_ ? N_all / tp_->size() : N_all, r0 = slice_ ? tp_->rank() * N : 0;
  const T* hs = h + r0 * C_;
  const int64_t E = spec_.experts, K = spec_.top_k, M = N * K, C = C_, I = I_, S = S_;
  // router, in T (fp32 in every precision: the model's T is the master
  // type), its choice in host memory
  k::linear_forward(a.logits, hs, w.router, static_cast<const T*>(nullptr), N, C, E, math_);
  mirror(a.logits_h, a.logits, N * E);
  const T* bias = w.bias;
  if (bias && !on_host_) mirror(s.bias_h, w.bias, E), bias = s.bias_h;
  k::router_forward(a.expert_h, a.weight_h, a.scores, a.logits_h, bias, N, spec_);
  mirror(a.expert, a.expert_h, M), mirror(a.weight, a.weight_h, M);
  // permute: expert-major, tokens in increasing index within an expert
  const int64_t* off = a.offsets.data();
  k::moe_route_index(a.row, a.token, a.offsets.data(), a.expert, N, K, E);
  k::moe_permute(s.x, hs, a.token, M, C);
  // the shared experts (they read only h): their output, added after the routed one
  T* so = a.shared_out ? a.shared_out : s.dx;  // the ungated output is only added
  auto shared = [&] {                          // every row (the tensor ranks' partial sums)
    k::linear_forward(a.shared_fc, h, w.s_in, static_cast<const T*>(nullptr), N_all, C, 2 * S, math_);
    k::swiglu_forward(a.shared_act, a.shared_fc, N_all, S);
    k::linear_forward(so, a.shared_act, w.s_out, static_cast<const T*>(nullptr), N_all, S, C, math_);
    if (a.gate) {  // g = sigmoid(h w_g), one value a token
      k::linear_forward(a.gate, h, w.s_gate, static_cast<const T*>(nullptr), N_all, C, 1, math_);
      mirror(a.gate_h, a.gate, N_all);
      for (int64_t n = 0; n < N_all; ++n) a.gate_h[n] = T(1) / (T(1) + std::exp(-a.gate_h[n]));
      mirror(a.gate, a.gate_h, N_all);
    }
  };
  // the experts: one grouped GEMM each way, the activation over all rows
  if (ep_) {  // on the ranks holding them: the rows go there (while the shared experts compute) and come back
    a.plan = ep_->plan(off);
    const int64_t R = a.plan.received, L = ep_->local_experts();
    a.received =
        Tensor::empty({std::max<int64_t>(R * (C + 3 * I), 1)}, dtype_of<T>(), MemCategory::activations, device_);
    a.x_in = a.received.template data<T>(), a.fc_in = a.x_in + R * C, a.act_in = a.fc_in + R * 2 * I;
    T* y_in = exchange_scratch(s, R * C);  // the experts' output, until combine() sends it back
    parallel::PendingDispatch rows = ep_->start_dispatch(a.plan, s.x, C, s.staging);
    if (S > 0) shared();
    ep_->finish_dispatch(rows, a.plan, a.x_in, C, s.staging);
    k::grouped_linear_forward(a.fc_in, a.x_in, w.w_in, a.plan.local_offsets.data(), L, C, 2 * I, math_);
    k::swiglu_forward(a.act_in, a.fc_in, R, I);
    k::grouped_linear_forward(y_in, a.act_in, w.w_out, a.plan.local_offsets.data(), L, I, C, math_);
    ep_->combine(a.plan, a.y, y_in, C, s.staging);
  } else {
    k::grouped_linear_forward(a.fc, s.x, w.w_in, off, E, C, 2 * I, math_);
    k::swiglu_forward(a.act, a.fc, M, I);
    k::grouped_linear_forward(a.y, a.act, w.w_out, off, E, I, C, math_);
    if (S > 0) shared();
  }
  // combine, each token's experts in increasing id (whole experts: this
  // rank's slice, the other rows zero), then the shared output
  if (slice_) k::fill_zero(out, N_all * C);
  k::moe_combine(out + r0 * C, a.y, a.weight, a.row, N, K, C);
  if (S > 0) k::rows_scale_add(out, so, a.gate, N_all, C);
  // the balancing counts, over the context group (whole experts: and the tensor group's slices)
  const int64_t groups = cfg_.balance == Balance::seq_aux_loss ? B : 1, rows = N / groups;
  a.counts.assign(size_t(groups * E), T(0));
  for (int64_t i = 0; i < M; ++i) a.counts[size_t(i / (rows * K) * E + a.expert_h[i])] += T(1);
  cp_->sum(a.counts.data(), groups * E);
  if (slice_) tp_->sum_partials(a.counts.data(), groups * E);
  // the balancing losses' values (their gradients: balance_grad)
  a.aux_loss = a.z_loss = 0;
  if (cfg_.balance != Balance::none && cfg_.balance != Balance::hf && cfg_.balance_coef > 0) {
    std::fill(s.dscores_h, s.dscores_h + N * E, T(0));
    balance_grad(s.dscores_h, a, N, N_all, B, 1.0, true);
    // the loss is linear in q for fixed counts: loss = sum_ne q_ne dloss/dq_ne
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0, dot = 0;
      for (int64_t e = 0; e < E; ++e) sum += double(a.scores[n * E + e]);
      for (int64_t e = 0; e < E; ++e) {
        const double q = spec_.score == RouterScore::softmax ? double(a.scores[n * E + e]) : a.scores[n * E + e] / sum;
        dot += q * double(s.dscores_h[n * E + e]);
      }
      a.aux_loss += dot;
    }
  }
  if (cfg_.z_loss > 0) a.z_loss = cfg_.z_loss * k::router_z_loss(a.logits_h, N, E) / double(N_all * cp_->size());
  if (slice_) {  // each tensor rank's slice's share: the whole micro-batch's on every rank
    T losses[2] = {T(a.aux_loss), T(a.z_loss)};
    tp_->sum_partials(losses, 2);
    a.aux_loss = double(losses[0]), a.z_loss = double(losses[1]);
  }
}

// dscores [N,E] += scale x the gradient of the balancing loss, counts held
// fixed (the choice is a step), with respect to the normalised scores q
// (wrt_q) or to the router's scores p.
template <typename T>
void MoeMlp<T>::balance_grad(T* dscores, const MoeActs<T>& a, int64_t N, int64_t all, int64_t B, double scale,
                             bool wrt_q) const {
  const int64_t E = spec_.experts, K = spec_.top_k;
  if (cfg_.balance == Balance::none || cfg_.balance_coef == 0) return;
  const bool per_sequence = cfg_.balance == Balance::seq_aux_loss, hf = cfg_.balance == Balance::hf;
  const int64_t groups = per_sequence ? B : 1, rows = N / groups;  // sequences, or the whole micro-batch (local rows)
  const double whole = double(all / groups * cp_->size());         // ... and their tokens over the context group
  const double factor = hf ? cfg_.balance_coef * double(E) / (a.hf_rows * a.hf_rows)
                           : cfg_.balance_coef / double(groups) * double(E) / (double(K) * whole * whole);
  TRIDENT_CHECK(!hf || a.hf_counts.size() == size_t(E), "balance hf: finish_hf was not called");
  std::vector<double> dq(static_cast<size_t>(E));
  for (int64_t b = 0; b < groups; ++b) {
    const T* counts = hf ? a.hf_counts.data() : a.counts.data() + b * E;
    for (int64_t n = b * rows; n < (b + 1) * rows; ++n) {
      const T* p = a.scores + n * E;
      for (int64_t e = 0; e < E; ++e) dq[size_t(e)] = scale * factor * double(counts[e]);
      if (wrt_q || spec_.score == RouterScore::softmax) {  // softmax: q = p
        for (int64_t e = 0; e < E; ++e) dscores[n * E + e] += T(dq[size_t(e)]);
        continue;
      }
      // sigmoid: q = p / sum p, so dp_j = (dq_j - sum_i dq_i q_i) / sum p
      double sum = 0, dot = 0;
      for (int64_t e = 0; e < E; ++e) sum += double(p[e]);
      for (int64_t e = 0; e < E; ++e) dot += dq[size_t(e)] * double(p[e]) / sum;
      for (int64_t e = 0; e < E; ++e) dscores[n * E + e] += T((dq[size_t(e)] - dot) / sum);
    }
  }
}

template <typename T>
void MoeMlp<T>::finish_hf(const std::vector<MoeActs<T>*>& layers, int64_t N) const {
  const int64_t E = spec_.experts;
  std::vector<T> total(static_cast<size_t>(E), T(0));
  for (const MoeActs<T>* a : layers)
    for (int64_t e = 0; e < E; ++e) total[size_t(e)] += a->counts[size_t(e)];
  const double R = double(layers.size()) * double(N * cp_->size());
  for (MoeActs<T>* a : layers) {
    a->hf_counts = total, a->hf_rows = R;
    double loss = 0;  // this layer's share: coef E sum_e c_e sum_n p_ne / R^2 (this rank's rows)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = 0; e < E; ++e) loss += double(a->scores[n * E + e]) * double(total[size_t(e)]);
    a->aux_loss = cfg_.balance_coef * double(E) * loss / (R * R);
  }
}

template <typename T>
void MoeMlp<T>::backward(T* dh, const T* dy, const T* h, const MoeActs<T>& a, const MoeWeights<T>& w,
                         const MoeGrads<T>& g, int64_t N_all, int64_t B, T aux_scale, bool acc, MoeScratch<T>& s) {
  ensure_scratch(s, N_all);
  // the rows routed here: all of them, or (whole experts) this tensor rank's slice
  const int64_t N = slice_ ? N_all / tp_->size() : N_all, r0 = slice_ ? tp_->rank() * N : 0;
  const T* hs = h + r0 * C_;
  const int64_t E = spec_.experts, K = spec_.top_k, M = N * K, C = C_, I = I_, S = S_;
  T* dgate = s.dweight + N_all * K;  // [N], after the weights' [N,k]: one sum over the group for both
  // the experts' permuted output gradients (weighted), and the routing
  // weights' and the gate's gradients: dot products with partial outputs
  k::moe_combine_backward(s.dys, s.dweight, dy + r0 * C, a.y, a.weight, a.row, N, K, C);
  if (a.gate) k::rows_dot(dgate, dy, a.shared_out, N_all, C);
  if (!slice_)  // the experts' outputs are partial sums over the tensor group
    tp_->sum_partials(s.dweight, M + (a.gate ? N : 0));
  else if (a.gate)  // whole experts: only the shared output is
    tp_->sum_partials(dgate, N_all);
  // the shared experts' backward: their input gradient into sdx, added after the routed one
  auto shared = [&](T* sdx) {
    const T* dso = dy;
    if (a.gate) k::rows_scale(s.d_shared, dy, a.gate, N_all, C), dso = s.d_shared;
    k::linear_backward(s.sdact, g.s_out, static_cast<T*>(nullptr), dso, a.shared_act, w.s_out, N_all, S, C, acc, math_);
    k::swiglu_backward(s.sdfc, a.shared_fc, s.sdact, N_all, S);
    k::linear_backward(sdx, g.s_in, static_cast<T*>(nullptr), s.sdfc, h, w.s_in, N_all, C, 2 * S, acc, math_);
  };
  T* sdx = s.dx;  // where the shared experts' input gradient is (after the routed one's, when it is s.dx)
  // an expert without tokens gets a zero (not a stale) gradient
  if (ep_) {  // the output gradients go to the experts' ranks (while the shared experts' backward runs) and come back
    const int64_t R = a.plan.received, L = ep_->local_experts();
    T* d = exchange_scratch(s, R * (2 * C + 3 * I) + (S > 0 ? N_all * C : 0));
    T *dy_in = d, *dact_in = dy_in + R * C, *dfc_in = dact_in + R * I, *dx_in = dfc_in + R * 2 * I;
    parallel::PendingDispatch rows = ep_->start_dispatch(a.plan, s.dys, C, s.staging);
    if (S > 0) sdx = dx_in + R * C, shared(sdx);
    ep_->finish_dispatch(rows, a.plan, dy_in, C, s.staging);
    k::grouped_linear_backward(dact_in, g.w_out, dy_in, a.act_in, w.w_out, a.plan.local_offsets.data(), L, I, C, acc,
                               math_);
    k::swiglu_backward(dfc_in, a.fc_in, dact_in, R, I);
    k::grouped_linear_backward(dx_in, g.w_in, dfc_in, a.x_in, w.w_in, a.plan.local_offsets.data(), L, C, 2 * I, acc,
                               math_);
    ep_->combine(a.plan, s.dx, dx_in, C, s.staging);
  } else {
    k::moe_permute(s.x, hs, a.token, M, C);
    k::grouped_linear_backward(s.dact, g.w_out, s.dys, a.act, w.w_out, a.offsets.data(), E, I, C, acc, math_);
    k::swiglu_backward(s.dfc, a.fc, s.dact, M, I);
    k::grouped_linear_backward(s.dx, g.w_in, s.dfc, s.x, w.w_in, a.offsets.data(), E, C, 2 * I, acc, math_);
  }
  // unpermute: each token's rows added in increasing expert id (whole
  // experts: this rank's slice, the other rows zero), then the shared experts'
  if (slice_) k::fill_zero(dh, N_all * C);
  k::moe_unpermute(dh + r0 * C, s.dx, a.row, N, K, C);
  if (S > 0) {
    if (!ep_) shared(sdx);  // s.dx is free again
    k::rows_scale_add(dh, sdx, static_cast<const T*>(nullptr), N_all, C);
  }
  // router (host): from the weights' gradient and the balancing losses'
  mirror(s.dweight_h, s.dweight, N_all * K + (a.gate ? N_all : 0));
  std::fill(s.dscores_h, s.dscores_h + N * E, T(0));
  balance_grad(s.dscores_h, a, N, N_all, B, double(aux_scale), false);
  k::router_backward(s.dlogits_h, s.dweight_h, s.dscores_h, a.scores, a.expert_h, N, spec_);
  if (cfg_.z_loss > 0)
    k::router_z_loss(a.logits_h, N, E, s.dlogits_h, double(aux_scale) * cfg_.z_loss / double(N_all * cp_->size()));
  mirror(s.dlogits, s.dlogits_h, N * E);
  if (slice_) {  // the router's part of this rank's slice: into dh, summed over the tensor group with it
    k::linear_backward(s.dx, g.router, static_cast<T*>(nullptr), s.dlogits, hs, w.router, N, C, E, acc, math_);
    k::rows_scale_add(dh + r0 * C, s.dx, static_cast<const T*>(nullptr), N, C);
    k::fill_zero(s.d_router_h, N_all * C);  // what is complete on every rank: the gate's part
  } else {
    k::linear_backward(s.d_router_h, g.router, static_cast<T*>(nullptr), s.dlogits, h, w.router, N, C, E, acc, math_);
  }
  if (a.gate) {
    T* dgate_h = s.dweight_h + N_all * K;
    for (int64_t n = 0; n < N_all; ++n) dgate_h[n] *= a.gate_h[n] * (T(1) - a.gate_h[n]);  // through the sigmoid
    mirror(dgate, dgate_h, N_all);
    k::linear_backward(s.d_shared, g.s_gate, static_cast<T*>(nullptr), dgate, h, w.s_gate, N_all, C, 1, acc, math_);
    k::rows_scale_add(s.d_router_h, s.d_shared, static_cast<const T*>(nullptr), N_all, C);
  }
  if (g.bias) {  // the bias moves by counts, never by gradient: its slot takes this micro-batch's (kernels::BiasRange)
    for (int64_t e = 0; e < E; ++e) s.counts_h[size_t(e)] = T(a.offsets[size_t(e + 1)] - a.offsets[size_t(e)]);
    const T* counts = s.counts_h.data();
    if (!on_host_) mirror(s.counts_dev.template data<T>(), counts, E), counts = s.counts_dev.template data<T>();
    if (acc)
      k::rows_scale_add(g.bias, counts, static_cast<const T*>(nullptr), 1, E);
    else
      k::copy(g.bias, counts, E);
  }
}

template <typename T>
T* MoeMlp<T>::exchange_scratch(MoeScratch<T>& s, int64_t n) const {
  // a rank whose experts receive no rows (R = 0) still gets a valid pointer: nothing is read or written through it
  n = std::max<int64_t>(n, 1);
  if (!s.exchanged.defined() || s.exchanged.numel() < n)
    s.exchanged = Tensor::empty({n}, dtype_of<T>(), MemCategory::activations, device_);
  return s.exchanged.template data<T>();
}

// The scratch where the layer runs, in the order of model/memory.cpp's
// scratch_elements (the planner's count of the CPU's allocation), and the
// router's host side: on the CPU its scores' gradient is in the same
// allocation and the other mirrors are the layer's own buffers.
template <typename T>
void MoeMlp<T>::ensure_scratch(MoeScratch<T>& s, int64_t N) const {
  const int64_t E = spec_.experts;
  if (s.counts_h.empty()) {
    s.counts_h.assign(size_t(E), T(0));
    if (!on_host_) s.counts_dev = Tensor::empty({E}, dtype_of<T>(), MemCategory::activations, device_);
  }
  if (N <= s.N) return;
  const int64_t M = N * spec_.top_k, C = C_, I = I_, S = S_;
  const int64_t sizes[12] = {
      M * C, std::max(M, N) * C, M * C, M * 2 * I, M * I, on_host_ ? N * E : 0, N * E, M + N, N * C,
      N * C, N * 2 * S,          N * S};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  s.buffers = Tensor::empty({total}, dtype_of<T>(), MemCategory::activations, device_);
  T* p = s.buffers.template data<T>();
  T** outs[12] = {&s.x,       &s.dx,      &s.dys,        &s.dfc,      &s.dact, &s.dscores_h,
                  &s.dlogits, &s.dweight, &s.d_router_h, &s.d_shared, &s.sdfc, &s.sdact};
  for (int i = 0; i < 12; ++i) *outs[i] = p, p += sizes[i];
  s.dlogits_h = s.dlogits, s.dweight_h = s.dweight;
  if (!on_host_) {  // the router's side in host memory: scores' and logits' gradients, weights', the bias
    s.host = Tensor::empty({2 * N * E + M + N + E}, dtype_of<T>(), MemCategory::activations);
    s.dscores_h = s.host.template data<T>(), s.dlogits_h = s.dscores_h + N * E;
    s.dweight_h = s.dlogits_h + N * E, s.bias_h = s.dweight_h + M + N;
  }
  s.N = N;
}

template class MoeMlp<float>;
template class MoeMlp<double>;

}  // namespace trident::model
