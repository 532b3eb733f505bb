// The planner (see planner.hpp and docs/planner.md).
#include "launch/planner.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "model/memory.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "model/transformer.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/schedule.hpp"
#include "parallel/topology.hpp"

namespace trident::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Ring collectives over g ranks: time for `bytes` per rank.
double all_reduce_time(double bytes, int g, const Link& l) {
  return g <= 1 ? 0 : 2.0 * (g - 1) / g * bytes / l.bandwidth_at(bytes) + 2.0 * (g - 1) * l.latency;
}
double half_collective_time(double bytes, int g, const Link& l) {  // reduce-scatter or all-gather
  return g <= 1 ? 0 : double(g - 1) / g * bytes / l.bandwidth_at(bytes) + double(g - 1) * l.latency;
}

// Per pipeline rank and chunk: activation contexts the schedule holds (as the trainer sizes its pool).
std::vector<std::vector<int>> in_flight(parallel::ScheduleKind kind, int P, int V, int M) {
  static std::map<std::tuple<int, int, int, int>, std::vector<std::vector<int>>> cache;
  auto key = std::make_tuple(int(kind), P, V, M);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<std::vector<int>> out;
  for (int p = 0; p < P; ++p) {
    out.push_back(parallel::in_flight_per_chunk(parallel::make_schedule(kind, P, V, M, p), V));
    for (int& n : out.back()) n = std::max(n, 1);
  }
  return cache[key] = out;
}

double bubble_of(parallel::ScheduleKind kind, int P, int V, int M) {
  static std::map<std::tuple<int, int, int, int>, double> cache;
  auto key = std::make_tuple(int(kind), P, V, M);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache[key] = P > 1 ? parallel::simulate(kind, P, V, M).bubble_fraction() : 0.0;
}

// Where the groups of one kind sit: all inside a node, or across nodes with
// `per_node` members on each (the first group's count; groups are alike).
struct Placement {
  bool intra = true;
  int per_node = 1;
};
Placement place(const parallel::Topology& topo, parallel::GroupKind kind, int devices_per_node) {
  Placement p;
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
Link group_link(const Cluster& cl, const Placement& p) {
  if (p.intra) return cl.intra;
  Link l = cl.inter;
  l.bandwidth = std::min(cl.intra.bandwidth, cl.inter.bandwidth * p.per_node);
  return l;
}

std::string gib(double b) { return fmt::format("{:.1f} GiB", b / kGiB); }

// Identifies a recipe (text and overrides) in the caches.
std::string fnv_key(const Recipe& rc) { return std::to_string(parallel::fnv1a64(rc.resolved_text())); }

}  // namespace

double optimizer_bytes_per_element(Precision precision) {
  return 28.0 + (precision == Precision::fp32 ? 0.0 : 2.0);  // p r/w, g r, m r/w, v r/w (+ the 2-byte copy)
}

Recipe load_plan_recipe(const std::string& path, const std::vector<std::string>& sets) {
  std::vector<std::string> all = sets;
  for (const char* s : {"parallel.data=1", "parallel.tensor=1", "parallel.pipeline=1", "parallel.virtual_stages=1",
                        "parallel.stage_layers=[]"})
    all.push_back(s);
  Recipe rc = load_recipe(path, all, 1);
  rc.overrides = sets;
  return rc;
}

PlanConfig mesh_choices(const std::string& path, const std::vector<std::string>& sets, int64_t D, int64_t T, int64_t P,
                        int64_t C) {
  std::vector<std::string> on_mesh = sets;
  for (const auto& s : {fmt::format("parallel.data={}", D), fmt::format("parallel.tensor={}", T),
                        fmt::format("parallel.pipeline={}", P), fmt::format("parallel.context={}", C)})
    on_mesh.push_back(s);
  const Recipe q = load_recipe(path, on_mesh, D * T * P * C);
  return {D,
          T,
          P,
          q.parallel.virtual_stages,
          q.train.micro_batch,
          q.parallel.zero,
          q.train.recompute,
          q.parallel.schedule,
          q.parallel.sequence_parallel,
          q.parallel.stage_layers,
          C,
          q.parallel.context_mode};
}

