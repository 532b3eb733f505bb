// The `trident` command: subcommands train, prepare; --version, --help.
// Exit codes: 0 success, 1 failure, 2 bad input (recipe, data, command line).
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe.hpp"
#include "kernels/backends.hpp"
#include "launch/trainer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include <mpi.h>

#include "parallel/schedule.hpp"
#include "parallel/topology.hpp"

#ifndef TRIDENT_GIT_REV
#define TRIDENT_GIT_REV "unknown"
#endif

namespace {

using namespace trident;

int* g_argc = nullptr;
char*** g_argv = nullptr;

constexpr const char* kUsage = R"(usage: trident <command> [options]

commands:
  train RECIPE.yaml [--resume [auto|DIR]] [--set key.path=value ...]
                                                 train a model from a recipe
  prepare --input FILE.txt --out PREFIX [--tokenizer byte|char] [--valid-fraction F]
                                                 text -> indexed dataset (PREFIX_train, PREFIX_valid)
  topology RECIPE.yaml --world N [--ranks-per-node K] [--set ...]
                                                 print the rank layout and process groups
  schedule --pipeline P --micro-batches M [--virtual-stages V] --schedule S [--width W]
                                                 simulate a pipeline schedule, print its timeline
  --version                                      revision and backends of this build
  --help                                         this text

exit codes: 0 success, 1 failure, 2 bad input
docs: docs/commands.md, docs/recipes.md
)";

int cmd_train(const std::vector<std::string>& args) {
  std::string recipe;
  std::vector<std::string> sets;
  launch::TrainOptions opts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--resume") {  // --resume [auto|PATH]
      opts.resume = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 && args[i + 1].find(".yaml") == std::string::npos
                        ? args[++i]
                        : "auto";
    } else if (a.rfind("--resume=", 0) == 0) {
      opts.resume = a.substr(9);
    } else if (a == "--set") {
      if (i + 1 >= args.size()) fail_input("train: --set needs key.path=value");
      sets.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--help" || a == "-h") {
      fmt::print("usage: trident train RECIPE.yaml [--resume [auto|CHECKPOINT_DIR]] [--set key.path=value ...]\n");
      return 0;
    } else if (a.rfind("-", 0) == 0) {
      fail_input("train: unknown option '{}' (expected --set key.path=value)", a);
    } else if (recipe.empty()) {
      recipe = a;
    } else {
      fail_input("train: unexpected argument '{}' (one recipe file expected, found '{}' already)", a, recipe);
    }
  }
  if (recipe.empty()) fail_input("train: missing RECIPE.yaml (try configs/demo.yaml)");
  parallel::MpiRuntime mpi(g_argc, g_argv);  // a singleton world when not launched by mpirun/srun
  Recipe rc;
  try {
    rc = load_recipe(recipe, sets, mpi.world());
  } catch (const InputError&) {
    if (mpi.rank() != 0) return kExitBadInput;  // every rank reads the same recipe: rank 0 reports it once
    throw;
  }
  try {
    launch::train(rc, opts);
  } catch (const InputError&) {
    throw;  // the same on every rank: each reaches MPI_Finalize and exits 2
  } catch (const std::exception& e) {
    // A failure on one rank (a timed-out transfer, a lost peer) would leave
    // the others waiting in their next collective: report it here, on this
    // rank, and end the whole job.
    if (mpi.world() > 1) {
      log::error("{}", e.what());
      MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    }
    throw;
  }
  return 0;
}

int64_t parse_positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end || n < 1) fail_input("{}: expected a positive integer, found '{}'", flag, v);
  return n;
}

int cmd_topology(const std::vector<std::string>& args) {
  std::string recipe;
  std::vector<std::string> sets;
  int64_t world = 0, per_node = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) fail_input("topology: {} needs a value", a);
      return args[++i];
    };
    if (a == "--world") world = parse_positive("topology: --world", value());
    else if (a == "--ranks-per-node") per_node = parse_positive("topology: --ranks-per-node", value());
    else if (a == "--set") sets.push_back(value());
    else if (a == "--help" || a == "-h") {
      fmt::print("usage: trident topology RECIPE.yaml --world N [--ranks-per-node K] [--set key.path=value ...]\n");
      return 0;
    } else if (a.rfind("-", 0) == 0) fail_input("topology: unknown option '{}'", a);
    else if (recipe.empty()) recipe = a;
    else fail_input("topology: unexpected argument '{}'", a);
  }
  if (recipe.empty()) fail_input("topology: missing RECIPE.yaml");
  if (world == 0) fail_input("topology: missing --world N");
  Recipe rc = load_recipe(recipe, sets, world);
  const auto& p = rc.parallel;
  parallel::Topology topo(int(p.data), int(p.pipeline), int(p.tensor), p.order);
  fmt::print("{}", topo.describe(int(per_node > 0 ? per_node : world)));
  return 0;
}

