// The mixture-of-experts MLP (see moe.hpp).
#include "model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/buffer.hpp"
#include "kernels/gemm.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/rows.hpp"
#include "parallel/paired_passes.hpp"

namespace trident::model {

namespace f8 = trident::kernels::fp8;

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

MoeLayout moe_layout(const MoeConfig& cfg, int64_t N, int64_t C, int64_t I, int64_t S, bool expert_parallel) {
  const int64_t E = cfg.experts, M = N * cfg.top_k;
  MoeLayout z;
  z.logits = z.scores = N * E;
  z.weight = z.routes = M;
  if (!expert_parallel) z.fc = M * 2 * I, z.act = M * I;
  z.y = M * C;
  if (S > 0) {
    z.shared_fc = N * 2 * S, z.shared_act = N * S;
    if (cfg.shared_expert_gate) z.shared_out = N * C, z.gate = N;
  }
  z.received = expert_parallel ? M * (C + 3 * I) : 0;
  z.scratch = {M * C, std::max(M, N) * C, M * C, M * 2 * I, M * I, N * E, N * E, M + N, N * C, N * C, N * 2 * S, N * S};
  return z;
}

int64_t MoeLayout::kept() const {
  return logits + scores + weight + 3 * routes + fc + act + y + shared_fc + shared_act + shared_out + gate + received;
}

int64_t MoeLayout::scratch_total() const {
  int64_t n = 0;
  for (int64_t s : scratch) n += s;
  return n;
}

template <typename T>
MoeActs<T> MoeMlp<T>::make_acts(int64_t N, std::vector<Tensor>& storage) const {
  const int64_t E = spec_.experts;
  auto alloc_on = [&](int64_t n, DType dtype, Device where) {
    storage.push_back(Tensor::empty({std::max<int64_t>(n, 1)}, dtype, MemCategory::activations, where));
    return storage.back().raw();
  };
  auto alloc = [&](int64_t n) { return static_cast<T*>(alloc_on(n, dtype_of<T>(), device_)); };
  auto ints = [&](int64_t n) { return static_cast<int32_t*>(alloc_on(n, DType::i32, device_)); };
  // the router's host side: its own buffers on a GPU, the layer's on the CPU
  auto host = [&](T* same, int64_t n) { return on_host_ ? same : static_cast<T*>(alloc_on(n, dtype_of<T>(), {})); };
  const MoeLayout z = moe_layout(cfg_, N, C_, I_, S_, ep_ != nullptr);
  MoeActs<T> a;
  a.logits = alloc(z.logits), a.weight = alloc(z.weight);
  a.scores = on_host_ ? alloc(z.scores) : host(nullptr, z.scores);
  a.expert = ints(z.routes), a.row = ints(z.routes), a.token = ints(z.routes);
  a.logits_h = host(a.logits, z.logits), a.weight_h = host(a.weight, z.weight);
  a.expert_h = on_host_ ? a.expert : static_cast<int32_t*>(alloc_on(z.routes, DType::i32, {}));
  // under expert parallelism the experts' rows are the received ones (forward): z.fc, z.act 0
  if (z.fc > 0) a.fc = alloc(z.fc), a.act = alloc(z.act);
  a.y = alloc(z.y);
  if (z.shared_fc > 0) a.shared_fc = alloc(z.shared_fc), a.shared_act = alloc(z.shared_act);
  if (z.gate > 0) a.shared_out = alloc(z.shared_out), a.gate = alloc(z.gate), a.gate_h = host(a.gate, z.gate);
  a.offsets.assign(size_t(E + 1), 0);
  return a;
}

template <typename T>
typename MoeMlp<T>::Rows MoeMlp<T>::rows_of(const T* h, int64_t N_all) const {
  Rows r;
  r.all = N_all;
  r.n = slice_ ? N_all / tp_->size() : N_all;
  r.first = slice_ ? tp_->rank() * r.n : 0;
  r.h = h, r.hs = h + r.first * C_;
  return r;
}

// route: logits = hs Wr^T (in T, fp32 in every precision: the model's T is
// the master type), the choice in host memory, back where the layer runs
template <typename T>
void MoeMlp<T>::route(MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r, MoeScratch<T>& s) const {
  const int64_t E = spec_.experts, N = r.n;
  k::linear_forward(a.logits, r.hs, w.router, w.logit_bias, N, C_, E, math_);
  mirror(a.logits_h, a.logits, N * E);
  const T* bias = w.bias;
  if (bias && !on_host_) mirror(s.bias_h, w.bias, E), bias = s.bias_h;
  k::router_forward(a.expert_h, a.weight_h, a.scores, a.logits_h, bias, N, spec_);
  mirror(a.expert, a.expert_h, N * spec_.top_k), mirror(a.weight, a.weight_h, N * spec_.top_k);
}

// permute: the routed rows expert-major, tokens in increasing index within an expert
template <typename T>
void MoeMlp<T>::permute(MoeActs<T>& a, const Rows& r, MoeScratch<T>& s) const {
  k::moe_route_index(a.row, a.token, a.offsets.data(), a.expert, r.n, spec_.top_k, spec_.experts);
  k::moe_permute(s.x, r.hs, a.token, r.n * spec_.top_k, C_);
}

// the shared experts on every row (the tensor ranks' partial sums) into so,
// and the gate g = sigmoid(h w_g), one value a token
template <typename T>
void MoeMlp<T>::shared_forward(T* so, MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r) const {
  const int64_t N = r.all, C = C_, S = S_;
  if (fp8 && fp8->applies({w.layer, Linear::shared_in})) {  // FP8: one group of every row
    const int64_t all[2] = {0, N};
    grouped_fwd(a.shared_fc, r.h, w.s_in, all, 1, C, 2 * S, {w.layer, Linear::shared_in}, {true, true});
    k::swiglu_forward(a.shared_act, a.shared_fc, N, S);
    grouped_fwd(so, a.shared_act, w.s_out, all, 1, S, C, {w.layer, Linear::shared_out}, {true, true});
  } else {
    k::linear_forward(a.shared_fc, r.h, w.s_in, static_cast<const T*>(nullptr), N, C, 2 * S, math_);
    k::swiglu_forward(a.shared_act, a.shared_fc, N, S);
    k::linear_forward(so, a.shared_act, w.s_out, static_cast<const T*>(nullptr), N, S, C, math_);
  }
  if (!a.gate) return;
  k::linear_forward(a.gate, r.h, w.s_gate, static_cast<const T*>(nullptr), N, C, 1, math_);
  mirror(a.gate_h, a.gate, N);
  k::gate_sigmoid(a.gate_h, N);
  mirror(a.gate, a.gate_h, N);
}

template <typename T>
uint8_t* MoeMlp<T>::fp8_codes(int slot, int64_t n) const {
  Tensor& t = fp8_codes_[slot];
  if (t.numel() < n) t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::u8, MemCategory::activations, device_);
  return t.template data<uint8_t>();
}

