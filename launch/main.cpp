// The `trident` command: subcommands train, prepare; --version, --help.
// Exit codes: 0 success, 1 failure, 2 bad input (recipe, data, command line).
#include <cstdio>
#include <cstring>
#include <array>
#include <map>
#include <set>
#include <sstream>
#include <new>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe.hpp"
#include "kernels/backends.hpp"
#include "launch/hf.hpp"
#include "launch/checkpoint.hpp"
#include "launch/planner.hpp"
#include "launch/sample.hpp"
#include "launch/submit.hpp"
#include "launch/sweep.hpp"
#include "launch/trainer.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include <mpi.h>

#include "parallel/launch_env.hpp"
#include "parallel/nccl/nccl_communicator.hpp"
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
  export CHECKPOINT --format hf --out DIR         checkpoint (any mesh) -> transformers model directory
  import HF_DIR --recipe RECIPE.yaml --out DIR [--set ...]
                                                 transformers model directory -> step-0 checkpoint
  sample CHECKPOINT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]
                                                 generate text from a checkpoint
  submit RECIPE.yaml --nodes N [--tasks-per-node K] [--gpus-per-node G] [--time T] [--partition P]
         [--account A] [--dry-run] [--set ...]   Slurm batch job that saves and requeues before its time limit
  plan RECIPE.yaml --cluster CLUSTER.yaml --gpus N [--top K] [--mesh D,T,P] [--explain] [--json]
                                                 predict memory and throughput of every parallel configuration
  sweep RECIPE.yaml --cluster CLUSTER.yaml [--meshes D,T,P;...] [--steps S] [--out DIR]   (under mpirun/srun)
                                                 measure every mesh of the world size against the plan
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
  const parallel::LaunchEnv env = parallel::detect_launch_env();
  if (env.launcher == "srun" && env.world > 1 && (env.mpi_plugin.empty() || env.mpi_plugin == "none"))
    fail_input("srun started {} tasks without an MPI plugin (--mpi=none, or none configured): the ranks cannot "
               "find each other; use srun --mpi=pmix (srun --mpi=list shows the plugins)",
               env.world);
  parallel::MpiRuntime mpi(g_argc, g_argv);  // a singleton world when not launched by mpirun/srun
  if (env.world > 1 && mpi.world() == 1)  // e.g. srun without the MPI plugin: N singletons
    fail_input("{} started {} tasks, but MPI sees a world of 1: the MPI library did not connect to the launcher ({}); "
               "with Slurm use srun --mpi=pmix (srun --mpi=list shows the plugins)",
               env.launcher, env.world, env.launcher == "srun" ? "SLURM_NTASKS=" + std::to_string(env.world)
                                                               : "OMPI_COMM_WORLD_SIZE=" + std::to_string(env.world));
  Recipe rc;
  parallel::MpiCommunicator world(MPI_COMM_WORLD, "world");
  try {
    rc = load_recipe(recipe, sets, mpi.world());
    // every rank must train the same recipe: compared before anything else
    parallel::check_same_on_all_ranks(world, parallel::fnv1a64(rc.resolved_text()), "the recipe (its text and --set options)",
                                      fmt::format("{} with --set [{}]", recipe, fmt::join(rc.overrides, ", ")));
  } catch (const InputError&) {
    if (mpi.rank() != 0) return kExitBadInput;  // every rank reads the same recipe: rank 0 reports it once
    throw;
  }
  parallel::set_collective_timeout(rc.parallel.timeout_s);
  {  // where the ranks run, once
    std::vector<int> node_of_rank;
    const std::string placement = parallel::describe_placement(env, world, &node_of_rank);
    const auto& p = rc.parallel;
    log::info("{}\nmesh: data {} x tensor {} x pipeline {} (order {}, innermost first)", placement, p.data, p.tensor,
              p.pipeline, fmt::join(p.order, ", "));
    const parallel::Topology topo(int(p.data), int(p.pipeline), int(p.tensor), p.order);
    const std::string split = parallel::groups_across_nodes(topo.groups(parallel::GroupKind::tensor), node_of_rank);
    if (!split.empty() && mpi.rank() == 0)
      log::warn("tensor groups {} span nodes: tensor-parallel traffic crosses the network (make the ranks per node a "
                "multiple of parallel.tensor and keep tensor first in parallel.order)",
                split);
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

// Options of the form --flag VALUE; positional arguments in order.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::vector<std::string> sets;
  bool help = false;
};