PlanResult plan_one(const Recipe& rc, const Cluster& cl, const PlanConfig& c) {
  PlanResult r;
  r.config = c;
  r.precision = cl.precision;
  const int64_t N = c.data * c.tensor * c.pipeline * c.context;
  std::vector<std::string> sets = rc.overrides;
  for (const auto& s : std::vector<std::string>{
           fmt::format("parallel.data={}", c.data), fmt::format("parallel.tensor={}", c.tensor),
           fmt::format("parallel.context={}", c.context), fmt::format("parallel.context_mode={}", c.context_mode),
           fmt::format("parallel.pipeline={}", c.pipeline), fmt::format("parallel.virtual_stages={}", c.virtual_stages),
           fmt::format("parallel.schedule={}", c.schedule), fmt::format("parallel.zero={}", c.zero),
           fmt::format("parallel.sequence_parallel={}", c.sequence_parallel),
           fmt::format("parallel.stage_layers=[{}]", fmt::join(c.stage_layers, ",")),
           fmt::format("train.micro_batch={}", c.micro_batch), fmt::format("train.recompute={}", c.recompute)})
    sets.push_back(s);
  // the loader's verdict and the stage sizes do not depend on ZeRO or recompute: cached
  static std::map<std::string, std::pair<std::string, Recipe>> verdicts;
  const std::string layers_key = fmt::format("{}", fmt::join(c.stage_layers, ","));
  const std::string vkey = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", fnv_key(rc), c.data, c.tensor, c.pipeline,
                                       c.virtual_stages, c.schedule, c.sequence_parallel, c.micro_batch,
                                       c.schedule == ScheduleKind::zero_bubble ? enum_name(c.recompute) : "",
                                       layers_key, c.context, c.context_mode);
  auto found = verdicts.find(vkey);
  if (found == verdicts.end()) {
    std::pair<std::string, Recipe> v;
    try {
      v.second = load_recipe_text(rc.text, rc.source, sets, N);
    } catch (const InputError& e) {
      std::string why = e.what();
      const size_t key = why.find("key '");  // drop the file and override prefix: the key says enough
      v.first = key == std::string::npos ? why : why.substr(key);
    }
    found = verdicts.emplace(vkey, std::move(v)).first;
  }
  if (!found->second.first.empty()) {
    r.reason = found->second.first;
    return r;
  }
  Recipe q = found->second.second;
  q.train.recompute = c.recompute;
  q.parallel.zero = c.zero;
  const ModelConfig& m = q.model;
  const int D = int(c.data), T = int(c.tensor), P = int(c.pipeline), V = int(c.virtual_stages);
  const int CP = int(c.context), DC = D * CP;  // replicas of a model shard: gradients and ZeRO shards over D x CP
  const double pb = cl.precision == Precision::fp32 ? 4 : 2;  // bytes of a parameter / activation
  // (whole model, largest stage per tensor rank)
  struct Sizes {
    int64_t whole, stage;
  };
  static std::map<std::string, Sizes> sizes;
  const std::string skey = fmt::format("{}|{}|{}|{}|{}", fnv_key(rc), T, P, V, layers_key);
  if (!sizes.count(skey)) {
    Sizes z{model::consolidated_numel(m), 0};
    for (int pp = 0; pp < P; ++pp)
      z.stage = std::max(z.stage,
                         model::ParamRegistry(m, {0, T}, model::pipeline_chunks(m, P, V, c.stage_layers, pp)).total());
    sizes[skey] = z;
  }
  r.params = sizes[skey].whole;
  r.stage_params = sizes[skey].stage;
  r.micro_batches = int(q.train.global_batch / (c.micro_batch * D));
  const auto kind = c.schedule;
  std::vector<std::vector<int>> flight;
  try {  // the schedule's own rules (e.g. interleaving needs micro-batches % pipeline == 0)
    flight = in_flight(kind, P, V, r.micro_batches);
    r.bubble_fraction = bubble_of(kind, P, V, r.micro_batches);
  } catch (const InputError& e) {
    r.reason = e.what();
    return r;
  }
  r.in_flight = 0;
  for (int f : flight[0]) r.in_flight += f;

  // memory per device: the largest over pipeline ranks
  const double Ps = double(r.stage_params);
  PlanMemory& mem = r.memory;
  // As the trainer allocates (measured by its per-category peaks; docs/planner.md):
  // ZeRO 1 receives its reduced shard into a buffer; ZeRO 2 and 3 accumulate
  // into a whole gradient buffer when there are several micro-batches, else
  // hold a few segment windows while they are reduce-scattered; ZeRO 3
  // gathers parameters a segment at a time, the next one prefetched.
  static std::map<std::string, int64_t> segments;  // the largest gathered unit: a layer, or the embeddings
  const std::string gkey = fmt::format("{}|{}", fnv_key(rc), T);
  int64_t& segment = segments[gkey];
  if (segment == 0) {
    const model::ParamRegistry whole(m, {0, T});
    for (const auto& p : whole.params())
      if (p.name.find(".0.") != std::string::npos) segment += p.numel;
    int64_t emb = 0;
    for (const auto& p : whole.params())
      if (p.name.find("wte") != std::string::npos || p.name.find("wpe") != std::string::npos ||
          p.name.find("embed_tokens") != std::string::npos)
        emb += p.numel;
    segment = std::max(segment, emb);
  }
  mem.params = pb * Ps / (c.zero >= 3 ? DC : 1) + (c.zero >= 3 && DC > 1 ? 2 * pb * double(segment) : 0);
  // ZeRO 2/3 gradients beyond the shard: with accumulation (several
  // micro-batches) a whole accumulation buffer; with one micro-batch the
  // windows in flight (two reducing, one being written)
  const double windows = r.micro_batches > 1 ? 4 * Ps : 3 * 4 * double(segment);
  mem.grads = 4 * Ps / (c.zero >= 2 ? DC : 1) + (c.zero >= 2 && DC > 1 ? windows : 0);  // fp32
  mem.optimizer = (8 + (pb < 4 ? 4 : 0)) * Ps / (c.zero >= 1 ? DC : 1);  // AdamW moments (+ fp32 master weights)
  if (c.zero == 1 && DC > 1) mem.buffers += 4 * Ps / DC;
  const model::ActivationShape shape{
      c.micro_batch, T, c.sequence_parallel, c.recompute, kind == parallel::ScheduleKind::zero_bubble, CP};
  const auto counts = model::chunk_layer_counts(m, P, V, c.stage_layers);
  double act = 0;
  for (int pp = 0; pp < P; ++pp) {
    double a = double(model::scratch_elements(m, shape));
    for (int v = 0; v < V; ++v) {
      const int chunk = v * P + pp;
      a += double(flight[size_t(pp)][size_t(v)]) *
               double(model::activation_elements(m, shape, counts[size_t(chunk)], chunk == P * V - 1)) +
           double(model::shared_recompute_elements(m, shape, counts[size_t(chunk)]));
    }
    act = std::max(act, a);
  }
  mem.activations = pb * act;
  const double R = double(c.micro_batch * m.seq_len / CP) / (c.sequence_parallel ? T : 1);
  if (P > 1) mem.buffers += 4.0 * V * R * double(m.hidden) * pb;  // send/receive pools
  if (CP > 1) {  // the context transfer buffers, fp32 (parallel/context_parallel.hpp): per rank's rows
    const model::LocalDims local = model::local_dims(m, {0, T});
    const double rows = double(c.micro_batch * m.seq_len / CP), hd = double(m.head_dim());
    const double kv = rows * 2 * double(local.kv_heads) * hd, state = rows * double(local.heads);
    const double qkv = rows * double(local.heads + 2 * local.kv_heads) * hd, out = rows * double(local.heads) * hd;
    mem.buffers += 4 * (c.context_mode == ContextMode::ring ? 5 * kv + state : 4 * qkv + 3 * out + 4 * state);
  }

  // time per step
  // per mesh: tensor, data x context, pipeline, context groups
  static std::map<std::string, std::array<Placement, 4>> placement;
  const std::string pkey =
      fmt::format("{}|{}|{}|{}|{}|{}", D, T, P, CP, fmt::join(q.parallel.order, ","), cl.devices_per_node);
  if (!placement.count(pkey)) {
    const parallel::Topology topo(D, P, T, q.parallel.order, CP);
    placement[pkey] = {place(topo, parallel::GroupKind::tensor, cl.devices_per_node),
                       place(topo, parallel::GroupKind::data_context, cl.devices_per_node),
                       place(topo, parallel::GroupKind::pipeline, cl.devices_per_node),
                       place(topo, parallel::GroupKind::context, cl.devices_per_node)};
  }
  const auto& where = placement[pkey];
  r.tensor_intra_node = where[0].intra;
  r.data_intra_node = where[1].intra;
  r.pipeline_intra_node = where[2].intra;
  r.context_intra_node = where[3].intra;
  const double tokens = double(q.train.global_batch) * double(m.seq_len);
  PlanTime& t = r.time;
  // the operations of a layer and the head for one micro-batch; each
  // pipeline rank runs its chunks' layers (and the head on the last chunk's
  // rank) for every micro-batch; the slowest rank sets the pace
  r.ops = layer_ops(m, {c.micro_batch, T, c.sequence_parallel, CP}, cl.rates());
  const double mbs = r.micro_batches;
  double slowest = -1, most_layers = 0;
  for (int pp = 0; pp < P; ++pp) {
    double layers = 0;
    bool head = false;
    for (const auto& ch : model::pipeline_chunks(m, P, V, c.stage_layers, pp))
      layers += double(ch.layers), head |= ch.head;
    most_layers = std::max(most_layers, layers);
    const OpTimes ot = stage_op_times(r.ops, layers, head);
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
  if (CP > 1) {
    // per layer and micro-batch, on this rank's rows (b x s / CP), this tensor rank's heads
    const Link xl = group_link(cl, where[3]);
    const model::LocalDims local = model::local_dims(m, {0, T});
    const double rows = double(c.micro_batch * m.seq_len / CP), hd = double(m.head_dim());
    const double H = double(local.heads), KV = double(local.kv_heads);
    auto p2p = [&](double bytes) { return bytes / xl.bandwidth_at(bytes) + xl.latency; };
    double attn_f = 0, attn_b = 0;  // this rank's attention, forward and backward
    for (const Op& op : r.ops)
      if (op.kind == OpKind::attention) attn_f += op.forward_s, attn_b += op.backward_s;
    const double passes = most_layers * mbs;
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
  if (DC > 1) {
    // gradients are reduced, and ZeRO shards, over data x context
    const Link dl = group_link(cl, where[1]);
    const double grads = 4 * Ps;
    const double buckets = std::max(1.0, std::ceil(grads / double(q.parallel.bucket_bytes)));
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
      t.data_comm = half_collective_time(grads, DC, dl) + half_collective_time(pb * Ps, DC, dl),
      hide = busy * 2 / 3 / M;
    } else if (c.zero == 2) {
      t.data_comm = M * half_collective_time(grads, DC, dl) + half_collective_time(pb * Ps, DC, dl),
      hide = busy * 2 / 3;
    } else {
      t.data_comm = M * (half_collective_time(grads, DC, dl) + 2 * half_collective_time(pb * Ps, DC, dl)), hide = busy;
    }
    t.data_comm += (c.zero >= 2 ? M : 1) * buckets * 2.0 * (DC - 1) * dl.latency;
    if (P == 1 && V == 1) t.data_comm_hidden = std::min(t.data_comm, hide);  // the trainer overlaps when not piped
  }
  // the optimizer step: memory-bound over this rank's shard (all of it with ZeRO 0)
  t.optimizer = optimizer_bytes_per_element(cl.precision) * Ps / (c.zero >= 1 ? DC : 1) /
                (cl.memory_bandwidth * cl.memory_fraction);
  r.tokens_per_s = tokens / t.step();
  r.tflops_per_device = model::flops_per_token(m) * r.tokens_per_s / double(N) / 1e12;
  r.mfu = r.tflops_per_device * 1e12 / cl.peak_flops;
  const double total = mem.total();
  if (total > cl.memory_bytes) {
    std::vector<std::pair<double, const char*>> parts = {{mem.params, "parameters"},
                                                         {mem.grads, "gradients"},
                                                         {mem.optimizer, "optimizer states"},
                                                         {mem.activations, "activations"},
                                                         {mem.buffers, "buffers"}};
    const auto big = *std::max_element(parts.begin(), parts.end());
    r.reason = fmt::format("needs {} > {}: {} {}", gib(total), gib(cl.memory_bytes), big.second, gib(big.first));
    return r;
  }
  r.feasible = true;
  return r;
}

