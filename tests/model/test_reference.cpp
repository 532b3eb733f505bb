// Golden test against an outside reference: tiny Hugging Face GPT2LMHeadModel
// and LlamaForCausalLM, the MoE families and DeepseekV3ForCausalLM (multi-head
// latent attention) (transformers' own code, float64), loaded into Trident
// by parameter name. Checks logits, loss and every gradient by name.
// Regenerate the file: python tests/model/reference/make_reference.py
// (needs torch and transformers, e.g. the bench virtual environment).
#include <fstream>
#include <map>
#include <sstream>

#include "kernels/router.hpp"
#include "model/transformer.hpp"
#include "tests/test_util.hpp"

namespace trident::model {

constexpr int kReferenceVersion = 1;
const char* kRegenerate = "python3 tests/model/reference/make_reference.py (with torch and transformers installed)";

struct RefTensor {
  Shape shape;
  std::vector<double> values;
};

struct RefModel {
  ModelConfig cfg;
  std::string family;  // a family whose names and layouts the import maps (gpt_oss), else ""

  std::map<std::string, RefTensor> tensors;  // "kind name" -> tensor
  const RefTensor& at(const std::string& kind, const std::string& name) const {
    auto it = tensors.find(kind + " " + name);
    if (it == tensors.end()) throw std::runtime_error("reference has no " + kind + " " + name);
    return it->second;
  }
};

std::map<std::string, RefModel> load_reference() {
  std::ifstream in(std::string(TRIDENT_SOURCE_DIR) + "/tests/model/reference/reference.txt");
  if (!in)
    throw std::runtime_error(std::string("tests/model/reference/reference.txt missing; regenerate: ") + kRegenerate);
  std::string magic;
  int version = 0;
  in >> magic >> version;
  std::string rest;
  std::getline(in, rest);
  if (magic != "trident-reference" || version != kReferenceVersion)
    throw std::runtime_error("reference file version " + std::to_string(version) + ", test expects " +
                             std::to_string(kReferenceVersion) + "; regenerate: " + kRegenerate);
  std::map<std::string, RefModel> models;
  RefModel* cur = nullptr;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string kind, name;
    ls >> kind >> name;
    if (kind == "model") {
      cur = &models[name];
      cur->cfg.arch = name == "gpt2" ? Arch::gpt2 : Arch::llama;  // the MoE families are LLaMA with model.moe
      std::map<std::string, std::string> kv;
      for (std::string tok; ls >> tok;) kv[tok.substr(0, tok.find('='))] = tok.substr(tok.find('=') + 1);
      auto& m = cur->cfg;
      m.layers = std::stol(kv["layers"]), m.hidden = std::stol(kv["hidden"]), m.heads = std::stol(kv["heads"]);
      m.kv_heads = std::stol(kv["kv_heads"]), m.ffn_hidden = std::stol(kv["ffn_hidden"]);
      m.seq_len = std::stol(kv["seq_len"]), m.vocab = std::stol(kv["vocab"]), m.norm_eps = std::stod(kv["norm_eps"]);
      if (kv.count("rope_theta")) m.rope_theta = std::stod(kv["rope_theta"]);
      m.tie_embeddings = name == "gpt2";
      m.qk_norm = kv.count("qk_norm") && kv["qk_norm"] == "1";
      if (kv.count("head_dim")) m.head_size = std::stol(kv["head_dim"]);  // heads of their own size
      m.attention_bias = kv.count("attention_bias") && kv["attention_bias"] == "1";
      m.o_bias = kv.count("o_bias") && kv["o_bias"] == "1";
      if (kv.count("rope_type")) {  // rotary scaling (model.rope_scaling)
        RopeScaling& s = m.rope_scaling;
        s.type = *parse_enum<RopeType>(kv["rope_type"]);
        auto real = [&](const char* k, double def) { return kv.count(k) ? std::stod(kv[k]) : def; };
        s.factor = real("rope_factor", 1), s.original_seq_len = int64_t(real("rope_original", 0));
        s.low_freq_factor = real("rope_low", 1), s.high_freq_factor = real("rope_high", 4);
        s.beta_fast = real("beta_fast", 32), s.beta_slow = real("beta_slow", 1), s.mscale = real("mscale", 0);
        s.mscale_all_dim = real("mscale_all_dim", 0), s.truncate = real("truncate", 1) != 0;
      }
      if (kv.count("experts")) {  // an MoE family
        MoeConfig& e = m.moe;
        auto num = [&](const char* k, int64_t def) { return kv.count(k) ? std::stol(kv[k]) : def; };
        e.enabled = true, e.experts = num("experts", 0), e.top_k = num("top_k", 0), e.ffn_hidden = num("moe_ffn", 0);
        e.shared_experts = num("shared", 0), e.shared_ffn_hidden = num("shared_ffn", e.ffn_hidden);
        e.shared_expert_gate = num("gate", 0) != 0, e.first_dense = num("first_dense", 0);
        if (kv.count("dense_layers")) e.dense_layers = {std::stol(kv["dense_layers"])};
        e.score = kv["score"] == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
        e.norm_topk = num("norm_topk", 0) != 0, e.groups = num("groups", 1), e.group_topk = num("group_topk", 1);
        e.scaling = kv.count("scaling") ? std::stod(kv["scaling"]) : 1.0;
        // the reference's loss: the language-model loss, + transformers' aux loss where named
        e.balance = kv["balance"] == "hf" ? Balance::hf : Balance::none, e.z_loss = 0;
        e.balance_coef = kv.count("coef") ? std::stod(kv["coef"]) : 0.0;
      }
      if (kv.count("mla")) {  // DeepSeek-V3's multi-head latent attention
        m.attention = AttentionKind::mla;
        m.mla = {std::stol(kv["q_lora"]), std::stol(kv["kv_lora"]), std::stol(kv["nope"]), std::stol(kv["rope"]),
                 std::stol(kv["v"])};
      }
      if (kv.count("mtp")) m.mtp = {std::stol(kv["mtp"]), std::stod(kv["mtp_weight"])};  // multi-token prediction
      if (kv.count("window")) {  // sliding windows: every layer, or those layer_types names
        m.sliding_window = std::stol(kv["window"]);
        for (std::istringstream types(kv.count("layer_types") ? kv["layer_types"] : "");
             std::getline(types, name, ',');)
          m.layer_types.push_back(*parse_enum<LayerAttention>(name));
      }
      m.attention_sinks = kv.count("sinks") && kv["sinks"] == "1";
      if (kv.count("clamped")) {  // gpt-oss's MoE
        MoeConfig& e = m.moe;
        e.router_bias = kv["router_bias"] == "1", e.expert_bias = kv["expert_bias"] == "1";
        e.activation = MoeActivation::clamped_swiglu;
        e.swiglu_limit = std::stod(kv["swiglu_limit"]), e.swiglu_alpha = std::stod(kv["swiglu_alpha"]);
      }
      cur->family = kv.count("family") ? kv["family"] : "";
      m.vocab_multiple = 1;  // Hugging Face's shapes: no vocabulary padding
      continue;
    }
    RefTensor t;
    int ndim = 0;
    ls >> ndim;
    t.shape.resize(size_t(ndim));
    for (auto& d : t.shape) ls >> d;
    t.values.resize(size_t(shape_numel(t.shape)));
    for (auto& v : t.values) ls >> v;
    cur->tensors[kind + " " + name] = std::move(t);
  }
  return models;
}

