// index.json, written and read with nlohmann-json (see index.hpp).
#include "launch/checkpoint/index.hpp"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace trident::launch::checkpoint {

using Json = nlohmann::ordered_json;

namespace {
// The last key of an index: the CRC-32C of the bytes before this text.
constexpr std::string_view kChecksumKey = ",\"index_crc32c\":\"";
}  // namespace

std::string step_name(int64_t step) { return fmt::format("step_{:08d}", step); }
std::string file_name(int dp, int pp, int tp) { return fmt::format("dp{}_pp{}_tp{}.safetensors", dp, pp, tp); }

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

const IndexFile* CheckpointIndex::find_file(const std::string& name) const {
  for (const auto& f : files)
    if (f.file == name) return &f;
  return nullptr;
}

std::string index_json(const CheckpointIndex& x) {
  const auto& m = x.model;
  Json files = Json::array(), tensors = Json::object(), model_keys = Json::object();
  for (const auto& [key, value] : x.model_keys) model_keys[key] = value;
  for (const auto& f : x.files) {
    files.push_back({{"file", f.file},
                     {"dp", f.dp},
                     {"pp", f.pp},
                     {"tp", f.tp},
                     {"shard", {f.shard_begin, f.shard_end}},
                     {"bytes", f.bytes},
                     {"crc32c", f.crc32c}});
    if (x.mesh.expert > 1) files.back()["ep"] = f.ep, files.back()["expert_shard"] = {f.expert_begin, f.expert_end};
  }
  for (const auto& [name, t] : x.tensors) {
    Json pieces = Json::array();
    for (const auto& p : t.pieces)
      pieces.push_back({{"file", p.file},
                        {"offset", p.offset},
                        {"local", {p.local_begin, p.local_end}},
                        {"local_shape", p.local_shape},
                        {"rows", p.rows},
                        {"col_begin", p.col_begin}});
    tensors[name] = {
        {"dtype", "F32"}, {"global_shape", t.global_shape}, {"valid_rows", t.valid_rows}, {"pieces", pieces}};
  }
  Json j = {{"format", "trident-checkpoint"},
            {"version", x.version},
            {"step", x.step},
            {"consumed_samples", x.consumed_samples},
            {"seed", x.seed},
            {"mesh",
             {{"data", x.mesh.data},
              {"context", x.mesh.context},
              {"tensor", x.mesh.tensor},
              {"pipeline", x.mesh.pipeline},
              {"virtual_stages", x.mesh.virtual_stages},
              {"zero", x.mesh.zero},
              {"stage_layers", x.mesh.stage_layers},
              {"expert", x.mesh.expert},
              {"expert_tensor", x.mesh.expert_tensor},
              {"data_shard", x.mesh.data_shard_size()}}},
            {"model",
             {{"arch", enum_name(m.arch)},
              {"layers", m.layers},
              {"hidden", m.hidden},
              {"heads", m.heads},
              {"kv_heads", m.kv_heads},
              {"ffn_hidden", m.ffn_hidden},
              {"seq_len", m.seq_len},
              {"vocab", m.vocab},
              {"vocab_multiple", m.vocab_multiple},
              {"tie_embeddings", m.tie_embeddings},
              {"norm_eps", m.norm_eps},
              {"rope_theta", m.rope_theta}}},
            {"model_keys", model_keys},
            {"optimizer",
             {{"type", enum_name(x.optimizer)}, {"step", x.optimizer_step}, {"states", {"exp_avg", "exp_avg_sq"}}}},
            {"precision",
             {{"train", enum_name(x.precision.value_or(Precision::fp32))},
              {"master_weights", "F32"},
              {"loss_scale", x.loss_scale},
              {"good_steps", x.good_steps},
              {"skipped_steps", x.skipped_steps}}},
            {"recipe_file", x.recipe_file},
            {"recipe_text", x.recipe_text},
            {"recipe_overrides", x.recipe_overrides},
            {"files", files},
            {"tensors", tensors}};
  if (x.tokenizer) {
    const auto& t = *x.tokenizer;
    j["tokenizer"] = {
        {"kind", enum_name(t.kind)}, {"file", t.file}, {"crc32c", t.crc32c}, {"vocab", t.vocab}, {"eod", t.eod}};
  }
  if (x.fp8) j["fp8_state"] = {{"file", x.fp8->file}, {"crc32c", x.fp8->crc32c}};
  // the checksum of every byte before it, as the last key
  std::string body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  body.pop_back();  // the closing brace
  return fmt::format("{}{}{:08x}\"}}\n", body, kChecksumKey, crc32c(body.data(), body.size()));
}

