// `trident train` (see run_train.hpp).
#include "launch/train/run_train.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe/recipe.hpp"
#include "launch/train/trainer.hpp"
#include "parallel/launch_env.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

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
  const parallel::Topology topo = parallel::topology_of(p);
  const std::string split = parallel::groups_across_nodes(topo.groups(parallel::GroupKind::tensor), node_of_rank);
  if (!split.empty() && world.rank() == 0)
    log::warn(
        "tensor groups {} span nodes: tensor-parallel traffic crosses the network (make the ranks per node a "
        "multiple of parallel.tensor and keep tensor first in parallel.order)",
        split);
  const std::string shards = topo.data_replicate() > 1 ? parallel::groups_across_nodes(
                                                             topo.groups(parallel::GroupKind::data_shard), node_of_rank)
                                                       : "";
  if (!shards.empty() && world.rank() == 0)
    log::warn(
        "HSDP shard groups {} span nodes: ZeRO's gathers and reduce-scatters cross the network (make "
        "parallel.data_shard x the ranks inside it fit a node)",
        shards);
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

}  // namespace trident::launch
