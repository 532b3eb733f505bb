// `trident submit`: a Slurm batch job for a recipe (docs/slurm.md). The
// recipe is validated for nodes x tasks-per-node ranks first; the sbatch
// script is filled in from the template (launch/tools/slurm/trident.sbatch.in,
// embedded in the binary), written beside the job logs, printed, and given
// to sbatch unless dry_run (which writes the script and stops). The job runs `srun --mpi=MPI trident train
// RECIPE --resume auto`, is signalled before its time limit, saves, and
// requeues itself to resume. Under `trident supervise` (restarts > 0) a
// failed srun (a rank's exit, a hang's timeout) is started again inside the
// allocation, resuming from the newest checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident::launch {

struct SubmitOptions {
  std::string recipe;
  std::vector<std::string> sets;
  int64_t nodes = 0;
  int64_t tasks_per_node = 0;  // 0: gpus_per_node, else the recipe's mesh / nodes
  int64_t gpus_per_node = 0;
  int64_t cpus_per_task = 0;  // 0: not asked (Slurm's default, 1 CPU per task); else OMP_NUM_THREADS too
  std::string time = "01:00:00";
  std::string partition, account;
  std::string mpi = "pmix";  // srun --mpi=
  std::string log_dir = "runs/slurm";
  std::string name;              // job name (default: trident-<recipe stem>)
  int64_t signal_seconds = 120;  // SIGUSR1 this long before the time limit
  int64_t restarts = 3;          // srun runs under `trident supervise --restarts N` (0: not supervised)
  bool dry_run = false;
  std::string checkpoint_dir;  // filled by submit(): where the job saves (its stop marker too)
};

// The script text (for tests and --dry-run).
std::string sbatch_script(const SubmitOptions& o, const std::string& script_path);

// Returns the job id ("" with dry_run).
std::string submit(const SubmitOptions& o);

}  // namespace trident::launch
