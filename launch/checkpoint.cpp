// Checkpoint save and same-mesh resume (see checkpoint.hpp).
#include "launch/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "core/crc32c.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/safetensors.hpp"
#include "model/parallel_plan.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

namespace {

constexpr int kVersion = 1;

std::string step_name(int64_t step) { return fmt::format("step_{:08d}", step); }

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

// Writes text to path atomically (temporary, fsync, rename).
void write_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      fs::remove(tmp);
      throw Error(fmt::format("{}: write failed", tmp));
    }
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
}

std::string file_name(int dp, int pp, int tp) { return fmt::format("dp{}_pp{}_tp{}.safetensors", dp, pp, tp); }

std::string mesh_json(const Recipe& rc) {
  const auto& p = rc.parallel;
  return fmt::format("{{\"data\":{},\"tensor\":{},\"pipeline\":{},\"virtual_stages\":{},\"zero\":{},\"stage_layers\":[{}]}}",
                     p.data, p.tensor, p.pipeline, p.virtual_stages, p.zero, fmt::join(p.stage_layers, ","));
}

std::string model_json(const ModelConfig& m) {
  return fmt::format("{{\"arch\":\"{}\",\"layers\":{},\"hidden\":{},\"heads\":{},\"kv_heads\":{},\"ffn_hidden\":{},"
                     "\"seq_len\":{},\"vocab\":{},\"vocab_multiple\":{},\"tie_embeddings\":{},\"norm_eps\":{},"
                     "\"rope_theta\":{}}}",
                     m.arch, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.seq_len, m.vocab,
                     m.vocab_multiple, m.tie_embeddings, m.norm_eps, m.rope_theta);
}

std::string quoted(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + json_quote(i);
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}


}  // namespace

struct CheckpointSaver::Pending {
  int64_t step = 0;
  ScalerState scaler;
  fs::path tmp_dir, final_dir;
  std::thread writer;
  std::atomic<bool> written{false};
  double info[8] = {};  // written?, dp, pp, tp, crc high, crc low, shard begin, shard end
  std::string failure;
};

CheckpointSaver::CheckpointSaver(const Recipe& rc, parallel::Communicator* world) : rc_(rc), world_(world) {}

CheckpointSaver::~CheckpointSaver() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

int64_t CheckpointSaver::buffer_bytes() const {
  return int64_t(sizeof(float) * (params_.capacity() + exp_avg_.capacity() + exp_avg_sq_.capacity()));
}

void CheckpointSaver::reserve(int64_t n) {
  for (auto* b : {&params_, &exp_avg_, &exp_avg_sq_}) b->resize(static_cast<size_t>(n));
}

std::string CheckpointSaver::start(int64_t steps_done, const RankState& s) {
  const std::string previous = pending_ ? finish() : "";
  const fs::path root(rc_.checkpoint.dir);
  auto p = std::make_unique<Pending>();
  p->step = steps_done;
  if (s.scaler) p->scaler = *s.scaler;
  else p->scaler.optimizer_steps = steps_done;
  p->final_dir = root / step_name(steps_done), p->tmp_dir = root / (".tmp_" + step_name(steps_done));
  const int rank = world_ ? world_->rank() : 0;
  if (rank == 0) {
    fs::create_directories(root);
    fs::remove_all(p->tmp_dir);
    fs::create_directories(p->tmp_dir);
  }
  if (world_) world_->barrier()->wait();
  const bool writer = rc_.parallel.zero >= 1 || s.dp == 0;  // ZeRO 0: data replicas hold the same state
  const int64_t n = s.shard_end - s.shard_begin;
  double* info = p->info;
  info[1] = s.dp, info[2] = s.pp, info[3] = s.tp, info[6] = double(s.shard_begin), info[7] = double(s.shard_end);
  if (!writer) {
    p->written = true;
    pending_ = std::move(p);
    return previous;
  }
  // background: from a host copy, since training changes the shard while the
  // file is written; synchronous: from the shard itself (from a host copy
  // too when the shard is in device memory)
  const float *src_p = s.params, *src_m = s.exp_avg, *src_v = s.exp_avg_sq;
  if (rc_.checkpoint.async || is_device_pointer(s.params)) {
    for (auto [dst, src] : {std::pair{&params_, s.params}, {&exp_avg_, s.exp_avg}, {&exp_avg_sq_, s.exp_avg_sq}}) {
      dst->resize(static_cast<size_t>(n));
      copy_bytes(dst->data(), src, size_t(n) * sizeof(float));  // waits for the device's queued work
    }
    src_p = params_.data(), src_m = exp_avg_.data(), src_v = exp_avg_sq_.data();
  }
  auto write = [n, src_p, src_m, src_v, pending = p.get(), path = (p->tmp_dir / file_name(s.dp, s.pp, s.tp)).string()] {
    try {
      const uint64_t h = write_safetensors(path,
                                           {{"params", DType::f32, {n}, src_p},
                                            {"exp_avg", DType::f32, {n}, src_m},
                                            {"exp_avg_sq", DType::f32, {n}, src_v}},
                                           {{"step", std::to_string(pending->step)}});
      pending->info[0] = 1, pending->info[4] = double(h >> 32), pending->info[5] = double(h & 0xffffffffu);
    } catch (const std::exception& e) {  // disk full, permissions: this save is lost, training is not
      pending->failure = e.what();
      pending->info[0] = -1;
    }
    pending->written = true;
  };
  if (rc_.checkpoint.async) p->writer = std::thread(write);
  else write();
  pending_ = std::move(p);
  return previous;
}

