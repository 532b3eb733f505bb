// The planner (see planner.hpp and docs/planner.md).
#include "launch/plan/planner.hpp"

#include "launch/plan/plan_parts.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "model/memory.hpp"
#include "model/parallel_plan.hpp"
#include "model/params.hpp"
#include "model/transformer.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/schedule.hpp"
#include "parallel/topology.hpp"

namespace trident::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double b) { return fmt::format("{:.1f} GiB", b / kGiB); }

}  // namespace

double optimizer_bytes_per_element(Precision precision) {
  return 28.0 + (precision == Precision::fp32 ? 0.0 : 2.0);  // p r/w, g r, m r/w, v r/w (+ the 2-byte copy)
}

Recipe load_plan_recipe(const std::string& path, const std::vector<std::string>& sets) {
  return load_recipe_unplaced(path, sets);
}

Recipe on_mesh(const Recipe& rc, const PlanConfig& c) {
  Recipe q = rc;
  auto& p = q.parallel;
  p.data = c.data, p.tensor = c.tensor, p.pipeline = c.pipeline, p.context = c.context;
  p.context_mode = c.context_mode, p.virtual_stages = c.virtual_stages, p.schedule = c.schedule, p.zero = c.zero;
  p.sequence_parallel = c.sequence_parallel, p.stage_layers = c.stage_layers, p.expert = c.expert;
  p.data_shard = c.data_shard, p.data_replicate = 0;
  p.zero_accumulate = c.shard_accumulation ? ZeroAccumulate::shard : ZeroAccumulate::full;
  q.train.micro_batch = c.micro_batch, q.train.recompute = c.recompute;
  validate_on_mesh(q, c.data * c.tensor * c.pipeline * c.context);
  return q;
}

PlanConfig mesh_choices(const Recipe& rc, int64_t D, int64_t T, int64_t P, int64_t C, int64_t E) {
  Recipe q = rc;
  q.parallel.data = D, q.parallel.tensor = T, q.parallel.pipeline = P, q.parallel.context = C;
  if (E > 0) q.parallel.expert = E;
  validate_on_mesh(q, D * T * P * C);
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
          q.parallel.context_mode,
          q.parallel.expert,
          q.parallel.hsdp() ? q.parallel.data_shard_size() : 0,
          q.parallel.zero_accumulate == ZeroAccumulate::shard};
}

const ScheduleFacts& PlanMemo::schedule(ScheduleKind kind, int P, int V, int M) {
  const auto key = std::make_tuple(int(kind), P, V, M);
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return it->second;
  ScheduleFacts f;
  f.paired = kind == ScheduleKind::dualpipev ? 1.0 : 0.0;
  for (int p = 0; p < P; ++p) {
    const std::vector<parallel::Action> list = parallel::make_schedule(kind, P, V, M, p);
    f.in_flight.push_back(parallel::in_flight_per_chunk(list, V));
    for (int& n : f.in_flight.back()) n = std::max(n, 1);
    if (kind != ScheduleKind::dualpipev) continue;
    int pairs = 0;  // paired steps (a forward and a backward each)
    for (const parallel::Action& a : list) pairs += a.type == parallel::ActionType::paired;
    f.paired = std::min(f.paired, 2.0 * pairs / (2.0 * M * V));  // of M x V forwards and as many backwards
  }
  f.bubble = P > 1 ? parallel::simulate(kind, P, V, M).bubble_fraction() : 0.0;
  return schedules_.emplace(key, std::move(f)).first->second;
}