// GPT-2's Conv1D weights are [in, out] in Hugging Face; Trident stores [out, in].
bool is_conv1d(const std::string& name) {
  for (const char* s : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (name.size() > std::string(s).size() && name.ends_with(s) && name.rfind("transformer.h.", 0) == 0) return true;
  return false;
}

// Trident's name of a transformers parameter: Qwen2-MoE's one shared expert
// is `mlp.shared_expert.*`, Trident's `mlp.shared_experts.*`.
std::string hf_name(const std::string& trident) {
  const std::string ours = ".mlp.shared_experts.", theirs = ".mlp.shared_expert.";
  const size_t at = trident.find(ours);
  return at == std::string::npos ? trident : trident.substr(0, at) + theirs + trident.substr(at + ours.size());
}

std::vector<double> to_trident_layout(const std::string& name, const RefTensor& t) {
  if (!is_conv1d(name)) return t.values;
  const int64_t in = t.shape[0], out = t.shape[1];
  std::vector<double> r(t.values.size());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) r[size_t(o * in + i)] = t.values[size_t(i * out + o)];
  return r;
}

// gpt-oss as transformers holds it, written here from GptOssExperts and
// GptOssTopKRouter (an independent check of the import's map,
// launch/checkpoint/hf_names.hpp): the router under mlp.router; the experts'
// gate_up_proj [E, C, 2I] with gate at the even columns, its bias [E, 2I]
// interleaved alike, down_proj [E, I, C]; Trident's [E, 2I, C] (gate rows,
// then up rows), [E, 2I], [E, C, I].
std::vector<double> gpt_oss_values(const RefModel& ref, const std::string& kind, const ParamSpec& p) {
  std::string name = p.name;
  for (const char* router : {".mlp.gate.weight", ".mlp.gate.bias"})
    if (name.ends_with(router)) name.replace(name.size() - std::string(router).size() + 5, 4, "router");
  const RefTensor& t = ref.at(kind, name);
  const bool gate_up = name.ends_with("mlp.experts.gate_up_proj"), gate_up_bias = name.ends_with("gate_up_proj_bias");
  const bool down = name.ends_with("mlp.experts.down_proj");
  if (!gate_up && !gate_up_bias && !down) return t.values;
  const int64_t E = t.shape[0];
  std::vector<double> ours(t.values.size());
  if (down) {  // theirs [E, I, C] -> ours [E, C, I]
    const int64_t I = t.shape[1], C = t.shape[2];
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < I; ++i)
        for (int64_t c = 0; c < C; ++c) ours[size_t((e * C + c) * I + i)] = t.values[size_t((e * I + i) * C + c)];
    return ours;
  }
  const int64_t K = gate_up ? t.shape[1] : 1, R = gate_up ? t.shape[2] : t.shape[1], I = R / 2;  // R = 2I
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < I; ++j)
      for (int64_t half = 0; half < 2; ++half)  // gate j (their column 2j), up j (2j + 1)
        for (int64_t k = 0; k < K; ++k)
          ours[size_t((e * R + half * I + j) * K + k)] = t.values[size_t((e * K + k) * R + 2 * j + half)];
  return ours;
}