namespace {

// "key 'crc32c' in 'files[2]'" (where: "files[2]." or "" at the top).
std::string key_name(const std::string& where, const std::string& key) {
  return where.empty() ? fmt::format("key '{}'", key)
                       : fmt::format("key '{}' in '{}'", key, where.substr(0, where.size() - 1));
}

// Typed access that names the file and the key path on failure.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  const Json& at(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) fail_input("{}: {}: missing", file_, key_name(where, key));
    return j[key];
  }
  template <typename T>
  T get(const Json& j, const std::string& key, const std::string& where, const char* expected) const {
    const Json& v = at(j, key, where);
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if (!v.is_number_integer()) throw std::runtime_error("");
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number()) throw std::runtime_error("");
      }
      return v.get<T>();
    } catch (const std::exception&) {
      fail_input("{}: {}: expected {}, found {}", file_, key_name(where, key), expected, v.dump());
    }
  }
  template <typename T>
  T get_or(const Json& j, const std::string& key, const std::string& where, const char* expected, T def) const {
    return j.is_object() && j.contains(key) ? get<T>(j, key, where, expected) : def;
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

void read_model(const Reader& r, const Json& j, CheckpointIndex& x) {
  const Json& m = r.at(j, "model", "");
  const std::string arch = r.get<std::string>(m, "arch", "model.", "a string");
  const auto parsed = parse_enum<Arch>(arch);
  if (!parsed) fail_input("{}: key 'model.arch': expected {}, found '{}'", r.file(), enum_choices<Arch>(), arch);
  x.model.arch = *parsed;
  for (auto [key, field] : std::vector<std::pair<const char*, int64_t*>>{{"layers", &x.model.layers},
                                                                         {"hidden", &x.model.hidden},
                                                                         {"heads", &x.model.heads},
                                                                         {"kv_heads", &x.model.kv_heads},
                                                                         {"ffn_hidden", &x.model.ffn_hidden},
                                                                         {"seq_len", &x.model.seq_len},
                                                                         {"vocab", &x.model.vocab},
                                                                         {"vocab_multiple", &x.model.vocab_multiple}})
    *field = r.get<int64_t>(m, key, "model.", "an integer");
  if (!j.contains("model_keys")) return;  // older indexes: the sizes above only
  const Json& keys = j["model_keys"];
  if (!keys.is_object()) fail_input("{}: key 'model_keys': expected an object of key: value text", r.file());
  for (const auto& [key, value] : keys.items())
    x.model_keys.emplace_back(key, r.get<std::string>(keys, key, "model_keys.", "a string"));
}

void read_mesh(const Reader& r, const Json& j, CheckpointIndex& x) {
  const Json& m = r.at(j, "mesh", "");
  for (auto [key, field] : std::vector<std::pair<const char*, int64_t*>>{{"data", &x.mesh.data},
                                                                         {"tensor", &x.mesh.tensor},
                                                                         {"pipeline", &x.mesh.pipeline},
                                                                         {"virtual_stages", &x.mesh.virtual_stages},
                                                                         {"zero", &x.mesh.zero}})
    *field = r.get<int64_t>(m, key, "mesh.", "an integer");
  x.mesh.context = r.get_or<int64_t>(m, "context", "mesh.", "an integer", 1);  // older checkpoints: none
  x.mesh.expert = r.get_or<int64_t>(m, "expert", "mesh.", "an integer", 1);    // likewise
  x.mesh.expert_tensor = r.get_or<int64_t>(m, "expert_tensor", "mesh.", "an integer", 0);
  x.mesh.data_shard = r.get_or<int64_t>(m, "data_shard", "mesh.", "an integer", 0);  // older: plain ZeRO
  x.mesh.stage_layers = r.get<std::vector<int64_t>>(m, "stage_layers", "mesh.", "a list of integers");
}

void read_precision(const Reader& r, const Json& j, CheckpointIndex& x) {
  x.optimizer_step =
      r.get_or<int64_t>(j.value("optimizer", Json::object()), "step", "optimizer.", "an integer", x.step);
  const std::string type =
      r.get_or<std::string>(j.value("optimizer", Json::object()), "type", "optimizer.", "a string", "adamw");
  const std::optional<OptimizerKind> kind = parse_enum<OptimizerKind>(type);
  if (!kind)
    fail_input("{}: key 'optimizer.type': expected {}, found '{}'", r.file(), enum_choices<OptimizerKind>(), type);
  x.optimizer = *kind;
  if (!j.contains("precision")) return;  // older checkpoints: fp32, no skipped steps
  const Json& p = j["precision"];
  if (p.contains("train")) {
    const std::string train = r.get<std::string>(p, "train", "precision.", "a string");
    x.precision = parse_enum<Precision>(train);
    if (!x.precision)
      fail_input("{}: key 'precision.train': expected {}, found '{}'", r.file(), enum_choices<Precision>(), train);
  }
  x.loss_scale = r.get_or<double>(p, "loss_scale", "precision.", "a number", 1.0);
  x.good_steps = r.get_or<int64_t>(p, "good_steps", "precision.", "an integer", 0);
  x.skipped_steps = r.get_or<int64_t>(p, "skipped_steps", "precision.", "an integer", 0);
}

void read_files(const Reader& r, const Json& j, CheckpointIndex& x) {
  const Json& files = r.at(j, "files", "");
  if (!files.is_array()) fail_input("{}: key 'files': expected a list", r.file());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string where = fmt::format("files[{}].", i);
    const Json& f = files[i];
    IndexFile e;
    e.file = r.get<std::string>(f, "file", where, "a file name");
    e.dp = r.get<int>(f, "dp", where, "an integer"), e.pp = r.get<int>(f, "pp", where, "an integer");
    e.tp = r.get<int>(f, "tp", where, "an integer");
    const auto shard = r.get<std::vector<int64_t>>(f, "shard", where, "[begin, end]");
    if (shard.size() != 2) fail_input("{}: {}: expected [begin, end]", r.file(), key_name(where, "shard"));
    e.shard_begin = shard[0], e.shard_end = shard[1];
    if (x.mesh.expert > 1) {  // the expert shard after the dense one
      e.ep = r.get<int>(f, "ep", where, "an integer");
      const auto experts = r.get<std::vector<int64_t>>(f, "expert_shard", where, "[begin, end]");
      if (experts.size() != 2 || experts[1] < experts[0])
        fail_input("{}: {}: expected [begin, end]", r.file(), key_name(where, "expert_shard"));
      e.expert_begin = experts[0], e.expert_end = experts[1];
    }
    e.bytes = r.get<int64_t>(f, "bytes", where, "an integer");
    e.crc32c = r.get<std::string>(f, "crc32c", where, "8 hex digits");
    x.files.push_back(std::move(e));
  }
}

