// Subcommand bodies (see commands.hpp).
#include "launch/commands.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/planner.hpp"
#include "launch/sweep.hpp"
#include "launch/trainer.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/schedule.hpp"
#include "parallel/topology.hpp"

namespace trident::launch {
namespace {

// Launcher mistakes that would leave the ranks unable to find each other.
void check_launcher(const parallel::LaunchEnv& env, int mpi_world) {
  if (env.launcher == "srun" && env.world > 1 && (env.mpi_plugin.empty() || env.mpi_plugin == "none"))
    fail_input(
        "srun started {} tasks without an MPI plugin (--mpi=none, or none configured): the ranks cannot "
        "find each other; use srun --mpi=pmix (srun --mpi=list shows the plugins)",
        env.world);
  if (mpi_world >= 0 && env.world > 1 && mpi_world == 1)  // e.g. srun without the MPI plugin: N singletons
    fail_input(
        "{} started {} tasks, but MPI sees a world of 1: the MPI library did not connect to the launcher ({}); "
        "with Slurm use srun --mpi=pmix (srun --mpi=list shows the plugins)",
        env.launcher, env.world,
        env.launcher == "srun" ? "SLURM_NTASKS=" + std::to_string(env.world)
                               : "OMPI_COMM_WORLD_SIZE=" + std::to_string(env.world));
}

// Where the ranks run, once; a warning when tensor groups cross nodes.
void log_placement(const parallel::LaunchEnv& env, parallel::MpiCommunicator& world, const Recipe& rc) {
  std::vector<int> node_of_rank;
  const std::string placement = parallel::describe_placement(env, world, &node_of_rank);
  const auto& p = rc.parallel;
  log::info("{}\nmesh: data {} x tensor {} x pipeline {}{} (order {}, innermost first)", placement, p.data, p.tensor,
            p.pipeline, p.context > 1 ? fmt::format(" x context {} ({})", p.context, enum_name(p.context_mode)) : "",
            fmt::join(parallel::full_order(p.order), ", "));
  const parallel::Topology topo(int(p.data), int(p.pipeline), int(p.tensor), p.order, int(p.context));
  const std::string split = parallel::groups_across_nodes(topo.groups(parallel::GroupKind::tensor), node_of_rank);
  if (!split.empty() && world.rank() == 0)
    log::warn(
        "tensor groups {} span nodes: tensor-parallel traffic crosses the network (make the ranks per node a "
        "multiple of parallel.tensor and keep tensor first in parallel.order)",
        split);
}

void print_plan_table(const PlanCommand& c, const Cluster& cl, const std::vector<PlanResult>& results) {
  int64_t feasible = 0, invalid = 0;
  for (const auto& r : results) feasible += r.feasible, invalid += !r.feasible && r.memory.total() == 0;
  fmt::print("{} on {} x {} ({} per node, {:.0f} GiB, {:.4g} TFLOP/s {} peak, large GEMMs at {:.2f} of it)\n", c.recipe,
             c.gpus, cl.name, cl.devices_per_node, cl.memory_bytes / (1024.0 * 1024 * 1024), cl.peak_flops / 1e12,
             cl.precision, cl.gemm_table.empty() ? cl.gemm_fraction : cl.gemm_table.back().second);
  fmt::print("{} configurations: {} fit, {} out of memory, {} invalid\n", results.size(), feasible,
             int64_t(results.size()) - feasible - invalid, invalid);
  fmt::print("{:>4} {:>4} {:>4} {:>7} {:>3} {:>4} {:>4} {:>9} {:>3} {:>10} {:>12} {:>8} {:>6} {:>10}\n", "D", "T", "P",
             "C", "V", "mb", "zero", "recompute", "sp", "mem GiB", "tokens/s", "TFLOP/s", "MFU", "step s");
  int64_t shown = 0;
  for (const auto& r : results) {
    if (!r.feasible || shown++ >= c.top) continue;
    const auto& x = r.config;
    const std::string cx =
        x.context == 1 ? "1" : fmt::format("{} {}", x.context, x.context_mode == ContextMode::ring ? "ring" : "a2a");
    fmt::print(
        "{:>4} {:>4} {:>4} {:>7} {:>3} {:>4} {:>4} {:>9} {:>3} {:>10.2f} {:>12.5g} {:>8.1f} {:>5.1f}% {:>10.4g}\n",
        x.data, x.tensor, x.pipeline, cx, x.virtual_stages, x.micro_batch, x.zero, x.recompute,
        x.sequence_parallel ? "on" : "off", r.memory.total() / (1024.0 * 1024 * 1024), r.tokens_per_s,
        r.tflops_per_device, 100 * r.mfu, r.time.step());
  }
  // why the others were refused: the first few of each kind
  int64_t listed = 0;
  for (const auto& r : results)
    if (!r.feasible && listed++ < 5) {
      const auto& x = r.config;
      fmt::print(
          "rejected: data {} x tensor {} x pipeline {} x context {}, V {}, mb {}, ZeRO {}, recompute {}, sp {}: "
          "{}\n",
          x.data, x.tensor, x.pipeline, x.context, x.virtual_stages, x.micro_batch, x.zero, x.recompute,
          x.sequence_parallel ? "on" : "off", r.reason);
    }
}

}  // namespace

int run_train(const TrainCommand& c, int* argc, char*** argv) {
  const parallel::LaunchEnv env = parallel::detect_launch_env();
  check_launcher(env, -1);
  parallel::MpiRuntime mpi(argc, argv);  // a singleton world when not launched by mpirun/srun
  check_launcher(env, mpi.world());
  Recipe rc;
  const auto world_group = parallel::MpiCommunicator::world();
  parallel::MpiCommunicator& world = *world_group;
  try {
    rc = load_recipe(c.recipe, c.sets, mpi.world());
    // every rank must train the same recipe: compared before anything else
    parallel::check_same_on_all_ranks(world, parallel::fnv1a64(rc.resolved_text()),
                                      "the recipe (its text and --set options)",
                                      fmt::format("{} with --set [{}]", c.recipe, fmt::join(rc.overrides, ", ")));
  } catch (const InputError&) {
    if (mpi.rank() != 0) return kExitBadInput;  // every rank reads the same recipe: rank 0 reports it once
    throw;
  }
  parallel::set_collective_timeout(rc.parallel.timeout_s);
  log_placement(env, world, rc);
  try {
    train(rc, {.resume = c.resume});
  } catch (const InputError&) {
    throw;  // the same on every rank: each reaches MPI_Finalize and exits 2
  } catch (const std::exception& e) {
    // A failure on one rank (a timed-out transfer, a lost peer) would leave
    // the others waiting in their next collective: report it here, on this
    // rank, and end the whole job.
    if (mpi.world() > 1) {
      log::error("{}", e.what());
      parallel::MpiRuntime::abort_job(kExitFailure);
    }
    throw;
  }
  return kExitOk;
}

int run_topology(const TopologyCommand& c) {
  const Recipe rc = load_recipe(c.recipe, c.sets, c.world);
  const auto& p = rc.parallel;
  const parallel::Topology topo(int(p.data), int(p.pipeline), int(p.tensor), p.order, int(p.context));
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
  if (c.schedule != ScheduleKind::zero_bubble)
    fmt::print(" (formula {:.2f}%)", 100 * parallel::bubble_formula(c.schedule, P, V, M));
  fmt::print("\n");
  return kExitOk;
}

std::array<int64_t, 4> parse_mesh(const std::string& flag, const std::string& given) {
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
  if (dims.size() != 3 && dims.size() != 4)
    fail_input("{}: expected D,T,P or D,T,P,C (data, tensor, pipeline, context), found '{}'", flag, given);
  return {dims[0], dims[1], dims[2], dims.size() == 4 ? dims[3] : 1};
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
  const Cluster cl = load_cluster(c.cluster, precision);
  std::vector<PlanResult> results;
  if (!c.mesh.empty()) {
    const auto dims = parse_mesh("plan: --mesh", c.mesh);
    if (dims[0] * dims[1] * dims[2] * dims[3] != c.gpus)
      fail_input("plan: --mesh {}: {} x {} x {} x {} = {} != --gpus {}", c.mesh, dims[0], dims[1], dims[2], dims[3],
                 dims[0] * dims[1] * dims[2] * dims[3], c.gpus);
    // every other choice from the recipe and --set, checked on this mesh
    PlanConfig x;
    try {
      x = mesh_choices(c.recipe, c.sets, dims[0], dims[1], dims[2], dims[3]);
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

int run_keys(const std::string& update) {
  if (update.empty()) {
    std::vector<std::string> sections;
    for (const auto& k : recipe_keys())
      if (std::find(sections.begin(), sections.end(), recipe_section(k.path)) == sections.end())
        sections.push_back(recipe_section(k.path));
    for (const auto& s : sections)
      fmt::print("## {}\n\n{}\n", s.empty() ? "Top level" : "`" + s + "`", recipe_keys_markdown(s));
    return kExitOk;
  }
  std::ifstream in(update);
  if (!in) fail_input("keys: cannot read '{}'", update);
  std::stringstream ss;
  ss << in.rdbuf();
  write_file_atomic(update, recipe_doc_with_tables(ss.str()));
  return kExitOk;
}

}  // namespace trident::launch
