"""Writes tests/model/reference/reference.txt: logits, loss and every parameter and
gradient of tiny Hugging Face GPT2LMHeadModel, LlamaForCausalLM, and the MoE
families MixtralForCausalLM, Qwen2MoeForCausalLM and Glm4MoeForCausalLM, in
float64, for tests/model/test_reference.cpp.

The models are the `transformers` library's own (an outside reference: names,
layouts, GELU variant, rotary convention, grouped-query attention), with their
own random initialisation; the C++ test loads these weights by name.
Loss = mean cross-entropy of logits[b, t] against targets[b, t] (no shift).

Usage: python tests/model/reference/make_reference.py   (needs torch, transformers)
File format, text: line 1 `trident-reference VERSION torch=.. transformers=..`;
then per model a `model ARCH key=value ...` line and lines
`KIND NAME NDIM DIMS... VALUES...` with KIND in tokens, targets, logits, loss,
param, grad (HF shapes; GPT-2 Conv1D weights are [in, out]).
"""
import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VERSION = 1
B, T = 2, 7


def line(out, kind, name, t):
    dims = list(t.shape)
    flat = t.detach().reshape(-1).tolist()
    vals = " ".join(repr(float(v)) if kind not in ("tokens", "targets") else str(int(v)) for v in flat)
    out.write(f"{kind} {name} {len(dims)} {' '.join(map(str, dims))} {vals}\n")


def run(out, arch, model, cfg_line, vocab, aux_coef=0.0):
    torch.manual_seed(7)
    model = model.to(torch.float64)
    model.eval()  # dropout off (all dropout probabilities are 0 anyway)
    with torch.no_grad():  # non-trivial norm weights and biases too
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype))
        for name, b in model.named_buffers():  # a non-zero MoE correction bias
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, dtype=b.dtype))
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, vocab, (B, T), generator=g)
    targets = torch.randint(0, vocab, (B, T), generator=g)
    if aux_coef:  # the MoE balancing loss as transformers adds it (load_balancing_loss_func)
        result = model(input_ids=tokens, output_router_logits=True)
        logits = result.logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss = loss + aux_coef * result.aux_loss
    else:
        logits = model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    out.write(f"model {arch} {cfg_line}\n")
    line(out, "tokens", "tokens", tokens)
    line(out, "targets", "targets", targets)
    line(out, "logits", "logits", logits)
    line(out, "loss", "loss", loss.reshape(1))
    for name, p in model.named_parameters():
        line(out, "param", name, p)
        line(out, "grad", name, p.grad)
    for name, b in model.named_buffers():  # the MoE correction bias: loaded, never trained by gradient
        if name.endswith("e_score_correction_bias"):
            line(out, "param", name, b)
            line(out, "grad", name, torch.zeros_like(b))