std::string CheckpointSaver::poll() {
  if (!pending_) return "";
  double busy = pending_->written ? 0 : 1;  // does any rank still write?
  if (world_ && world_->size() > 1) {
    Tensor t = Tensor::zeros({1}, DType::f64, MemCategory::other);
    t.data<double>()[0] = busy;
    world_->all_reduce(t, {.op = parallel::ReduceOp::max})->wait();
    busy = t.data<double>()[0];
  }
  return busy == 0 ? complete() : "";
}

std::string CheckpointSaver::finish() { return pending_ ? complete() : ""; }

// Every rank's file is written (or this waits for it): the index, the rename,
// `latest`, rotation.
std::string CheckpointSaver::complete() {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->writer.joinable()) p->writer.join();
  const ScalerState scaler = p->scaler;
  const fs::path root(rc_.checkpoint.dir);
  const int rank = world_ ? world_->rank() : 0, size = world_ ? world_->size() : 1;
  const int64_t steps_done = p->step;
  const fs::path &tmp_dir = p->tmp_dir, &final_dir = p->final_dir;
  // every rank's file, at rank 0 (also the barrier before the index)
  Tensor all = Tensor::zeros({8 * size}, DType::f64, MemCategory::other);
  std::copy(p->info, p->info + 8, all.data<double>() + 8 * rank);
  if (world_) world_->all_gather(all)->wait();
  bool failed = false;
  for (int r = 0; r < size; ++r) failed |= all.data<double>()[8 * r] < 0;
  if (failed) {
    if (!p->failure.empty()) log::error("checkpoint after step {}: {}", steps_done, p->failure);
    if (rank == 0) {
      fs::remove_all(tmp_dir);
      log::error("checkpoint after step {} failed (see the errors above); the previous checkpoint ({}) is kept and "
                 "training continues",
                 steps_done, fs::exists(root / "latest") ? read_text((root / "latest").string()) : "none\n");
    }
    if (world_) world_->barrier()->wait();
    return "";
  }
  if (rank == 0) {
    const Recipe& rc = rc_;
    const auto& m = rc.model;
    const auto& p = rc.parallel;
    std::string files, tensors_by_name;
    std::map<std::string, std::vector<std::string>> pieces;  // per global name
    std::map<std::string, std::string> shapes;
    for (int r = 0; r < size; ++r) {
      const double* e = all.data<double>() + 8 * r;
      if (e[0] == 0) continue;
      const int dp = int(e[1]), pp = int(e[2]), tp = int(e[3]);
      const int64_t sb = int64_t(e[6]), se = int64_t(e[7]);
      const std::string name = file_name(dp, pp, tp);
      const uint64_t h = (uint64_t(e[4]) << 32) | uint64_t(e[5]);
      files += fmt::format("{}{{\"file\":\"{}\",\"dp\":{},\"pp\":{},\"tp\":{},\"shard\":[{},{}],\"bytes\":{},"
                           "\"crc32c\":\"{:08x}\"}}",
                           files.empty() ? "" : ",", name, dp, pp, tp, sb, se, fs::file_size(tmp_dir / name), h);
      model::ParamRegistry reg(m, {tp, int(p.tensor)},
                               model::pipeline_chunks(m, int(p.pipeline), int(p.virtual_stages), p.stage_layers, pp));
      for (const auto& q : reg.params()) {
        const int64_t lo = std::max(sb, q.offset), hi = std::min(se, q.offset + q.numel);
        if (hi <= lo || q.tied_copy) continue;
        std::string rows;
        for (auto [a, b] : q.row_ranges) rows += fmt::format("{}[{},{}]", rows.empty() ? "" : ",", a, b);
        pieces[q.name].push_back(fmt::format(
            "{{\"file\":\"{}\",\"offset\":{},\"local\":[{},{}],\"local_shape\":[{}],\"rows\":[{}],\"col_begin\":{}}}",
            name, lo - sb, lo - q.offset, hi - q.offset, fmt::join(q.shape, ","), rows, q.col_begin));
        shapes[q.name] = fmt::format("[{}]", fmt::join(q.global_shape, ","));
      }
    }
    const model::ParamRegistry whole(m);  // valid rows per name
    for (const auto& [name, list] : pieces)
      tensors_by_name += fmt::format("{}\"{}\":{{\"dtype\":\"F32\",\"global_shape\":{},\"valid_rows\":{},\"pieces\":[{}]}}",
                                     tensors_by_name.empty() ? "" : ",", name, shapes[name],
                                     whole.at(name).valid_rows, fmt::join(list, ","));
    const std::string index = fmt::format(
        "{{\"format\":\"trident-checkpoint\",\"version\":{},\"step\":{},\"consumed_samples\":{},\"seed\":{},"
        "\"mesh\":{},\"model\":{},\"optimizer\":{{\"type\":\"adamw\",\"step\":{},\"states\":[\"exp_avg\",\"exp_avg_sq\"]}},"
        "\"precision\":{{\"train\":\"{}\",\"master_weights\":\"F32\",\"loss_scale\":{},\"good_steps\":{},"
        "\"skipped_steps\":{}}},"
        "\"recipe_file\":{},\"recipe_text\":{},\"recipe_overrides\":[{}],\"files\":[{}],\"tensors\":{{{}}}}}\n",
        kVersion, steps_done, steps_done * rc.train.global_batch, rc.seed, mesh_json(rc), model_json(m),
        scaler.optimizer_steps, rc.train.precision, scaler.loss_scale, scaler.good_steps, scaler.skipped_steps,
        json_quote(rc.source), json_quote(rc.text), quoted(rc.overrides),
        files, tensors_by_name);
    write_atomic((tmp_dir / "index.json").string(), index);
    fsync_path(tmp_dir.string());
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    fsync_path(root.string());
    write_atomic((root / "latest").string(), step_name(steps_done) + "\n");
    // keep the newest checkpoint.keep complete checkpoints; drop abandoned temporaries
    std::vector<fs::path> done;
    for (const auto& e : fs::directory_iterator(root)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) == 0 && fs::exists(e.path() / "index.json")) done.push_back(e.path());
      if (n.rfind(".tmp_step_", 0) == 0 && e.path() != tmp_dir) fs::remove_all(e.path());
    }
    std::sort(done.begin(), done.end());
    for (size_t i = 0; i + size_t(rc.checkpoint.keep) < done.size(); ++i) fs::remove_all(done[i]);
  }
  if (world_) world_->barrier()->wait();
  return final_dir.string();
}