Args parse_args(const std::string& cmd, const std::vector<std::string>& args, const std::set<std::string>& flags,
                const std::set<std::string>& switches = {}) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
    } else if (switches.count(a)) {
      out.values[a] = "1";
    } else if (a.rfind("--", 0) == 0) {
      std::string key = a, value;
      const bool inline_value = a.find('=') != std::string::npos;
      if (inline_value) key = a.substr(0, a.find('=')), value = a.substr(a.find('=') + 1);
      if (key != "--set" && !flags.count(key))
        fail_input("{}: unknown option '{}' (expected one of: {})", cmd, key, fmt::join(flags, ", "));
      if (!inline_value) {
        if (i + 1 >= args.size()) fail_input("{}: {} needs a value", cmd, key);
        value = args[++i];
      }
      if (key == "--set") out.sets.push_back(value);
      else out.values[key] = value;
    } else {
      out.positional.push_back(a);
    }
  }
  return out;
}

double parse_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end) fail_input("{}: expected a number, found '{}'", flag, v);
  return x;
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end || n < 0) fail_input("{}: expected an integer >= 0, found '{}'", flag, v);
  return n;
}

int cmd_export(const std::vector<std::string>& args) {
  const Args a = parse_args("export", args, {"--format", "--out"});
  if (a.help) {
    fmt::print("usage: trident export CHECKPOINT --format hf --out DIR\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("export: expected one CHECKPOINT (a step directory or a checkpoint.dir)");
  const std::string format = a.values.count("--format") ? a.values.at("--format") : "";
  if (format != "hf") fail_input("export: --format: expected hf, found '{}'", format);
  if (!a.values.count("--out")) fail_input("export: missing --out DIR");
  launch::export_hf(a.positional[0], a.values.at("--out"));
  return 0;
}

int cmd_import(const std::vector<std::string>& args) {
  const Args a = parse_args("import", args, {"--recipe", "--out"});
  if (a.help) {
    fmt::print("usage: trident import HF_DIR --recipe RECIPE.yaml --out DIR [--set key.path=value ...]\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("import: expected one HF_DIR (config.json + model.safetensors)");
  if (!a.values.count("--recipe")) fail_input("import: missing --recipe RECIPE.yaml");
  if (!a.values.count("--out")) fail_input("import: missing --out DIR");
  launch::import_hf(a.positional[0], a.values.at("--recipe"), a.sets, a.values.at("--out"));
  return 0;
}

int cmd_sample(const std::vector<std::string>& args) {
  const Args a = parse_args("sample", args,
                            {"--prompt", "--prompt-ids", "--tokens", "--temperature", "--top-k", "--seed", "--logits"});
  if (a.help) {
    fmt::print("usage: trident sample CHECKPOINT (--prompt TEXT | --prompt-ids ID,ID,...) [--tokens N] "
               "[--temperature T] [--top-k K] [--seed S] [--logits FILE.safetensors]\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("sample: expected one CHECKPOINT (a step directory or a checkpoint.dir)");
  launch::SampleOptions o;
  o.checkpoint = a.positional[0];
  auto get = [&](const char* k) { return a.values.count(k) ? a.values.at(k) : std::string(); };
  o.prompt = get("--prompt");
  if (!get("--prompt-ids").empty()) {
    if (!o.prompt.empty()) fail_input("sample: give --prompt or --prompt-ids, not both");
    std::string ids = get("--prompt-ids");
    for (char& c : ids)
      if (c == ',') c = ' ';
    std::istringstream in(ids);
    std::string item;
    while (in >> item) o.prompt_ids.push_back(int32_t(parse_count("sample: --prompt-ids", item)));
  }
  if (!get("--tokens").empty()) o.tokens = parse_count("sample: --tokens", get("--tokens"));
  if (!get("--temperature").empty()) o.temperature = parse_number("sample: --temperature", get("--temperature"));
  if (!get("--top-k").empty()) o.top_k = parse_count("sample: --top-k", get("--top-k"));
  if (!get("--seed").empty()) o.seed = uint64_t(parse_count("sample: --seed", get("--seed")));
  o.logits_out = get("--logits");
  log::info_to_stderr(true);  // stdout is the text
  launch::sample(o);
  return 0;
}

int cmd_submit(const std::vector<std::string>& args) {
  const Args a = parse_args("submit", args,
                            {"--nodes", "--tasks-per-node", "--gpus-per-node", "--time", "--partition", "--account",
                             "--mpi", "--log-dir", "--name", "--signal-seconds"},
                            {"--dry-run"});
  if (a.help) {
    fmt::print("usage: trident submit RECIPE.yaml --nodes N [--tasks-per-node K] [--gpus-per-node G] [--time T]\n"
               "       [--partition P] [--account A] [--mpi pmix] [--log-dir runs/slurm] [--name NAME]\n"
               "       [--signal-seconds S] [--dry-run] [--set key.path=value ...]\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("submit: expected one RECIPE.yaml");
  launch::SubmitOptions o;
  o.recipe = a.positional[0];
  o.sets = a.sets;
  auto get = [&](const char* k) { return a.values.count(k) ? a.values.at(k) : std::string(); };
  if (!get("--nodes").empty()) o.nodes = parse_positive("submit: --nodes", get("--nodes"));
  if (!get("--tasks-per-node").empty()) o.tasks_per_node = parse_positive("submit: --tasks-per-node", get("--tasks-per-node"));
  if (!get("--gpus-per-node").empty()) o.gpus_per_node = parse_count("submit: --gpus-per-node", get("--gpus-per-node"));
  if (!get("--signal-seconds").empty()) o.signal_seconds = parse_count("submit: --signal-seconds", get("--signal-seconds"));
  if (!get("--time").empty()) o.time = get("--time");
  o.partition = get("--partition");
  o.account = get("--account");
  if (!get("--mpi").empty()) o.mpi = get("--mpi");
  if (!get("--log-dir").empty()) o.log_dir = get("--log-dir");
  o.name = get("--name");
  o.dry_run = a.values.count("--dry-run") > 0;
  launch::submit(o);
  return 0;
}

// "D,T,P" (or DxTxP): data, tensor, pipeline sizes.
std::array<int64_t, 3> parse_mesh(const std::string& flag, const std::string& given) {
  std::string text = given;
  for (char& c : text)
    if (c == ',' || c == 'x') c = ' ';
  std::istringstream in(text);
  std::vector<int64_t> dims;
  for (std::string item; in >> item;) dims.push_back(parse_positive(flag, item));
  if (dims.size() != 3) fail_input("{}: expected D,T,P (data, tensor, pipeline), found '{}'", flag, given);
  return {dims[0], dims[1], dims[2]};
}

int cmd_plan(const std::vector<std::string>& args) {
  const Args a = parse_args("plan", args, {"--cluster", "--gpus", "--devices", "--mesh", "--top", "--precision", "--out"},
                            {"--explain", "--json", "--calibrate"});
  if (a.help) {
    fmt::print("usage: trident plan RECIPE.yaml --cluster CLUSTER.yaml --gpus N [--precision fp32|bf16|fp16] [--top K]\n"
               "       [--mesh D,T,P] [--explain] [--json] [--set key.path=value ...]\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("plan: expected one RECIPE.yaml");
  auto get = [&](const char* k) { return a.values.count(k) ? a.values.at(k) : std::string(); };
  if (get("--cluster").empty()) fail_input("plan: missing --cluster CLUSTER.yaml (configs/clusters/)");
  if (a.values.count("--calibrate")) {  // under the launcher the sweep will use
    if (get("--out").empty()) fail_input("plan --calibrate: missing --out CALIBRATED.yaml");
    parallel::MpiRuntime mpi(g_argc, g_argv);
    parallel::MpiCommunicator world(MPI_COMM_WORLD, "world");
    launch::calibrate({a.positional[0], get("--cluster"), get("--out"), a.sets}, world);
    return 0;
  }
  const std::string n_text = !get("--gpus").empty() ? get("--gpus") : get("--devices");
  if (n_text.empty()) fail_input("plan: missing --gpus N");
  const int64_t n = parse_positive("plan: --gpus", n_text);
  const int64_t top = get("--top").empty() ? 10 : parse_positive("plan: --top", get("--top"));
  // the recipe as given, on one process (its mesh is what the planner chooses)
  std::vector<std::string> sets = a.sets;
  for (const auto& s : launch::single_process_overrides()) sets.push_back(s);
  Recipe rc = load_recipe(a.positional[0], sets, 1);
  rc.overrides = a.sets;
  const launch::Cluster cl =
      launch::load_cluster(get("--cluster"), get("--precision").empty() ? rc.train.precision : get("--precision"));
  std::vector<launch::PlanResult> results;
  if (!get("--mesh").empty()) {
    const auto dims = parse_mesh("plan: --mesh", get("--mesh"));
    if (dims[0] * dims[1] * dims[2] != n)
      fail_input("plan: --mesh {}: {} x {} x {} = {} != --gpus {}", get("--mesh"), dims[0], dims[1], dims[2],
                 dims[0] * dims[1] * dims[2], n);
    launch::PlanConfig c{dims[0], dims[1], dims[2], rc.parallel.virtual_stages, rc.train.micro_batch, rc.parallel.zero,
                         rc.train.recompute, rc.parallel.schedule, rc.parallel.sequence_parallel};
    if (c.pipeline == 1) c.virtual_stages = 1;
    results.push_back(launch::plan_one(rc, cl, c));
  } else {
    results = launch::plan_all(rc, cl, n);
  }
  if (a.values.count("--json")) {
    fmt::print("{}", launch::plan_json(results));
    return 0;
  }
  int64_t feasible = 0, invalid = 0;
  for (const auto& r : results) feasible += r.feasible, invalid += !r.feasible && r.memory.total() == 0;
  fmt::print("{} on {} x {} ({} per node, {:.0f} GiB, {:.4g} TFLOP/s {} peak x {:.2f} achievable GEMM)\n",
             a.positional[0], n, cl.name, cl.devices_per_node, cl.memory_bytes / (1024.0 * 1024 * 1024),
             cl.peak_flops / 1e12, cl.precision, cl.gemm_fraction);
  fmt::print("{} configurations: {} fit, {} out of memory, {} invalid\n", results.size(), feasible,
             int64_t(results.size()) - feasible - invalid, invalid);
  fmt::print("{:>4} {:>4} {:>4} {:>3} {:>4} {:>4} {:>9} {:>3} {:>10} {:>12} {:>8} {:>6} {:>10}\n", "D", "T", "P", "V",
             "mb", "zero", "recompute", "sp", "mem GiB", "tokens/s", "TFLOP/s", "MFU", "step s");
  int64_t shown = 0;
  for (const auto& r : results) {
    if (!r.feasible || shown++ >= top) continue;
    const auto& c = r.config;
    fmt::print("{:>4} {:>4} {:>4} {:>3} {:>4} {:>4} {:>9} {:>3} {:>10.2f} {:>12.5g} {:>8.1f} {:>5.1f}% {:>10.4g}\n",
               c.data, c.tensor, c.pipeline, c.virtual_stages, c.micro_batch, c.zero, c.recompute,
               c.sequence_parallel ? "on" : "off", r.memory.total() / (1024.0 * 1024 * 1024), r.tokens_per_s,
               r.tflops_per_device, 100 * r.mfu, r.time.step());
  }
  // why the others were refused: the first few of each kind
  int64_t listed = 0;
  for (const auto& r : results)
    if (!r.feasible && listed++ < 5) {
      const auto& c = r.config;
      fmt::print("rejected: data {} x tensor {} x pipeline {}, V {}, mb {}, ZeRO {}, recompute {}, sp {}: {}\n",
                 c.data, c.tensor, c.pipeline, c.virtual_stages, c.micro_batch, c.zero, c.recompute,
                 c.sequence_parallel ? "on" : "off", r.reason);
    }
  if (a.values.count("--explain") && !results.empty()) fmt::print("\n{}", launch::plan_explain(results.front(), cl));
  return 0;
}

int cmd_sweep(const std::vector<std::string>& args) {
  const Args a = parse_args("sweep", args, {"--cluster", "--meshes", "--warmup", "--steps", "--out", "--repeats"});
  if (a.help) {
    fmt::print("usage: mpirun -np N trident sweep RECIPE.yaml --cluster CLUSTER.yaml [--meshes D,T,P;D,T,P...] "
               "[--warmup W] [--steps S] [--repeats R] [--out DIR] [--set key.path=value ...]\n");
    return 0;
  }
  if (a.positional.size() != 1) fail_input("sweep: expected one RECIPE.yaml");
  auto get = [&](const char* k) { return a.values.count(k) ? a.values.at(k) : std::string(); };
  launch::SweepOptions o;
  o.recipe = a.positional[0];
  o.cluster = get("--cluster");
  o.sets = a.sets;
  if (!get("--out").empty()) o.out_dir = get("--out");
  if (!get("--warmup").empty()) o.warmup = parse_count("sweep: --warmup", get("--warmup"));
  if (!get("--steps").empty()) o.steps = parse_positive("sweep: --steps", get("--steps"));
  if (!get("--repeats").empty()) o.repeats = parse_positive("sweep: --repeats", get("--repeats"));
  if (!get("--meshes").empty()) {
    std::string text = get("--meshes");
    for (char& c : text)
      if (c == ';' || c == ' ') c = '\n';
    std::istringstream in(text);
    for (std::string mesh; std::getline(in, mesh);) {
      if (mesh.empty()) continue;
      o.meshes.push_back(parse_mesh("sweep: --meshes", mesh));
    }
  }
  parallel::MpiRuntime mpi(g_argc, g_argv);
  parallel::MpiCommunicator world(MPI_COMM_WORLD, "world");
  for (const auto& d : o.meshes)
    if (d[0] * d[1] * d[2] != mpi.world())
      fail_input("sweep: --meshes: {} x {} x {} = {} != the world size {} (launch with mpirun -np {})", d[0], d[1], d[2],
                 d[0] * d[1] * d[2], mpi.world(), d[0] * d[1] * d[2]);
  launch::sweep(o, world);
  return 0;
}

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
      fmt::print("trident {} (revision {})\n  cpu gemm: {}\n  cuda: {}\n  nccl: {}\n  mpi: {}\n", TRIDENT_VERSION,
                 TRIDENT_GIT_REV, kernels::cpu_gemm_backend(), kernels::cuda_backend(), parallel::nccl_version(),
                 parallel::mpi_library_version());
      return kExitOk;
    }
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "train") return cmd_train(rest);
    if (args[0] == "prepare") return cmd_prepare(rest);
    if (args[0] == "topology") return cmd_topology(rest);
    if (args[0] == "schedule") return cmd_schedule(rest);
    if (args[0] == "export") return cmd_export(rest);
    if (args[0] == "import") return cmd_import(rest);
    if (args[0] == "sample") return cmd_sample(rest);
    if (args[0] == "submit") return cmd_submit(rest);
    if (args[0] == "plan") return cmd_plan(rest);
    if (args[0] == "sweep") return cmd_sweep(rest);
    fail_input("unknown command '{}' (expected train, prepare, topology, schedule, export, import, sample, "
               "submit, plan or sweep; see trident --help)",
               args[0]);
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