// The reference's param or grad of Trident's parameter p in Trident's
// layout: by name (GPT-2's Conv1D transposed, Qwen2-MoE's shared expert;
// gpt-oss's names and layouts above).
std::vector<double> reference_values(const RefModel& ref, const std::string& kind, const ParamSpec& p) {
  if (ref.family == "gpt_oss") return gpt_oss_values(ref, kind, p);
  const std::string name = ref.tensors.count(kind + " " + p.name) ? p.name : hf_name(p.name);
  return to_trident_layout(p.name, ref.at(kind, name));
}

double rel_diff(const double* a, const std::vector<double>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < b.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]), n += b[i] * b[i];
  return std::sqrt(d / std::max(n, 1e-300));
}

void check_against_reference(const std::string& arch) {
  auto models = load_reference();
  ASSERT_TRUE(models.count(arch)) << "reference has no " << arch << " model; regenerate: " << kRegenerate;
  const RefModel& ref = models.at(arch);
  const auto& tok = ref.at("tokens", "tokens");
  const int64_t B = tok.shape[0], T = tok.shape[1], N = B * T;
  // Hugging Face's LLaMA is not float64 throughout even when cast: RMSNorm
  // normalises in float32 and the rotary cos/sin tables are float32. GPT-2 is.
  // The MoE families' routers run in float32 (transformers casts them), and
  // the routes must not flip: the margin is asserted below.
  const double tol = arch == "gpt2" ? 1e-9 : arch == "llama" ? 2e-6 : 1e-5;
  ASSERT_EQ(T, ref.cfg.seq_len);
  Transformer<double> net(ref.cfg, 1);
  // every Trident parameter comes from the reference, by name and shape
  for (const auto& p : net.registry().params()) {
    const std::vector<double> v = reference_values(ref, "param", p);
    ASSERT_EQ(int64_t(v.size()), p.numel) << p.name;
    std::copy(v.begin(), v.end(), net.param(p.name));
  }
  std::vector<int32_t> tokens(tok.values.begin(), tok.values.end());
  const auto& tg = ref.at("targets", "targets");
  std::vector<int32_t> targets(tg.values.begin(), tg.values.end());
  auto ctx = net.make_activations(B, Recompute::none);
  net.forward(*ctx, tokens.data(), targets.data(), 0.0);
  EXPECT_LT(rel_diff(ctx->logits, ref.at("logits", "logits").values), tol)
      << arch << " logits; first: trident " << ctx->logits[0] << " reference " << ref.at("logits", "logits").values[0];
  double worst = rel_diff(ctx->logits, ref.at("logits", "logits").values);
  // dscale 1/N: the balancing loss's scale is dscale x B x T = 1, as in the reference's sum
  net.reset_moe_step();
  double loss = net.forward(*ctx, tokens.data(), targets.data(), 1.0 / double(N)) / double(N);
  loss += net.balance_losses(*ctx).first;
  const MtpConfig& mtp = ref.cfg.mtp;  // each depth's mean over its T - k positions, weighted
  for (int64_t k = 1; k <= mtp.depth; ++k)
    loss += mtp.loss_weight / double(mtp.depth) * net.mtp_losses()[size_t(k - 1)] / double(B * (T - k));
  EXPECT_NEAR(loss, ref.at("loss", "loss").values[0], tol) << arch;
  // no route may be near a tie (a one-ulp difference would flip it): every token of every MoE layer
  for (size_t l = 0; l < ctx->moe.size(); ++l) {
    const MoeActs<double>& a = ctx->moe[l];
    if (!a.logits) continue;
    const double* bias = nullptr;
    const std::string bias_name = layer_prefix(ref.cfg, int64_t(l)) + "mlp.gate.e_score_correction_bias";
    for (const auto& p : net.registry().params())
      if (p.name == bias_name) bias = net.param(p.name);
    kernels::RouterSpec spec{ref.cfg.moe.experts, ref.cfg.moe.top_k,      ref.cfg.moe.score,  ref.cfg.moe.norm_topk,
                             ref.cfg.moe.groups,  ref.cfg.moe.group_topk, ref.cfg.moe.scaling};
    const double margin = kernels::router_margin(a.logits, bias, N, spec);
    EXPECT_GT(margin, 1e-3) << arch << " layer " << l;
    if (std::getenv("TRIDENT_TEST_VERBOSE"))
      std::fprintf(stderr, "%s layer %zu: margin %.3e\n", arch.c_str(), l, margin);
  }
  net.backward(*ctx, Recompute::none);
  int checked = 0;
  for (const auto& p : net.registry().params()) {
    const std::vector<double> g = reference_values(ref, "grad", p);
    if (p.kind == ParamKind::buffer) {  // the correction bias: its slot holds counts (docs/moe.md)
      ++checked;
      continue;
    }
    worst = std::max(worst, rel_diff(net.grad(p.name), g));
    EXPECT_LT(rel_diff(net.grad(p.name), g), tol)
        << arch << " gradient of " << p.name << ": trident " << net.grad(p.name)[0] << " reference " << g[0];
    ++checked;
  }
  EXPECT_EQ(checked, int(ref.tensors.size() - 4) / 2) << "parameter sets differ";
  if (std::getenv("TRIDENT_TEST_VERBOSE"))
    std::fprintf(stderr, "%s: worst relative difference %.3e\n", arch.c_str(), worst);
}