template <typename T>
float* MoeMlp<T>::fp8_scratch(int slot, int64_t n) const {
  Tensor& t = fp8_scratch_[slot];
  if (t.numel() < n) t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, MemCategory::activations, device_);
  return t.template data<float>();
}

template <typename T>
void MoeMlp<T>::grouped_fwd(T* y, const T* x, const T* w, const int64_t* off, int64_t G, int64_t C, int64_t OC,
                            LinearSite site, Fp8Linears::Spread over) const {
  if constexpr (std::is_same_v<T, float>) {
    if (fp8 && fp8->applies(site) && fp8->config().recipe != Fp8Recipe::blockwise) {  // codes, a scale a group
      std::vector<float> sx(static_cast<size_t>(G)), sw(sx);
      uint8_t *xq = fp8_codes(0, off[G] * C), *wq = fp8_codes(1, G * OC * C);
      fp8->quantize_groups_codes(site, Operand::input, x, off, G, C, over, xq, sx.data());
      fp8->quantize_weights_codes(site, w, G, OC, C, over, wq, sw.data());
      const f8::Format fx = fp8->format_of(Operand::input), fw = fp8->format_of(Operand::weight);
      return f8::grouped_linear_forward8(y, xq, fx, sx.data(), wq, fw, sw.data(), off, G, C, OC);
    }
    if (fp8 && fp8->applies(site)) {
      float *xq = fp8_scratch(0, off[G] * C), *wq = fp8_scratch(1, G * OC * C);
      fp8->quantize_groups(site, Operand::input, x, off, G, C, false, over, xq);
      fp8->quantize_weights(site, w, G, OC, C, over, wq);
      return k::grouped_linear_forward(y, xq, wq, off, G, C, OC, k::Precision::fp32);
    }
  }
  k::grouped_linear_forward(y, x, w, off, G, C, OC, math_);
}

