// Saving a checkpoint in two halves: start() and the background write, then
// complete() once every rank's file is written (see checkpoint.hpp).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <tuple>
#include <type_traits>

#include "core/atomic_file.hpp"
#include "core/crc32c.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/log.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/checkpoint/index.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

void unpack_runs(float* full, int64_t n, const float* packed, const std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::fill(full, full + n, 0.0f);
  for (auto [lo, hi] : runs) {
    std::copy(packed, packed + (hi - lo), full + lo);
    packed += hi - lo;
  }
}

void pack_runs(float* packed, const float* full, const std::vector<std::pair<int64_t, int64_t>>& runs) {
  for (auto [lo, hi] : runs) packed = std::copy(full + lo, full + hi, packed);
}
using checkpoint::file_name;
using checkpoint::step_name;

namespace checkpoint {
// What each rank tells rank 0 about its file when a save completes: the
// typed message of the save agreement, gathered as raw bytes.
struct FileReport {
  int32_t status = 0;  // 0: nothing written (a ZeRO 0 replica), 1: written, -1: failed
  int32_t dp = 0, pp = 0, tp = 0;
  uint32_t crc = 0;                          // CRC-32C of the file
  int32_t ep = 0;                            // experts split over ranks: the expert rank
  int64_t shard_begin = 0, shard_end = 0;    // the dense shard written (empty: none)
  int64_t expert_begin = 0, expert_end = 0;  // the expert shard written after it (empty: none)
};
static_assert(sizeof(FileReport) % sizeof(int32_t) == 0 && std::is_trivially_copyable_v<FileReport>);

// Every rank's report, in world rank order (collective).
std::vector<FileReport> gather_reports(parallel::Communicator* world, const FileReport& mine) {
  const int size = world ? world->size() : 1, rank = world ? world->rank() : 0;
  constexpr int64_t words = sizeof(FileReport) / sizeof(int32_t);
  Tensor all = Tensor::zeros({words * size}, DType::i32, MemCategory::other);
  std::memcpy(all.data<int32_t>() + words * rank, &mine, sizeof(FileReport));
  if (world && size > 1) world->all_gather(all)->wait();
  std::vector<FileReport> out(static_cast<size_t>(size));
  std::memcpy(static_cast<void*>(out.data()), all.data<int32_t>(), sizeof(FileReport) * size_t(size));
  return out;
}
}  // namespace checkpoint

using checkpoint::FileReport;

struct CheckpointSaver::Pending {
  int64_t step = 0;
  ScalerState scaler;
  fs::path tmp_dir, final_dir;
  std::thread writer;
  std::atomic<bool> written{false};
  FileReport report;
  std::string failure;
  checkpoint::Fp8State fp8;  // this rank's part of delayed FP8 scaling's state at the step
};

CheckpointSaver::CheckpointSaver(const Recipe& rc, parallel::Communicator* world) : rc_(rc), world_(world) {
  // a run starting here is no longer stopped: the previous run's marker goes
  if (!rc_.checkpoint.dir.empty() && (!world_ || world_->rank() == 0)) {
    std::error_code ec;
    fs::remove(fs::path(rc_.checkpoint.dir) / kStoppedFile, ec);
  }
}

void CheckpointSaver::mark_stopped(int64_t steps_done, const std::string& signal) const {
  if (rc_.checkpoint.dir.empty() || (world_ && world_->rank() != 0)) return;
  const std::string name = checkpoint::step_name(steps_done);
  if (previous_checkpoint() != name) return;  // the stop's save did not become `latest`: no marker
  write_file_atomic((fs::path(rc_.checkpoint.dir) / kStoppedFile).string(),
                    fmt::format("{{\"stopped\": true, \"signal\": \"{}\", \"step\": {}, \"checkpoint\": \"{}\"}}\n",
                                signal, steps_done, name));
}

CheckpointSaver::~CheckpointSaver() {
  if (!pending_) return;
  if (pending_->writer.joinable()) pending_->writer.join();
  // unwinding (an error on some rank): the unfinished save is abandoned; one
  // process removes its temporary (with more ranks the next save's rotation does)
  if (!world_ || world_->size() == 1) {
    std::error_code ec;
    fs::remove_all(pending_->tmp_dir, ec);
  }
}

int64_t CheckpointSaver::buffer_bytes() const {
  return int64_t(sizeof(float) * (params_.capacity() + exp_avg_.capacity() + exp_avg_sq_.capacity()));
}

