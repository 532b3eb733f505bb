// The planner's commands (see commands.hpp).
#include "launch/plan/commands.hpp"

#include <sstream>

#include "core/error.hpp"
#include "launch/plan/planner.hpp"
#include "launch/plan/sweep.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/schedule.hpp"

namespace trident::launch {
namespace {

void print_plan_table(const PlanCommand& c, const Cluster& cl, const std::vector<PlanResult>& results) {
  int64_t feasible = 0, invalid = 0;
  for (const auto& r : results) feasible += r.feasible, invalid += !r.feasible && r.memory.total() == 0;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  fmt::print(
      "{} on {} x {} ({} per node, {:.0f} GiB, {:.4g} usable, {:.4g} TFLOP/s {} peak, large GEMMs at {:.2f} of it; "
      "software: {})\n",
      c.recipe, c.gpus, cl.name, cl.devices_per_node, cl.memory_bytes / kGiB, cl.usable_bytes / kGiB,
      cl.peak_flops / 1e12, cl.precision, cl.gemm_table.empty() ? cl.gemm_fraction : cl.gemm_table.back().second,
      cl.software);
  if (cl.fp8_from_recipe)
    fmt::print(
        "train.fp8 ({}): the FP8 linears' GEMMs at {:.4g} TFLOP/s (peak_tflops.fp8{}), the rest at the {} "
        "peak; MFU counts against the {} peak\n",
        enum_name(cl.recipe_fp8.recipe), cl.fp8_peak_flops / 1e12,
        cl.recipe_fp8.param_gather ? "; ZeRO 3 gathers their weights in FP8" : "", cl.precision, cl.precision);
  fmt::print("{} configurations: {} fit, {} out of memory, {} invalid\n", results.size(), feasible,
             int64_t(results.size()) - feasible - invalid, invalid);
  fmt::print(
      "{:>4} {:>4} {:>4} {:>7} {:>3} {:>3} {:>4} {:>4} {:>5} {:>5} {:>9} {:>3} {:>10} {:>12} {:>8} {:>6} {:>10}\n", "D",
      "T", "P", "C", "E", "V", "mb", "zero", "shard", "accum", "recompute", "sp", "mem GiB", "tokens/s", "TFLOP/s",
      "MFU", "step s");
  int64_t shown = 0;
  for (const auto& r : results) {
    if (!r.feasible || shown++ >= c.top) continue;
    const auto& x = r.config;
    const std::string cx =
        x.context == 1 ? "1" : fmt::format("{} {}", x.context, x.context_mode == ContextMode::ring ? "ring" : "a2a");
    // shard: HSDP's shard group (- : all of data x context); accum: where ZeRO 2-3 accumulate (- : ZeRO 0-1)
    const std::string shard = x.data_shard > 0 ? std::to_string(x.data_shard) : "-";
    fmt::print(
        "{:>4} {:>4} {:>4} {:>7} {:>3} {:>3} {:>4} {:>4} {:>5} {:>5} {:>9} {:>3} {:>10.2f} {:>12.5g} {:>8.1f} "
        "{:>5.1f}% {:>10.4g}\n",
        x.data, x.tensor, x.pipeline, cx, x.expert, x.virtual_stages, x.micro_batch, x.zero, shard,
        x.zero < 2             ? "-"
        : x.shard_accumulation ? "shard"
                               : "full",
        x.recompute, x.sequence_parallel ? "on" : "off", r.memory.total() / (1024.0 * 1024 * 1024), r.tokens_per_s,
        r.tflops_per_device, 100 * r.mfu, r.time.step());
  }
  // why the others were refused: the first few of each kind
  int64_t listed = 0;
  for (const auto& r : results)
    if (!r.feasible && listed++ < 5) {
      const auto& x = r.config;
      fmt::print(
          "rejected: data {} x tensor {} x pipeline {} x context {}, expert {}, V {}, mb {}, ZeRO {}{}{}, recompute "
          "{}, sp {}: {}\n",
          x.data, x.tensor, x.pipeline, x.context, x.expert, x.virtual_stages, x.micro_batch, x.zero,
          x.data_shard > 0 ? fmt::format(" in shards of {}", x.data_shard) : "",
          x.shard_accumulation ? " accumulating in the shard" : "", x.recompute, x.sequence_parallel ? "on" : "off",
          r.reason);
    }
}

}  // namespace

int run_topology(const TopologyCommand& c) {
  const Recipe rc = load_recipe(c.recipe, c.sets, c.world);
  const auto& p = rc.parallel;
  const parallel::Topology topo = parallel::topology_of(p);
  fmt::print("{}", topo.describe(int(c.ranks_per_node > 0 ? c.ranks_per_node : c.world)));
  return kExitOk;
}

int run_schedule(const ScheduleCommand& c) {
  // The simulator's work and the timeline grow with P x V x M: bound them
  // (a bound is a clear message; no limit was minutes and gigabytes).
  constexpr int64_t kMaxActions = 1 << 20;
  const int64_t actions = c.pipeline * c.virtual_stages * c.micro_batches;
  if (c.pipeline > 4096 || c.micro_batches > 65536 || c.virtual_stages > 256 || actions > kMaxActions)
    fail_input(
        "schedule: pipeline({}) x virtual stages({}) x micro-batches({}) = {} stage-chunk-micro-batches; "
        "the simulator takes at most {} (pipeline <= 4096, virtual stages <= 256, micro-batches <= 65536)",
        c.pipeline, c.virtual_stages, c.micro_batches, actions, kMaxActions);
  const int P = int(c.pipeline), V = int(c.virtual_stages), M = int(c.micro_batches);
  const auto sim = parallel::simulate(c.schedule, P, V, M);
  fmt::print(
      "schedule {} | pipeline {} x virtual stages {} | {} micro-batches | unit costs: forward 1, "
      "backward 2 (input 1 + weight 1)\n",
      c.schedule, P, V, M);
  fmt::print("F/B/W + micro-batch (base 36); {}'.' idle\n", V > 1 ? "odd chunks in lower case; " : "");
  fmt::print("{}", parallel::render_timeline(sim, V, int(c.width)));
  fmt::print("makespan {} | bubble {:.2f}%", sim.makespan, 100 * sim.bubble_fraction());
  if (c.schedule == ScheduleKind::dualpipev) {  // DeepSeek-V3's Table 2: idle per rank, unit costs
    const double idle = parallel::bubble_time_formula(c.schedule, P, {});
    fmt::print(" (formula: idle (P-1)(F&B+B-3W) = {} of {} = {:.2f}%)", idle, sim.makespan, 100 * idle / sim.makespan);
  } else if (c.schedule != ScheduleKind::zero_bubble) {
    fmt::print(" (formula {:.2f}%)", 100 * parallel::bubble_formula(c.schedule, P, V, M));
  }
  fmt::print("\n");
  return kExitOk;
}

std::array<int64_t, 5> parse_mesh(const std::string& flag, const std::string& given) {
  std::string text = given;
  for (char& ch : text)
    if (ch == ',' || ch == 'x') ch = ' ';
  std::istringstream in(text);
  std::vector<int64_t> dims;
  for (std::string item; in >> item;) {
    char* end = nullptr;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    if (end == item.c_str() || *end || n < 1) fail_input("{}: expected a positive integer, found '{}'", flag, item);
    dims.push_back(n);
  }
  if (dims.size() < 3 || dims.size() > 5)
    fail_input("{}: expected D,T,P, D,T,P,C or D,T,P,C,E (data, tensor, pipeline, context, expert), found '{}'", flag,
               given);
  return {dims[0], dims[1], dims[2], dims.size() >= 4 ? dims[3] : 1, dims.size() == 5 ? dims[4] : 0};
}

int run_plan(const PlanCommand& c, int* argc, char*** argv) {
  if (c.calibrate) {  // under the launcher the sweep will use
    if (c.out.empty()) fail_input("plan --calibrate: missing --out CALIBRATED.yaml");
    parallel::MpiRuntime mpi(argc, argv);
    const auto world_group = parallel::MpiCommunicator::world();
    parallel::MpiCommunicator& world = *world_group;
    calibrate({c.recipe, c.cluster, c.out, c.sets}, world);
    return kExitOk;
  }
  if (c.gpus == 0) fail_input("plan: missing --gpus N");
  const Recipe rc = load_plan_recipe(c.recipe, c.sets);
  Precision precision = rc.train.precision;
  if (!c.precision.empty()) precision = *parse_enum<Precision>(c.precision);  // checked by the command line
  Cluster cl = load_cluster(c.cluster, precision, c.cluster_sets);
  apply_recipe_fp8(cl, rc, c.cluster);
  std::vector<PlanResult> results;
  if (!c.mesh.empty()) {
    const auto dims = parse_mesh("plan: --mesh", c.mesh);
    if (dims[0] * dims[1] * dims[2] * dims[3] != c.gpus)
      fail_input("plan: --mesh {}: {} x {} x {} x {} = {} != --gpus {}", c.mesh, dims[0], dims[1], dims[2], dims[3],
                 dims[0] * dims[1] * dims[2] * dims[3], c.gpus);
    // every other choice from the recipe and --set, checked on this mesh
    PlanConfig x;
    try {
      x = mesh_choices(rc, dims[0], dims[1], dims[2], dims[3], dims[4]);
    } catch (const InputError& e) {
      fail_input("plan --mesh {}: {}", c.mesh, e.what());
    }
    results.push_back(plan_one(rc, cl, x));
  } else {
    results = plan_all(rc, cl, c.gpus, c.max_context);
  }
  if (c.json) {
    fmt::print("{}", plan_json(results));
    return kExitOk;
  }
  print_plan_table(c, cl, results);
  if (c.explain && !results.empty()) fmt::print("\n{}", plan_explain(results.front(), cl));
  return kExitOk;
}

}  // namespace trident::launch