namespace {

// The FP8 backward's groups: f(g, first row, rows, the group's weight
// gradient [per]) for each group with rows; an expert that received none
// gets a zero weight gradient (unless accumulating).
template <typename F>
void each_group(const int64_t* off, int64_t G, float* dw, int64_t per, bool acc, F f) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = off[g], rows = off[g + 1] - r0;
    float* dwg = dw + g * per;
    if (rows > 0)
      f(g, r0, rows, dwg);
    else if (!acc)
      k::fill_zero(dwg, per);
  }
}

}  // namespace

// FP8: each group's input gradient and weight gradient from the quantised
// operands (blockwise: the weight gradient's tiled along the group's tokens).
template <typename T>
void MoeMlp<T>::grouped_bwd(T* dx, T* dw, const T* dy, const T* x, const T* w, const int64_t* off, int64_t G, int64_t C,
                            int64_t OC, bool acc, LinearSite site, Fp8Linears::Spread over) const {
  if constexpr (std::is_same_v<T, float>) {
    if (fp8 && fp8->applies(site) && fp8->config().recipe != Fp8Recipe::blockwise) {  // codes, a scale a group
      const int64_t M = off[G];
      std::vector<float> sg(static_cast<size_t>(G)), sw(sg), sx(sg);
      uint8_t *gq = fp8_codes(2, M * OC), *wq = fp8_codes(1, G * OC * C), *xq = fp8_codes(0, M * C);
      fp8->quantize_groups_codes(site, Operand::grad, dy, off, G, OC, over, gq, sg.data());
      fp8->quantize_weights_codes(site, w, G, OC, C, over, wq, sw.data());
      fp8->quantize_groups_codes(site, Operand::input, x, off, G, C, over, xq, sx.data());
      const f8::Format fg = fp8->format_of(Operand::grad), fw = fp8->format_of(Operand::weight),
                       fx = fp8->format_of(Operand::input);
      each_group(off, G, dw, OC * C, acc, [&](int64_t g, int64_t r0, int64_t rows, float* dwg) {
        const f8::Operand8 dyg{gq + r0 * OC, fg, sg[size_t(g)]};
        if (dx) f8::linear_dgrad8(dx + r0 * C, dyg, {wq + g * OC * C, fw, sw[size_t(g)]}, rows, C, OC);
        f8::linear_wgrad8(dwg, dyg, {xq + r0 * C, fx, sx[size_t(g)]}, rows, C, OC, acc);
      });
      return;
    }
    if (fp8 && fp8->applies(site)) {
      const int64_t M = off[G];
      float *xq = fp8_scratch(0, M * C), *wq = fp8_scratch(1, G * OC * C), *gq = fp8_scratch(2, M * OC);
      float* gt = gq;
      fp8->quantize_groups(site, Operand::grad, dy, off, G, OC, false, over, gq);
      fp8->quantize_weights(site, w, G, OC, C, over, wq);
      if (fp8->config().recipe == Fp8Recipe::blockwise)
        gt = fp8_scratch(3, M * OC), fp8->quantize_groups(site, Operand::grad, dy, off, G, OC, true, over, gt);
      fp8->quantize_groups(site, Operand::input, x, off, G, C, true, over, xq);
      each_group(off, G, dw, OC * C, acc, [&](int64_t g, int64_t r0, int64_t rows, float* dwg) {
        if (dx)
          k::gemm<float>(false, false, rows, C, OC, 1.f, gq + r0 * OC, OC, wq + g * OC * C, C, 0.f, dx + r0 * C, C,
                         k::Precision::fp32);
        k::gemm<float>(true, false, OC, C, rows, 1.f, gt + r0 * OC, OC, xq + r0 * C, C, acc ? 1.f : 0.f, dwg, C,
                       k::Precision::fp32);
      });
      return;
    }
  }
  k::grouped_linear_backward(dx, dw, dy, x, w, off, G, C, OC, acc, math_);
}

