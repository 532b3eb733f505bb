// trident submit (see submit.hpp).
#include "launch/tools/submit.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/tools/slurm_template.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// A word for the shell, single-quoted when it needs to be.
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%") ==
                        std::string::npos)
    return s;
  std::string out(1, '\'');
  out += replace_all(s, "'", "'\\''");
  out += '\'';
  return out;
}

std::string this_binary() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("trident") : p.string();
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

std::string sbatch_script(const SubmitOptions& o, const std::string& script_path) {
  std::string sets;
  for (const auto& s : o.sets) sets += " \\\n    --set " + shell_word(s);
  std::string s = kSbatchTemplate;
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"{{WHEN}}", now_text()},
      {"{{SCRIPT}}", script_path},
      {"{{NAME}}", o.name},
      {"{{NODES}}", std::to_string(o.nodes)},
      {"{{TASKS_PER_NODE}}", std::to_string(o.tasks_per_node)},
      {"{{GPUS}}", o.gpus_per_node > 0 ? fmt::format("#SBATCH --gpus-per-node={}\n", o.gpus_per_node) : ""},
      {"{{CPUS}}", o.cpus_per_task > 0 ? fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_task) : ""},
      {"{{TIME}}", o.time},
      {"{{PARTITION}}", o.partition.empty() ? "" : "#SBATCH --partition=" + o.partition + "\n"},
      {"{{ACCOUNT}}", o.account.empty() ? "" : "#SBATCH --account=" + o.account + "\n"},
      {"{{LOG_DIR}}", fs::absolute(o.log_dir).lexically_normal().string()},
      {"{{WORKDIR}}", fs::current_path().string()},
      {"{{SIGNAL_SECONDS}}", std::to_string(o.signal_seconds)},
      {"{{MPI}}", o.mpi},
      {"{{SUPERVISE}}",
       o.restarts > 0 ? fmt::format("{} supervise --restarts {} -- ", shell_word(this_binary()), o.restarts) : ""},
      {"{{TRIDENT}}", shell_word(this_binary())},
      {"{{RECIPE}}", shell_word(fs::absolute(o.recipe).lexically_normal().string())},
      {"{{SETS}}", sets},
      {"{{CHECKPOINT_DIR}}", shell_word(o.checkpoint_dir)},
  };
  for (const auto& [k, v] : fields) s = replace_all(s, k, v);
  return s;
}

std::string submit(const SubmitOptions& given) {
  SubmitOptions o = given;
  if (o.nodes < 1) fail_input("submit: missing --nodes N");
  if (o.signal_seconds < 0) fail_input("submit: --signal-seconds: expected an integer >= 0");
  if (!std::regex_match(o.time, std::regex(R"((\d+-)?\d+(:\d{1,2}){0,2})")))
    fail_input("submit: --time: expected minutes, HH:MM:SS or D-HH:MM:SS (Slurm's forms), found '{}'", o.time);
  if (!std::regex_match(o.mpi, std::regex(R"([A-Za-z0-9_]+)")))
    fail_input("submit: --mpi: expected an srun MPI plugin name (pmix, pmi2, ...), found '{}'", o.mpi);
  if (o.tasks_per_node == 0) {
    const int64_t ranks = recipe_ranks(o.recipe, o.sets);
    if (o.gpus_per_node > 0)
      o.tasks_per_node = o.gpus_per_node;  // one rank per GPU
    else if (ranks > 0 && ranks % o.nodes == 0)
      o.tasks_per_node = ranks / o.nodes;
    else
      fail_input(
          "submit: --tasks-per-node: not given, and the recipe's mesh ({} ranks) does not divide over {} "
          "nodes; give --tasks-per-node K",
          ranks, o.nodes);
  }
  // every recipe check, for the job's world size, before anything is submitted
  const Recipe rc = load_recipe(o.recipe, o.sets, o.nodes * o.tasks_per_node);
  if (rc.checkpoint.dir.empty()) {  // a requeued job resumes from here
    const std::string dir = fs::absolute(fs::path(o.log_dir) / (fs::path(o.recipe).stem().string() + "_checkpoints"))
                                .lexically_normal()
                                .string();
    o.sets.push_back("checkpoint.dir=" + dir);
    log::info("submit: the recipe sets no checkpoint.dir; the job saves to {} (so that a requeued job resumes)", dir);
    o.checkpoint_dir = dir;
  } else {
    o.checkpoint_dir = rc.checkpoint.dir;
  }
  // what the job asks of Slurm against where the recipe trains
  if (o.gpus_per_node > 0 && rc.device == DeviceType::cpu)
    log::warn(
        "submit: --gpus-per-node {} but {} says device: cpu: the job holds GPUs and trains on the CPUs (set "
        "device: cuda to use them; the CUDA backend has not yet run on a GPU, docs/cuda.md)",
        o.gpus_per_node, o.recipe);
  if (o.gpus_per_node == 0 && rc.device == DeviceType::cuda)
    log::warn(
        "submit: {} says device: cuda but no --gpus-per-node was given: the job gets a GPU only where the "
        "partition gives one by default",
        o.recipe);
  if (o.cpus_per_task == 0 && rc.device == DeviceType::cpu)
    log::info(
        "submit: no --cpus-per-task: Slurm gives each rank its default (1 CPU where tasks are bound), and each "
        "trains with the CPUs it may use divided by its node's ranks; give --cpus-per-task C (the node's cores / "
        "tasks per node) for C threads per rank");
  if (o.name.empty()) o.name = "trident-" + fs::path(o.recipe).stem().string();
  const std::string script_path =
      fs::absolute(fs::path(o.log_dir) / fmt::format("{}-{}.sbatch", o.name, ::getpid())).lexically_normal().string();
  const std::string text = sbatch_script(o, script_path);
  log::info("submit: {} nodes x {} tasks = {} ranks | mesh data {} x tensor {} x pipeline {}", o.nodes,
            o.tasks_per_node, o.nodes * o.tasks_per_node, rc.parallel.data, rc.parallel.tensor, rc.parallel.pipeline);
  fs::create_directories(o.log_dir);
  {
    std::ofstream f(script_path);
    f << text;
    if (!f) throw Error(fmt::format("{}: cannot write the sbatch script", script_path));
  }
  fs::permissions(script_path, fs::perms::owner_exec, fs::perm_options::add);
  fmt::print("{}", text);
  std::fflush(stdout);
  if (o.dry_run) {
    log::info("submit: --dry-run: the script is written to {}, not submitted (submit it with: sbatch {})", script_path,
              script_path);
    return "";
  }
  const std::string cmd = "sbatch --parsable " + shell_word(script_path) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw Error("submit: cannot run sbatch");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  const int status = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (status != 0)
    throw Error(fmt::format("submit: sbatch {} failed: {} (the script is kept: fix the cause and run sbatch on it)",
                            script_path, out.empty() ? "no output (is Slurm installed and running?)" : out));
  const std::string job = out.substr(0, out.find(';'));  // --parsable: "JOBID[;CLUSTER]"
  log::info("submit: job {} submitted | script {} | log {}/{}-{}.out | watch: squeue -j {}; cancel: scancel {}", job,
            script_path, fs::absolute(o.log_dir).lexically_normal().string(), o.name, job, job, job);
  return job;
}

}  // namespace trident::launch