void CheckpointSaver::reserve(int64_t n) {
  for (auto* b : {&params_, &exp_avg_, &exp_avg_sq_}) b->resize(static_cast<size_t>(n));
}

void CheckpointSaver::prepare(int64_t n) {
  if (rc_.checkpoint.dir.empty() || !rc_.checkpoint.async) return;
  reserve(n);
  log::info("checkpoints: background writes from a host copy of this rank's shard ({:.1f} MiB per rank)",
            double(buffer_bytes()) / (1 << 20));
}

void CheckpointSaver::after_step(int64_t steps_done, bool stopping, const RankState& s, bool quiet) {
  if (rc_.checkpoint.dir.empty()) return;
  auto report = [&](const std::string& saved) {
    if (!quiet && !saved.empty()) log::info("checkpoint {}", saved);
  };
  report(poll());
  const bool last = steps_done == rc_.train.steps;
  const int64_t every = rc_.checkpoint.every;
  if ((every > 0 && steps_done % every == 0) || last || stopping) {
    report(start(steps_done, s));
    if (!last && !stopping) return;
    const std::string saved = finish();
    report(saved);
    // the run ends here: a lost save is the run's failure (exit 1, so that a
    // job script does not requeue it as if it had saved)
    if (saved.empty())
      throw Error(
          fmt::format("the checkpoint after step {} ({}) failed: the run ends without it; --resume continues "
                      "from the previous checkpoint ({})",
                      steps_done, stopping ? "the stop signal's save" : "the last step's save", previous_checkpoint()));
  }
}

std::string CheckpointSaver::start(int64_t steps_done, const RankState& s) {
  const std::string previous = pending_ ? finish() : "";
  const fs::path root(rc_.checkpoint.dir);
  auto p = std::make_unique<Pending>();
  p->step = steps_done;
  if (s.scaler)
    p->scaler = *s.scaler;
  else
    p->scaler.optimizer_steps = steps_done;
  p->final_dir = root / step_name(steps_done), p->tmp_dir = root / (".tmp_" + step_name(steps_done));
  if (s.fp8 && s.fp8_writes) p->fp8 = s.fp8->state();
  if (!world_ || world_->rank() == 0) {
    fs::create_directories(root);
    fs::remove_all(p->tmp_dir);
    fs::create_directories(p->tmp_dir);
  }
  if (world_) world_->barrier()->wait();
  p->report.dp = s.dp, p->report.pp = s.pp, p->report.tp = s.tp;
  // ZeRO 0 and HSDP: replicas hold the same state, only the first of each part's replicas writes it
  const bool split = s.experts.params != nullptr;
  const bool dense = s.writes, experts = split && s.experts.writes;
  if (dense) p->report.shard_begin = s.shard_begin, p->report.shard_end = s.shard_end;
  p->report.ep = s.experts.rank;
  if (experts) p->report.expert_begin = s.experts.shard_begin, p->report.expert_end = s.experts.shard_end;
  if (!dense && !experts) {
    p->written = true;
    pending_ = std::move(p);
    return previous;
  }
  // background: from a host copy, since training changes the shard while the
  // file is written; synchronous: from the shard itself (from a host copy
  // too when the shard is in device memory, or when the file holds two shards)
  const int64_t nd = dense ? s.shard_end - s.shard_begin : 0;
  const int64_t ne = experts ? s.experts.shard_end - s.experts.shard_begin : 0, n = nd + ne;
  const float *src_p = s.params, *src_m = s.exp_avg, *src_v = s.exp_avg_sq;
  const bool packed = s.exp_avg_sq_packed || s.experts.exp_avg_sq_packed;
  if (rc_.checkpoint.async || is_device_pointer(s.params) || split || packed) {
    for (auto [dst, d, e] : {std::tuple{&params_, s.params, s.experts.params},
                             {&exp_avg_, s.exp_avg, s.experts.exp_avg},
                             {&exp_avg_sq_, s.exp_avg_sq, s.experts.exp_avg_sq}}) {
      dst->resize(static_cast<size_t>(n));
      if (dst == &exp_avg_sq_ && packed) {  // Muon's: the shard's layout, zeros at the matrices
        if (nd > 0 && s.exp_avg_sq_packed) unpack_runs(dst->data(), nd, d, s.exp_avg_sq_runs);
        if (nd > 0 && !s.exp_avg_sq_packed) copy_bytes(dst->data(), d, size_t(nd) * sizeof(float));
        if (ne > 0 && s.experts.exp_avg_sq_packed) unpack_runs(dst->data() + nd, ne, e, s.experts.exp_avg_sq_runs);
        if (ne > 0 && !s.experts.exp_avg_sq_packed) copy_bytes(dst->data() + nd, e, size_t(ne) * sizeof(float));
        continue;
      }
      if (nd > 0) copy_bytes(dst->data(), d, size_t(nd) * sizeof(float));  // waits for the device's queued work
      if (ne > 0) copy_bytes(dst->data() + nd, e, size_t(ne) * sizeof(float));
    }
    src_p = params_.data(), src_m = exp_avg_.data(), src_v = exp_avg_sq_.data();
  }
  auto write = [n, src_p, src_m, src_v, pending = p.get(), path = (p->tmp_dir / file_name(s.dp, s.pp, s.tp)).string()] {
    try {
      if (fault::hit(fault::Phase::save, pending->step))
        throw Error(fmt::format("{}: write failed (TRIDENT_FAULT fail_write)", path));
      pending->report.crc = write_safetensors(path,
                                              {{"params", DType::f32, {n}, src_p},
                                               {"exp_avg", DType::f32, {n}, src_m},
                                               {"exp_avg_sq", DType::f32, {n}, src_v}},
                                              {{"step", std::to_string(pending->step)}});
      pending->report.status = 1;
    } catch (const std::exception& e) {  // disk full, permissions: this save is lost, training is not
      pending->failure = e.what();
      pending->report.status = -1;
    }
    pending->written = true;
  };
  if (rc_.checkpoint.async)
    p->writer = std::thread(write);
  else
    write();
  pending_ = std::move(p);
  return previous;
}