std::string save_checkpoint(const Recipe& rc, int64_t steps_done, const RankState& s, parallel::Communicator* world) {
  Recipe sync = rc;
  sync.checkpoint.async = false;  // writes from the shard: no copy
  CheckpointSaver saver(sync, world);
  saver.start(steps_done, s);
  return saver.finish();
}

namespace {

// root/latest -> root/step_N ("" when there is no `latest`).
std::string follow_latest(const fs::path& root) {
  const fs::path latest = root / "latest";
  if (!fs::exists(latest)) return "";
  std::string name = read_text(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = root / name;
  if (!fs::exists(dir / "index.json"))
    fail_input("{}: points at '{}', which has no index.json", latest.string(), name);
  return dir.string();
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "index.json")) return path;
  if (fs::exists(fs::path(path) / "latest")) return follow_latest(path);
  if (!fs::exists(path)) fail_input("{}: no such checkpoint", path);
  fail_input("{}: not a checkpoint (neither a step directory with index.json nor a checkpoint directory with "
             "`latest`; an interrupted save leaves neither)",
             path);
}

std::string resolve_resume(const Recipe& rc, const std::string& arg) {
  if (arg != "auto") return resolve_checkpoint(arg);
  if (rc.checkpoint.dir.empty()) fail_input("--resume auto: the recipe sets no checkpoint.dir");
  return follow_latest(rc.checkpoint.dir);
}