std::vector<PlanResult> plan_all(const Recipe& rc, const Cluster& cl, int64_t devices, int64_t max_context) {
  std::vector<PlanResult> out;
  const ModelConfig& m = rc.model;
  for (int64_t CP = 1; CP <= std::min(max_context, devices); ++CP) {
    if (devices % CP || (CP > 1 && m.seq_len % (2 * CP))) continue;
    const int64_t n = devices / CP;
    for (ContextMode mode : {ContextMode::ring, ContextMode::all_to_all}) {
      if (mode == ContextMode::all_to_all && CP == 1) continue;
      for (int64_t T = 1; T <= n; ++T) {
        if (n % T) continue;
        for (int64_t P = 1; P <= n / T; ++P) {
          if ((n / T) % P) continue;
          const int64_t D = n / T / P;
          if (rc.train.global_batch % D) continue;  // the loader would refuse every micro-batch size
          for (int64_t V = 1; V * P <= m.layers; ++V) {
            if (V > 1 && P == 1) break;
            if (m.layers % (P * V)) continue;
            const ScheduleKind schedule = V > 1 ? ScheduleKind::interleaved_1f1b
                                          : rc.parallel.schedule == ScheduleKind::interleaved_1f1b
                                              ? ScheduleKind::one_f_one_b
                                              : rc.parallel.schedule;
            for (int64_t mb = 1; mb <= rc.train.global_batch / D; ++mb) {
              if ((rc.train.global_batch / D) % mb) continue;
              for (bool sp : {false, true}) {
                if (sp && T == 1) continue;
                for (int64_t zero = 0; zero <= 3; ++zero)
                  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
                    out.push_back(plan_one(rc, cl, {D, T, P, V, mb, zero, recompute, schedule, sp, {}, CP, mode}));
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const PlanResult& a, const PlanResult& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.tokens_per_s > b.tokens_per_s;
  });
  return out;
}

std::string plan_json(const std::vector<PlanResult>& results) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    const auto& c = r.config;
    const auto& m = r.memory;
    const bool timed = r.feasible || r.memory.total() > 0;  // out of memory: still timed
    out.push_back({{"data", c.data},
                   {"tensor", c.tensor},
                   {"pipeline", c.pipeline},
                   {"context", c.context},
                   {"context_mode", enum_name(c.context_mode)},
                   {"virtual_stages", c.virtual_stages},
                   {"micro_batch", c.micro_batch},
                   {"zero", c.zero},
                   {"recompute", enum_name(c.recompute)},
                   {"sequence_parallel", c.sequence_parallel},
                   {"schedule", enum_name(c.schedule)},
                   {"stage_layers", c.stage_layers},
                   {"precision", enum_name(r.precision)},
                   {"params", r.params},
                   {"memory_bytes",
                    {{"params", std::round(m.params)},
                     {"grads", std::round(m.grads)},
                     {"optimizer", std::round(m.optimizer)},
                     {"activations", std::round(m.activations)},
                     {"buffers", std::round(m.buffers)},
                     {"total", std::round(m.total())}}},
                   {"step_time_s", timed ? r.time.step() : 0.0},
                   {"time_s",
                    {{"gemm", timed ? r.time.gemm : 0.0},
                     {"attention", timed ? r.time.attention : 0.0},
                     {"memory_bound", timed ? r.time.memory : 0.0},
                     {"recompute", timed ? r.time.recompute : 0.0},
                     {"bubble", timed ? r.time.bubble : 0.0},
                     {"tensor_comm", timed ? r.time.tensor_comm : 0.0},
                     {"pipeline_comm", timed ? r.time.pipeline_comm : 0.0},
                     {"data_comm", timed ? r.time.data_comm : 0.0},
                     {"data_comm_hidden", timed ? r.time.data_comm_hidden : 0.0},
                     {"context_comm", timed ? r.time.context_comm : 0.0},
                     {"context_comm_hidden", timed ? r.time.context_comm_hidden : 0.0},
                     {"optimizer", timed ? r.time.optimizer : 0.0}}},
                   {"tokens_per_s", timed ? r.tokens_per_s : 0.0},
                   {"tflops_per_device", timed ? r.tflops_per_device : 0.0},
                   {"mfu", timed ? r.mfu : 0.0},
                   {"bubble", r.bubble_fraction},
                   {"feasible", r.feasible},
                   {"reason", r.feasible ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.reason)}});
  }
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string plan_explain(const PlanResult& r, const Cluster& cl) {
  const auto& c = r.config;
  const auto& m = r.memory;
  const auto& t = r.time;
  auto link = [&](bool intra) { return intra ? "intra-node" : "inter-node"; };
  std::string s = fmt::format(
      "data {} x tensor {} x pipeline {}{} | virtual stages {} | schedule {} | micro-batch {} ({} per step) | ZeRO {} "
      "| recompute {} | sequence parallel {}\n",
      c.data, c.tensor, c.pipeline,
      c.context > 1 ? fmt::format(" x context {} ({})", c.context, enum_name(c.context_mode)) : "", c.virtual_stages,
      c.schedule, c.micro_batch, r.micro_batches, c.zero, c.recompute, c.sequence_parallel ? "on" : "off");
  if (!r.feasible && r.memory.total() == 0) return s + "invalid: " + r.reason + "\n";
  s += fmt::format("parameters {:.3f}B in all, {:.3f}B on the largest stage per tensor rank\n", double(r.params) / 1e9,
                   double(r.stage_params) / 1e9);
  s += fmt::format(
      "memory per device: params {} | grads {} | optimizer {} | activations {} ({} micro-batches in flight on the "
      "first stage) | buffers {} | total {} of {}{}\n",
      gib(m.params), gib(m.grads), gib(m.optimizer), gib(m.activations), r.in_flight, gib(m.buffers), gib(m.total()),
      gib(cl.memory_bytes), r.feasible ? "" : " -> " + r.reason);
  s += fmt::format(
      "step time {:.4g} s: gemm {:.4g} | attention {:.4g} | memory-bound {:.4g} | recompute {:.4g} | pipeline bubble "
      "{:.4g} ({:.1f}% simulated) | tensor comm {:.4g} ({}) | pipeline comm {:.4g} ({}) | data comm {:.4g} ({}, "
      "{:.4g} hidden behind backward) | optimizer {:.4g}\n",
      t.step(), t.gemm, t.attention, t.memory, t.recompute, t.bubble, 100 * r.bubble_fraction, t.tensor_comm,
      link(r.tensor_intra_node), t.pipeline_comm, link(r.pipeline_intra_node), t.data_comm, link(r.data_intra_node),
      t.data_comm_hidden, t.optimizer);
  if (c.context > 1)
    s += fmt::format("context comm {:.4g} ({}), {:.4g} of it hidden behind attention: {:.4g} exposed\n", t.context_comm,
                     link(r.context_intra_node), t.context_comm_hidden, t.context_comm - t.context_comm_hidden);
  if (!r.ops.empty()) {
    s += fmt::format(
        "operations of one micro-batch on one tensor rank ({} attention, {:.0f} GB/s for memory-bound "
        "kernels, {:.1f} us floor per kernel):\n",
        cl.flash_attention ? "flash" : "materialized", cl.memory_bandwidth * cl.memory_fraction / 1e9,
        cl.kernel_floor * 1e6);
    s += fmt::format("  {:<26} {:>9} {:>24} {:>11} {:>11} {:>8} {:>11} {:>11}\n", "operation", "per", "shape m x n x k",
                     "GFLOP", "MB", "eff.", "fwd ms", "bwd ms");
    for (const auto& op : r.ops) {
      const std::string shape =
          op.kind == OpKind::memory || op.m == 0
              ? "-"
              : fmt::format("{}{} x {} x {}", op.batch > 1 ? fmt::format("{} x ", op.batch) : "", op.m, op.n, op.k);
      s += fmt::format("  {:<26} {:>9} {:>24} {:>11.3f} {:>11.2f} {:>7.0f}% {:>11.4f} {:>11.4f}\n", op.name,
                       op.head ? "head" : "layer", shape, op.flops / 1e9, op.bytes / 1e6, 100 * op.efficiency,
                       op.forward_s * 1e3, op.backward_s * 1e3);
    }
  }
  s += fmt::format(
      "predicted {:.4g} tokens/s | {:.1f} TFLOP/s per device (model FLOPs) | MFU {:.1f}% of {:.0f} TFLOP/s\n",
      r.tokens_per_s, r.tflops_per_device, 100 * r.mfu, cl.peak_flops / 1e12);
  return s;
}

}  // namespace trident::launch
