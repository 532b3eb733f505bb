// Checkpoints (docs/checkpoint.md): a directory per step under
// checkpoint.dir, one safetensors file per distinct rank state and an
// index.json written last; the directory is renamed into place and the
// `latest` pointer updated only then; checkpoint.keep complete checkpoints
// are kept.
//
// Each writing rank saves its shard [shard_begin, shard_end) of its flat
// buffer: fp32 parameters and AdamW's exp_avg and exp_avg_sq ("params",
// "exp_avg", "exp_avg_sq"). Data-parallel replicas with ZeRO 0 hold the same
// state, so only data rank 0 writes it; under HSDP only the first replica of
// each shard group writes (RankState::writes). The index records the step, the
// consumed samples (the data order and the LR schedule are functions of the
// step), the mesh and model, every file's coordinates, shard, size and
// CRC-32C checksum, and for every parameter the pieces of it each file holds
// (global name, shape, file, offset and slice).
//
// Loading works on any mesh: on the one it was saved under each rank reads
// its own file; on another, each rank maps every element of its new shard
// (by parameter name, global row and column) to the saved piece holding it
// and reads only those ranges. Every file read is checked (size, checksum,
// tensor names and shapes) on every rank before any state changes.
//
// Experts split over ranks: each file holds what its rank writes of the
// dense shard (ZeRO 0: data x context rank 0) followed by what it writes of
// its expert shard (ZeRO 0: expert-data rank 0); the index's pieces say
// which elements are where, and loading always reshards (any expert size,
// any mesh).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/checkpoint/fp8_state.hpp"
#include "launch/checkpoint/index.hpp"
#include "model/params.hpp"
#include "optim/mixed_precision.hpp"
#include "parallel/communicator.hpp"

namespace trident::launch {

using optim::ScalerState;  // optim/mixed_precision.hpp

// What one rank contributes to (or takes from) a checkpoint. params are the
// fp32 (master) weights, whatever train.precision is.
struct RankState {
  const model::ParamRegistry* registry;    // this rank's slices
  int dp = 0, pp = 0, tp = 0;              // dp: the rank in data x context (names the file)
  int64_t shard_begin = 0, shard_end = 0;  // elements of the flat buffer
  float *params = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;  // shard_end - shard_begin each
  // exp_avg_sq packed (Muon: AdamW's elements only, optim::AdamW's
  // second_moment_runs): the runs of the shard it holds, one after another
  // (none: a shard of Muon's matrices only); the file's exp_avg_sq has the
  // shard's layout, zeros elsewhere.
  bool exp_avg_sq_packed = false;
  std::vector<std::pair<int64_t, int64_t>> exp_avg_sq_runs;
  ScalerState* scaler = nullptr;  // saved with the index; filled on load (null: optimizer step = step)
  // Experts split over ranks (parallel.expert > 1): the expert part of the
  // flat buffer (model/params.hpp, expert_begin) has a shard of its own over
  // the expert-data group, saved after the dense shard in the same file.
  // params null: none (the shard above is the whole buffer's).
  struct ExpertPart {
    int rank = 0;                            // this rank's place in the expert group
    int dp = 0;                              // ... in the expert-data group
    bool writes = true;                      // (ZeRO 0: expert-data rank 0 writes; HSDP: expert_replicate rank 0)
    int64_t shard_begin = 0, shard_end = 0;  // elements of the flat buffer
    float *params = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
    bool exp_avg_sq_packed = false;
    std::vector<std::pair<int64_t, int64_t>> exp_avg_sq_runs;
  } experts = {};
  // Whether this rank writes its (dense) shard: ZeRO 0's replicas and HSDP's
  // hold the same state, only the first of them writes it.
  bool writes = true;
  // Delayed FP8 scaling (train.fp8.recipe delayed): the model's state, saved
  // from the ranks where fp8_writes (one per pipeline stage: its state is the
  // same on the stage's other ranks) and loaded on every rank (null: none).
  model::Fp8Linears* fp8 = nullptr;
  bool fp8_writes = false;
};

// A packed exp_avg_sq (RankState::exp_avg_sq_runs) in the shard's layout
// (n elements, zeros off the runs), and back.
void unpack_runs(float* full, int64_t n, const float* packed, const std::vector<std::pair<int64_t, int64_t>>& runs);
void pack_runs(float* packed, const float* full, const std::vector<std::pair<int64_t, int64_t>>& runs);

// Saves in two halves. start() (collective) copies this rank's shard into
// host buffers it keeps (3 x 4 bytes per element of the shard: the memory
// cost of saving) and writes its file from a background thread
// (checkpoint.async) or at once; poll() (collective, once per step) finishes
// the save when every rank's file is written: rank 0 writes the index,
// renames the directory into place, updates `latest` and rotates. A second
// start() first waits for the previous save. finish() waits for and finishes
// the pending save. All ranks call these at the same steps.
// A finished save returns the checkpoint directory, or "" when a rank could
// not write its file (disk full): then the error is logged, the temporary
// directory is removed, the previous checkpoint and `latest` are untouched,
// and training goes on (the next save tries again), except at the last step
// and at a stop signal, where after_step() throws: the run fails (exit 1).
// Destroyed with a save pending (an exception unwinding): the writer thread
// is joined; one process removes the unfinished `.tmp_` directory, with more
// it is left (as after a crash) and the next save's rotation removes it.
namespace checkpoint {
struct FileReport;
}

class CheckpointSaver {
 public:
  CheckpointSaver(const Recipe& rc, parallel::Communicator* world);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;
  // Returns the directory of a previous save finished on the way, else "".
  std::string start(int64_t steps_done, const RankState& s);
  std::string poll();
  std::string finish();
  bool pending() const { return pending_ != nullptr; }
  // Allocates (and touches) the host copy for a shard of n elements now, so
  // that the first save does not stall on page faults.
  void reserve(int64_t n);
  // The same, when the recipe saves in the background (logged).
  void prepare(int64_t n);
  // After each step (collective): finishes a save whose files are written,
  // and saves when checkpoint.every, the last step or a stop asks for it
  // (synchronously at the last step and at a stop). A no-op without a dir.
  void after_step(int64_t steps_done, bool stopping, const RankState& s, bool quiet);
  int64_t buffer_bytes() const;  // the host copy kept for background writes
  // The tokenizer of the run's data: each checkpoint records it and holds
  // its file's `bytes` (read once, when the run starts) as t.file.
  void record_tokenizer(const checkpoint::IndexTokenizer& t, std::string bytes);
  // After a stop signal's save (rank 0): writes checkpoint.dir/stopped.json
  // {"stopped": true, "signal", "step", "checkpoint"} when `latest` names the
  // step just saved, so that a job script can tell a clean stop from a
  // failure whatever its launcher's exit code (docs/slurm.md). The next run
  // in the directory removes it when it starts.
  void mark_stopped(int64_t steps_done, const std::string& signal) const;
  static constexpr const char* kStoppedFile = "stopped.json";
  static constexpr const char* kFp8StateFile = "fp8_state.json";  // delayed FP8 scaling's state in a step directory