std::vector<std::string> single_process_overrides() {
  return {"parallel.data=1",         "parallel.tensor=1",     "parallel.pipeline=1",
          "parallel.virtual_stages=1", "parallel.zero=0",     "parallel.schedule=1f1b",
          "parallel.sequence_parallel=false", "parallel.stage_layers=[]"};
}

WholeModel load_whole_model(const std::string& path) {
  WholeModel w;
  w.dir = resolve_checkpoint(path);
  const std::string index_path = (fs::path(w.dir) / "index.json").string();
  YAML::Node idx;
  try {
    idx = YAML::LoadFile(index_path);
  } catch (const YAML::Exception& e) {
    fail_input("{}: not valid JSON ({})", index_path, e.what());
  }
  if (!idx["recipe_text"]) fail_input("{}: no key 'recipe_text'", index_path);
  // the recipe the run was trained with, on one process
  std::vector<std::string> sets;
  if (idx["recipe_overrides"]) sets = idx["recipe_overrides"].as<std::vector<std::string>>();
  for (const auto& s : single_process_overrides()) sets.push_back(s);
  const std::string name = idx["recipe_file"] ? idx["recipe_file"].as<std::string>() + " (from " + index_path + ")"
                                               : index_path;
  w.recipe = load_recipe_text(idx["recipe_text"].as<std::string>(), name, sets, 1);
  const model::ParamRegistry reg(w.recipe.model);
  w.params.assign(static_cast<size_t>(reg.total()), 0.0f);
  const RankState s{&reg, 0, 0, 0, 0, reg.total(), w.params.data(), nullptr, nullptr};
  w.step = load_checkpoint(w.recipe, w.dir, s, nullptr);
  return w;
}

namespace {

// Where a saved parameter's elements are: one piece per file holding some.
struct Piece {
  std::string file;
  int64_t offset, local_begin, local_end, local_cols;
  std::vector<std::pair<int64_t, int64_t>> rows;  // global rows of the saved slice, in its local order
  int64_t col_begin;
};

// One read: `count` elements at element `src` of a file's flat tensors into
// element `dst` of this rank's shard.
struct Copy {
  std::string file;
  int64_t src, dst, count;
};

}  // namespace

struct ReshardPlan {
  std::vector<std::string> files;  // files read (checked first)
  std::vector<Copy> copies;
  std::vector<std::pair<int64_t, int64_t>> zeros;  // shard ranges with no saved values: vocabulary padding
};

