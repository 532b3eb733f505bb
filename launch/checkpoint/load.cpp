// Finding, verifying and loading checkpoints (see checkpoint.hpp): every
// file a rank reads is checked (index entry, size, checksum, tensor names and
// shapes) on every rank before any state changes.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <regex>

#include "core/crc32c.hpp"
#include "core/device_memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "launch/checkpoint/index.hpp"
#include "launch/checkpoint/reshard.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch {

namespace fs = std::filesystem;
using checkpoint::CheckpointIndex;

namespace {

// The optimizer's progress and the loss scaler, from the index, as this run
// (its precision) continues them.
void restore_scaler(const CheckpointIndex& x, const std::string& index_path, const Recipe& rc, ScalerState& s) {
  s = ScalerState{};
  s.optimizer_steps = x.optimizer_step, s.loss_scale = x.loss_scale;
  // the moments are one optimizer's: another's cannot continue them (a step-0 checkpoint, an import's, has none)
  if (x.optimizer != rc.optim.name && x.optimizer_step > 0)
    fail_input(
        "{}: key 'optimizer.type': the checkpoint's optimizer state is {}'s ({} steps), the recipe's optim.name is {}: "
        "resume with optim.name: {} (its moments do not carry over to another optimizer)",
        index_path, enum_name(x.optimizer), x.optimizer_step, enum_name(rc.optim.name), enum_name(x.optimizer));
  s.good_steps = x.good_steps, s.skipped_steps = x.skipped_steps;
  if (!(s.loss_scale > 0) || s.skipped_steps > x.step || s.optimizer_steps > x.step)
    fail_input(
        "{}: key 'precision': loss_scale {} must be > 0, and skipped_steps {} and optimizer.step {} at most "
        "the step {}",
        index_path, s.loss_scale, s.skipped_steps, s.optimizer_steps, x.step);
  if (x.precision && *x.precision != rc.train.precision)
    log::info("{}: saved under train.precision {}, resumed under {} (the master weights are fp32 either way)",
              index_path, *x.precision, rc.train.precision);
  if (rc.train.precision != Precision::fp16)
    s.loss_scale = 1.0;
  else if (x.precision != Precision::fp16)
    s.loss_scale = rc.train.loss_scale, s.good_steps = 0;
}

// The model keys a resumed run may change (said, not refused): training
// coefficients, not the architecture. The initialisation is over once
// weights are loaded; balancing coefficients, the bias's update rate and
// the multi-token loss weight are changed mid-run by design (DeepSeek-V3
// lowers its MTP weight and stops the bias late in training); the capacity
// factor decides only which tokens a step drops.
bool may_differ_on_resume(const std::string& key) {
  static const std::vector<std::string> keys = {
      "model.init_std",           "model.moe.balance.kind",      "model.moe.balance.coef",
      "model.moe.balance.z_loss", "model.moe.balance.bias_rate", "model.moe.capacity_factor",
      "model.mtp.loss_weight"};
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The model the checkpoint holds is the recipe's: every model key the index
// records (each key of the recipe that saved, with its value) equals this
// recipe's, bar the training coefficients above; older indexes record the
// sizes only.
void check_model(const CheckpointIndex& x, const std::string& index_path, const Recipe& rc) {
  const ModelConfig& saved = x.model;
  const ModelConfig& m = rc.model;
  std::vector<std::string> differs;
  auto saved_keys = x.model_keys;
  if (saved_keys.empty() && !x.recipe_text.empty()) try {  // an older index: the keys of the recipe it saved
      saved_keys =
          recipe_values(load_recipe_text_on_one_process(x.recipe_text, index_path, x.recipe_overrides), "model");
    } catch (const InputError&) {
      // a saved recipe this version no longer reads: the sizes below are checked
    }
  if (!saved_keys.empty()) {
    const auto mine = recipe_values(rc, "model");
    for (const auto& [key, have] : saved_keys) {
      const auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& kv) { return kv.first == key; });
      if (it == mine.end() || it->second == have) continue;  // a key this version does not know, or the same
      if (!may_differ_on_resume(key))
        fail_input("{}: {}: the checkpoint has {}, the recipe {} (set {}={} to continue this checkpoint)", index_path,
                   key, have, it->second, key, have);
      differs.push_back(fmt::format("{} {} -> {}", key, have, it->second));
    }
  }
  if (!differs.empty())
    log::info("{}: the model's training coefficients differ from the run that saved: {}", index_path,
              fmt::join(differs, "; "));
  if (saved.arch != m.arch)
    fail_input("{}: model.arch: the checkpoint has {}, the recipe {}", index_path, saved.arch, m.arch);
  for (auto [key, have, want] : std::vector<std::tuple<const char*, int64_t, int64_t>>{
           {"layers", saved.layers, m.layers},
           {"hidden", saved.hidden, m.hidden},
           {"heads", saved.heads, m.heads},
           {"kv_heads", saved.kv_heads, m.kv_heads},
           {"ffn_hidden", saved.ffn_hidden, m.ffn_hidden},
           {"seq_len", saved.seq_len, m.seq_len},
           {"vocab", saved.vocab, m.vocab},
           {"vocab_multiple", saved.vocab_multiple, m.vocab_multiple}})
    if (have != want) fail_input("{}: model.{}: the checkpoint has {}, the recipe {}", index_path, key, have, want);
}