int cmd_prepare(const std::vector<std::string>& args) {
  launch::PrepareOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) fail_input("prepare: {} needs a value", a);
      return args[++i];
    };
    if (a == "--input") o.input = value();
    else if (a == "--out") o.out = value();
    else if (a == "--tokenizer") o.tokenizer = value();
    else if (a == "--valid-fraction") {
      std::string v = value();
      char* end = nullptr;
      o.valid_fraction = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end) fail_input("prepare: --valid-fraction: expected a number, found '{}'", v);
    } else if (a == "--help" || a == "-h") {
      fmt::print("usage: trident prepare --input FILE.txt --out PREFIX [--tokenizer byte|char] [--valid-fraction F]\n");
      return 0;
    } else fail_input("prepare: unknown argument '{}'", a);
  }
  launch::prepare(o);
  return 0;
}

}  // namespace

int cmd_schedule(const std::vector<std::string>& args) {
  int64_t P = 0, M = 0, V = 1, width = 120;
  std::string kind;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) fail_input("schedule: {} needs a value", a);
      return args[++i];
    };
    if (a == "--pipeline") P = parse_positive("schedule: --pipeline", value());
    else if (a == "--micro-batches") M = parse_positive("schedule: --micro-batches", value());
    else if (a == "--virtual-stages") V = parse_positive("schedule: --virtual-stages", value());
    else if (a == "--schedule") kind = value();
    else if (a == "--width") width = parse_positive("schedule: --width", value());
    else if (a == "--help" || a == "-h") {
      fmt::print("usage: trident schedule --pipeline P --micro-batches M [--virtual-stages V] --schedule "
                 "gpipe|1f1b|interleaved_1f1b|zero_bubble [--width W]\n");
      return 0;
    } else fail_input("schedule: unexpected argument '{}'", a);
  }
  if (P == 0) fail_input("schedule: missing --pipeline P");
  if (M == 0) fail_input("schedule: missing --micro-batches M");
  if (kind.empty()) fail_input("schedule: missing --schedule gpipe|1f1b|interleaved_1f1b|zero_bubble");
  const auto k = parallel::parse_schedule(kind);
  const auto sim = parallel::simulate(k, int(P), int(V), int(M));
  fmt::print("schedule {} | pipeline {} x virtual stages {} | {} micro-batches | unit costs: forward 1, "
             "backward 2 (input 1 + weight 1)\n",
             kind, P, V, M);
  fmt::print("F/B/W + micro-batch (base 36); {}'.' idle\n", V > 1 ? "odd chunks in lower case; " : "");
  fmt::print("{}", parallel::render_timeline(sim, int(V), int(width)));
  fmt::print("makespan {} | bubble {:.2f}%", sim.makespan, 100 * sim.bubble_fraction());
  if (k != parallel::ScheduleKind::zero_bubble)
    fmt::print(" (formula {:.2f}%)", 100 * parallel::bubble_formula(k, int(P), int(V), int(M)));
  fmt::print("\n");
  return 0;
}

int main(int argc, char** argv) {
  trident::launch::install_stop_signals();  // before MPI and OpenMP start threads
  g_argc = &argc;
  g_argv = &argv;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      fmt::print("{}", kUsage);
      return args.empty() ? kExitBadInput : kExitOk;
    }
    if (args[0] == "--version") {
      fmt::print("trident {} (revision {})\n  cpu gemm: {}\n  cuda: {}\n", TRIDENT_VERSION, TRIDENT_GIT_REV,
                 kernels::cpu_gemm_backend(), kernels::cuda_backend());
      return kExitOk;
    }
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "train") return cmd_train(rest);
    if (args[0] == "prepare") return cmd_prepare(rest);
    if (args[0] == "topology") return cmd_topology(rest);
    if (args[0] == "schedule") return cmd_schedule(rest);
    fail_input("unknown command '{}' (expected train, prepare, topology or schedule; see trident --help)", args[0]);
  } catch (const InputError& e) {
    log::error("{}", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    log::error("out of host memory: the recipe's model, optimizer state and activations do not fit this machine");
    return kExitFailure;
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    return kExitFailure;
  }
}