void read_tensors(const Reader& r, const Json& j, CheckpointIndex& x) {
  const Json& tensors = r.at(j, "tensors", "");
  if (!tensors.is_object()) fail_input("{}: key 'tensors': expected an object", r.file());
  for (const auto& [name, t] : tensors.items()) {
    const std::string where = "tensors." + name + ".";
    IndexTensor e;
    e.global_shape = r.get<Shape>(t, "global_shape", where, "a shape");
    e.valid_rows = r.get<int64_t>(t, "valid_rows", where, "an integer");
    const Json& pieces = r.at(t, "pieces", where);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string pw = fmt::format("{}pieces[{}].", where, i);
      const Json& q = pieces[i];
      IndexPiece p;
      p.file = r.get<std::string>(q, "file", pw, "a file name");
      p.offset = r.get<int64_t>(q, "offset", pw, "an integer");
      const auto local = r.get<std::vector<int64_t>>(q, "local", pw, "[begin, end]");
      if (local.size() != 2) fail_input("{}: {}: expected [begin, end]", r.file(), key_name(pw, "local"));
      p.local_begin = local[0], p.local_end = local[1];
      p.local_shape = r.get<Shape>(q, "local_shape", pw, "a shape");
      p.rows = r.get<std::vector<std::pair<int64_t, int64_t>>>(q, "rows", pw, "a list of [begin, end]");
      p.col_begin = r.get<int64_t>(q, "col_begin", pw, "an integer");
      e.pieces.push_back(std::move(p));
    }
    x.tensors[name] = std::move(e);
  }
}

}  // namespace