// The whole model's parameters and the largest pipeline stage's on one
// tensor rank, from the registries of one dense and one MoE layer, the
// embeddings and the head; the largest unit ZeRO 3 gathers, a layer or the
// embeddings.
StageSizes stage_sizes(const ModelConfig& m, int T, int P, int V, const std::vector<int64_t>& stage_layers,
                       ScheduleKind schedule) {
  int64_t dense_at = -1, moe_at = -1;  // a layer of each kind
  for (int64_t l = 0; l < m.layers; ++l) (m.moe.is_moe(l) ? moe_at : dense_at) = l;
  auto layer_size = [&](int64_t l) {
    return l < 0 ? 0 : model::ParamRegistry(m, {0, T}, {{l, 1, false, false}}).total();
  };
  const int64_t dense_layer = layer_size(dense_at), moe_layer = layer_size(moe_at);
  int64_t moe_experts = 0;  // an MoE layer's routed experts (every expert)
  if (moe_at >= 0) {
    const model::ParamRegistry moe_layer_reg(m, {0, T}, {{moe_at, 1, false, false}});
    for (const auto& p : moe_layer_reg.params()) moe_experts += p.expert_major ? p.numel : 0;
  }
  const int64_t layer = std::max(dense_layer, moe_layer);
  const int64_t embedding = model::ParamRegistry(m, {0, T}, {{0, 0, true, false}}).total();
  // the head's chunk without the embedding: the head (or a tied embedding's copy) and the final norm
  const int64_t head = model::ParamRegistry(m, {0, T}, {{0, 0, false, true}}).total();
  const int64_t both = model::ParamRegistry(m, {0, T}, {{0, 0, true, true}}).total();
  StageSizes z{model::consolidated_numel(m), 0, std::max(layer, embedding)};
  for (int pp = 0; pp < P; ++pp) {
    int64_t stage = 0;
    bool has_embedding = false, has_head = false;  // a rank holding both (in one chunk or two) keeps no copy
    for (const auto& ch : model::pipeline_chunks(m, P, V, stage_layers, pp, schedule)) {
      stage += (ch.layers - model::moe_layers_in(m, ch.first_layer, ch.layers)) * dense_layer +
               model::moe_layers_in(m, ch.first_layer, ch.layers) * moe_layer;
      has_embedding |= ch.embedding, has_head |= ch.head;
    }
    stage += has_embedding && has_head ? both : has_embedding ? embedding : has_head ? head : 0;
    if (stage > z.largest_stage) {
      z.largest_stage = stage, z.largest_experts = 0;
      for (const auto& ch : model::pipeline_chunks(m, P, V, stage_layers, pp, schedule))
        z.largest_experts += model::moe_layers_in(m, ch.first_layer, ch.layers) * moe_experts;
    }
  }
  return z;
}

const StageSizes& PlanMemo::sizes(const ModelConfig& m, int T, int P, int V, const std::vector<int64_t>& stage_layers,
                                  ScheduleKind schedule) {
  const auto key = std::make_tuple(T, P, V, stage_layers, schedule);
  auto it = sizes_.find(key);
  if (it != sizes_.end()) return it->second;
  return sizes_.emplace(key, stage_sizes(m, T, P, V, stage_layers, schedule)).first->second;
}

const MeshPlacement& PlanMemo::placement(int D, int T, int P, int CP, int EP, const std::vector<MeshAxis>& order,
                                         int devices_per_node, bool whole_experts, int data_shard) {
  const auto key = std::make_tuple(D, T, P, CP, EP, order, devices_per_node, whole_experts, data_shard);
  auto it = placements_.find(key);
  if (it != placements_.end()) return it->second;
  return placements_.emplace(key, place_groups(D, T, P, CP, EP, order, devices_per_node, whole_experts, data_shard))
      .first->second;
}

PlanResult plan_one(const Recipe& rc, const Cluster& cl, const PlanConfig& c) {
  PlanMemo memo;
  return plan_one(rc, cl, c, memo);
}