// What a resumed run does differently from the run that saved: said, not
// refused (continuing with a longer schedule or another batch is legitimate).
void describe_changes(const CheckpointIndex& x, const std::string& index_path, const Recipe& rc) {
  std::vector<std::string> changes;
  if (x.seed != rc.seed) changes.push_back(fmt::format("seed {} -> {} (the data order changes)", x.seed, rc.seed));
  if (x.step > 0 && x.consumed_samples != x.step * rc.train.global_batch)
    changes.push_back(fmt::format("train.global_batch {} -> {}", x.consumed_samples / x.step, rc.train.global_batch));
  if (!x.recipe_text.empty()) try {
      const Recipe before = load_recipe_text_on_one_process(x.recipe_text, index_path, x.recipe_overrides);
      auto changed = [&](const char* key, auto a, auto b) {
        if (a != b) changes.push_back(fmt::format("{} {} -> {}", key, a, b));
      };
      changed("train.steps", before.train.steps, rc.train.steps);
      changed("optim.lr", before.optim.lr, rc.optim.lr);
      changed("optim.min_lr", before.optim.min_lr, rc.optim.min_lr);
      changed("optim.warmup", before.optim.warmup, rc.optim.warmup);
      changed("optim.decay", enum_name(before.optim.decay), enum_name(rc.optim.decay));
      changed("train.precision", enum_name(before.train.precision), enum_name(rc.train.precision));
      std::vector<std::string> a, b;
      for (const auto& d : before.data.train) a.push_back(fmt::format("{}:{}", d.path, d.weight));
      for (const auto& d : rc.data.train) b.push_back(fmt::format("{}:{}", d.path, d.weight));
      if (a != b) changes.push_back(fmt::format("data.train [{}] -> [{}]", fmt::join(a, ", "), fmt::join(b, ", ")));
    } catch (const InputError&) {
      // a saved recipe this version no longer reads: the keys above were checked
    }
  if (!changes.empty())
    log::info("resume: this run differs from the one that saved {}: {}", index_path, fmt::join(changes, "; "));
}

// A file this rank reads: listed, present, its indexed size and checksum.
const checkpoint::IndexFile& check_file(const CheckpointIndex& x, const std::string& index_path, const std::string& dir,
                                        const std::string& name) {
  const checkpoint::IndexFile* entry = x.find_file(name);
  if (!entry) fail_input("{}: no file {} in the index", index_path, name);
  const std::string path = (fs::path(dir) / name).string();
  if (!fs::exists(path)) fail_input("{}: missing (listed in {})", path, index_path);
  if (int64_t(fs::file_size(path)) != entry->bytes)
    fail_input("{}: {} bytes, the index says {} (truncated or replaced)", path, fs::file_size(path), entry->bytes);
  const std::string sum = fmt::format("{:08x}", crc32c_file(path));
  if (sum != entry->crc32c)
    fail_input("{}: checksum {} != {} in the index (the file is corrupted)", path, sum, entry->crc32c);
  return *entry;
}

