// The step time of one plan, by category (see plan_parts.hpp and
// docs/planner.md): compute from the step cost model, the bubble from the
// schedule's simulation, collectives by an alpha-beta model per link level.
#include <algorithm>
#include <array>
#include <cmath>

#include "launch/plan/plan_parts.hpp"
#include "model/memory.hpp"
#include "model/parallel_plan.hpp"
#include "parallel/topology.hpp"

namespace trident::launch {

namespace {

// Ring collectives over g ranks: time for `bytes` per rank.
double all_reduce_time(double bytes, int g, const Link& l) {
  return g <= 1 ? 0 : 2.0 * (g - 1) / g * bytes / l.bandwidth_at(bytes) + 2.0 * (g - 1) * l.latency;
}
double half_collective_time(double bytes, int g, const Link& l) {  // reduce-scatter or all-gather
  return g <= 1 ? 0 : double(g - 1) / g * bytes / l.bandwidth_at(bytes) + double(g - 1) * l.latency;
}

GroupPlacement place(const parallel::Topology& topo, parallel::GroupKind kind, int devices_per_node) {
  GroupPlacement p;
  const auto groups = topo.groups(kind);
  for (const auto& g : groups)
    for (int r : g)
      if (r / devices_per_node != g.front() / devices_per_node) p.intra = false;
  const auto& first = groups.front();
  p.per_node = int(std::count_if(first.begin(), first.end(),
                                 [&](int r) { return r / devices_per_node == first.front() / devices_per_node; }));
  return p;
}

// The link a group's collectives run over: inside a node the node's fabric;
// across nodes the ring leaves each node through the network interfaces of
// the members there (one per device), up to the node fabric's bandwidth.
Link group_link(const Cluster& cl, const GroupPlacement& p) {
  if (p.intra) return cl.intra;
  Link l = cl.inter;
  l.bandwidth = std::min(cl.intra.bandwidth, cl.inter.bandwidth * p.per_node);
  return l;
}

// Context parallelism's transfers per step (ring or all-to-all) and the
// part the attention of the block in hand hides; `passes`: layer passes of
// the slowest stage (layers x micro-batches).
void context_comm_time(const PlanContext& x, PlanResult& r, double passes) {
  const PlanConfig& c = x.c;
  const ModelConfig& m = x.q.model;
  const int T = x.T, CP = x.CP;
  const double pb = x.pb;
  PlanTime& t = r.time;
  // per layer and micro-batch, on this rank's rows (b x s / CP), this tensor rank's heads
  const Link xl = group_link(x.cl, x.where[3]);
  const model::LocalDims local = model::local_dims(m, {0, T});
  const double rows = double(c.micro_batch * m.seq_len / CP), hd = double(m.head_dim());
  const double H = double(local.heads), KV = double(local.kv_heads);
  auto p2p = [&](double bytes) { return bytes / xl.bandwidth_at(bytes) + xl.latency; };
  double attn_f = 0, attn_b = 0;  // this rank's attention, forward and backward
  for (const Op& op : r.ops)
    if (op.kind == OpKind::attention) attn_f += op.forward_s, attn_b += op.backward_s;
  const double again = c.recompute == Recompute::none ? 0 : 1;  // full or selective: the forward's exchange again
  if (c.context_mode == ContextMode::ring) {
    // CP - 1 key/value blocks pass forward, each behind the attention of the block in hand; backward passes them
    // again behind theirs, and the dK/dV partials (as large) CP times, after each block's compute
    const double kv = p2p(rows * 2 * KV * hd * pb);
    const double fwd = (CP - 1) * kv, bwd = (CP - 1) * kv + CP * kv;
    const double fwd_hidden = (CP - 1) * std::min(kv, attn_f / CP), bwd_hidden = (CP - 1) * std::min(kv, attn_b / CP);
    t.context_comm = passes * ((1 + again) * fwd + bwd);
    t.context_comm_hidden = passes * ((1 + again) * fwd_hidden + bwd_hidden);
  } else {
    // all-to-all of (CP-1)/CP of the buffer: q, k, v and the output forward; backward the output gradient,
    // q, k, v again and dq, dk, dv
    auto a2a = [&](double bytes) { return (CP - 1) * p2p(bytes / CP); };
    const double qkv = a2a(rows * (H + 2 * KV) * hd * pb), out = a2a(rows * H * hd * pb);
    t.context_comm = passes * ((1 + again) * (qkv + out) + out + 2 * qkv);
  }
}

// The data x context group's gradient reduction (and ZeRO's parameter
// gathers) per step, and the part the backward hides; `busy`: the slowest
// stage's compute.
void data_comm_time(const PlanContext& x, PlanResult& r, double busy) {
  const PlanConfig& c = x.c;
  const int P = x.P, V = x.V, DC = x.DC;
  const double pb = x.pb, Ps = double(r.stage_params);
  PlanTime& t = r.time;
  // gradients are reduced, and ZeRO shards, over data x context
  const Link dl = group_link(x.cl, x.where[1]);
  const double grads = 4 * Ps;
  const double buckets = std::max(1.0, std::ceil(grads / double(x.q.parallel.bucket_bytes)));
  const double M = r.micro_batches;
  // ZeRO 0/1: one reduction of the accumulated gradients per step (all-reduce,
  // or reduce-scatter + parameter all-gather), overlapping only the last
  // micro-batch's backward. ZeRO 2: a reduce-scatter per micro-batch, behind
  // each backward. ZeRO 3: also the parameters gathered for every forward and
  // backward, prefetched behind compute.
  double hide = 0;
  if (c.zero == 0) {
    t.data_comm = all_reduce_time(grads, DC, dl), hide = busy * 2 / 3 / M;
  } else if (c.zero == 1) {
    t.data_comm = half_collective_time(grads, DC, dl) + half_collective_time(pb * Ps, DC, dl), hide = busy * 2 / 3 / M;
  } else if (c.zero == 2) {
    t.data_comm = M * half_collective_time(grads, DC, dl) + half_collective_time(pb * Ps, DC, dl), hide = busy * 2 / 3;
  } else {
    t.data_comm = M * (half_collective_time(grads, DC, dl) + 2 * half_collective_time(pb * Ps, DC, dl)), hide = busy;
  }
  t.data_comm += (c.zero >= 2 ? M : 1) * buckets * 2.0 * (DC - 1) * dl.latency;
  if (P == 1 && V == 1) t.data_comm_hidden = std::min(t.data_comm, hide);  // the trainer overlaps when not piped
}

}  // namespace

MeshPlacement place_groups(int D, int T, int P, int CP, const std::vector<MeshAxis>& order, int devices_per_node) {
  const parallel::Topology topo(D, P, T, order, CP);
  return {place(topo, parallel::GroupKind::tensor, devices_per_node),
          place(topo, parallel::GroupKind::data_context, devices_per_node),
          place(topo, parallel::GroupKind::pipeline, devices_per_node),
          place(topo, parallel::GroupKind::context, devices_per_node)};
}

// Seconds per step on the slowest pipeline stage, by category.
void plan_time(const PlanContext& x, PlanResult& r) {
  const Recipe& q = x.q;
  const Cluster& cl = x.cl;
  const PlanConfig& c = x.c;
  const ModelConfig& m = q.model;
  const int T = x.T, P = x.P, V = x.V, CP = x.CP, DC = x.DC;
  const double pb = x.pb, Ps = double(r.stage_params);
  const MeshPlacement& where = x.where;
  r.tensor_intra_node = where[0].intra;
  r.data_intra_node = where[1].intra;
  r.pipeline_intra_node = where[2].intra;
  r.context_intra_node = where[3].intra;
  PlanTime& t = r.time;
  // the operations of a layer and the head for one micro-batch; each
  // pipeline rank runs its chunks' layers (and the head on the last chunk's
  // rank) for every micro-batch; the slowest rank sets the pace
  r.ops = layer_ops(m, {c.micro_batch, T, c.sequence_parallel, CP}, cl.rates());
  const double mbs = r.micro_batches;
  double slowest = -1, most_layers = 0;
  for (int pp = 0; pp < P; ++pp) {
    double layers = 0, moe = 0;
    bool head = false;
    for (const auto& ch : model::pipeline_chunks(m, P, V, c.stage_layers, pp))
      layers += double(ch.layers), head |= ch.head, moe += double(model::moe_layers_in(m, ch.first_layer, ch.layers));
    most_layers = std::max(most_layers, layers);
    const OpTimes ot = stage_op_times(r.ops, layers - moe, moe, head);
    const double again = c.recompute == Recompute::full        ? ot.forward
                         : c.recompute == Recompute::selective ? ot.selective
                                                               : 0;
    if (ot.total() + again <= slowest) continue;
    slowest = ot.total() + again;
    t.gemm = mbs * ot.gemm, t.attention = mbs * ot.attention, t.memory = mbs * ot.memory, t.recompute = mbs * again;
  }
  const double busy = t.compute() + t.recompute;
  t.bubble = r.bubble_fraction < 1 ? busy * r.bubble_fraction / (1 - r.bubble_fraction) : 0;
  const Link tl = group_link(cl, where[0]);
  const double act_bytes = double(c.micro_batch * m.seq_len / CP * m.hidden) * pb;
  // per layer and micro-batch: two all-reduces forward, two backward (with
  // sequence parallelism an all-gather and a reduce-scatter each: the same
  // volume), two more when full recomputation repeats the forward
  const double layer_ops = most_layers * mbs * (4 + (c.recompute == Recompute::full ? 2 : 0));
  t.tensor_comm = layer_ops * all_reduce_time(act_bytes, T, tl);
  if (P > 1) {
    const Link pl = group_link(cl, where[2]);
    const double bytes = act_bytes / (c.sequence_parallel ? T : 1);
    t.pipeline_comm = 2.0 * mbs * V * (bytes / pl.bandwidth_at(bytes) + pl.latency);
  }
  if (CP > 1) context_comm_time(x, r, most_layers * mbs);
  if (DC > 1) data_comm_time(x, r, busy);
  // the optimizer step: memory-bound over this rank's shard (all of it with ZeRO 0)
  t.optimizer = optimizer_bytes_per_element(cl.precision) * Ps / (c.zero >= 1 ? DC : 1) /
                (cl.memory_bandwidth * cl.memory_fraction);
}

}  // namespace trident::launch
