// Hugging Face export and import (see hf.hpp).
#include "launch/checkpoint/hf.hpp"

#include <fmt/ranges.h>
#include "launch/checkpoint/hf_config.hpp"
#include "launch/checkpoint/hf_names.hpp"
#include "launch/checkpoint/quantized.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/recipe/recipe.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "model/params.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

namespace {

// Weights transformers stores as Conv1D modules (GPT-2's attention and MLP):
// [in, out], the transpose of Trident's (and torch.nn.Linear's) [out, in].
bool conv1d(const ModelConfig& m, const std::string& name) {
  const model::ParamRow* row = model::architecture(m.arch).find(name);
  return row && row->hf_transposed;
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
  // the nearest existing directory above it must take new entries (a read-only file system does not)
  fs::path at = fs::absolute(dir).parent_path();
  while (!at.empty() && !fs::exists(at) && at != at.parent_path()) at = at.parent_path();
  if (::access(at.c_str(), W_OK) != 0)
    fail_input("{}: expected a directory that can be created, found {} not writable ({})", flag, at.string(),
               std::strerror(errno));
}

// DIR.tmp, fresh; renamed to DIR by commit().
// DIR.tmp.PID, this process's own: nothing of anyone else's is ever removed
// (a user's DIR.tmp stays as it is).
struct StagedDir {
  std::string final_dir, tmp;
  bool done = false, created = false;
  explicit StagedDir(std::string dir) : final_dir(std::move(dir)), tmp(final_dir + ".tmp." + std::to_string(getpid())) {
    if (fs::exists(tmp)) fail_input("{}: exists (left by an earlier process?); remove it and run again", tmp);
    std::error_code ec;
    fs::create_directories(tmp, ec);
    if (ec) fail_input("--out: expected a directory that can be created, found {}: {}", tmp, ec.message());
    created = true;
  }
  void commit() {
    if (fs::exists(final_dir)) fs::remove(final_dir);  // checked empty
    fs::rename(tmp, final_dir);
    done = true;
  }
  ~StagedDir() {
    if (!done && created) {
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

std::string config_json(const ModelConfig& m, HfFamily f) {
  using Json = nlohmann::ordered_json;
  Json c;
  if (m.arch == Arch::gpt2) {
    c = {{"architectures", {hf_class(f)}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab},
         {"n_positions", m.seq_len},
         {"n_ctx", m.seq_len},
         {"n_embd", m.hidden},
         {"n_layer", m.layers},
         {"n_head", m.heads},
         {"n_inner", m.ffn_hidden},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", m.norm_eps},
         {"initializer_range", m.init_std},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"tie_word_embeddings", m.tie_embeddings},
         {"torch_dtype", "float32"}};
    return c.dump(2) + "\n";
  }
  c = {{"architectures", {hf_class(f)}},
       {"model_type", hf_model_type(f)},
       {"vocab_size", m.vocab},
       {"hidden_size", m.hidden},
       {"intermediate_size", m.ffn_hidden},
       {"num_hidden_layers", m.layers},
       {"num_attention_heads", m.heads},
       {"num_key_value_heads", m.kv_heads},
       {"head_dim", m.head_dim()},
       {"max_position_embeddings", m.seq_len},
       {"rms_norm_eps", m.norm_eps},
       {"rope_theta", m.rope_theta},
       {"hidden_act", "silu"},
       {"attention_bias", m.attention_bias},
       {"initializer_range", m.init_std},
       {"tie_word_embeddings", m.tie_embeddings},
       {"torch_dtype", "float32"}};
  if (f == HfFamily::gpt_oss && m.rope_scaling.type == RopeType::none)  // else GptOssConfig assumes its YaRN
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  if (const RopeScaling& s = m.rope_scaling; s.type != RopeType::none) {  // transformers 5's rope_parameters
    nlohmann::json rp = {{"rope_type", enum_name(s.type)}, {"rope_theta", m.rope_theta}, {"factor", s.factor}};
    if (s.type != RopeType::linear) rp["original_max_position_embeddings"] = s.original_seq_len;
    if (s.type == RopeType::llama3)
      rp["low_freq_factor"] = s.low_freq_factor, rp["high_freq_factor"] = s.high_freq_factor;
    if (s.type == RopeType::yarn) {
      rp["beta_fast"] = s.beta_fast, rp["beta_slow"] = s.beta_slow, rp["truncate"] = s.truncate;
      if (s.mscale != 0) rp["mscale"] = s.mscale;
      if (s.mscale_all_dim != 0) rp["mscale_all_dim"] = s.mscale_all_dim;
    }
    c["rope_parameters"] = rp;
  }
  const MoeConfig& e = m.moe;
  // sliding windows: every layer's (mistral, mixtral), or layer_types (qwen2/3, their MoE, gpt_oss)
  const bool windowed = m.sliding_window > 0;
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t l = 0; l < m.layers; ++l)
    layer_types.push_back(m.window(l) > 0 ? "sliding_attention" : "full_attention");
  auto qwen_windows = [&] {
    c["use_sliding_window"] = windowed;
    if (windowed) c["sliding_window"] = m.sliding_window, c["layer_types"] = layer_types;
    if (windowed) c["max_window_layers"] = m.layers;  // layer_types decides
  };
  auto window_or_null = [&] {
    if (windowed)
      c["sliding_window"] = m.sliding_window;
    else
      c["sliding_window"] = nullptr;
  };
  switch (f) {
    case HfFamily::gpt2:
    case HfFamily::llama:
      c["mlp_bias"] = false;
      break;
    case HfFamily::mistral:
      window_or_null();
      break;
    case HfFamily::qwen3:
      qwen_windows();
      break;
    case HfFamily::qwen2:  // its q, k and v have biases always, o_proj none
      c.erase("attention_bias");
      qwen_windows();
      break;
    case HfFamily::qwen3_moe:
      c["num_experts"] = e.experts, c["num_experts_per_tok"] = e.top_k, c["moe_intermediate_size"] = e.ffn_hidden;
      c["norm_topk_prob"] = e.norm_topk, c["decoder_sparse_step"] = e.every, c["mlp_only_layers"] = e.dense_layers;
      c["router_aux_loss_coef"] = e.balance_coef;
      qwen_windows();
      break;
    case HfFamily::mixtral:
      c["num_local_experts"] = e.experts, c["num_experts_per_tok"] = e.top_k;
      c["intermediate_size"] = e.ffn_hidden;  // Mixtral's experts' width
      c["router_aux_loss_coef"] = e.balance_coef, c["router_jitter_noise"] = 0.0;
      window_or_null();
      break;
    case HfFamily::qwen2_moe:
      c["num_experts"] = e.experts, c["num_experts_per_tok"] = e.top_k, c["moe_intermediate_size"] = e.ffn_hidden;
      c["shared_expert_intermediate_size"] = e.shared_ffn_hidden, c["norm_topk_prob"] = e.norm_topk;
      c["decoder_sparse_step"] = e.every, c["mlp_only_layers"] = e.dense_layers;
      c["router_aux_loss_coef"] = e.balance_coef, c["qkv_bias"] = true;
      qwen_windows();
      break;
    case HfFamily::gpt_oss:  // attention_bias: q, k, v and o; the experts' width is intermediate_size
      c["num_local_experts"] = e.experts, c["num_experts_per_tok"] = e.top_k, c["intermediate_size"] = e.ffn_hidden;
      c["swiglu_alpha"] = e.swiglu_alpha, c["swiglu_limit"] = e.swiglu_limit;
      c["router_aux_loss_coef"] = e.balance_coef, c["layer_types"] = layer_types;
      window_or_null();
      break;
    case HfFamily::deepseek_v3: {
      const MlaConfig& a = m.mla;
      if (a.q_lora_rank > 0)
        c["q_lora_rank"] = a.q_lora_rank;
      else
        c["q_lora_rank"] = nullptr;
      c["kv_lora_rank"] = a.kv_lora_rank, c["qk_nope_head_dim"] = a.qk_nope_head_dim;
      c["qk_rope_head_dim"] = a.qk_rope_head_dim, c["v_head_dim"] = a.v_head_dim, c["head_dim"] = a.qk_rope_head_dim;
      c["rope_interleave"] = true, c["scoring_func"] = "sigmoid", c["topk_method"] = "noaux_tc";
      c["num_nextn_predict_layers"] = m.mtp.depth;
    }
      [[fallthrough]];  // glm4_moe's MoE keys
    case HfFamily::glm4_moe:
      c["n_routed_experts"] = e.experts, c["num_experts_per_tok"] = e.top_k, c["moe_intermediate_size"] = e.ffn_hidden;
      c["n_shared_experts"] = e.shared_experts, c["first_k_dense_replace"] = e.first_dense;
      c["n_group"] = e.groups, c["topk_group"] = e.group_topk, c["routed_scaling_factor"] = e.scaling;
      c["norm_topk_prob"] = e.norm_topk;
      if (f == HfFamily::glm4_moe) c["partial_rotary_factor"] = 1.0, c["use_qk_norm"] = m.qk_norm;
      break;
  }
  return c.dump(2) + "\n";
}

}  // namespace

void export_hf(const std::string& checkpoint, const std::string& out_dir) {
  check_new_dir("--out", out_dir);
  const WholeModel w = load_whole_model(checkpoint);
  const ModelConfig& m = w.recipe.model;
  const HfFamily family = hf_family(w.recipe);
  const model::ParamRegistry reg(m);
  std::vector<std::vector<float>> transposed;  // keeps the Conv1D (and gpt-oss experts') copies alive until written
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
    for (const HfPiece& piece : hf_pieces(m, family, p, shape)) {  // vocabulary rows: the valid prefix
      const float* at = src + piece.offset;
      if (piece.layout != HfLayout::same) {  // gpt-oss's experts: their layout
        auto& t = transposed.emplace_back(static_cast<size_t>(shape_numel(piece.shape)));
        hf_layout_out(t.data(), at, piece);
        at = t.data();
      }
      tensors.push_back({piece.name, DType::f32, piece.shape, at});
    }
    total += shape_numel(shape);
  }
  const std::vector<HfPiece> zero = hf_zero_tensors(m, family);
  int64_t zeros = 0;
  for (const auto& z : zero) zeros = std::max(zeros, shape_numel(z.shape));
  const std::vector<float> zero_values(static_cast<size_t>(zeros), 0.0f);
  for (const auto& z : zero) tensors.push_back({z.name, DType::f32, z.shape, zero_values.data()});
  StagedDir out(out_dir);
  write_safetensors(out.tmp + "/model.safetensors", tensors, {{"format", "pt"}});
  write_text(out.tmp + "/config.json", config_json(m, family));
  write_text(
      out.tmp + "/trident.json",
      nlohmann::ordered_json{{"checkpoint", w.dir},
                             {"step", w.step},
                             {"recipe_file", w.recipe.source},
                             {"tokenizer", w.tokenizer ? enum_name(w.tokenizer->kind) : ""},
                             {"data_train", w.recipe.data.synthetic ? std::string() : w.recipe.data.train[0].path}}
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n");
  // the checkpoint's tokenizer, where Hugging Face reads one: tokenizer.json
  // (byte-level BPE) or tokenizer.model (SentencePiece)
  const bool hf_tokenizer =
      w.tokenizer && (w.tokenizer->kind == TokenizerKind::hf_bpe || w.tokenizer->kind == TokenizerKind::sentencepiece);
  if (hf_tokenizer) std::filesystem::copy_file(w.dir + "/" + w.tokenizer->file, out.tmp + "/" + w.tokenizer->file);
  out.commit();
  log::info("exported {} (step {}, {} {}, {:.2f}M parameters, vocabulary {}{}) -> {} for transformers' {}", w.dir,
            w.step, m.arch, fmt::format("{}x{}", m.layers, m.hidden), double(total) / 1e6, m.vocab,
            hf_tokenizer ? ", " + w.tokenizer->file : "", out_dir, hf_class(family));
}

namespace {

// transformers' names -> Trident's: the original GPT-2 files lack the
// "transformer." prefix. "" for buffers that are not parameters.
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON ({})", path, e.what());
  }
}