// Why the step directory `dir` is not a complete checkpoint ("" when it is):
// its index reads and checks, and every file it lists has its size and checksum.
std::string incomplete(const fs::path& dir) {
  try {
    const std::string index_path = (dir / "index.json").string();
    const CheckpointIndex x = checkpoint::read_index(index_path);
    for (const auto& f : x.files) check_file(x, index_path, dir.string(), f.file);
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

// A checkpoint directory without `latest` (a save interrupted between the
// rename and the pointer, or a deleted pointer): its newest complete step
// directory, checked; "" when it has no step directories (a fresh start).
// Step directories none of which is complete are refused, never overwritten.
std::string newest_complete(const fs::path& root) {
  std::vector<fs::path> steps;
  if (fs::is_directory(root))
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory() && std::regex_match(e.path().filename().string(), std::regex("step_[0-9]+")))
        steps.push_back(e.path());
  std::sort(steps.rbegin(), steps.rend());
  std::string reasons;
  for (const fs::path& dir : steps) {
    const std::string why = incomplete(dir);
    if (why.empty()) {
      log::info("{}: no `latest`; using {}, the newest complete checkpoint (its files checked)", root.string(),
                dir.filename().string());
      return dir.string();
    }
    log::info("{}: skipped, not a complete checkpoint: {}", dir.string(), why);
    reasons += "\n  " + why;
  }
  if (!steps.empty())
    fail_input(
        "{}: no `latest`, and none of its {} step directories is a complete checkpoint (refusing to start over "
        "them; move them away to start afresh):{}",
        root.string(), steps.size(), reasons);
  return "";
}

// root/latest -> root/step_N; without `latest`, the newest complete step.
std::string follow_latest(const fs::path& root) {
  const fs::path latest = root / "latest";
  if (!fs::exists(latest)) return newest_complete(root);
  std::string name = checkpoint::read_text(latest.string());
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (!std::regex_match(name, std::regex("step_[0-9]+")))
    fail_input("{}: expected the name of a step directory inside {} (like step_00000042), found '{}'", latest.string(),
               root.string(), name);
  const fs::path dir = root / name;
  if (!fs::exists(dir / "index.json")) fail_input("{}: points at '{}', which has no index.json", latest.string(), name);
  return dir.string();
}

// Same mesh: this rank's own file (data rank 0's with ZeRO 0; HSDP: the
// first replica's rank at its place in the shard group), whole.
std::string check_own_file(const CheckpointIndex& x, const std::string& index_path, const std::string& dir,
                           const Recipe& rc, const RankState& s) {
  const int dp = rc.parallel.zero >= 1 ? s.dp % int(rc.parallel.data_shard_size()) : 0;
  const auto& entry = check_file(x, index_path, dir, checkpoint::file_name(dp, s.pp, s.tp));
  const std::string file = (fs::path(dir) / entry.file).string();
  if (entry.shard_begin != s.shard_begin || entry.shard_end != s.shard_end)
    fail_input(
        "{}: holds elements [{}, {}), this rank's shard is [{}, {}): the checkpoint's model is not the recipe's in "
        "a way its index does not record (an index without model_keys or recipe_text: compare the recipe that "
        "saved it with this one)",
        file, entry.shard_begin, entry.shard_end, s.shard_begin, s.shard_end);
  const SafetensorsReader reader(file);
  for (const char* t : {"params", "exp_avg", "exp_avg_sq"}) {
    const auto& e = reader.at(t);
    if (e.dtype != DType::f32 || e.shape != Shape{s.shard_end - s.shard_begin})
      fail_input("{}: tensor '{}': expected F32 [{}], found {} [{}]", file, t, s.shard_end - s.shard_begin,
                 safetensors_dtype(e.dtype), fmt::join(e.shape, ","));
  }
  return file;
}

std::string describe_mesh(const ParallelConfig& p) {
  return fmt::format("data {}{} x tensor {} x pipeline {} (virtual stages {}), ZeRO {}{}{}", p.data,
                     p.context > 1 ? fmt::format(" x context {}", p.context) : "", p.tensor, p.pipeline,
                     p.virtual_stages, p.zero, p.hsdp() ? fmt::format(" in shards of {}", p.data_shard_size()) : "",
                     p.expert > 1 || p.whole_experts()
                         ? fmt::format(", expert {}{}", p.expert, p.whole_experts() ? " (expert_tensor 1)" : "")
                         : "");
}

// The expert part of a rank's state, as a state of its own.
RankState expert_part(const RankState& s) {
  const RankState::ExpertPart& e = s.experts;
  return {s.registry,       e.dp,     s.pp,      s.tp,         e.shard_begin,
          e.shard_end,      e.params, e.exp_avg, e.exp_avg_sq, e.exp_avg_sq_packed,
          e.exp_avg_sq_runs};
}

// What a rank reads: its own file (same mesh) or a resharding plan (and one
// for its expert shard, when experts are split over ranks).
struct LoadPlan {
  int64_t step = 0;
  std::string own_file;  // same mesh
  checkpoint::ReshardPlan reshard, experts;
  std::optional<checkpoint::Fp8State> fp8;  // delayed FP8 scaling's state, checked
};

LoadPlan verify(const Recipe& rc, const std::string& dir, const RankState& s) {
  const std::string index_path = (fs::path(dir) / "index.json").string();
  const CheckpointIndex x = checkpoint::read_index(index_path);
  LoadPlan plan;
  plan.step = x.step;
  if (s.scaler) restore_scaler(x, index_path, rc, *s.scaler);
  if (s.fp8 && x.fp8) {  // delayed FP8 scaling's state: checked here, taken by read_state
    const std::string file = (fs::path(dir) / x.fp8->file).string();
    if (!fs::exists(file)) fail_input("{}: missing (the FP8 state {} records)", file, index_path);
    if (const std::string sum = fmt::format("{:08x}", crc32c_file(file)); sum != x.fp8->crc32c)
      fail_input("{}: checksum {} != {} in {} (the FP8 state was changed)", file, sum, x.fp8->crc32c, index_path);
    plan.fp8 = checkpoint::read_fp8_state(file);
  } else if (s.fp8) {
    log::info("{} holds no delayed FP8 scaling state: the scales start at 1", dir);
  }
  const std::string saved = describe_mesh(x.mesh), mine = describe_mesh(rc.parallel);
  // experts split over ranks: a file holds two shards, always read by the pieces
  const bool split = x.mesh.expert > 1 || x.mesh.whole_experts() || s.experts.params;
  const bool same_mesh = saved == mine && x.mesh.stage_layers == rc.parallel.stage_layers && !split;
  if (!same_mesh && saved != mine) log::info("resharding {} saved under mesh {} onto this run's {}", dir, saved, mine);
  check_model(x, index_path, rc);
  describe_changes(x, index_path, rc);
  if (same_mesh) {
    plan.own_file = check_own_file(x, index_path, dir, rc, s);
  } else {
    plan.reshard = checkpoint::plan_reshard(x, index_path, s);
    for (const auto& name : plan.reshard.files) check_file(x, index_path, dir, name);
    if (s.experts.params) {
      plan.experts = checkpoint::plan_reshard(x, index_path, expert_part(s));
      for (const auto& name : plan.experts.files) check_file(x, index_path, dir, name);
    }
  }
  return plan;
}

// A loaded shard holds finite numbers only: the first that is not is
// refused naming its parameter (this rank's slice of it) and element.
void check_finite(const RankState& s, const RankState& h, const std::string& dir) {
  const int64_t n = s.shard_end - s.shard_begin;
  const std::pair<const char*, const float*> states[3] = {
      {"params", h.params}, {"exp_avg", h.exp_avg}, {"exp_avg_sq", h.exp_avg_sq}};
  for (const auto& [state, x] : states) {
    if (!x) continue;
    const float* bad = std::find_if(x, x + n, [](float v) { return !std::isfinite(v); });
    if (bad == x + n) continue;
    const int64_t at = s.shard_begin + (bad - x);
    for (const auto& p : s.registry->params())
      if (at >= p.offset && at < p.offset + p.numel)
        fail_input(
            "{}: {} of tensor '{}': element {} (of this rank's {}) is {}: a checkpoint with non-finite "
            "values is not loaded",
            dir, state, p.name, at - p.offset, p.numel, *bad);
    fail_input("{}: {}: element {} of the flat buffer is {}: a checkpoint with non-finite values is not loaded", dir,
               state, at, *bad);
  }
}

// Reads one shard (by `read` into host memory), refuses non-finite values,
// then copies it where the state lives (a shard in device memory is read
// into host buffers first).
void read_shard(const RankState& s, const std::string& dir, const std::function<void(const RankState&)>& read) {
  const bool device = is_device_pointer(s.params);
  const int64_t n = s.shard_end - s.shard_begin;
  std::vector<float> host[3];
  RankState h = s;
  float** fields[3] = {&h.params, &h.exp_avg, &h.exp_avg_sq};
  // a packed exp_avg_sq (Muon) is read in the shard's layout, then packed
  const bool staged[3] = {device, device, device || s.exp_avg_sq_packed};
  for (int i = 0; i < 3; ++i)
    if (*fields[i] && staged[i]) host[i].resize(static_cast<size_t>(n)), *fields[i] = host[i].data();
  read(h);
  check_finite(s, h, dir);
  float* dst[3] = {s.params, s.exp_avg, s.exp_avg_sq};
  for (int i = 0; i < 3; ++i) {
    if (!dst[i] || !staged[i]) continue;
    if (i == 2 && s.exp_avg_sq_packed)
      pack_runs(dst[i], host[i].data(), s.exp_avg_sq_runs);
    else
      copy_bytes(dst[i], host[i].data(), size_t(n) * sizeof(float));
  }
  if (device) device_synchronize();
}

void read_state(const LoadPlan& plan, const std::string& dir, const RankState& s) {
  read_shard(s, dir, [&](const RankState& h) {
    if (plan.own_file.empty()) return checkpoint::run_reshard(plan.reshard, dir, h);
    const SafetensorsReader reader(plan.own_file);
    reader.read("params", h.params);
    if (h.exp_avg) reader.read("exp_avg", h.exp_avg);
    if (h.exp_avg_sq) reader.read("exp_avg_sq", h.exp_avg_sq);
  });
  if (s.experts.params)
    read_shard(expert_part(s), dir, [&](const RankState& h) { checkpoint::run_reshard(plan.experts, dir, h); });
  if (plan.fp8 && s.fp8) s.fp8->load_state(*plan.fp8);
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "index.json")) return path;
  if (!fs::exists(path)) fail_input("{}: no such checkpoint", path);
  if (const std::string dir = follow_latest(path); !dir.empty()) return dir;
  fail_input(
      "{}: not a checkpoint (neither a step directory with index.json nor a checkpoint directory with "
      "`latest`; an interrupted save leaves neither)",
      path);
}