// The experts: one grouped GEMM each way, the activation over all rows, into
// a.y. Under expert parallelism on the ranks holding them: dispatch (the
// shared experts compute while the rows travel), experts, combine back;
// else here, then the shared experts.
template <typename T>
void MoeMlp<T>::experts_forward(MoeActs<T>& a, const MoeWeights<T>& w, const Rows& r, MoeScratch<T>& s,
                                const std::function<void()>& shared) {
  const int64_t E = spec_.experts, M = r.n * spec_.top_k, C = C_, I = I_;
  if (!ep_) {
    grouped_fwd(a.fc, s.x, w.w_in, a.offsets.data(), E, C, 2 * I, {w.layer, Linear::experts_in}, routed());
    if (w.b_in) k::grouped_bias_forward(a.fc, w.b_in, a.offsets.data(), E, 2 * I);
    activation_forward(a.act, a.fc, M);
    grouped_fwd(a.y, a.act, w.w_out, a.offsets.data(), E, I, C, {w.layer, Linear::experts_out}, routed());
    if (w.b_out && adds_out_bias()) k::grouped_bias_forward(a.y, w.b_out, a.offsets.data(), E, C);
    if (shared) shared();
    return;
  }
  a.plan = ep_->plan(a.offsets.data());
  const int64_t R = a.plan.received, L = ep_->local_experts();
  a.received = Tensor::empty({std::max<int64_t>(R * (C + 3 * I), 1)}, dtype_of<T>(), MemCategory::activations, device_);
  a.x_in = a.received.template data<T>(), a.fc_in = a.x_in + R * C, a.act_in = a.fc_in + R * 2 * I;
  T* y_in = exchange_scratch(s, R * C);  // the experts' output, until combine() sends it back
  parallel::PendingDispatch rows = ep_->start_dispatch(a.plan, s.x, C, s.staging);
  if (shared) shared();
  ep_->finish_dispatch(rows, a.plan, a.x_in, C, s.staging, parallel::switch_pass);
  const int64_t* off = a.plan.local_offsets.data();
  grouped_fwd(a.fc_in, a.x_in, w.w_in, off, L, C, 2 * I, {w.layer, Linear::experts_in}, routed());
  if (w.b_in) k::grouped_bias_forward(a.fc_in, w.b_in, off, L, 2 * I);
  activation_forward(a.act_in, a.fc_in, R);
  grouped_fwd(y_in, a.act_in, w.w_out, off, L, I, C, {w.layer, Linear::experts_out}, routed());
  if (w.b_out && adds_out_bias()) k::grouped_bias_forward(y_in, w.b_out, off, L, C);
  ep_->combine(a.plan, a.y, y_in, C, s.staging, parallel::switch_pass);
}

// combine: each token's experts in increasing id (whole experts: this
// rank's slice, the other rows zero), then the shared output so
template <typename T>
void MoeMlp<T>::combine(T* out, const T* so, const MoeActs<T>& a, const Rows& r) const {
  if (slice_) k::fill_zero(out, r.all * C_);
  k::moe_combine(out + r.first * C_, a.y, a.weight, a.row, r.n, spec_.top_k, C_);
  if (S_ > 0) k::rows_scale_add(out, so, a.gate, r.all, C_);
}

// the balancing counts over the context group (whole experts: and the
// tensor group's slices) and the losses' values (their gradients:
// balance_grad)
template <typename T>
void MoeMlp<T>::balance_losses(MoeActs<T>& a, const Rows& r, int64_t B, MoeScratch<T>& s) const {
  const int64_t E = spec_.experts, K = spec_.top_k, N = r.n, M = N * K;
  const int64_t groups = cfg_.balance == Balance::seq_aux_loss ? B : 1, rows = N / groups;
  a.counts.assign(size_t(groups * E), T(0));
  for (int64_t i = 0; i < M; ++i) a.counts[size_t(i / (rows * K) * E + a.expert_h[i])] += T(1);
  cp_->sum(a.counts.data(), groups * E);
  if (slice_) tp_->sum_partials(a.counts.data(), groups * E);
  a.aux_loss = a.z_loss = 0;
  if (cfg_.balance != Balance::none && cfg_.balance != Balance::hf && cfg_.balance_coef > 0) {
    std::fill(s.dscores_h, s.dscores_h + N * E, T(0));
    balance_grad(s.dscores_h, a, N, r.all, B, 1.0, true);
    a.aux_loss = k::balance_loss_value(a.scores, s.dscores_h, N, E, spec_.score);
  }
  if (cfg_.z_loss > 0) a.z_loss = cfg_.z_loss * k::router_z_loss(a.logits_h, N, E) / double(r.all * cp_->size());
  if (slice_) {  // each tensor rank's slice's share: the whole micro-batch's on every rank
    T losses[2] = {T(a.aux_loss), T(a.z_loss)};
    tp_->sum_partials(losses, 2);
    a.aux_loss = double(losses[0]), a.z_loss = double(losses[1]);
  }
}