std::string trident_name(const ModelConfig& m, const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), std::string::npos, s) == 0;
  };
  if (ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq")) return "";
  if (m.arch == Arch::gpt2 && name != "lm_head.weight" && name.rfind("transformer.", 0) != 0)
    return "transformer." + name;
  return name;
}

// A tensor's values as floats (F32, F64, BF16, F16).
std::vector<float> read_floats(const SafetensorsReader& r, const std::string& name, const SafetensorsEntry& e) {
  const int64_t n = shape_numel(e.shape);
  std::vector<float> v(static_cast<size_t>(n));
  std::vector<char> raw(size_t(e.end - e.begin));
  r.read(name, raw.data());
  switch (e.dtype) {
    case DType::f32:
      std::memcpy(v.data(), raw.data(), raw.size());
      break;
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
      fail_input("{}: tensor '{}': dtype {} is not a floating-point weight", r.path(), name,
                 safetensors_dtype(e.dtype));
  }
  return v;
}

}  // namespace

void import_hf(const std::string& hf_dir, const std::string& recipe, const std::vector<std::string>& sets,
               const std::string& out_dir) {
  check_new_dir("--out", out_dir);
  const std::string config_path = (fs::path(hf_dir) / "config.json").string();
  if (!fs::exists(config_path)) fail_input("{}: missing (import reads a transformers model directory)", config_path);
  const nlohmann::json config = read_json(config_path);
  if (!config.is_object()) fail_input("{}: expected a JSON object", config_path);

  // tensor name -> file holding it
  std::map<std::string, std::string> where;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  const fs::path single = fs::path(hf_dir) / "model.safetensors",
                 index = fs::path(hf_dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    readers[single.string()] = std::make_unique<SafetensorsReader>(single.string());
    for (const auto& e : readers[single.string()]->entries()) where[e.name] = single.string();
  } else if (fs::exists(index)) {
    const nlohmann::json idx = read_json(index.string());
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail_input("{}: missing key 'weight_map' (an object: tensor name -> file)", index.string());
    for (const auto& [tensor, value] : idx["weight_map"].items()) {
      if (!value.is_string() || value.get<std::string>().find('/') != std::string::npos ||
          value.get<std::string>() == "..")
        fail_input("{}: key 'weight_map.{}': expected a file name in {}, found {}", index.string(), tensor, hf_dir,
                   value.dump());
      const std::string file = (fs::path(hf_dir) / value.get<std::string>()).string();
      if (!readers.count(file)) {
        if (!fs::exists(file)) fail_input("{}: weight_map names {}, which is missing", index.string(), file);
        readers[file] = std::make_unique<SafetensorsReader>(file);
      }
      where[tensor] = file;
    }
  } else {
    fail_input("{}: no model.safetensors or model.safetensors.index.json (only safetensors weights are read)", hf_dir);
  }

  // DeepSeek-V3's config names its multi-token prediction modules (num_nextn_predict_layers) whether the
  // checkpoint holds them or not (transformers' own model does not): a derived recipe has them when it does
  const bool has_mtp =
      config.contains("num_hidden_layers") && config["num_hidden_layers"].is_number_integer() &&
      where.count(fmt::format("model.layers.{}.eh_proj.weight", config["num_hidden_layers"].get<int64_t>())) > 0;
  // without --recipe: the recipe config.json describes, written to DIR/recipe.yaml with the checkpoint
  const std::string derived = recipe.empty() ? recipe_from_hf_config(config_path, config, has_mtp) : "";
  const std::string recipe_path = recipe.empty() ? (fs::path(out_dir) / "recipe.yaml").string() : recipe;
  Recipe rc = recipe.empty() ? load_recipe_text_on_one_process(derived, recipe_path, sets)
                             : load_model_recipe_on_one_process(recipe, sets);  // the training keys may be absent
  const ModelConfig& m = rc.model;
  check_hf_config(config_path, config, rc);
  const model::ParamRegistry reg(m);
  const HfFamily family = hf_family(rc);
  // the file's tensors by the names the pieces use (GPT-2's with the "transformer." prefix)
  std::map<std::string, std::string> by_name;  // lookup name -> tensor name in the file
  int64_t dropped = 0;                         // DeepSeek-V3's multi-token prediction modules the recipe does not have
  for (const auto& [name, file] : where) {
    const std::string t = trident_name(m, name);
    if (t.empty()) continue;
    if (family == HfFamily::deepseek_v3 && t.rfind("model.layers.", 0) == 0 &&
        std::stoll(t.substr(13, t.find('.', 13) - 13)) >= m.layers + m.mtp.depth) {
      ++dropped;
      continue;
    }
    if (t == "lm_head.weight" && m.tie_embeddings) continue;  // a copy of the tied embedding
    by_name[t] = name;
  }
  std::set<std::string> used;
  // one tensor of the file -> v (floats), checked against its expected shape
  auto read = [&](const HfPiece& piece) {
    const std::string& name = by_name.at(piece.name);
    const SafetensorsReader& r = *readers.at(where.at(name));
    const SafetensorsEntry& e = r.at(name);
    if (e.shape != piece.shape)
      fail_input("{}: tensor '{}': expected shape [{}], found [{}]", r.path(), name, fmt::join(piece.shape, ","),
                 fmt::join(e.shape, ","));
    used.insert(piece.name);
    std::vector<float> v;
    if (e.dtype == DType::f8_e4m3) {  // DeepSeek's FP8: with its block scales (quantized.hpp)
      const std::string scale = name + "_scale_inv";
      if (!where.count(scale))
        fail_input("{}: tensor '{}' is F8_E4M3 without its block scales '{}'", r.path(), name, scale);
      v = read_fp8_block_scaled(r, name, *readers.at(where.at(scale)), scale, piece.shape);
      used.insert(trident_name(m, scale));
    } else {
      v = read_floats(r, name, e);
    }
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end())
      fail_input("{}: tensor '{}': element {} (of {}) is {}: a model with non-finite weights is not imported", r.path(),
                 name, bad - v.begin(), v.size(), *bad);
    return v;
  };
  std::vector<float> params(static_cast<size_t>(reg.total()), 0.0f);  // vocabulary padding stays zero
  for (const auto& p : reg.params()) {
    Shape want = hf_shape(m, p);
    const bool positions = p.name == "transformer.wpe.weight";  // may hold more positions than seq_len
    if (positions && by_name.count(p.name)) {
      const auto& e = readers.at(where.at(by_name.at(p.name)))->at(by_name.at(p.name));
      if (e.shape.size() == 2 && e.shape[0] >= want[0] && e.shape[1] == want[1]) want[0] = e.shape[0];
    }
    auto present = [&](const std::vector<HfPiece>& pieces) {
      if (pieces.empty()) return false;
      for (const auto& x : pieces)
        if (!by_name.count(x.name)) return false;
      return true;
    };
    std::vector<HfPiece> pieces = hf_pieces(m, family, p, want);
    if (!present(pieces) && present(hf_fused_pieces(m, family, p, want))) pieces = hf_fused_pieces(m, family, p, want);
    // gpt-oss's MXFP4 experts: X_blocks and X_scales in place of X (quantized.hpp)
    auto mxfp4 = [&](const HfPiece& x) {
      return x.layout != HfLayout::same && !by_name.count(x.name) && by_name.count(x.name + "_blocks") &&
             by_name.count(x.name + "_scales");
    };
    for (const auto& x : pieces)
      if (!by_name.count(x.name) && !mxfp4(x))
        fail_input("{}: no tensor '{}' (needed by the recipe's model)", hf_dir, x.name);
    float* dst = params.data() + p.offset;
    const int64_t rows = p.valid_rows, cols = p.global_cols();
    for (const auto& x0 : pieces) {
      HfPiece x = x0;
      std::vector<float> v;
      if (mxfp4(x)) {  // the blocks hold [E, rows, cols] untransposed: gate_up's rows interleaved, down's as ours
        const std::string blocks = by_name.at(x.name + "_blocks"), scales = by_name.at(x.name + "_scales");
        x.layout = x.layout == HfLayout::interleaved_rows_transposed ? HfLayout::interleaved_rows : HfLayout::same;
        x.shape = {x.E, x.R, x.K};
        v = read_mxfp4(*readers.at(where.at(blocks)), blocks, *readers.at(where.at(scales)), scales, x.shape);
        used.insert(x.name + "_blocks"), used.insert(x.name + "_scales");
      } else {
        v = read(x);
      }
      if (&x0 != &pieces[0] && x.offset == 0 && x.shape == pieces[0].shape) {  // a copy (DeepSeek's MTP modules')
        if (!std::equal(v.begin(), v.end(), dst))
          fail_input(
              "{}: tensor '{}' differs from '{}': Trident's multi-token prediction shares the embedding and "
              "the LM head with the model",
              where.at(by_name.at(x.name)), by_name.at(x.name), by_name.at(pieces[0].name));
        continue;
      }
      if (x.layout != HfLayout::same) {
        hf_layout_in(dst + x.offset, v.data(), x);
      } else if (conv1d(m, p.name)) {
        for (int64_t r2 = 0; r2 < rows; ++r2)
          for (int64_t c = 0; c < cols; ++c) dst[r2 * cols + c] = v[size_t(c * rows + r2)];
      } else if (pieces.size() == 1 && x.offset == 0) {
        std::copy(v.begin(), v.begin() + rows * cols, dst);  // wpe: the first seq_len positions
      } else {
        std::copy(v.begin(), v.end(), dst + x.offset);
      }
    }
  }
  for (const HfPiece& z : hf_zero_tensors(m, family)) {  // Qwen2-MoE's q/k/v biases: Trident has none
    if (!by_name.count(z.name)) continue;
    for (float x : read(z))
      if (x != 0.0f)
        fail_input(
            "{}: tensor '{}' is not zero: the recipe's {} model has no q/k/v bias (set model.attention_bias: "
            "true to import them)",
            where.at(by_name.at(z.name)), z.name, hf_model_type(family));
  }
  for (const auto& [t, name] : by_name)
    if (!used.count(t))
      fail_input("{}: tensor '{}' is not a parameter of the recipe's {} model ({} layers)", where.at(name), name,
                 hf_model_type(family), m.layers);
  if (dropped > 0)
    log::info(
        "{}: dropped {} tensors of multi-token prediction modules (model.layers.{} and after; the recipe's "
        "model.mtp.depth is {})",
        hf_dir, dropped, m.layers + m.mtp.depth, m.mtp.depth);
  std::vector<float> zeros(params.size(), 0.0f);  // AdamW's moments start at zero
  rc.checkpoint.async = false;
  rc.checkpoint.keep = 1;
  StagedDir out(out_dir);
  rc.checkpoint.dir = out.tmp;
  const RankState s{&reg, 0, 0, 0, 0, reg.total(), params.data(), zeros.data(), zeros.data(), false, {}};
  if (save_checkpoint(rc, 0, s, nullptr).empty())
    throw Error(fmt::format("{}: writing the checkpoint failed", out.tmp));
  if (!derived.empty()) write_text(out.tmp + "/recipe.yaml", derived);
  out.commit();
  // the training keys the recipe left out (placeholders for the import): the run needs them
  std::vector<std::string> to_set;
  for (const auto& given : sets) to_set.push_back("--set " + given);
  for (size_t i = sets.size(); i < rc.overrides.size(); ++i)
    to_set.push_back("--set " + rc.overrides[i].substr(0, rc.overrides[i].find('=')) + "=...");
  log::info("imported {} ({} {}x{}, {} tensors) -> {}: train with trident train {} --resume {}{}{}", hf_dir, m.arch,
            m.layers, m.hidden, used.size(), out_dir, recipe_path, out_dir,
            to_set.empty() ? "" : " " + fmt::format("{}", fmt::join(to_set, " ")),
            rc.overrides.size() > sets.size() ? " (the recipe has no training keys: give them)" : "");
}

}  // namespace trident::launch
