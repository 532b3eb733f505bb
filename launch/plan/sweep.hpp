// `trident sweep` (measure) and `trident plan --calibrate`, both run under a
// launcher (mpirun / srun): docs/planner.md.
//   sweep: every mesh data x tensor x pipeline of the world size (or the
//          listed ones) trains the recipe for warm-up + measured steps; each
//          run records tokens/s, MFU, the peak memory per category (max over
//          ranks), the measured bubble, and the planner's prediction for the
//          same configuration. Table on stdout, sweep.csv and sweep.json in
//          the output directory (bench/plot_sweep.py draws sweep.png).
//   calibrate: every rank at once trains the whole recipe on its own for a
//          few steps (so oversubscribed ranks see their share of the cores):
//          model FLOPs per second over the device peak is the achievable
//          fraction (every kernel included, not only GEMMs); ranks 0 and 1
//          ping-pong to measure the link. Writes a cluster file from a base
//          one with the measured gemm_fraction and intra-node link.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::launch {

struct SweepOptions {
  std::string recipe, cluster, out_dir = "runs/sweep";
  std::vector<std::string> sets;
  // data, tensor, pipeline, context, expert (0: the recipe's); empty: every mesh of the world size (MoE models:
  // every expert size too)
  std::vector<std::array<int64_t, 5>> meshes;
  int64_t warmup = 2, steps = 4;
  int64_t repeats = 1;  // the mesh list runs this many times, alternating; medians reported
};
void sweep(const SweepOptions& o, parallel::MpiCommunicator& world);

struct CalibrateOptions {
  std::string recipe, base_cluster, out;
  std::vector<std::string> sets;
};
void calibrate(const CalibrateOptions& o, parallel::MpiCommunicator& world);

}  // namespace trident::launch
