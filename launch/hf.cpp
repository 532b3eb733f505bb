// Hugging Face export and import (see hf.hpp).
#include "launch/hf.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint.hpp"
#include "model/params.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

namespace {

// GPT-2's attention and MLP weights are Conv1D modules in transformers:
// stored [in, out], the transpose of Trident's (and torch.nn.Linear's) [out, in].
bool conv1d(const ModelConfig& m, const std::string& name) {
  if (m.arch != "gpt2") return false;
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (name.size() > std::string(s).size() && name.compare(name.size() - std::string(s).size(), std::string::npos, s) == 0)
      return true;
  return false;
}

// The parameter as transformers stores it: valid rows only, Conv1D transposed.
Shape hf_shape(const ModelConfig& m, const model::ParamSpec& p) {
  if (p.global_shape.size() == 1) return {p.valid_rows};
  if (conv1d(m, p.name)) return {p.global_cols(), p.valid_rows};
  return {p.valid_rows, p.global_cols()};
}

// Where a new directory goes: it must not exist, or be empty.
void check_new_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) fail_input("{}: missing", flag);
  if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
    fail_input("{} {}: exists and is not empty (nothing is overwritten: choose a new directory)", flag, dir);
}

// DIR.tmp, fresh; renamed to DIR by commit().
struct StagedDir {
  std::string final_dir, tmp;
  bool done = false;
  explicit StagedDir(std::string dir) : final_dir(std::move(dir)), tmp(final_dir + ".tmp") {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  void commit() {
    if (fs::exists(final_dir)) fs::remove(final_dir);  // checked empty
    fs::rename(tmp, final_dir);
    done = true;
  }
  ~StagedDir() {
    if (!done) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  if (!f) throw Error(fmt::format("{}: write failed", path));
}

std::string config_json(const ModelConfig& m) {
  if (m.arch == "gpt2")
    return fmt::format(
        "{{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": {},\n"
        "  \"n_positions\": {},\n  \"n_ctx\": {},\n  \"n_embd\": {},\n  \"n_layer\": {},\n  \"n_head\": {},\n"
        "  \"n_inner\": {},\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": {},\n"
        "  \"initializer_range\": {},\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
        "  \"tie_word_embeddings\": {},\n  \"torch_dtype\": \"float32\"\n}}\n",
        m.vocab, m.seq_len, m.seq_len, m.hidden, m.layers, m.heads, m.ffn_hidden, m.norm_eps, m.init_std,
        m.tie_embeddings);
  return fmt::format(
      "{{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"vocab_size\": {},\n"
      "  \"hidden_size\": {},\n  \"intermediate_size\": {},\n  \"num_hidden_layers\": {},\n"
      "  \"num_attention_heads\": {},\n  \"num_key_value_heads\": {},\n  \"head_dim\": {},\n"
      "  \"max_position_embeddings\": {},\n  \"rms_norm_eps\": {},\n  \"rope_theta\": {},\n"
      "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
      "  \"initializer_range\": {},\n  \"tie_word_embeddings\": {},\n  \"torch_dtype\": \"float32\"\n}}\n",
      m.vocab, m.hidden, m.ffn_hidden, m.layers, m.heads, m.kv_heads, m.head_dim(), m.seq_len, m.norm_eps,
      m.rope_theta, m.init_std, m.tie_embeddings);
}

}  // namespace

void export_hf(const std::string& checkpoint, const std::string& out_dir) {
  check_new_dir("--out", out_dir);
  const WholeModel w = load_whole_model(checkpoint);
  const ModelConfig& m = w.recipe.model;
  const model::ParamRegistry reg(m);
  std::vector<std::vector<float>> transposed;  // keeps the Conv1D copies alive until written
  std::vector<SafetensorsInput> tensors;
  int64_t total = 0;
  for (const auto& p : reg.params()) {
    const float* src = w.params.data() + p.offset;
    const Shape shape = hf_shape(m, p);
    if (conv1d(m, p.name)) {
      const int64_t rows = p.valid_rows, cols = p.global_cols();
      auto& t = transposed.emplace_back(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = src[r * cols + c];
      src = t.data();
    }
    tensors.push_back({p.name, DType::f32, shape, src});  // vocabulary rows: the valid prefix
    total += shape_numel(shape);
  }
  StagedDir out(out_dir);
  write_safetensors(out.tmp + "/model.safetensors", tensors, {{"format", "pt"}});
  write_text(out.tmp + "/config.json", config_json(m));
  write_text(out.tmp + "/trident.json",
             fmt::format("{{\"checkpoint\":{},\"step\":{},\"recipe_file\":{},\"data_train\":{}}}\n",
                         json_quote(w.dir), w.step, json_quote(w.recipe.source), json_quote(w.recipe.data.train)));
  out.commit();
  log::info("exported {} (step {}, {} {}, {:.2f}M parameters, vocabulary {}) -> {} for transformers' {}", w.dir,
            w.step, m.arch, fmt::format("{}x{}", m.layers, m.hidden), double(total) / 1e6, m.vocab, out_dir,
            m.arch == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM");
}

namespace {

// config.json against the recipe's model: every size must agree.
void check_config(const std::string& path, const YAML::Node& c, const Recipe& rc) {
  const ModelConfig& m = rc.model;
  const std::string type = c["model_type"] ? c["model_type"].as<std::string>() : "";
  if (type != "gpt2" && type != "llama")
    fail_input("{}: key 'model_type': expected gpt2 or llama, found '{}'", path, type);
  if (type != m.arch)
    fail_input("{}: key 'model_type' is '{}', the recipe {} has model.arch {}", path, type, rc.source, m.arch);
  auto num = [&](const char* key, int64_t def) -> int64_t {
    if (!c[key] || c[key].IsNull()) {
      if (def >= 0) return def;
      fail_input("{}: missing key '{}'", path, key);
    }
    return c[key].as<int64_t>();
  };
  auto same = [&](const char* key, int64_t found, const char* recipe_key, int64_t want) {
    if (found != want)
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}", path, key, found, rc.source, recipe_key, want);
  };
  auto close = [&](const char* key, double found, const char* recipe_key, double want) {
    if (std::abs(found - want) > 1e-12 * std::max(1.0, std::abs(want)))
      fail_input("{}: key '{}' is {}, the recipe {} has {} = {}", path, key, found, rc.source, recipe_key, want);
  };
  auto text = [&](const char* key, const std::string& def) {
    return c[key] && !c[key].IsNull() ? c[key].as<std::string>() : def;
  };
  auto flag = [&](const char* key, bool def) { return c[key] && !c[key].IsNull() ? c[key].as<bool>() : def; };
  int64_t positions = 0;
  if (type == "gpt2") {
    same("n_layer", num("n_layer", -1), "model.layers", m.layers);
    same("n_embd", num("n_embd", -1), "model.hidden", m.hidden);
    same("n_head", num("n_head", -1), "model.heads", m.heads);
    same("n_inner", num("n_inner", 4 * num("n_embd", -1)), "model.ffn_hidden", m.ffn_hidden);
    same("vocab_size", num("vocab_size", -1), "model.vocab", m.vocab);
    close("layer_norm_epsilon", c["layer_norm_epsilon"] ? c["layer_norm_epsilon"].as<double>() : 1e-5,
          "model.norm_eps", m.norm_eps);
    const std::string act = text("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail_input("{}: key 'activation_function': expected gelu_new (tanh GELU, as Trident), found '{}'", path, act);
    positions = num("n_positions", -1);
    same("tie_word_embeddings", flag("tie_word_embeddings", true), "model.tie_embeddings", m.tie_embeddings);
  } else {
    same("num_hidden_layers", num("num_hidden_layers", -1), "model.layers", m.layers);
    same("hidden_size", num("hidden_size", -1), "model.hidden", m.hidden);
    same("num_attention_heads", num("num_attention_heads", -1), "model.heads", m.heads);
    same("num_key_value_heads", num("num_key_value_heads", num("num_attention_heads", -1)), "model.kv_heads",
         m.kv_heads);
    same("head_dim", num("head_dim", m.head_dim()), "model.hidden / model.heads", m.head_dim());
    same("intermediate_size", num("intermediate_size", -1), "model.ffn_hidden", m.ffn_hidden);
    same("vocab_size", num("vocab_size", -1), "model.vocab", m.vocab);
    close("rms_norm_eps", c["rms_norm_eps"] ? c["rms_norm_eps"].as<double>() : 1e-6, "model.norm_eps", m.norm_eps);
    close("rope_theta", c["rope_theta"] ? c["rope_theta"].as<double>() : 10000.0, "model.rope_theta", m.rope_theta);
    if (text("hidden_act", "silu") != "silu")
      fail_input("{}: key 'hidden_act': expected silu (SwiGLU, as Trident), found '{}'", path, text("hidden_act", ""));
    if (flag("attention_bias", false) || flag("mlp_bias", false))
      fail_input("{}: attention_bias / mlp_bias: Trident's LLaMA has no linear biases", path);
    if (c["rope_scaling"] && !c["rope_scaling"].IsNull())
      fail_input("{}: key 'rope_scaling': scaled RoPE is not supported (plain RoPE with rope_theta only)", path);
    positions = num("max_position_embeddings", -1);
    same("tie_word_embeddings", flag("tie_word_embeddings", false), "model.tie_embeddings", m.tie_embeddings);
  }
  if (positions < m.seq_len)
    fail_input("{}: the model has {} positions, the recipe {} trains on model.seq_len {}", path, positions, rc.source,
               m.seq_len);
}

// transformers' names -> Trident's: the original GPT-2 files lack the
// "transformer." prefix. "" for buffers that are not parameters.
std::string trident_name(const ModelConfig& m, const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), std::string::npos, s) == 0;
  };
  if (ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq")) return "";
  if (m.arch == "gpt2" && name != "lm_head.weight" && name.rfind("transformer.", 0) != 0) return "transformer." + name;
  return name;
}

}  // namespace

void import_hf(const std::string& hf_dir, const std::string& recipe, const std::vector<std::string>& sets,
               const std::string& out_dir) {
  check_new_dir("--out", out_dir);
  std::vector<std::string> all = sets;
  for (const auto& s : single_process_overrides()) all.push_back(s);
  Recipe rc = load_recipe(recipe, all, 1);
  const ModelConfig& m = rc.model;
  const std::string config_path = (fs::path(hf_dir) / "config.json").string();
  if (!fs::exists(config_path)) fail_input("{}: missing (import reads a transformers model directory)", config_path);
  YAML::Node config;
  try {
    config = YAML::LoadFile(config_path);
  } catch (const YAML::Exception& e) {
    fail_input("{}: not valid JSON ({})", config_path, e.what());
  }
  check_config(config_path, config, rc);

  // tensor name -> file holding it
  std::map<std::string, std::string> where;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  const fs::path single = fs::path(hf_dir) / "model.safetensors", index = fs::path(hf_dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    readers[single.string()] = std::make_unique<SafetensorsReader>(single.string());
    for (const auto& e : readers[single.string()]->entries()) where[e.name] = single.string();
  } else if (fs::exists(index)) {
    YAML::Node idx;
    try {
      idx = YAML::LoadFile(index.string());
    } catch (const YAML::Exception& e) {
      fail_input("{}: not valid JSON ({})", index.string(), e.what());
    }
    if (!idx["weight_map"]) fail_input("{}: missing key 'weight_map'", index.string());
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      const std::string file = (fs::path(hf_dir) / it->second.as<std::string>()).string();
      if (!readers.count(file)) {
        if (!fs::exists(file)) fail_input("{}: weight_map names {}, which is missing", index.string(), file);
        readers[file] = std::make_unique<SafetensorsReader>(file);
      }
      where[it->first.as<std::string>()] = file;
    }
  } else {
    fail_input("{}: no model.safetensors or model.safetensors.index.json (only safetensors weights are read)", hf_dir);
  }

