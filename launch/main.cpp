// The `trident` command line: one command table (CLI11), `--help` for every
// subcommand, and one way of failing: a bad word on the command line, like
// bad input anywhere, is one message and exit code 2 (docs/commands.md).
// The subcommands' bodies live in the rooms that own them: train/run_train,
// plan/commands and plan/sweep, checkpoint/hf, tools/{report,sample,submit,
// keys}, core/data/prepare.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "core/data/prepare.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "launch/checkpoint/hf.hpp"
#include "launch/cli.hpp"
#include "launch/plan/commands.hpp"
#include "launch/plan/sweep.hpp"
#include "launch/tools/keys.hpp"
#include "launch/tools/report.hpp"
#include "launch/tools/sample.hpp"
#include "launch/tools/submit.hpp"
#include "launch/tools/supervise.hpp"
#include "launch/train/run_train.hpp"
#include "launch/train/stop_signals.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/nccl/nccl_communicator.hpp"

#ifndef TRIDENT_GIT_REV
#define TRIDENT_GIT_REV "unknown"
#endif

namespace {

using namespace trident;
using namespace trident::launch;

int* g_argc = nullptr;
char*** g_argv = nullptr;

// --set key.path=value, repeatable, one value each.
void add_sets(CLI::App& c, std::vector<std::string>& sets) {
  c.add_option("--set", sets, "override a recipe key (YAML value); repeatable")
      ->allow_extra_args(false)
      ->type_name("KEY.PATH=VALUE");
}

using cli::integer_in;
using cli::number_in;
using cli::one_of;

// The bounds of the counts a user types (docs/commands.md, "Bounds").
constexpr int64_t kMaxWorld = int64_t(1) << 20;         // ranks, devices: 1,048,576
constexpr int64_t kMaxSampleTokens = int64_t(1) << 20;  // tokens one `sample` generates
constexpr int64_t kMaxSteps = int64_t(1) << 20;         // sweep steps and warm-up steps
constexpr int64_t kMaxCount = int64_t(1) << 40;         // counts the command bounds itself, with its arithmetic

// A flag taking one of an enum's recipe spellings.
template <typename E>
CLI::Option* add_choice(CLI::App& c, const std::string& name, std::string& value, const std::string& help) {
  std::vector<std::string> names;
  for (const auto& [e, n] : EnumNames<E>::table) names.push_back(n);
  return c.add_option(name, value, help)->check(one_of(names));
}

struct Options {
  TrainCommand train;
  bool train_resume = false;
  data::PrepareOptions prepare;
  TopologyCommand topology;
  ScheduleCommand schedule;
  std::string schedule_kind;
  std::string checkpoint, out, format, recipe;
  std::vector<std::string> sets;
  SampleOptions sample;
  std::string prompt_ids;
  SubmitOptions submit;
  SuperviseOptions supervise;
  PlanCommand plan;
  SweepOptions sweep;
  ReportOptions report;
  std::string meshes;
  std::string keys_update;
  std::string inspect;
};

struct Command {
  const char* name;
  const char* about;
  std::function<void(CLI::App&, Options&)> options;
  std::function<int(Options&)> run;
};

// The command table: every subcommand, its options and its body.
std::vector<Command> commands() {
  return {
      {"train", "train a model from a recipe",
       [](CLI::App& c, Options& o) {
         c.add_option("recipe", o.train.recipe, "the recipe")->type_name("RECIPE.yaml");
         c.add_option("--resume", o.train.resume,
                      "continue from CHECKPOINT, or with no value (auto) from checkpoint.dir/latest if there is one")
             ->expected(0, 1)
             ->type_name("[auto|CHECKPOINT]");
         add_sets(c, o.train.sets);
       },
       [](Options& o) {
         auto& t = o.train;
         // `train --resume RECIPE.yaml`: the recipe was taken for the resume value
         if (t.recipe.empty() && t.resume.size() > 5 && t.resume.substr(t.resume.size() - 5) == ".yaml")
           std::swap(t.recipe, t.resume);
         if (t.recipe.empty()) fail_input("train: missing RECIPE.yaml (try configs/demo.yaml)");
         if (o.train_resume && t.resume.empty()) t.resume = "auto";
         // a restart by `trident supervise`: resume from checkpoint.dir's latest (a given CHECKPOINT stays)
         if (const char* r = std::getenv("TRIDENT_RESUME"); r && t.resume.empty()) t.resume = r;
         return run_train(t, g_argc, g_argv);
       }},
      {"prepare", "text or JSONL corpora -> indexed datasets (PREFIX_train, PREFIX_valid)",
       [](CLI::App& c, Options& o) {
         auto& p = o.prepare;
         c.add_option("--input", p.inputs, "text or JSONL files or globs (plain, .gz, .zst); repeatable")
             ->type_name("FILE")
             ->allow_extra_args(false);
         c.add_option("--out", p.out, "the dataset prefix")->type_name("PREFIX");
         c.add_option("--tokenizer", p.tokenizer,
                      "byte, char, or a tokenizer file: Hugging Face tokenizer.json (byte-level BPE) or "
                      "SentencePiece tokenizer.model")
             ->capture_default_str();
         c.add_option("--valid-fraction", p.valid_fraction, "share of the documents held out")
             ->check(number_in(0, 1, /*open_high=*/true))
             ->capture_default_str();
         c.add_flag("--doc-per-line", p.doc_per_line, "text: one document per line (default: per paragraph)");
         c.add_option("--json-key", p.json_key, "JSONL: the key holding the document")->capture_default_str();
         c.add_flag("--skip-bad-lines", p.skip_bad_lines, "JSONL: count and skip lines that are not documents");
         c.add_option("--eod-token", p.eod_token,
                      "end-of-document token (its text or id) appended to each document, or none "
                      "(default: the tokenizer's, none for byte and char)");
         c.add_option("--workers", p.workers, "encoding threads")->check(integer_in(1, 1024))->capture_default_str();
         c.add_flag("--force", p.force, "replace an existing dataset at --out");
         c.add_option("--inspect", o.inspect, "print what a dataset holds, and its first document decoded")
             ->type_name("PREFIX");
       },
       [](Options& o) {
         if (!o.inspect.empty()) {
           data::inspect_dataset(o.inspect);
           return 0;
         }
         data::prepare(o.prepare);
         return 0;
       }},
      {"topology", "print the rank layout and process groups of a recipe's mesh",
       [](CLI::App& c, Options& o) {
         c.add_option("recipe", o.topology.recipe, "the recipe")->required()->type_name("RECIPE.yaml");
         c.add_option("--world", o.topology.world, "ranks in all")->required()->check(integer_in(1, kMaxWorld));
         c.add_option("--ranks-per-node", o.topology.ranks_per_node, "ranks per node")->check(integer_in(1, kMaxWorld));
         add_sets(c, o.topology.sets);
       },
       [](Options& o) { return run_topology(o.topology); }},
      {"schedule", "simulate a pipeline schedule and print its timeline",
       [](CLI::App& c, Options& o) {
         // run_schedule bounds P, V, M and their product with the arithmetic in the message
         c.add_option("--pipeline", o.schedule.pipeline, "pipeline stages P")
             ->required()
             ->check(integer_in(1, kMaxCount));
         c.add_option("--micro-batches", o.schedule.micro_batches, "micro-batches per step M")
             ->required()
             ->check(integer_in(1, kMaxCount));
         c.add_option("--virtual-stages", o.schedule.virtual_stages, "chunks per stage V")
             ->check(integer_in(1, kMaxCount))
             ->capture_default_str();
         add_choice<ScheduleKind>(c, "--schedule", o.schedule_kind, "the schedule")->required();
         c.add_option("--width", o.schedule.width, "columns of the timeline")
             ->check(integer_in(1, 100000))
             ->capture_default_str();
       },
       [](Options& o) {
         o.schedule.schedule = *parse_enum<ScheduleKind>(o.schedule_kind);
         return run_schedule(o.schedule);
       }},
      {"export", "checkpoint (any mesh) -> Hugging Face transformers model directory",
       [](CLI::App& c, Options& o) {
         c.add_option("checkpoint", o.checkpoint, "a step directory or a checkpoint.dir")->required();
         c.add_option("--format", o.format, "the output format")->required()->check(one_of({"hf"}));
         c.add_option("--out", o.out, "the new model directory")->required()->type_name("DIR");
       },
       [](Options& o) {
         export_hf(o.checkpoint, o.out);
         return 0;
       }},
      {"import", "Hugging Face model directory -> step-0 checkpoint",
       [](CLI::App& c, Options& o) {
         c.add_option("hf_dir", o.checkpoint, "config.json + model.safetensors")->required()->type_name("HF_DIR");
         c.add_option("--recipe", o.recipe,
                      "the recipe to train it with (checked against config.json); without it, DIR/recipe.yaml is "
                      "written from config.json")
             ->type_name("RECIPE.yaml");
         c.add_option("--out", o.out, "the new checkpoint directory")->required()->type_name("DIR");
         add_sets(c, o.sets);
       },
       [](Options& o) {
         import_hf(o.checkpoint, o.recipe, o.sets, o.out);
         return 0;
       }},
      {"sample", "generate text from a checkpoint",
       [](CLI::App& c, Options& o) {
         auto& s = o.sample;
         c.add_option("checkpoint", s.checkpoint, "a step directory or a checkpoint.dir")->required();
         auto* text = c.add_option("--prompt", s.prompt, "the prompt text");
         c.add_option("--prompt-ids", o.prompt_ids, "the prompt as token ids")->type_name("ID,ID,...")->excludes(text);
         c.add_option("--tokens", s.tokens, "new tokens")
             ->check(integer_in(0, kMaxSampleTokens))
             ->capture_default_str();
         c.add_option("--temperature", s.temperature, "0: greedy")->check(number_in(0, 1e6))->capture_default_str();
         c.add_option("--top-k", s.top_k, "sample among the k likeliest (0: all)")
             ->check(integer_in(0, int64_t(1) << 30));
         c.add_option("--seed", s.seed, "sampling seed")->check(integer_in(0, INT64_MAX));
         c.add_option("--logits", s.logits_out, "write the prompt's logits here")->type_name("FILE.safetensors");
       },
       [](Options& o) {
         std::string ids = o.prompt_ids;
         for (char& ch : ids)
           if (ch == ',') ch = ' ';
         std::istringstream in(ids);
         for (std::string item; in >> item;) {
           char* end = nullptr;
           const long long id = std::strtoll(item.c_str(), &end, 10);
           if (end == item.c_str() || *end || id < 0)
             fail_input("sample: --prompt-ids: expected an integer >= 0, found '{}'", item);
           o.sample.prompt_ids.push_back(int32_t(id));
         }
         log::info_to_stderr(true);  // stdout is the text
         sample(o.sample);
         return 0;
       }},
      {"submit", "a Slurm batch job that saves and requeues before its time limit",
       [](CLI::App& c, Options& o) {
         auto& s = o.submit;
         c.add_option("recipe", s.recipe, "the recipe")->required()->type_name("RECIPE.yaml");
         c.add_option("--nodes", s.nodes, "nodes")->check(integer_in(1, kMaxWorld));
         c.add_option("--tasks-per-node", s.tasks_per_node, "ranks per node")->check(integer_in(1, 4096));
         c.add_option("--gpus-per-node", s.gpus_per_node, "GPUs per node")->check(integer_in(0, 1024));
         c.add_option("--cpus-per-task", s.cpus_per_task,
                      "CPUs per rank, and its threads (OMP_NUM_THREADS); default: Slurm's")
             ->check(integer_in(1, 4096));
         c.add_option("--time", s.time, "time limit")->capture_default_str();
         c.add_option("--partition", s.partition, "Slurm partition");
         c.add_option("--account", s.account, "Slurm account");
         c.add_option("--mpi", s.mpi, "srun --mpi plugin")->capture_default_str();
         c.add_option("--log-dir", s.log_dir, "job logs")->capture_default_str();
         c.add_option("--name", s.name, "job name (default trident-<recipe stem>)");
         c.add_option("--signal-seconds", s.signal_seconds, "SIGUSR1 this long before the limit")
             ->check(integer_in(0, 86400))
             ->capture_default_str();
         c.add_option("--restarts", s.restarts,
                      "srun restarted inside the allocation after a failure, up to this many times (trident "
                      "supervise; 0: not supervised)")
             ->check(integer_in(0, 1000000))
             ->capture_default_str();
         c.add_flag("--dry-run", s.dry_run, "write and print the script, do not submit it");
         add_sets(c, s.sets);
       },
       [](Options& o) {
         submit(o.submit);
         return 0;
       }},
      {"supervise", "run a launch command and restart it, resuming, when it fails",
       [](CLI::App& c, Options& o) {
         auto& s = o.supervise;
         c.add_option("--restarts", s.restarts, "restarts after a failure before giving up")
             ->check(integer_in(0, 1000000))
             ->capture_default_str();
         c.add_option("--grace", s.grace, "seconds from SIGTERM to SIGKILL for what is left of a failed attempt")
             ->check(number_in(0, 86400))
             ->capture_default_str();
         c.add_option("command", s.command, "the launch command, after --")->type_name("-- LAUNCH...");
       },
       [](Options& o) { return supervise(o.supervise); }},
      {"plan", "predict memory and step time of every parallel configuration",
       [](CLI::App& c, Options& o) {
         auto& p = o.plan;
         c.add_option("recipe", p.recipe, "the recipe")->required()->type_name("RECIPE.yaml");
         c.add_option("--cluster", p.cluster, "configs/clusters/*.yaml")->required()->type_name("CLUSTER.yaml");
         c.add_option("--gpus,--devices", p.gpus, "devices in all")->check(integer_in(1, kMaxWorld));
         c.add_option("--top", p.top, "configurations shown")->check(integer_in(1, 1000000))->capture_default_str();
         c.add_option("--mesh", p.mesh, "plan this mesh only (C: context, default 1; E: expert, default the recipe's)")
             ->type_name("D,T,P[,C[,E]]");
         c.add_option("--max-context", p.max_context, "also plan context sizes up to this (both modes)")
             ->check(integer_in(1, 4096))
             ->capture_default_str();
         add_choice<Precision>(c, "--precision", p.precision, "instead of the recipe's train.precision");
         c.add_option("--out", p.out, "--calibrate: the calibrated cluster file")->type_name("CALIBRATED.yaml");
         c.add_flag("--explain", p.explain, "the best configuration's memory and time, term by term");
         c.add_flag("--json", p.json, "every configuration as JSON");
         c.add_flag("--calibrate", p.calibrate, "measure this machine (under the sweep's launcher)");
         add_sets(c, p.sets);
         c.add_option("--cluster-set", p.cluster_sets, "override a cluster file key (YAML value); repeatable")
             ->allow_extra_args(false)
             ->type_name("KEY.PATH=VALUE");
       },
       [](Options& o) { return run_plan(o.plan, g_argc, g_argv); }},
      {"sweep", "measure every mesh of the world size against the plan (under mpirun/srun)",
       [](CLI::App& c, Options& o) {
         auto& s = o.sweep;
         c.add_option("recipe", s.recipe, "the recipe")->required()->type_name("RECIPE.yaml");
         c.add_option("--cluster", s.cluster, "the planner's cluster file")->required()->type_name("CLUSTER.yaml");
         c.add_option("--meshes", o.meshes,
                      "meshes to run (default: all, context sizes included; MoE recipes: every expert size too)")
             ->type_name("D,T,P[,C[,E]];...");
         c.add_option("--warmup", s.warmup, "steps not timed")->check(integer_in(0, kMaxSteps))->capture_default_str();
         c.add_option("--steps", s.steps, "steps timed")->check(integer_in(1, kMaxSteps))->capture_default_str();
         c.add_option("--repeats", s.repeats, "passes over the meshes")
             ->check(integer_in(1, 1000))
             ->capture_default_str();
         c.add_option("--out", s.out_dir, "results directory")->capture_default_str();
         add_sets(c, s.sets);
       },
       [](Options& o) {
         std::string text = o.meshes;
         for (char& ch : text)
           if (ch == ';' || ch == ' ') ch = '\n';
         std::istringstream in(text);
         for (std::string mesh; std::getline(in, mesh);)
           if (!mesh.empty()) o.sweep.meshes.push_back(parse_mesh("sweep: --meshes", mesh));
         parallel::MpiRuntime mpi(g_argc, g_argv);
         const auto world_group = parallel::MpiCommunicator::world();
         parallel::MpiCommunicator& world = *world_group;
         for (const auto& d : o.sweep.meshes)
           if (d[0] * d[1] * d[2] * d[3] != mpi.world())
             fail_input("sweep: --meshes: {} x {} x {} x {} = {} != the world size {} (launch with mpirun -np {})",
                        d[0], d[1], d[2], d[3], d[0] * d[1] * d[2] * d[3], mpi.world(), d[0] * d[1] * d[2] * d[3]);
         sweep(o.sweep, world);
         return 0;
       }},
      {"report", "an HTML page and PNG charts from runs' metrics, checkpoints and traces, and sweeps",
       [](CLI::App& c, Options& o) {
         c.add_option("runs", o.report.runs, "metrics files, run directories or sweep directories")
             ->required()
             ->type_name("RUN");
         c.add_option("--out", o.report.out, "output directory (index.html and a PNG per chart)")
             ->capture_default_str();
       },
       [](Options& o) {
         write_report(o.report);
         return 0;
       }},
      {"keys", "every recipe key: type, default, meaning (the tables of docs/recipes.md)",
       [](CLI::App& c, Options& o) {
         c.add_option("--update", o.keys_update, "rewrite this page's key tables")->type_name("docs/recipes.md");
       },
       [](Options& o) { return run_keys(o.keys_update); }},
  };
}

std::string version_text() {
  return fmt::format("trident {} (revision {})\n  cpu gemm: {}\n  cuda: {}\n  nccl: {}\n  mpi: {}\n", TRIDENT_VERSION,
                     TRIDENT_GIT_REV, kernels::cpu_gemm_backend(), kernels::cuda_backend(), parallel::nccl_version(),
                     parallel::mpi_library_version());
}

int run(int argc, char** argv) {
  CLI::App app{
      "trident: dense and mixture-of-experts LLM training from YAML recipes, over data (ZeRO), tensor, pipeline, "
      "context and expert parallelism, on CPUs (the CUDA backend is tested in emulation, not yet on a GPU); "
      "docs/commands.md",
      "trident"};
  app.require_subcommand(1);
  app.footer("exit codes: 0 success, 1 failure, 2 bad input\ndocs: docs/commands.md, docs/recipes.md");
  bool version = false;
  app.add_flag("--version", version, "revision and backends of this build");
  Options options;
  const std::vector<Command> table = commands();
  std::vector<std::pair<CLI::App*, const Command*>> subs;
  for (const auto& c : table) {
    CLI::App* sub = app.add_subcommand(c.name, c.about);
    c.options(*sub, options);
    subs.push_back({sub, &c});
  }
  CLI::Option* resume = app.get_subcommand("train")->get_option("--resume");
  if (argc == 1) {
    fmt::print("{}", app.help());
    return kExitBadInput;
  }
  if (argc == 2 && std::string(argv[1]) == "--version") {
    fmt::print("{}", version_text());
    return kExitOk;
  }
  if (argv[1][0] != '-' &&
      std::none_of(table.begin(), table.end(), [&](const Command& c) { return c.name == std::string(argv[1]); })) {
    std::vector<std::string> names;
    for (const auto& c : table) names.push_back(c.name);
    fail_input("trident: {}: expected a command ({}), found '{}'", argv[1], fmt::join(names, " | "), argv[1]);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "trident";
    for (const auto& [sub, c] : subs)
      if (sub->parsed()) where += std::string(" ") + c->name;
    const CLI::App* sub = nullptr;
    for (const auto& [s, c] : subs)
      if (s->parsed()) sub = s;
    log::error("{}: {}", where, cli::describe(e, sub));
    return kExitBadInput;
  }
  options.train_resume = resume->count() > 0;
  for (const auto& [sub, c] : subs)
    if (sub->parsed()) return c->run(options);
  return kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  // before MPI and OpenMP start threads; not for the supervisor, which handles them itself and whose
  // launched commands must not inherit them blocked
  if (!(argc > 1 && std::string(argv[1]) == "supervise")) trident::launch::install_stop_signals();
  g_argc = &argc;
  g_argv = &argv;
  try {
    return run(argc, argv);
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