def deepseek_v3_mtp(out, base, rope):
    """DeepSeek-V3 with multi-token prediction (arXiv 2412.19437 §2.2), depth
    2: transformers' DeepseekV3ForCausalLM for the main model, and per depth
    the module as DeepSeek's checkpoints name it (model.layers.{L + k - 1}.:
    enorm, hnorm, eh_proj over [enorm(embedding) | hnorm(previous hidden)],
    a DeepseekV3DecoderLayer, shared_head.norm) with the model's embedding
    and LM head, as Megatron-Core and vLLM compute it: depth k's input is the
    token k ahead, its target the token k + 1 ahead, its loss the mean over
    the T - k positions; loss = main + weight / D x sum_k L_k."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm
    depth, weight = 2, 0.3
    cfg = DeepseekV3Config(**dict(base, num_key_value_heads=4), intermediate_size=24, moe_intermediate_size=6,
                           num_experts_per_tok=2, n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=2.5,
                           n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True, q_lora_rank=10,
                           kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3, rope_interleave=True,
                           attention_bias=False, rope_parameters=rope)
    L, C = cfg.num_hidden_layers, cfg.hidden_size

    class Module(torch.nn.Module):
        def __init__(self, idx):
            super().__init__()
            self.enorm = DeepseekV3RMSNorm(C, eps=cfg.rms_norm_eps)
            self.hnorm = DeepseekV3RMSNorm(C, eps=cfg.rms_norm_eps)
            self.eh_proj = torch.nn.Linear(2 * C, C, bias=False)
            self.block = DeepseekV3DecoderLayer(cfg, layer_idx=idx)
            self.shared_head = torch.nn.Module()
            self.shared_head.norm = DeepseekV3RMSNorm(C, eps=cfg.rms_norm_eps)

    class WithMtp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.main = DeepseekV3ForCausalLM(cfg)
            self.mtp = torch.nn.ModuleList([Module(L + k) for k in range(depth)])
            with torch.no_grad():  # transformers initialises only its own models' modules: these as they are
                for mod in self.mtp.modules():
                    self.main._init_weights(mod)

        def forward(self, input_ids, targets):
            m = self.main.model
            h = m(input_ids=input_ids).last_hidden_state  # after the final norm
            logits = self.main.lm_head(h)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            Bn, Tn = input_ids.shape
            pos = torch.arange(Tn)[None].expand(Bn, Tn)
            mask = torch.full((Tn, Tn), float("-inf"), dtype=h.dtype).triu(1)[None, None]
            for k, mod in enumerate(self.mtp, start=1):
                tok = torch.zeros_like(targets)
                tok[:, :Tn - k + 1] = targets[:, k - 1:]
                tgt = torch.full_like(targets, -100)
                tgt[:, :Tn - k] = targets[:, k:]
                x = mod.eh_proj(torch.cat([mod.enorm(m.embed_tokens(tok)), mod.hnorm(h)], dim=-1))
                x = mod.block(x, attention_mask=mask, position_ids=pos, position_embeddings=m.rotary_emb(x, pos))
                h = mod.shared_head.norm(x)
                lk = torch.nn.functional.cross_entropy(self.main.lm_head(h).reshape(-1, logits.shape[-1]),
                                                       tgt.reshape(-1), ignore_index=-100)
                loss = loss + weight / depth * lk
            return logits, loss

    torch.manual_seed(7)
    model = WithMtp().to(torch.float64)
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, dtype=b.dtype))
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 13, (B, T), generator=g)
    targets = torch.randint(0, 13, (B, T), generator=g)
    logits, loss = model(tokens, targets)
    loss.backward()
    out.write("model deepseek_v3_mtp layers=3 hidden=16 heads=4 kv_heads=4 seq_len=7 vocab=13 norm_eps=1e-5 "
              "rope_theta=10000 ffn_hidden=24 experts=8 top_k=2 moe_ffn=6 shared=2 shared_ffn=6 first_dense=1 "
              "score=sigmoid norm_topk=1 groups=4 group_topk=2 scaling=2.5 mla=1 q_lora=10 kv_lora=6 nope=4 rope=4 "
              f"v=3 mtp={depth} mtp_weight={weight}\n")
    line(out, "tokens", "tokens", tokens)
    line(out, "targets", "targets", targets)
    line(out, "logits", "logits", logits)
    line(out, "loss", "loss", loss.reshape(1))

    def name_of(n):  # DeepSeek's checkpoint names
        if n.startswith("main."):
            return n[len("main."):]
        k, rest = n[len("mtp."):].split(".", 1)
        return f"model.layers.{L + int(k)}." + rest.replace("block.", "", 1)
    for n, p in model.named_parameters():
        line(out, "param", name_of(n), p)
        line(out, "grad", name_of(n), p.grad)
    for n, b in model.named_buffers():
        if n.endswith("e_score_correction_bias"):
            line(out, "param", name_of(n), b)
            line(out, "grad", name_of(n), torch.zeros_like(b))


def moe_families(out):
    """Mixture of experts: Mixtral, Qwen2-MoE (a gated shared expert, a dense
    layer by mlp_only_layers, both norm_topk_prob values) and GLM-4-MoE
    (sigmoid routing with a non-zero correction bias, groups, scaling, shared
    experts, a dense first layer). The loss is the language-model loss alone
    (no aux loss: output_router_logits off); the router's gradients come
    through the routing weights."""
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM, MixtralConfig, MixtralForCausalLM
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    base = dict(vocab_size=13, hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.3,
                bos_token_id=0, eos_token_id=0, attn_implementation="eager", experts_implementation="eager")
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    common = "layers=3 hidden=16 heads=4 kv_heads=2 seq_len=7 vocab=13 norm_eps=1e-5 rope_theta=10000"
    mixtral = MixtralConfig(**base, intermediate_size=12, num_local_experts=4, num_experts_per_tok=2,
                            router_jitter_noise=0.0, sliding_window=None, rope_parameters=rope)
    run(out, "mixtral", MixtralForCausalLM(mixtral),
        common + " ffn_hidden=12 experts=4 top_k=2 moe_ffn=12 score=softmax norm_topk=1", 13)
    # with transformers' aux loss (output_router_logits=True): one cross-layer product
    run(out, "mixtral_aux", MixtralForCausalLM(mixtral),
        common + " ffn_hidden=12 experts=4 top_k=2 moe_ffn=12 score=softmax norm_topk=1 balance=hf coef=0.05", 13,
        aux_coef=0.05)
    for norm in (False, True):
        q = Qwen2MoeConfig(**base, intermediate_size=24, moe_intermediate_size=12, shared_expert_intermediate_size=10,
                           num_experts=4, num_experts_per_tok=2, norm_topk_prob=norm, mlp_only_layers=[1],
                           decoder_sparse_step=1, qkv_bias=False, use_sliding_window=False, rope_parameters=rope)
        qwen = (common + f" ffn_hidden=24 experts=4 top_k=2 moe_ffn=12 shared=1 shared_ffn=10 gate=1 dense_layers=1 "
                         f"score=softmax norm_topk={int(norm)}")
        run(out, "qwen2_moe" + ("_norm" if norm else ""), Qwen2MoeForCausalLM(q), qwen, 13)
        if norm:
            run(out, "qwen2_moe_aux", Qwen2MoeForCausalLM(q), qwen + " balance=hf coef=0.05", 13, aux_coef=0.05)
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    q3 = Qwen3Config(**base, intermediate_size=24, head_dim=4, attention_bias=False, use_sliding_window=False,
                     rope_parameters=rope)
    run(out, "qwen3", Qwen3ForCausalLM(q3), common + " ffn_hidden=24 qk_norm=1", 13)
    for norm in (False, True):
        q = Qwen3MoeConfig(**base, intermediate_size=24, moe_intermediate_size=12, num_experts=4, num_experts_per_tok=2,
                           norm_topk_prob=norm, mlp_only_layers=[1], decoder_sparse_step=1, head_dim=4,
                           attention_bias=False, use_sliding_window=False, rope_parameters=rope)
        run(out, "qwen3_moe" + ("_norm" if norm else ""), Qwen3MoeForCausalLM(q),
            common + f" ffn_hidden=24 qk_norm=1 experts=4 top_k=2 moe_ffn=12 dense_layers=1 score=softmax "
                     f"norm_topk={int(norm)}", 13)
    g = Glm4MoeConfig(**base, intermediate_size=24, moe_intermediate_size=6, num_experts_per_tok=2, n_shared_experts=2,
                      n_routed_experts=8, routed_scaling_factor=2.5, n_group=4, topk_group=2, first_k_dense_replace=1,
                      norm_topk_prob=True, attention_bias=False, use_qk_norm=False,
                      rope_parameters=dict(rope, partial_rotary_factor=1.0))
    run(out, "glm4_moe", Glm4MoeForCausalLM(g),
        common + " ffn_hidden=24 experts=8 top_k=2 moe_ffn=6 shared=2 shared_ffn=6 first_dense=1 score=sigmoid "
                 "norm_topk=1 groups=4 group_topk=2 scaling=2.5", 13)
    # DeepSeek-V3: multi-head latent attention (with and without the query
    # latent; value heads smaller than the query heads; interleaved rotary)
    # on its MoE (sigmoid routing with a non-zero correction bias, groups,
    # scaling, shared experts, a dense first layer)
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    for q_lora in (10, None):
        d = DeepseekV3Config(**dict(base, num_key_value_heads=4), intermediate_size=24, moe_intermediate_size=6,
                             num_experts_per_tok=2, n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=2.5,
                             n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
                             q_lora_rank=q_lora, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3,
                             rope_interleave=True, attention_bias=False, rope_parameters=rope)
        run(out, "deepseek_v3" + ("" if q_lora else "_no_q_lora"), DeepseekV3ForCausalLM(d),
            common.replace("kv_heads=2", "kv_heads=4") +
            " ffn_hidden=24 experts=8 top_k=2 moe_ffn=6 shared=2 shared_ffn=6 first_dense=1 score=sigmoid "
            f"norm_topk=1 groups=4 group_topk=2 scaling=2.5 mla=1 q_lora={q_lora or 0} kv_lora=6 nope=4 rope=4 v=3",
            13)
    deepseek_v3_mtp(out, base, rope)
    families_2026(out, base, rope, common)


def families_2026(out, base, rope, common):
    """The released families' features (made after the others, so that
    their random draws leave the models above as they were)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    # heads of their own size (head_dim 6 on a 16-wide model with 4 heads: q_proj [24, 16], o_proj [16, 24])
    q3h = Qwen3Config(**base, intermediate_size=24, head_dim=6, attention_bias=False, use_sliding_window=False,
                      rope_parameters=rope)
    run(out, "qwen3_head_dim", Qwen3ForCausalLM(q3h), common + " ffn_hidden=24 qk_norm=1 head_dim=6", 13)
    # rotary scaling: heads of 8 (4 frequencies, theta 100: wavelengths 6.3, 19.9, 62.8, 199) so that every
    # branch of each formula is taken
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    wide = dict(base, hidden_size=32)
    llama3 = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    lc = LlamaConfig(**wide, intermediate_size=24, attention_bias=False, mlp_bias=False, rope_parameters=llama3)
    wide_line = common.replace("hidden=16", "hidden=32").replace("rope_theta=10000", "rope_theta=100")
    run(out, "llama3_rope", LlamaForCausalLM(lc),
        wide_line + " ffn_hidden=24 rope_type=llama3 rope_factor=8 rope_original=32 rope_low=1 rope_high=4", 13)
    for truncate in (True, False):  # the ramp over dimensions 2.6 .. 5.6 (truncated: 2 .. 6)
        yarn = {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "original_max_position_embeddings": 4096,
                "beta_fast": 32.0, "beta_slow": 1.0, "truncate": truncate}
        lc = LlamaConfig(**wide, intermediate_size=24, attention_bias=False, mlp_bias=False, rope_parameters=yarn)
        run(out, "llama_yarn" + ("" if truncate else "_untruncated"), LlamaForCausalLM(lc),
            wide_line + f" ffn_hidden=24 rope_type=yarn rope_factor=4 rope_original=4096 beta_fast=32 beta_slow=1 "
                        f"truncate={int(truncate)}", 13)
    # biases: Qwen2's on q, k and v; transformers' Llama with attention_bias on q, k, v and o
    from transformers import Qwen2Config, Qwen2ForCausalLM
    q2 = Qwen2Config(**base, intermediate_size=24, use_sliding_window=False, rope_parameters=rope)
    run(out, "qwen2", Qwen2ForCausalLM(q2), common + " ffn_hidden=24 attention_bias=1", 13)
    lb = LlamaConfig(**base, intermediate_size=24, attention_bias=True, mlp_bias=False, rope_parameters=rope)
    run(out, "llama_bias", LlamaForCausalLM(lb), common + " ffn_hidden=24 attention_bias=1 o_bias=1", 13)
    # DeepSeek-V3's YaRN (factor 40, mscale = mscale_all_dim = 1): cos and sin unscaled, the softmax scale times
    # (0.1 ln 40 + 1)^2
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 64,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    d = DeepseekV3Config(**dict(base, num_key_value_heads=4), intermediate_size=24, moe_intermediate_size=6,
                         num_experts_per_tok=2, n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=2.5,
                         n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True, q_lora_rank=10,
                         kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3, rope_interleave=True,
                         attention_bias=False, rope_parameters=yarn)
    run(out, "deepseek_v3_yarn", DeepseekV3ForCausalLM(d),
        common.replace("kv_heads=2", "kv_heads=4") +
        " ffn_hidden=24 experts=8 top_k=2 moe_ffn=6 shared=2 shared_ffn=6 first_dense=1 score=sigmoid "
        "norm_topk=1 groups=4 group_topk=2 scaling=2.5 mla=1 q_lora=10 kv_lora=6 nope=4 rope=4 v=3 "
        "rope_type=yarn rope_factor=40 rope_original=64 beta_fast=32 beta_slow=1 mscale=1 mscale_all_dim=1", 13)
    gpt_oss_and_windows(out, base, rope, common)