PlanResult plan_one(const Recipe& rc, const Cluster& cl, const PlanConfig& c, PlanMemo& memo) {
  PlanResult r;
  r.config = c;
  r.precision = cl.precision;
  Recipe q;
  try {
    q = on_mesh(rc, c);
  } catch (const InputError& e) {
    const std::string why = e.what();
    const size_t key = why.find("key '");  // drop the file: the key says enough
    r.reason = key == std::string::npos ? why : why.substr(key);
    return r;
  }
  const ModelConfig& m = q.model;
  const int D = int(c.data), T = int(c.tensor), P = int(c.pipeline), V = int(c.virtual_stages);
  const int CP = int(c.context);
  const int EP = m.moe.enabled ? int(c.expert) : 1;
  const bool whole = m.moe.enabled && q.parallel.whole_experts();  // expert_tensor 1: experts not split over tensor
  const StageSizes& sizes = memo.sizes(m, T, P, V, c.stage_layers, c.schedule);
  // an expert rank holds 1 / EP of the stage's routed experts (whole experts: of their whole width)
  const int64_t experts = sizes.largest_experts * (whole ? T : 1) / EP,
                dense = sizes.largest_stage - sizes.largest_experts;
  r.params = sizes.whole, r.stage_params = dense + experts, r.stage_expert_params = experts;
  r.micro_batches = int(q.train.global_batch / (c.micro_batch * D));
  const ScheduleFacts* schedule = nullptr;
  try {  // the schedule's own rules (e.g. interleaving needs micro-batches % pipeline == 0)
    schedule = &memo.schedule(c.schedule, P, V, r.micro_batches);
  } catch (const InputError& e) {
    r.reason = e.what();
    return r;
  }
  r.bubble_fraction = schedule->bubble;
  r.in_flight = 0;
  for (int f : schedule->in_flight[0]) r.in_flight += f;
  const int S = int(q.parallel.data_shard_size()), R = D * CP / S;
  const int EDC = D * CP * (whole ? T : 1) / EP, ER = std::gcd(R, EDC);  // the experts' replicas (topology.hpp)
  const MeshPlacement& where =
      memo.placement(D, T, P, CP, EP, q.parallel.order, cl.devices_per_node, whole, R > 1 ? S : 0);
  const PlanContext x{q,
                      cl,
                      c,
                      D,
                      T,
                      P,
                      V,
                      CP,
                      D * CP,
                      EP,
                      EDC,
                      S,
                      R,
                      EDC / ER,
                      ER,
                      whole,
                      cl.precision == Precision::fp32 ? 4.0 : 2.0,
                      double(dense),
                      double(experts),
                      sizes,
                      *schedule,
                      where};
  plan_memory(x, r);
  plan_time(x, r);
  const double tokens = double(q.train.global_batch) * double(m.seq_len);
  const PlanTime& t = r.time;
  const PlanMemory& mem = r.memory;
  const int64_t N = c.data * c.tensor * c.pipeline * c.context;
  r.tokens_per_s = tokens / t.step();
  r.tflops_per_device = model::flops_per_token(m) * r.tokens_per_s / double(N) / 1e12;
  r.mfu = r.tflops_per_device * 1e12 / cl.peak_flops;
  const double total = mem.total();
  if (total > cl.usable_bytes) {
    std::vector<std::pair<double, const char*>> parts = {{mem.params, "parameters"},
                                                         {mem.grads, "gradients"},
                                                         {mem.optimizer, "optimizer states"},
                                                         {mem.activations, "activations"},
                                                         {mem.buffers, "buffers"}};
    const auto big = *std::max_element(parts.begin(), parts.end());
    r.reason = fmt::format("needs {} > {} usable: {} {}", gib(total), gib(cl.usable_bytes), big.second, gib(big.first));
    return r;
  }
  r.feasible = true;
  return r;
}

// HSDP shard sizes worth planning besides plain ZeRO, given a valid plain
// plan of the mesh: each divisor S >= 2 of data x context whose shard
// groups span at most kMaxShardNodes nodes (the peers' HSDP keeps its shard
// group on a node or a few; a larger one puts ZeRO 3's gathers back on the
// network). A shard group is S consecutive members of a data x context
// group, whose first node holds `per_node` of them: it spans S / per_node
// nodes. Arithmetic only: no placement is worked out for sizes not planned.
constexpr int kMaxShardNodes = 8;
std::vector<int64_t> hsdp_shards(const PlanResult& plain, const Cluster& cl, PlanMemo& memo, const Recipe& rc) {
  const PlanConfig& c = plain.config;
  const int64_t DC = c.data * c.context;
  const bool whole = rc.model.moe.enabled && rc.parallel.expert_tensor == 1 && c.tensor > 1;
  const MeshPlacement& w =
      memo.placement(int(c.data), int(c.tensor), int(c.pipeline), int(c.context),
                     rc.model.moe.enabled ? int(c.expert) : 1, rc.parallel.order, cl.devices_per_node, whole);
  const int64_t per_node = w[kDataContext].intra ? DC : w[kDataContext].per_node;
  std::vector<int64_t> out;
  for (int64_t S = 2; S < DC && S <= kMaxShardNodes * per_node; ++S)
    if (DC % S == 0) out.push_back(S);
  return out;
}