template <typename T>
void MoeMlp<T>::forward(T* out, const T* h, MoeActs<T>& a, const MoeWeights<T>& w, int64_t N_all, int64_t B,
                        MoeScratch<T>& s) {
  ensure_scratch(s, N_all);
  const Rows r = rows_of(h, N_all);
  route(a, w, r, s);
  permute(a, r, s);
  T* so = a.shared_out ? a.shared_out : s.dx;  // the ungated shared output is only added
  std::function<void()> shared;
  if (S_ > 0) shared = [&] { shared_forward(so, a, w, r); };
  experts_forward(a, w, r, s, shared);
  combine(out, so, a, r);
  balance_losses(a, r, B, s);
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
  const int64_t groups = per_sequence ? B : 1;              // sequences, or the whole micro-batch (local rows)
  const double whole = double(all / groups * cp_->size());  // ... and their tokens over the context group
  const double factor = hf ? cfg_.balance_coef * double(E) / (a.hf_rows * a.hf_rows)
                           : cfg_.balance_coef / double(groups) * double(E) / (double(K) * whole * whole);
  TRIDENT_CHECK(!hf || a.hf_counts.size() == size_t(E), "balance hf: finish_hf was not called");
  k::balance_loss_grad(dscores, a.scores, hf ? a.hf_counts.data() : a.counts.data(), N, E, groups, factor, scale,
                       spec_.score, wrt_q);
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

// combine's backward: the experts' permuted output gradients (weighted)
// into s.dys, the routing weights' and the gate's gradients (dot products
// with partial outputs) into s.dweight [N,k] and after it [N]
template <typename T>
void MoeMlp<T>::combine_backward(const T* dy, const MoeActs<T>& a, const Rows& r, MoeScratch<T>& s) const {
  const int64_t K = spec_.top_k, M = r.n * K, C = C_;
  T* dgate = s.dweight + r.all * K;  // after the weights': one sum over the group for both
  k::moe_combine_backward(s.dys, s.dweight, dy + r.first * C, a.y, a.weight, a.row, r.n, K, C);
  if (a.gate) k::rows_dot(dgate, dy, a.shared_out, r.all, C);
  if (!slice_)  // the experts' outputs are partial sums over the tensor group
    tp_->sum_partials(s.dweight, M + (a.gate ? r.n : 0));
  else if (a.gate)  // whole experts: only the shared output is
    tp_->sum_partials(dgate, r.all);
}

// the shared experts' backward: their input gradient into sdx
template <typename T>
void MoeMlp<T>::shared_backward(T* sdx, const T* dy, const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g,
                                const Rows& r, MoeScratch<T>& s, bool acc) const {
  const int64_t N = r.all, C = C_, S = S_;
  const T* dso = dy;
  if (a.gate) k::rows_scale(s.d_shared, dy, a.gate, N, C), dso = s.d_shared;
  if (fp8 && fp8->applies({w.layer, Linear::shared_in})) {  // FP8: one group of every row
    const int64_t all[2] = {0, N};
    grouped_bwd(s.sdact, g.s_out, dso, a.shared_act, w.s_out, all, 1, S, C, acc, {w.layer, Linear::shared_out},
                {true, true});
    k::swiglu_backward(s.sdfc, a.shared_fc, s.sdact, N, S);
    grouped_bwd(sdx, g.s_in, s.sdfc, r.h, w.s_in, all, 1, C, 2 * S, acc, {w.layer, Linear::shared_in}, {true, true});
    return;
  }
  k::linear_backward(s.sdact, g.s_out, static_cast<T*>(nullptr), dso, a.shared_act, w.s_out, N, S, C, acc, math_);
  k::swiglu_backward(s.sdfc, a.shared_fc, s.sdact, N, S);
  k::linear_backward(sdx, g.s_in, static_cast<T*>(nullptr), s.sdfc, r.h, w.s_in, N, C, 2 * S, acc, math_);
}

// The experts' backward, from s.dys to their input rows' gradient s.dx (an
// expert without tokens gets a zero, not a stale, gradient). Under expert
// parallelism the output gradients go to the experts' ranks (the shared
// experts' backward runs while they travel) and come back. Returns where
// the shared experts' input gradient is (null: not computed yet).
template <typename T>
T* MoeMlp<T>::experts_backward(const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g, const Rows& r,
                               MoeScratch<T>& s, bool acc, const std::function<void(T*)>& shared) {
  const int64_t E = spec_.experts, M = r.n * spec_.top_k, C = C_, I = I_;
  if (!ep_) {
    k::moe_permute(s.x, r.hs, a.token, M, C);
    if (g.b_out) k::grouped_bias_backward(g.b_out, s.dys, a.offsets.data(), E, C, acc);
    grouped_bwd(s.dact, g.w_out, s.dys, a.act, w.w_out, a.offsets.data(), E, I, C, acc, {w.layer, Linear::experts_out},
                routed());
    activation_backward(s.dfc, a.fc, s.dact, M);
    if (g.b_in) k::grouped_bias_backward(g.b_in, s.dfc, a.offsets.data(), E, 2 * I, acc);
    grouped_bwd(s.dx, g.w_in, s.dfc, s.x, w.w_in, a.offsets.data(), E, C, 2 * I, acc, {w.layer, Linear::experts_in},
                routed());
    return nullptr;
  }
  const int64_t R = a.plan.received, L = ep_->local_experts();
  T* d = exchange_scratch(s, R * (2 * C + 3 * I) + (S_ > 0 ? r.all * C : 0));
  T *dy_in = d, *dact_in = dy_in + R * C, *dfc_in = dact_in + R * I, *dx_in = dfc_in + R * 2 * I;
  T* sdx = S_ > 0 ? dx_in + R * C : nullptr;
  parallel::PendingDispatch rows = ep_->start_dispatch(a.plan, s.dys, C, s.staging);
  if (sdx) shared(sdx);
  ep_->finish_dispatch(rows, a.plan, dy_in, C, s.staging, parallel::switch_pass);
  const int64_t* off = a.plan.local_offsets.data();
  if (g.b_out) k::grouped_bias_backward(g.b_out, dy_in, off, L, C, acc);
  grouped_bwd(dact_in, g.w_out, dy_in, a.act_in, w.w_out, off, L, I, C, acc, {w.layer, Linear::experts_out}, routed());
  activation_backward(dfc_in, a.fc_in, dact_in, R);
  if (g.b_in) k::grouped_bias_backward(g.b_in, dfc_in, off, L, 2 * I, acc);
  grouped_bwd(dx_in, g.w_in, dfc_in, a.x_in, w.w_in, off, L, C, 2 * I, acc, {w.layer, Linear::experts_in}, routed());
  ep_->combine(a.plan, s.dx, dx_in, C, s.staging, parallel::switch_pass);
  return sdx;
}

// The router's backward (host): from the weights' gradient and the
// balancing losses', to the router's weight gradient and its input
// gradient (whole experts: this rank's slice's part added into dh, and
// s.d_router_h zero), then the gate's part added to s.d_router_h
template <typename T>
void MoeMlp<T>::router_backward(T* dh, const MoeActs<T>& a, const MoeWeights<T>& w, const MoeGrads<T>& g, const Rows& r,
                                MoeScratch<T>& s, int64_t B, T aux_scale, bool acc) const {
  const int64_t E = spec_.experts, K = spec_.top_k, N = r.n, C = C_;
  mirror(s.dweight_h, s.dweight, r.all * K + (a.gate ? r.all : 0));
  std::fill(s.dscores_h, s.dscores_h + N * E, T(0));
  balance_grad(s.dscores_h, a, N, r.all, B, double(aux_scale), false);
  k::router_backward(s.dlogits_h, s.dweight_h, s.dscores_h, a.scores, a.expert_h, N, spec_);
  if (cfg_.z_loss > 0)
    k::router_z_loss(a.logits_h, N, E, s.dlogits_h, double(aux_scale) * cfg_.z_loss / double(r.all * cp_->size()));
  mirror(s.dlogits, s.dlogits_h, N * E);
  if (slice_) {  // the router's part of this rank's slice: into dh, summed over the tensor group with it
    k::linear_backward(s.dx, g.router, g.logit_bias, s.dlogits, r.hs, w.router, N, C, E, acc, math_);
    k::rows_scale_add(dh + r.first * C, s.dx, static_cast<const T*>(nullptr), N, C);
    k::fill_zero(s.d_router_h, r.all * C);  // what is complete on every rank: the gate's part
  } else {
    k::linear_backward(s.d_router_h, g.router, g.logit_bias, s.dlogits, r.h, w.router, N, C, E, acc, math_);
  }
  if (!a.gate) return;
  T *dgate_h = s.dweight_h + r.all * K, *dgate = s.dweight + r.all * K;
  k::gate_sigmoid_backward(dgate_h, a.gate_h, r.all);
  mirror(dgate, dgate_h, r.all);
  k::linear_backward(s.d_shared, g.s_gate, static_cast<T*>(nullptr), dgate, r.h, w.s_gate, r.all, C, 1, acc, math_);
  k::rows_scale_add(s.d_router_h, s.d_shared, static_cast<const T*>(nullptr), r.all, C);
}

// the correction bias moves by counts, never by gradient: its slot takes
// this micro-batch's (kernels::BiasRange)
template <typename T>
void MoeMlp<T>::bias_counts(T* slot, const MoeActs<T>& a, MoeScratch<T>& s, bool acc) const {
  const int64_t E = spec_.experts;
  for (int64_t e = 0; e < E; ++e) s.counts_h[size_t(e)] = T(a.offsets[size_t(e + 1)] - a.offsets[size_t(e)]);
  const T* counts = s.counts_h.data();
  if (!on_host_) mirror(s.counts_dev.template data<T>(), counts, E), counts = s.counts_dev.template data<T>();
  if (acc)
    k::rows_scale_add(slot, counts, static_cast<const T*>(nullptr), 1, E);
  else
    k::copy(slot, counts, E);
}

template <typename T>
void MoeMlp<T>::backward(T* dh, const T* dy, const T* h, const MoeActs<T>& a, const MoeWeights<T>& w,
                         const MoeGrads<T>& g, int64_t N_all, int64_t B, T aux_scale, bool acc, MoeScratch<T>& s) {
  ensure_scratch(s, N_all);
  const Rows r = rows_of(h, N_all);
  combine_backward(dy, a, r, s);
  auto shared = [&](T* sdx) { shared_backward(sdx, dy, a, w, g, r, s, acc); };
  T* sdx = experts_backward(a, w, g, r, s, acc, shared);
  // unpermute: each token's rows added in increasing expert id (whole
  // experts: this rank's slice, the other rows zero), then the shared experts'
  if (slice_) k::fill_zero(dh, N_all * C_);
  k::moe_unpermute(dh + r.first * C_, s.dx, a.row, r.n, spec_.top_k, C_);
  if (S_ > 0) {
    if (!sdx) sdx = s.dx, shared(sdx);  // s.dx is free again
    k::rows_scale_add(dh, sdx, static_cast<const T*>(nullptr), N_all, C_);
  }
  router_backward(dh, a, w, g, r, s, B, aux_scale, acc);
  if (g.bias) bias_counts(g.bias, a, s, acc);
}

template <typename T>
void MoeMlp<T>::activation_forward(T* act, const T* fc, int64_t M) const {
  if (cfg_.activation == MoeActivation::clamped_swiglu)
    k::clamped_swiglu_forward(act, fc, M, I_, cfg_.swiglu_alpha, cfg_.swiglu_limit);
  else
    k::swiglu_forward(act, fc, M, I_);
}

template <typename T>
void MoeMlp<T>::activation_backward(T* dfc, const T* fc, const T* dact, int64_t M) const {
  if (cfg_.activation == MoeActivation::clamped_swiglu)
    k::clamped_swiglu_backward(dfc, fc, dact, M, I_, cfg_.swiglu_alpha, cfg_.swiglu_limit);
  else
    k::swiglu_backward(dfc, fc, dact, M, I_);
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
  const int64_t M = N * spec_.top_k;
  std::array<int64_t, 12> sizes = moe_layout(cfg_, N, C_, I_, S_, ep_ != nullptr).scratch;
  if (!on_host_) sizes[5] = 0;  // dscores_h: in host memory (s.host, below)
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