def gpt_oss_and_windows(out, base, rope, common):
    """gpt-oss: attention sinks, a sliding window of 3 (shorter than the 7
    positions) on layers 0 and 2, biases on q, k, v, o, the router and the
    experts, the clamped SwiGLU (limit 1.0: the gate and up values reach it),
    the softmax over the chosen logits, YaRN over 4 original positions
    (untruncated), heads of their own size; and Qwen2's sliding layers
    (use_sliding_window with layer_types), Mistral's window on every layer."""
    from transformers import GptOssConfig, GptOssForCausalLM, MistralConfig, MistralForCausalLM
    from transformers import Qwen2Config, Qwen2ForCausalLM
    yarn = {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "original_max_position_embeddings": 4,
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
    types = ["sliding_attention", "full_attention", "sliding_attention"]
    g = GptOssConfig(**base, intermediate_size=6, head_dim=6, num_local_experts=4, num_experts_per_tok=2,
                     sliding_window=3, layer_types=types, swiglu_limit=1.0, attention_bias=True,
                     router_aux_loss_coef=0.0, rope_parameters=yarn)
    run(out, "gpt_oss", GptOssForCausalLM(g),
        common.replace("rope_theta=10000", "rope_theta=100") +
        " ffn_hidden=6 head_dim=6 experts=4 top_k=2 moe_ffn=6 score=softmax norm_topk=1 family=gpt_oss "
        "attention_bias=1 o_bias=1 sinks=1 window=3 layer_types=sliding,full,sliding router_bias=1 expert_bias=1 "
        "clamped=1 swiglu_limit=1.0 swiglu_alpha=1.702 rope_type=yarn rope_factor=4 rope_original=4 beta_fast=32 "
        "beta_slow=1 truncate=0", 13)
    q2 = Qwen2Config(**base, intermediate_size=24, use_sliding_window=True, sliding_window=3,
                     layer_types=["full_attention", "sliding_attention", "sliding_attention"], rope_parameters=rope)
    run(out, "qwen2_sliding", Qwen2ForCausalLM(q2),
        common + " ffn_hidden=24 attention_bias=1 window=3 layer_types=full,sliding,sliding", 13)
    mc = MistralConfig(**base, intermediate_size=24, sliding_window=4, rope_parameters=rope)
    run(out, "mistral_sliding", MistralForCausalLM(mc), common + " ffn_hidden=24 window=4", 13)


def main():
    torch.manual_seed(1234)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.txt")
    with open(path + ".tmp", "w") as out:
        out.write(f"trident-reference {VERSION} torch={torch.__version__} transformers={transformers.__version__}\n")
        gc = GPT2Config(vocab_size=11, n_positions=T, n_embd=12, n_layer=2, n_head=3, n_inner=20,
                        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=1e-5, initializer_range=0.3, tie_word_embeddings=True,
                        bos_token_id=0, eos_token_id=0)
        run(out, "gpt2", GPT2LMHeadModel(gc),
            "layers=2 hidden=12 heads=3 kv_heads=3 ffn_hidden=20 seq_len=7 vocab=11 norm_eps=1e-5", 11)
        lc = LlamaConfig(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         attention_bias=False, mlp_bias=False, initializer_range=0.3, bos_token_id=0, eos_token_id=0,
                         attn_implementation="eager")
        run(out, "llama", LlamaForCausalLM(lc),
            "layers=2 hidden=16 heads=4 kv_heads=2 ffn_hidden=24 seq_len=7 vocab=13 norm_eps=1e-5 rope_theta=10000",
            13)
        moe_families(out)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