std::string CheckpointSaver::poll() {
  if (!pending_) return "";
  const bool busy = parallel::max_over(world_, pending_->written ? 0 : 1) != 0;  // does any rank still write?
  return busy ? "" : complete();
}

std::string CheckpointSaver::finish() { return pending_ ? complete() : ""; }

// Every rank's file is written (or this waits for it): the index, the rename,
// `latest`, rotation.
std::string CheckpointSaver::complete() {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->writer.joinable()) p->writer.join();
  const fs::path root(rc_.checkpoint.dir);
  const int rank = world_ ? world_->rank() : 0;
  const std::vector<FileReport> files = checkpoint::gather_reports(world_, p->report);  // also the barrier
  const bool delayed = rc_.train.fp8.recipe == Fp8Recipe::delayed;
  const checkpoint::Fp8State fp8 = delayed ? checkpoint::gather_fp8_state(world_, p->fp8) : checkpoint::Fp8State{};
  const bool failed = std::any_of(files.begin(), files.end(), [](const FileReport& f) { return f.status < 0; });
  if (failed) {
    if (!p->failure.empty()) log::error("checkpoint after step {}: {}", p->step, p->failure);
    if (rank == 0) {
      fs::remove_all(p->tmp_dir);
      log::error("checkpoint after step {} failed (see the errors above); the previous checkpoint ({}) is kept",
                 p->step, previous_checkpoint());
    }
    if (world_) world_->barrier()->wait();
    return "";
  }
  if (rank == 0) {
    write_index(files, p->step, p->scaler, p->tmp_dir.string(), delayed ? &fp8 : nullptr);
    fsync_path(p->tmp_dir.string());
    if (fs::exists(p->final_dir)) fs::remove_all(p->final_dir);
    fs::rename(p->tmp_dir, p->final_dir);
    fsync_path(root.string());
    write_file_atomic((root / "latest").string(), step_name(p->step) + "\n");
    rotate(p->tmp_dir.string());
  }
  if (world_) world_->barrier()->wait();
  return p->final_dir.string();
}

std::string CheckpointSaver::previous_checkpoint() const {
  const fs::path latest = fs::path(rc_.checkpoint.dir) / "latest";
  std::string name = fs::exists(latest) ? checkpoint::read_text(latest.string()) : "";
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name.empty() ? "none" : name;
}

void CheckpointSaver::record_tokenizer(const checkpoint::IndexTokenizer& t, std::string bytes) {
  tokenizer_ = t, tokenizer_bytes_ = std::move(bytes);
}

