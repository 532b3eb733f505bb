// Who started this process: the launcher's environment (Slurm's srun, Open
// MPI's mpirun, a PMIx launcher) gives rank, world, local rank and node
// without asking MPI; `describe_placement` gathers every rank's node name
// over MPI for the start-up log. Used for the start-up report and for
// launch mistakes (a multi-rank recipe started as one process, ranks that
// read different recipes).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident::parallel {

class Communicator;
class MpiCommunicator;

struct LaunchEnv {
  std::string launcher = "none";                                            // "srun", "mpirun", "pmix" or "none"
  int rank = -1, world = -1, local_rank = -1, local_world = -1, node = -1;  // -1: not given
  std::string node_name;                                                    // SLURMD_NODENAME, else this host's name
  std::string job;                                                          // "Slurm job 42 step 0", "" elsewhere
  std::string mpi_plugin;  // srun's --mpi (SLURM_MPI_TYPE): "" or "none" when srun starts no MPI wire-up
  bool launched() const { return launcher != "none"; }
};

// From the environment only (no MPI calls).
LaunchEnv detect_launch_env();

// One line per node with its ranks, and the launcher: what start-up prints
// (collective over world; every rank gets the text). node_of_rank is filled
// with each world rank's node index (in order of first appearance).
std::string describe_placement(const LaunchEnv& env, MpiCommunicator& world, std::vector<int>* node_of_rank = nullptr);

// Tensor groups (lists of world ranks) spanning more than one node, as text
// ("" when none): tensor-parallel traffic would cross the network.
std::string groups_across_nodes(const std::vector<std::vector<int>>& groups, const std::vector<int>& node_of_rank);

// 64-bit FNV-1a, for comparing what ranks read.
uint64_t fnv1a64(const std::string& s);

// Collective: InputError on every rank when the ranks' `hash`es differ,
// naming which ranks hold which; `mine` describes this rank's input.
void check_same_on_all_ranks(MpiCommunicator& world, uint64_t hash, const std::string& what, const std::string& mine);

}  // namespace trident::parallel