std::vector<PlanResult> plan_all(const Recipe& rc, const Cluster& cl, int64_t devices, int64_t max_context) {
  std::vector<PlanResult> out;
  PlanMemo memo;  // the many configurations of one schedule shape (ZeRO, recompute, ...) share its facts
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
          // expert parallelism: every size that divides data x context and the experts
          std::vector<int64_t> expert_sizes = {1};
          const int64_t domain = D * CP * (rc.parallel.expert_tensor == 1 ? T : 1);  // expert_tensor 1: x tensor
          for (int64_t E = 2; m.moe.enabled && E <= domain; ++E)
            if (domain % E == 0 && m.moe.experts % E == 0) expert_sizes.push_back(E);
          for (int64_t V = 1; V * P <= m.layers; ++V) {
            if (V > 1 && P == 1) break;
            if (m.layers % (P * V)) continue;
            // the recipe's schedule where the chunk count allows it: several
            // chunks interleave (dualpipev: two, its V), one runs 1F1B or ZB-H1
            const ScheduleKind asked = rc.parallel.schedule;
            const ScheduleKind schedule = asked == ScheduleKind::dualpipev && V == 2 ? ScheduleKind::dualpipev
                                          : V > 1                                    ? ScheduleKind::interleaved_1f1b
                                          : asked == ScheduleKind::interleaved_1f1b || asked == ScheduleKind::dualpipev
                                              ? ScheduleKind::one_f_one_b
                                              : asked;
            for (int64_t mb = 1; mb <= rc.train.global_batch / D; ++mb) {
              if ((rc.train.global_batch / D) % mb) continue;
              for (bool sp : {false, true}) {
                if (sp && T == 1) continue;
                for (int64_t zero = 0; zero <= 3; ++zero)
                  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
                    for (int64_t E : expert_sizes)
                      for (bool acc : {false, true}) {  // ZeRO 2-3 accumulating in the shard, where there is a step
                        if (acc && (zero < 2 || rc.train.global_batch / D / mb < 2)) continue;
                        const PlanConfig c{D, T, P, V, mb, zero, recompute, schedule, sp, {}, CP, mode, E, 0, acc};
                        out.push_back(plan_one(rc, cl, c, memo));
                        if (zero == 0 || (!out.back().feasible && out.back().memory.total() == 0)) continue;
                        const PlanResult plain = out.back();  // valid: HSDP's shard sizes on the same mesh
                        for (int64_t S : hsdp_shards(plain, cl, memo, rc)) {
                          PlanConfig h = c;
                          h.data_shard = S;
                          out.push_back(plan_one(rc, cl, h, memo));
                        }
                      }
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
                   {"expert", c.expert},
                   {"virtual_stages", c.virtual_stages},
                   {"micro_batch", c.micro_batch},
                   {"zero", c.zero},
                   {"data_shard", c.shard_size()},
                   {"data_replicate", c.data * c.context / c.shard_size()},
                   {"zero_accumulate", c.shard_accumulation ? "shard" : "full"},
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
                     {"tensor_comm_hidden", timed ? r.time.tensor_comm_hidden : 0.0},
                     {"pipeline_comm", timed ? r.time.pipeline_comm : 0.0},
                     {"pipeline_comm_hidden", timed ? r.time.pipeline_comm_hidden : 0.0},
                     {"data_comm", timed ? r.time.data_comm : 0.0},
                     {"data_comm_hidden", timed ? r.time.data_comm_hidden : 0.0},
                     {"replica_comm", timed ? r.time.replica_comm : 0.0},
                     {"context_comm", timed ? r.time.context_comm : 0.0},
                     {"context_comm_hidden", timed ? r.time.context_comm_hidden : 0.0},
                     {"expert_comm", timed ? r.time.expert_comm : 0.0},
                     {"expert_comm_hidden", timed ? r.time.expert_comm_hidden : 0.0},
                     {"optimizer", timed ? r.time.optimizer : 0.0},
                     {"muon_iteration", timed ? r.time.muon_iteration : 0.0},
                     {"optimizer_comm", timed ? r.time.optimizer_comm : 0.0}}},
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
      "data {} x tensor {} x pipeline {}{}{} | virtual stages {} | schedule {} | micro-batch {} ({} per step) | ZeRO "
      "{}{}{} | recompute {} | sequence parallel {}\n",
      c.data, c.tensor, c.pipeline,
      c.context > 1 ? fmt::format(" x context {} ({})", c.context, enum_name(c.context_mode)) : "",
      c.expert > 1 ? fmt::format(" | expert {} (expert-data {})", c.expert, c.data * c.context / c.expert) : "",
      c.virtual_stages, c.schedule, c.micro_batch, r.micro_batches, c.zero,
      c.data_shard > 0
          ? fmt::format(" in shards of {} x {} replicas (HSDP)", c.data_shard, c.data * c.context / c.data_shard)
          : "",
      c.zero >= 2 ? (c.shard_accumulation ? ", accumulating in the shard" : ", accumulating in a full buffer") : "",
      c.recompute, c.sequence_parallel ? "on" : "off");
  if (!r.feasible && r.memory.total() == 0) return s + "invalid: " + r.reason + "\n";
  s += fmt::format("parameters {:.3f}B in all, {:.3f}B on the largest stage per tensor rank{}\n",
                   double(r.params) / 1e9, double(r.stage_params) / 1e9,
                   r.stage_expert_params > 0 ? fmt::format(" ({:.3f}B of it routed experts', this expert rank's)",
                                                           double(r.stage_expert_params) / 1e9)
                                             : "");
  s += fmt::format(
      "memory per device: params {} | grads {} | optimizer {} | activations {} ({} {} in flight on the "
      "first stage{}) | buffers {} | total {} of {} usable{}\n",
      gib(m.params), gib(m.grads), gib(m.optimizer), gib(m.activations), r.in_flight,
      r.config.virtual_stages > 1 ? "chunk-micro-batches" : "micro-batches",
      cl.kept == Cluster::Kept::megatron     ? ", Megatron-Core's formula"
      : cl.kept == Cluster::Kept::torchtitan ? ", torchtitan's checkpointing"
                                             : "",
      gib(m.buffers), gib(m.total()), gib(cl.usable_bytes), r.feasible ? "" : " -> " + r.reason);
  s += fmt::format(
      "step time {:.4g} s: gemm {:.4g} | attention {:.4g} | memory-bound {:.4g} | recompute {:.4g} | pipeline bubble "
      "{:.4g} ({:.1f}% simulated) | tensor comm {:.4g} ({}, {:.4g} hidden behind its GEMMs) | pipeline comm {:.4g} "
      "({}, {:.4g} hidden) | data comm {:.4g} ({}{}, {:.4g} hidden behind compute) | optimizer {:.4g}\n",
      t.step(), t.gemm, t.attention, t.memory, t.recompute, t.bubble, 100 * r.bubble_fraction, t.tensor_comm,
      link(r.tensor_intra_node), t.tensor_comm_hidden, t.pipeline_comm, link(r.pipeline_intra_node),
      t.pipeline_comm_hidden, t.data_comm, link(r.data_intra_node),
      c.data_shard > 0
          ? fmt::format("; {:.4g} of it the replicas' all-reduce, {}", t.replica_comm, link(r.replica_intra_node))
          : "",
      t.data_comm_hidden, t.optimizer);
  if (c.context > 1)
    s += fmt::format("context comm {:.4g} ({}), {:.4g} of it hidden behind attention: {:.4g} exposed\n", t.context_comm,
                     link(r.context_intra_node), t.context_comm_hidden, t.context_comm - t.context_comm_hidden);
  if (c.expert > 1)
    s += fmt::format(
        "expert comm {:.4g} ({}): each MoE layer's dispatch and combine, forward and backward; {:.4g} of it under "
        "the other pass of dualpipev's paired steps: {:.4g} exposed\n",
        t.expert_comm, link(r.expert_intra_node), t.expert_comm_hidden, t.expert_comm - t.expert_comm_hidden);
  if (t.muon_iteration > 0 || t.optimizer_comm > 0)
    s += fmt::format(
        "muon: Newton-Schulz {:.4g} s on this rank (in optimizer; the stage's matrices spread over tensor x data x "
        "context {} ranks, one owner each) | exchanges {:.4g} s (to the owners and back over the tensor group, "
        "gathered and summed over the replicas)\n",
        t.muon_iteration, c.tensor * c.data * c.context, t.optimizer_comm);
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
