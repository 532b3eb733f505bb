// The MLP part of a layer (model/mlp.hpp): dense, and the mixture of
// experts around model/moe.cpp's MoeMlp.
#include "model/mlp.hpp"

#include <algorithm>

#include "kernels/activation.hpp"
#include "kernels/buffer.hpp"
#include "kernels/residual.hpp"

namespace trident::model {

namespace k = trident::kernels;

template <typename T>
void DenseMlp<T>::forward(T* out, Activations<T>& ctx, int l, const T* h, const LayerParams<T>& p, int64_t, Run,
                          Workspace<T>&) {
  const LayerOps<T>& o = ops_;
  const int64_t N = ctx.B * o.seq(), C = o.cfg().hidden, F = o.dims().ffn;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  o.linear_fwd(a.fc, {h}, {p.fcw()}, p.fcb(), N, C, o.fc_width(), {p.layer, Linear::fc}, o.fp8_input(a, o.ln2_full));
  o.store(a.fc, N * o.fc_width());
  if (o.arch().mlp == MlpKind::swiglu)
    k::swiglu_forward(a.act, a.fc, N, F);
  else
    k::gelu_forward(a.act, a.fc, N * F);
  o.store(a.act, N * F);
  o.linear_fwd(out, {a.act}, {p.pw()}, nullptr, N, F, C, {p.layer, Linear::fc2}, o.fp8_input(a, o.act));
}

template <typename T>
void DenseMlp<T>::backward(Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, Workspace<T>& w, Recompute,
                           bool split, bool acc) {
  const LayerOps<T>& o = ops_;
  const int64_t N = ctx.B * o.seq(), C = o.cfg().hidden, F = o.dims().ffn;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  T* d_fc = split ? ctx.saved[size_t(l)].d_fc : w.d_fc;
  if (split) k::copy(ctx.saved[size_t(l)].d_mlp_out, dy, N * C);
  if (o.gemm_reads_16bit()) k::pack_16(w.dy16, dy, N * C, o.precision());  // w.d_res is rounded: exact
  o.linear_bwd(w.d_act, split ? nullptr : p.dpw(), nullptr, {dy, w.dy16}, o.saved_in(ctx, l, o.act, a.act), {p.pw()}, N,
               F, C, acc, {p.layer, Linear::fc2});
  o.store(w.d_act, N * F);
  if (o.arch().mlp == MlpKind::swiglu)
    k::swiglu_backward(d_fc, a.fc, w.d_act, N, F);
  else
    k::gelu_backward(d_fc, a.fc, w.d_act, N * F);
  o.store_grad(d_fc, w.dfc16, N * o.fc_width());
  o.linear_bwd(w.d_ln, split ? nullptr : p.dfcw(), p.dfcb(), {d_fc, w.dfc16},
               o.saved_in(ctx, l, o.ln2_full, a.ln2_full), {p.fcw()}, N, C, o.fc_width(), acc, {p.layer, Linear::fc});
}

template <typename T>
void DenseMlp<T>::weight_grads(const Activations<T>& ctx, int l, const LayerParams<T>& p, bool acc) const {
  const LayerOps<T>& o = ops_;
  const int64_t N = ctx.B * o.seq(), C = o.cfg().hidden, F = o.dims().ffn;
  const LayerActs<T>& a = ctx.layers[size_t(l)];
  const SavedGrads<T>& g = ctx.saved[size_t(l)];
  o.linear_bwd(nullptr, p.dpw(), nullptr, {g.d_mlp_out}, o.saved_in(ctx, l, o.act, a.act), {p.pw()}, N, F, C, acc,
               {p.layer, Linear::fc2});
  o.linear_bwd(nullptr, p.dfcw(), nullptr, {g.d_fc}, o.saved_in(ctx, l, o.ln2_full, a.ln2_full), {p.fcw()}, N, C,
               o.fc_width(), acc, {p.layer, Linear::fc});
}

template <typename T>
MoeLayer<T>::MoeLayer(const LayerOps<T>& ops, parallel::ExpertParallel* ep, bool whole_experts)
    : ops_(ops),
      moe_(ops.cfg().moe, ops.cfg().hidden, ops.cfg().moe.ffn_hidden / (whole_experts ? 1 : ops.tp().size()),
           ops.cfg().moe.shared_width() / ops.tp().size(), &ops.tp(), &ops.cp(), ep, ops.device(), whole_experts,
           ops.precision()) {}

template <typename T>
void MoeLayer<T>::forward(T* out, Activations<T>& ctx, int l, const T* h, const LayerParams<T>& p, int64_t global,
                          Run run, Workspace<T>& w) {
  MoeActs<T>& m = ctx.moe[size_t(l)];
  const int64_t N = ctx.B * ops_.seq();
  moe_.forward(out, h, m, p.moe(), N, ctx.B, w.moe);
  if (run == Run::training) count_routes(m, global);
  // full recompute: the rows the experts received are received again by the recomputation
  if (run != Run::recompute && ctx.recompute == Recompute::full) m.received = Tensor();
}

template <typename T>
void MoeLayer<T>::backward(Activations<T>& ctx, int l, const T* dy, const LayerParams<T>& p, Workspace<T>& w,
                           Recompute recompute, bool, bool acc) {
  MoeActs<T>& m = ctx.moe[size_t(l)];
  const int64_t N = ctx.B * ops_.seq();
  // its weights' gradients come with the input pass (docs/moe.md)
  moe_.backward(w.d_ln, dy, ctx.layers[size_t(l)].ln2_full, m, p.moe(), p.moe_grads(), N, ctx.B, ctx.aux_scale, acc,
                w.moe);
  if (recompute == Recompute::full) m.received = Tensor();
}

// the router's and gate's part, complete on every rank: this rank's rows
template <typename T>
const T* MoeLayer<T>::add_replicated_grad(const T* d, Workspace<T>& w, int64_t N) const {
  const int64_t C = ops_.cfg().hidden, R = ops_.tp().rows(N);
  k::residual_forward(w.d_local, d, w.moe.d_router_h + ops_.tp().row_begin(N) * C, static_cast<T*>(nullptr), R, C);
  return w.d_local;
}

template <typename T>
void MoeLayer<T>::count_routes(const MoeActs<T>& m, int64_t global) {
  const int64_t E = ops_.cfg().moe.experts;
  const auto at = std::find(step_.layers.begin(), step_.layers.end(), global) - step_.layers.begin();
  if (size_t(at) == step_.layers.size())
    step_.layers.push_back(global), step_.counts.resize(step_.counts.size() + size_t(E), 0.0);
  for (int64_t e = 0; e < E; ++e)
    step_.counts[size_t(at * E + e)] += double(m.offsets[size_t(e + 1)] - m.offsets[size_t(e)]);
}

template <typename T>
void MoeLayer<T>::reset_step() {
  std::fill(step_.counts.begin(), step_.counts.end(), 0.0);
  step_.aux_loss = step_.z_loss = 0;
}

template class DenseMlp<float>;
template class DenseMlp<double>;
template class MoeLayer<float>;
template class MoeLayer<double>;

}  // namespace trident::model