  const model::ParamRegistry reg(m);
  std::map<std::string, std::string> by_trident;  // Trident name -> transformers name
  for (const auto& [name, file] : where) {
    const std::string t = trident_name(m, name);
    if (t.empty()) continue;
    if (t == "lm_head.weight" && m.tie_embeddings) continue;  // a copy of the tied embedding
    bool known = false;
    for (const auto& p : reg.params()) known |= p.name == t;
    if (!known)
      fail_input("{}: tensor '{}' is not a parameter of the recipe's {} model ({} layers)", file, name, m.arch,
                 m.layers);
    by_trident[t] = name;
  }
  std::vector<float> params(static_cast<size_t>(reg.total()), 0.0f);  // vocabulary padding stays zero
  for (const auto& p : reg.params()) {
    auto found = by_trident.find(p.name);
    if (found == by_trident.end()) fail_input("{}: no tensor '{}' (needed by the recipe's model)", hf_dir, p.name);
    const SafetensorsReader& r = *readers.at(where.at(found->second));
    const SafetensorsEntry& e = r.at(found->second);
    Shape want = hf_shape(m, p);
    const bool positions = p.name == "transformer.wpe.weight";  // may hold more positions than seq_len
    if (positions && e.shape.size() == 2 && e.shape[0] >= want[0] && e.shape[1] == want[1]) want[0] = e.shape[0];
    if (e.shape != want)
      fail_input("{}: tensor '{}': expected shape [{}], found [{}]", r.path(), found->second, fmt::join(want, ","),
                 fmt::join(e.shape, ","));
    const int64_t n = shape_numel(e.shape);
    std::vector<float> v(static_cast<size_t>(n));
    std::vector<char> raw(size_t(e.end - e.begin));
    r.read(found->second, raw.data());
    switch (e.dtype) {
      case DType::f32: std::memcpy(v.data(), raw.data(), raw.size()); break;
      case DType::f64:
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(reinterpret_cast<const double*>(raw.data())[i]);
        break;
      case DType::bf16:
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = bf16_to_f32(reinterpret_cast<const uint16_t*>(raw.data())[i]);
        break;
      case DType::f16:
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f16_to_f32(reinterpret_cast<const uint16_t*>(raw.data())[i]);
        break;
      default:
        fail_input("{}: tensor '{}': dtype {} is not a floating-point weight", r.path(), found->second,
                   safetensors_dtype(e.dtype));
    }
    float* dst = params.data() + p.offset;
    const int64_t rows = p.valid_rows, cols = p.global_cols();
    if (conv1d(m, p.name)) {
      for (int64_t r2 = 0; r2 < rows; ++r2)
        for (int64_t c = 0; c < cols; ++c) dst[r2 * cols + c] = v[size_t(c * rows + r2)];
    } else {
      std::copy(v.begin(), v.begin() + rows * cols, dst);  // wpe: the first seq_len positions
    }
  }
  std::vector<float> zeros(params.size(), 0.0f);  // AdamW's moments start at zero
  rc.checkpoint.async = false;
  rc.checkpoint.keep = 1;
  StagedDir out(out_dir);
  rc.checkpoint.dir = out.tmp;
  const RankState s{&reg, 0, 0, 0, 0, reg.total(), params.data(), zeros.data(), zeros.data()};
  if (save_checkpoint(rc, 0, s, nullptr).empty()) throw Error(fmt::format("{}: writing the checkpoint failed", out.tmp));
  out.commit();
  log::info("imported {} ({} {}x{}, {} tensors) -> {}: train with trident train {} --resume {}", hf_dir, m.arch,
            m.layers, m.hidden, by_trident.size(), out_dir, recipe, out_dir);
}

}  // namespace trident::launch