 private:
  struct Pending;
  std::string complete();
  void write_index(const std::vector<checkpoint::FileReport>& files, int64_t steps_done, const ScalerState& scaler,
                   const std::string& tmp_dir, const checkpoint::Fp8State* fp8) const;
  void rotate(const std::string& tmp_dir) const;
  std::string previous_checkpoint() const;  // what `latest` names, or "none"
  const Recipe& rc_;
  parallel::Communicator* world_;
  std::unique_ptr<Pending> pending_;
  std::optional<checkpoint::IndexTokenizer> tokenizer_;
  std::string tokenizer_bytes_;
  std::vector<float> params_, exp_avg_, exp_avg_sq_;
};

// One synchronous save (start + finish).
std::string save_checkpoint(const Recipe& rc, int64_t steps_done, const RankState& s, parallel::Communicator* world);

// A step directory (with index.json), or a checkpoint directory: its
// `latest`. InputError naming the path otherwise.
std::string resolve_checkpoint(const std::string& path);

// What `dir` already holds ("latest -> step_00000042", "3 step directories"),
// or "" when it holds no checkpoint.
std::string existing_checkpoints(const std::string& dir);

// "auto": checkpoint.dir/latest (without it, the newest complete step
// directory; step directories none of which is complete are refused), or "" when there is none (start fresh);
// otherwise resolve_checkpoint(arg).
std::string resolve_resume(const Recipe& rc, const std::string& arg);

// Collective. Fills the shard from checkpoint `dir`; returns its step. Null
// exp_avg / exp_avg_sq: the optimizer state is not read.
int64_t load_checkpoint(const Recipe& rc, const std::string& dir, const RankState& s, parallel::Communicator* world);

// A checkpoint saved under any mesh, on one process: the recipe it was
// trained with (its file text and --set overrides, on a 1x1x1 mesh) and the
// parameters in the whole model's registry layout (padded vocabulary rows
// zero). For export and sampling.

struct WholeModel {
  std::string dir;  // the step directory
  Recipe recipe;
  int64_t step = 0;
  std::vector<float> params;
  // the tokenizer the checkpoint records (its file's copy checked), if any
  std::optional<checkpoint::IndexTokenizer> tokenizer;
};
WholeModel load_whole_model(const std::string& path);

}  // namespace trident::launch