// For every element of this rank's shard, the saved piece holding the same
// global element (Philox-free: slices are mapped by global row and column).
ReshardPlan plan_reshard(const YAML::Node& idx, const std::string& index_path, const RankState& s) {
  std::map<std::string, std::vector<Piece>> pieces;
  for (auto it = idx["tensors"].begin(); it != idx["tensors"].end(); ++it) {
    auto& list = pieces[it->first.as<std::string>()];
    for (const YAML::Node& q : it->second["pieces"]) {
      Piece pc;
      pc.file = q["file"].as<std::string>();
      pc.offset = q["offset"].as<int64_t>();
      pc.local_begin = q["local"][0].as<int64_t>(), pc.local_end = q["local"][1].as<int64_t>();
      const auto shape = q["local_shape"].as<std::vector<int64_t>>();
      pc.local_cols = shape.size() > 1 ? shape[1] : 1;
      for (const YAML::Node& r : q["rows"]) pc.rows.push_back({r[0].as<int64_t>(), r[1].as<int64_t>()});
      pc.col_begin = q["col_begin"].as<int64_t>();
      list.push_back(std::move(pc));
    }
  }
  ReshardPlan plan;
  std::set<std::string> files;
  for (const auto& p : s.registry->params()) {
    const int64_t lo = std::max(s.shard_begin, p.offset), hi = std::min(s.shard_end, p.offset + p.numel);
    if (hi <= lo) continue;
    auto found = pieces.find(p.name);
    if (found == pieces.end()) fail_input("{}: no tensor '{}' in the checkpoint", index_path, p.name);
    const int64_t lc = p.cols();
    int64_t filled = 0;
    for (int64_t e = lo - p.offset; e < hi - p.offset;) {  // one local row (part) at a time
      const int64_t c = e % lc, run = std::min(lc - c, hi - p.offset - e);
      const int64_t g = p.global_index(e);
      const int64_t grow = g / p.global_cols(), gcol = g % p.global_cols();
      const int64_t dst = p.offset + e - s.shard_begin;
      if (grow >= p.valid_rows) {  // vocabulary padding: nothing saved, nothing used
        plan.zeros.push_back({dst, dst + run});
        filled += run;
        e += run;
        continue;
      }
      std::vector<char> done(static_cast<size_t>(run), 0);
      for (const Piece& pc : found->second) {
        int64_t lr = 0;  // the saved slice's local row holding global row grow
        bool has = false;
        for (auto [a, b] : pc.rows) {
          if (grow >= a && grow < b) {
            lr += grow - a, has = true;
            break;
          }
          lr += b - a;
        }
        if (!has) continue;
        const int64_t x0 = std::max(gcol, pc.col_begin), x1 = std::min(gcol + run, pc.col_begin + pc.local_cols);
        if (x1 <= x0) continue;
        const int64_t le = lr * pc.local_cols + (x0 - pc.col_begin);  // saved local element of column x0
        const int64_t a = std::max(le, pc.local_begin), b = std::min(le + (x1 - x0), pc.local_end);
        if (b <= a) continue;
        // replicated parameters are saved by several ranks: take each element once
        const int64_t first = (x0 - gcol) + (a - le);  // position in this run
        for (int64_t i = first; i < first + (b - a);) {
          if (done[size_t(i)]) {
            ++i;
            continue;
          }
          int64_t j = i;
          while (j < first + (b - a) && !done[size_t(j)]) done[size_t(j++)] = 1;
          plan.copies.push_back({pc.file, pc.offset + (a - pc.local_begin) + (i - first), dst + i, j - i});
          files.insert(pc.file);
          filled += j - i;
          i = j;
        }
      }
      e += run;
    }
    if (filled != hi - lo)
      fail_input("{}: tensor '{}': the checkpoint holds {} of the {} elements this rank needs", index_path, p.name,
                 filled, hi - lo);
  }
  plan.files.assign(files.begin(), files.end());
  return plan;
}

void run_reshard(const ReshardPlan& plan, const std::string& dir, const RankState& s) {
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  for (const auto& name : plan.files) readers[name] = std::make_unique<SafetensorsReader>((fs::path(dir) / name).string());
  for (const Copy& c : plan.copies) {
    const auto& r = *readers.at(c.file);
    r.read_range("params", c.src, c.count, s.params + c.dst);
    if (s.exp_avg) r.read_range("exp_avg", c.src, c.count, s.exp_avg + c.dst);
    if (s.exp_avg_sq) r.read_range("exp_avg_sq", c.src, c.count, s.exp_avg_sq + c.dst);
  }
  for (auto [a, b] : plan.zeros)
    for (float* t : {s.params, s.exp_avg, s.exp_avg_sq})
      if (t) std::fill(t + a, t + b, 0.0f);
}