std::string existing_checkpoints(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int steps = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) steps += e.path().filename().string().rfind("step_", 0) == 0;
  const fs::path latest = fs::path(dir) / "latest";
  if (fs::exists(latest)) {
    std::string name = checkpoint::read_text(latest.string());
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    return fmt::format("`latest` -> {}", name);
  }
  return steps ? fmt::format("{} step director{}", steps, steps == 1 ? "y" : "ies") : "";
}

std::string resolve_resume(const Recipe& rc, const std::string& arg) {
  if (arg != "auto") return resolve_checkpoint(arg);
  if (rc.checkpoint.dir.empty()) fail_input("--resume auto: the recipe sets no checkpoint.dir");
  return follow_latest(rc.checkpoint.dir);
}

WholeModel load_whole_model(const std::string& path) {
  WholeModel w;
  w.dir = resolve_checkpoint(path);
  const std::string index_path = (fs::path(w.dir) / "index.json").string();
  const CheckpointIndex x = checkpoint::read_index(index_path);
  if (x.recipe_text.empty()) fail_input("{}: no key 'recipe_text'", index_path);
  // the recipe the run was trained with, on one process
  const std::string name = x.recipe_file.empty() ? index_path : x.recipe_file + " (from " + index_path + ")";
  w.recipe = load_recipe_text_on_one_process(x.recipe_text, name, x.recipe_overrides);
  const model::ParamRegistry reg(w.recipe.model);
  w.params.assign(static_cast<size_t>(reg.total()), 0.0f);
  const RankState s{&reg, 0, 0, 0, 0, reg.total(), w.params.data(), nullptr, nullptr, false, {}};
  w.step = load_checkpoint(w.recipe, w.dir, s, nullptr);
  w.tokenizer = x.tokenizer;
  if (w.tokenizer && !w.tokenizer->file.empty()) {
    const std::string copy = (fs::path(w.dir) / w.tokenizer->file).string();
    if (!fs::exists(copy)) fail_input("{}: missing (the tokenizer {} records)", copy, index_path);
    const std::string sum = fmt::format("{:08x}", crc32c_file(copy));
    if (sum != w.tokenizer->crc32c)
      fail_input("{}: checksum {} != {} in {} (the tokenizer copy was changed)", copy, sum, w.tokenizer->crc32c,
                 index_path);
  }
  return w;
}

int64_t load_checkpoint(const Recipe& rc, const std::string& dir, const RankState& s, parallel::Communicator* world) {
  // every rank checks its files before any rank changes its state
  LoadPlan plan;
  parallel::agree_or_fail(
      world, [&] { plan = verify(rc, dir, s); }, fmt::format("{}: rejected by another rank (its error says why)", dir));
  parallel::agree_or_fail(  // what is read is checked too (non-finite values)
      world, [&] { read_state(plan, dir, s); }, fmt::format("{}: rejected by another rank (its error says why)", dir));
  return plan.step;
}

}  // namespace trident::launch