TEST(Reference, Gpt2MatchesHuggingFace) { check_against_reference("gpt2"); }
TEST(Reference, LlamaMatchesHuggingFace) { check_against_reference("llama"); }
TEST(Reference, MixtralMatchesHuggingFace) { check_against_reference("mixtral"); }
TEST(Reference, Qwen2MoeMatchesHuggingFace) { check_against_reference("qwen2_moe"); }
TEST(Reference, Qwen2MoeNormTopkMatchesHuggingFace) { check_against_reference("qwen2_moe_norm"); }
TEST(Reference, Glm4MoeMatchesHuggingFace) { check_against_reference("glm4_moe"); }
TEST(Reference, Qwen3MatchesHuggingFace) { check_against_reference("qwen3"); }
// model.head_dim other than hidden / heads (as every released Qwen3)
TEST(Reference, Qwen3WithItsOwnHeadSizeMatchesHuggingFace) { check_against_reference("qwen3_head_dim"); }
// gpt-oss: sinks, windows on layers 0 and 2 (3 of the 7 positions), biases everywhere, the clamped SwiGLU reaching
// its clamps, YaRN untruncated over 4 original positions; Qwen2's sliding layers; Mistral's window on every layer
TEST(Reference, GptOssMatchesHuggingFace) { check_against_reference("gpt_oss"); }
TEST(Reference, Qwen2SlidingLayersMatchHuggingFace) { check_against_reference("qwen2_sliding"); }
TEST(Reference, MistralSlidingWindowMatchesHuggingFace) { check_against_reference("mistral_sliding"); }
// model.rope_scaling: Llama 3.1's, YaRN (truncated and not), DeepSeek-V3's YaRN with its softmax-scale correction
// model.attention_bias (Qwen2), and with model.o_bias (transformers' Llama with attention_bias)
TEST(Reference, Qwen2MatchesHuggingFace) { check_against_reference("qwen2"); }
TEST(Reference, LlamaWithAttentionBiasesMatchesHuggingFace) { check_against_reference("llama_bias"); }
TEST(Reference, Llama3RopeScalingMatchesHuggingFace) { check_against_reference("llama3_rope"); }
TEST(Reference, YarnMatchesHuggingFace) { check_against_reference("llama_yarn"); }
TEST(Reference, YarnUntruncatedMatchesHuggingFace) { check_against_reference("llama_yarn_untruncated"); }
TEST(Reference, DeepseekV3YarnMatchesHuggingFace) { check_against_reference("deepseek_v3_yarn"); }
TEST(Reference, DeepseekV3MatchesHuggingFace) { check_against_reference("deepseek_v3"); }
TEST(Reference, DeepseekV3WithoutQueryLatentMatchesHuggingFace) { check_against_reference("deepseek_v3_no_q_lora"); }
// multi-token prediction (depth 2) on transformers' DeepSeek-V3 modules (make_reference.py: deepseek_v3_mtp)
TEST(Reference, DeepseekV3MultiTokenPredictionMatchesReference) { check_against_reference("deepseek_v3_mtp"); }
TEST(Reference, Qwen3MoeMatchesHuggingFace) { check_against_reference("qwen3_moe"); }
TEST(Reference, Qwen3MoeNormTopkMatchesHuggingFace) { check_against_reference("qwen3_moe_norm"); }
// with transformers' aux loss (balance.kind hf, output_router_logits=True): loss and every gradient
TEST(Reference, MixtralWithAuxLossMatchesHuggingFace) { check_against_reference("mixtral_aux"); }
TEST(Reference, Qwen2MoeWithAuxLossMatchesHuggingFace) { check_against_reference("qwen2_moe_aux"); }

}  // namespace trident::model