int64_t load_checkpoint(const Recipe& rc, const std::string& dir, const RankState& s, parallel::Communicator* world) {
  const std::string index_path = (fs::path(dir) / "index.json").string();
  std::string problem;
  int64_t step = 0;
  std::string file;
  bool same_mesh = true;
  ReshardPlan plan;
  try {
    YAML::Node idx;
    try {
      idx = YAML::LoadFile(index_path);
    } catch (const YAML::Exception& e) {
      fail_input("{}: not valid JSON ({})", index_path, e.what());
    }
    if (!idx["format"] || idx["format"].as<std::string>() != "trident-checkpoint")
      fail_input("{}: key 'format': expected 'trident-checkpoint'", index_path);
    const int version = idx["version"] ? idx["version"].as<int>() : -1;
    if (version != kVersion)
      fail_input("{}: key 'version': expected {}, found {} (written by another Trident version)", index_path, kVersion,
                 version);
    step = idx["step"].as<int64_t>();
    if (s.scaler) {  // older checkpoints: fp32, no skipped steps
      *s.scaler = ScalerState{};
      // a present but malformed field is an input error naming the key
      auto field = [&](const YAML::Node& n, const char* key, auto def) {
        using V = decltype(def);
        if (!n || !n[key]) return def;
        try {
          return n[key].template as<V>();
        } catch (const YAML::Exception&) {
          fail_input("{}: key '{}': expected a number, found '{}'", index_path, key, YAML::Dump(n[key]));
        }
      };
      s.scaler->optimizer_steps = field(idx["optimizer"], "step", step);
      if (const YAML::Node mp = idx["precision"]) {
        s.scaler->loss_scale = field(mp, "loss_scale", 1.0);
        s.scaler->good_steps = field(mp, "good_steps", int64_t(0));
        s.scaler->skipped_steps = field(mp, "skipped_steps", int64_t(0));
        if (!(s.scaler->loss_scale > 0) || s.scaler->skipped_steps > step || s.scaler->optimizer_steps > step)
          fail_input("{}: key 'precision': loss_scale {} must be > 0, and skipped_steps {} and optimizer.step {} at most "
                     "the step {}",
                     index_path, s.scaler->loss_scale, s.scaler->skipped_steps, s.scaler->optimizer_steps, step);
        if (mp["train"] && mp["train"].as<std::string>() != rc.train.precision)
          log::info("{}: saved under train.precision {}, resumed under {} (the master weights are fp32 either way)",
                    index_path, mp["train"].as<std::string>(), rc.train.precision);
      }
      if (rc.train.precision != "fp16") s.scaler->loss_scale = 1.0;
      else if (!idx["precision"] || !idx["precision"]["train"] || idx["precision"]["train"].as<std::string>() != "fp16")
        s.scaler->loss_scale = rc.train.loss_scale, s.scaler->good_steps = 0;
    }
    const auto& p = rc.parallel;
    const YAML::Node mesh = idx["mesh"];
    const std::string saved = fmt::format("data {} x tensor {} x pipeline {} (virtual stages {}), ZeRO {}",
                                          mesh["data"].as<int64_t>(), mesh["tensor"].as<int64_t>(),
                                          mesh["pipeline"].as<int64_t>(), mesh["virtual_stages"].as<int64_t>(),
                                          mesh["zero"].as<int64_t>());
    const std::string mine = fmt::format("data {} x tensor {} x pipeline {} (virtual stages {}), ZeRO {}", p.data,
                                         p.tensor, p.pipeline, p.virtual_stages, p.zero);
    same_mesh = saved == mine && mesh["stage_layers"].as<std::vector<int64_t>>() == p.stage_layers;
    if (!same_mesh) log::info("resharding {} saved under mesh {} onto this run's {}", dir, saved, mine);
    const YAML::Node model = idx["model"];
    const auto& m = rc.model;
    for (auto [key, want] : std::vector<std::pair<const char*, int64_t>>{
             {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
             {"ffn_hidden", m.ffn_hidden}, {"seq_len", m.seq_len}, {"vocab", m.vocab}, {"vocab_multiple", m.vocab_multiple}})
      if (model[key].as<int64_t>() != want)
        fail_input("{}: model.{}: the checkpoint has {}, the recipe {}", index_path, key, model[key].as<int64_t>(), want);
    if (model["arch"].as<std::string>() != m.arch)
      fail_input("{}: model.arch: the checkpoint has {}, the recipe {}", index_path, model["arch"].as<std::string>(),
                 m.arch);
    // every file this rank reads: exists, indexed size and checksum
    auto check_file = [&](const std::string& name) {
      YAML::Node entry;
      for (const YAML::Node& f : idx["files"])
        if (f["file"].as<std::string>() == name) entry = f;
      if (!entry) fail_input("{}: no file {} in the index", index_path, name);
      const std::string path = (fs::path(dir) / name).string();
      if (!fs::exists(path)) fail_input("{}: missing (listed in {})", path, index_path);
      const int64_t bytes = entry["bytes"].as<int64_t>();
      if (int64_t(fs::file_size(path)) != bytes)
        fail_input("{}: {} bytes, the index says {} (truncated or replaced)", path, fs::file_size(path), bytes);
      const std::string sum = fmt::format("{:08x}", crc32c_file(path));
      if (sum != entry["crc32c"].as<std::string>())
        fail_input("{}: checksum {} != {} in the index (the file is corrupted)", path, sum,
                   entry["crc32c"].as<std::string>());
      return entry;
    };
    if (same_mesh) {
      // this rank's file: its own, or data rank 0's with ZeRO 0
      const int dp = p.zero >= 1 ? s.dp : 0;
      const std::string want_name = file_name(dp, s.pp, s.tp);
      const YAML::Node entry = check_file(want_name);
      file = (fs::path(dir) / want_name).string();
      if (entry["shard"][0].as<int64_t>() != s.shard_begin || entry["shard"][1].as<int64_t>() != s.shard_end)
        fail_input("{}: holds elements [{}, {}), this rank's shard is [{}, {})", file, entry["shard"][0].as<int64_t>(),
                   entry["shard"][1].as<int64_t>(), s.shard_begin, s.shard_end);
      SafetensorsReader reader(file);
      for (const char* t : {"params", "exp_avg", "exp_avg_sq"}) {
        const auto& e = reader.at(t);
        if (e.dtype != DType::f32 || e.shape != Shape{s.shard_end - s.shard_begin})
          fail_input("{}: tensor '{}': expected F32 [{}], found {} [{}]", file, t, s.shard_end - s.shard_begin,
                     safetensors_dtype(e.dtype), fmt::join(e.shape, ","));
      }
    } else {
      plan = plan_reshard(idx, index_path, s);
      for (const auto& name : plan.files) check_file(name);
    }
  } catch (const InputError& e) {
    problem = e.what();
  }
  // every rank checks its file before any rank changes its state
  double failed = problem.empty() ? 0 : 1;
  if (world && world->size() > 1) {
    Tensor t = Tensor::zeros({1}, DType::f64, MemCategory::other);
    t.data<double>()[0] = failed;
    world->all_reduce(t, {.op = parallel::ReduceOp::max})->wait();
    failed = t.data<double>()[0];
  }
  if (!problem.empty()) fail_input("{}", problem);
  if (failed != 0) fail_input("{}: rejected by another rank (its error says why)", dir);
  // a shard in device memory is read into host buffers, then copied over
  const bool device = is_device_pointer(s.params);
  const int64_t n = s.shard_end - s.shard_begin;
  std::vector<float> host[3];
  RankState h = s;
  if (device) {
    float** fields[3] = {&h.params, &h.exp_avg, &h.exp_avg_sq};
    for (int i = 0; i < 3; ++i)
      if (*fields[i]) host[i].resize(static_cast<size_t>(n)), *fields[i] = host[i].data();
  }
  if (same_mesh) {
    SafetensorsReader reader(file);
    reader.read("params", h.params);
    if (h.exp_avg) reader.read("exp_avg", h.exp_avg);
    if (h.exp_avg_sq) reader.read("exp_avg_sq", h.exp_avg_sq);
  } else {
    run_reshard(plan, dir, h);
  }
  if (device) {
    float* dst[3] = {s.params, s.exp_avg, s.exp_avg_sq};
    for (int i = 0; i < 3; ++i)
      if (dst[i]) copy_bytes(dst[i], host[i].data(), size_t(n) * sizeof(float));
    device_synchronize();
  }
  return step;
}

}  // namespace trident::launch