CheckpointIndex read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // indexes written before the checksum have none; any other edit is refused
  const size_t at = text.rfind(kChecksumKey);
  if (at != std::string::npos) {
    const std::string saved = text.substr(at + kChecksumKey.size(), 8);
    const std::string sum = fmt::format("{:08x}", crc32c(text.data(), at));
    if (saved != sum)
      fail_input(
          "{}: key 'index_crc32c': the index's checksum is {}, its bytes give {} (the index was changed or "
          "damaged after it was written)",
          path, saved, sum);
  }
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    fail_input("{}: not valid JSON ({})", path, e.what());
  }
  const Reader r(path);
  if (!j.is_object() || j.value("format", "") != "trident-checkpoint")
    fail_input("{}: key 'format': expected 'trident-checkpoint'", path);
  CheckpointIndex x;
  x.version = j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int>() : -1;
  if (x.version != kVersion)
    fail_input("{}: key 'version': expected {}, found {} (written by another Trident version)", path, kVersion,
               x.version);
  x.step = r.get<int64_t>(j, "step", "", "an integer");
  x.consumed_samples = r.get_or<int64_t>(j, "consumed_samples", "", "an integer", 0);
  x.seed = r.get_or<int64_t>(j, "seed", "", "an integer", 0);
  read_mesh(r, j, x);
  read_model(r, j, x);
  read_precision(r, j, x);
  x.recipe_file = r.get_or<std::string>(j, "recipe_file", "", "a string", "");
  x.recipe_text = r.get_or<std::string>(j, "recipe_text", "", "a string", "");
  x.recipe_overrides = r.get_or<std::vector<std::string>>(j, "recipe_overrides", "", "a list of strings", {});
  read_files(r, j, x);
  read_tensors(r, j, x);
  if (j.contains("tokenizer")) {
    const Json& t = j["tokenizer"];
    IndexTokenizer tok;
    const std::string kind = r.get<std::string>(t, "kind", "tokenizer.", "a string");
    const auto parsed = parse_enum<TokenizerKind>(kind);
    if (!parsed)
      fail_input("{}: key 'tokenizer.kind': expected {}, found '{}'", path, enum_choices<TokenizerKind>(), kind);
    tok.kind = *parsed;
    tok.file = r.get<std::string>(t, "file", "tokenizer.", "a file name");
    if (tok.file.find('/') != std::string::npos || tok.file == "..")
      fail_input("{}: key 'tokenizer.file': expected a file name in the step directory, found '{}'", path, tok.file);
    tok.crc32c = r.get<std::string>(t, "crc32c", "tokenizer.", "8 hex digits");
    tok.vocab = r.get<int64_t>(t, "vocab", "tokenizer.", "an integer");
    tok.eod = r.get<int64_t>(t, "eod", "tokenizer.", "an integer");
    x.tokenizer = tok;
  }
  if (j.contains("fp8_state")) {
    const Json& f = j["fp8_state"];
    IndexFp8 fp8;
    fp8.file = r.get<std::string>(f, "file", "fp8_state.", "a file name");
    if (fp8.file.empty() || fp8.file.find('/') != std::string::npos || fp8.file == "..")
      fail_input("{}: key 'fp8_state.file': expected a file name in the step directory, found '{}'", path, fp8.file);
    fp8.crc32c = r.get<std::string>(f, "crc32c", "fp8_state.", "8 hex digits");
    x.fp8 = fp8;
  }
  return x;
}

}  // namespace trident::launch::checkpoint
