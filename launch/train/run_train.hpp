// `trident train`: the launcher checks, the MPI runtime, the recipe (the
// same on every rank), the placement log, then the trainer. The command line
// itself is launch/main.cpp's table; this runs after it has checked the words.
// Returns the exit code (0), or throws InputError (exit 2) or Error (1).
#pragma once
#include <string>
#include <vector>

namespace trident::launch {

struct TrainCommand {
  std::string recipe;
  std::vector<std::string> sets;
  std::string resume;  // "", "auto" or a checkpoint
};
int run_train(const TrainCommand& c, int* argc, char*** argv);

}  // namespace trident::launch