// The index of every written file and, per parameter, the pieces each holds.
void CheckpointSaver::write_index(const std::vector<FileReport>& files, int64_t steps_done, const ScalerState& scaler,
                                  const std::string& tmp_dir, const checkpoint::Fp8State* fp8) const {
  const Recipe& rc = rc_;
  const auto& m = rc.model;
  const auto& par = rc.parallel;
  checkpoint::CheckpointIndex x;
  x.step = steps_done, x.consumed_samples = steps_done * rc.train.global_batch, x.seed = rc.seed;
  x.mesh = par, x.model = m, x.model_keys = recipe_values(rc, "model");
  x.optimizer_step = scaler.optimizer_steps, x.precision = rc.train.precision, x.optimizer = rc.optim.name;
  x.loss_scale = scaler.loss_scale, x.good_steps = scaler.good_steps, x.skipped_steps = scaler.skipped_steps;
  x.recipe_file = rc.source, x.recipe_text = rc.text, x.recipe_overrides = rc.overrides;
  x.tokenizer = tokenizer_;
  if (tokenizer_ && !tokenizer_->file.empty())
    write_file_atomic((fs::path(tmp_dir) / tokenizer_->file).string(), tokenizer_bytes_);
  if (fp8) {  // delayed FP8 scaling's state, beside the shards
    const std::string text = checkpoint::fp8_state_json(*fp8);
    write_file_atomic((fs::path(tmp_dir) / kFp8StateFile).string(), text);
    x.fp8 = checkpoint::IndexFp8{kFp8StateFile, fmt::format("{:08x}", crc32c(text.data(), text.size()))};
  }
  const model::ParamRegistry whole(m);  // valid rows per name
  const int experts = m.moe.enabled && par.expert > 1 ? int(par.expert) : 1;
  for (const FileReport& f : files) {
    if (f.status == 0) continue;
    const std::string name = file_name(f.dp, f.pp, f.tp);
    x.files.push_back({name, f.dp, f.pp, f.tp, f.shard_begin, f.shard_end,
                       int64_t(fs::file_size(fs::path(tmp_dir) / name)), fmt::format("{:08x}", f.crc), f.ep,
                       f.expert_begin, f.expert_end});
    const model::ParamRegistry reg(
        m, {f.tp, int(par.tensor)},
        model::pipeline_chunks(m, int(par.pipeline), int(par.virtual_stages), par.stage_layers, f.pp, par.schedule),
        {f.ep, experts, m.moe.enabled && par.whole_experts()});
    // the file's flat tensors: the dense shard, then the expert shard
    for (auto [begin, end, at] : {std::tuple{f.shard_begin, f.shard_end, int64_t(0)},
                                  {f.expert_begin, f.expert_end, f.shard_end - f.shard_begin}})
      for (const auto& q : reg.params()) {
        const int64_t lo = std::max(begin, q.offset), hi = std::min(end, q.offset + q.numel);
        if (hi <= lo || q.tied_copy) continue;
        auto& t = x.tensors[q.name];
        t.global_shape = q.global_shape, t.valid_rows = whole.at(q.name).valid_rows;
        t.pieces.push_back({name, at + lo - begin, lo - q.offset, hi - q.offset, q.shape, q.row_ranges, q.col_begin});
      }
  }
  write_file_atomic((fs::path(tmp_dir) / "index.json").string(), checkpoint::index_json(x));
}

// Keeps the newest checkpoint.keep complete checkpoints; drops abandoned temporaries.
void CheckpointSaver::rotate(const std::string& tmp_dir) const {
  std::vector<fs::path> done;
  for (const auto& e : fs::directory_iterator(rc_.checkpoint.dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && fs::exists(e.path() / "index.json")) done.push_back(e.path());
    if (n.rfind(".tmp_step_", 0) == 0 && e.path() != fs::path(tmp_dir)) fs::remove_all(e.path());
  }
  std::sort(done.begin(), done.end());
  for (size_t i = 0; i + size_t(rc_.checkpoint.keep) < done.size(); ++i) fs::remove_all(done[i]);
}

std::string save_checkpoint(const Recipe& rc, int64_t steps_done, const RankState& s, parallel::Communicator* world) {
  Recipe sync = rc;
  sync.checkpoint.async = false;  // writes from the shard: no copy
  CheckpointSaver saver(sync, world);
  saver.start(steps_done, s);
  return saver.finish();
}

}  // namespace trident::launch
