"""Hugging Face interoperability, both directions, GPT-2, LLaMA (with Mistral's
and Qwen2's sliding windows) and the mixture-of-experts families (Mixtral,
Qwen2-MoE and Qwen3-MoE (QK-norm) with both norm_topk_prob values and
mlp_only_layers, GLM-4-MoE with a non-zero correction bias, groups, scaling,
shared experts and a dense first layer, DeepSeek-V3: the same MoE with
multi-head latent attention, with and without the query latent; gpt-oss with
its sinks, windows, biases and clamped SwiGLU). The user flow at the end:
a transformers-made Qwen3-MoE and gpt-oss imported without a recipe,
trained on 8 ranks, exported, loaded by transformers with the trained loss.

Export: Trident trains a small model on a tensor- or pipeline-parallel mesh
(real MPI ranks) and saves a checkpoint; `trident export --format hf` writes
a transformers directory; transformers loads it (GPT2LMHeadModel /
LlamaForCausalLM) and its logits on a batch of token sequences must match the
logits `trident sample --logits` computes from the checkpoint within 1e-4.

Import: transformers builds a randomly initialised model of the recipe's
sizes and saves it (safetensors); `trident import` turns it into a Trident
checkpoint; Trident's logits on the same batch must match transformers'
within 1e-4, and exporting that checkpoint again must give back the same
tensors bit for bit.

Import, then train: a transformers GPT-2 imported into a step-0 checkpoint
trains under every mesh of the equivalence matrix (data with ZeRO 0-3,
tensor, sequence, pipeline with each schedule, context, and their 4- and
8-rank combinations) on a dataset whose one epoch is the global batch: step
1's loss is transformers' own loss on that epoch (within 1e-5), and every
step's loss is the single-rank run's (within 1e-4, the equivalence
tolerance).

MoE: transformers builds each family at configs/moe-tiny.yaml's sizes (the
first seed whose routes on the test batch are all far from a tie: the gap
between the k-th and (k+1)-th choice, and between kept and dropped groups, is
asserted above 1e-4 of the row's largest score, so a rounding difference
cannot flip a route unnoticed); `trident import` reads its fused 5.x layout;
the logits must match within 1e-4; exporting writes the hub layout (a tensor
per expert), which transformers loads back to the same weights bit for bit
and which imports to the same logits bit for bit. Trained by Trident on a
mesh (tensor 2; data 2 with ZeRO 3 and a moving correction bias), exported,
loaded by transformers: the same logits.

Usage: interop.py --trident BUILD/launch/trident --root SOURCE_DIR --work DIR
"""
import argparse
import shutil
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

TOL = 1e-4
BATCH = [[1, 5, 9, 2, 7, 7, 3, 0, 31, 4, 18, 22], [30, 2, 2, 17, 6], list(range(32)) * 2]  # last: seq_len 64


def run(cmd, **kw):
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout, r.stderr, sep="\n")
        raise SystemExit(f"command failed with exit code {r.returncode}: {' '.join(cmd)}")
    return r


def trident_logits(a, ckpt, ids, name):
    out = os.path.join(a.work, name + ".safetensors")
    run([a.trident, "sample", ckpt, "--prompt-ids", ",".join(map(str, ids)), "--tokens", "0", "--logits", out])
    t = load_file(out)
    assert t["tokens"].tolist() == ids, "the logits file holds another prompt"
    return t["logits"].double()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double()


def compare(what, ours, theirs):
    assert ours.shape == theirs.shape, f"{what}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    diff = (ours - theirs).abs().max().item()
    scale = theirs.abs().max().item()
    print(f"{what}: max |trident - transformers| = {diff:.3e} (logits up to {scale:.2f})", flush=True)
    assert diff < TOL, f"{what}: logits differ by {diff:.3e} > {TOL}"
    return diff


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n)]


def export_direction(a, arch, recipe, mesh, ranks):
    ckpt = os.path.join(a.work, f"train_{arch}")
    sets = ["train.steps=30", "eval.every=0", "eval.batches=2", "log.metrics=", f"checkpoint.dir={ckpt}"] + mesh
    cmd = mpirun(ranks) + [a.trident, "train", os.path.join(a.root, "configs", recipe)]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    out = os.path.join(a.work, f"hf_{arch}")
    run([a.trident, "export", ckpt, "--format", "hf", "--out", out])
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    expected = GPT2LMHeadModel if arch == "gpt2" else LlamaForCausalLM
    assert isinstance(model, expected), f"transformers loaded {type(model).__name__}, expected {expected.__name__}"
    worst = 0.0
    for i, ids in enumerate(BATCH):
        worst = max(worst, compare(f"export {arch} ({' '.join(mesh)}) sequence {i}",
                                   trident_logits(a, ckpt, ids, f"exp_{arch}_{i}"), hf_logits(model, ids)))
    return worst


def import_direction(a, arch, recipe, hf_extra=None, sets=(), tag=None):
    torch.manual_seed(7)
    if arch == "qwen2":  # biases on q, k and v (Qwen2, Qwen2.5)
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(**dict(dict(vocab_size=32, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.1,
                                      use_sliding_window=False), **(hf_extra or {})))
        model = Qwen2ForCausalLM(cfg)
    elif arch == "mistral":  # LLaMA's model with a sliding window on every layer
        from transformers import MistralConfig, MistralForCausalLM
        cfg = MistralConfig(vocab_size=32, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                            tie_word_embeddings=False, initializer_range=0.1, **(hf_extra or {}))
        model = MistralForCausalLM(cfg)
    elif arch == "qwen3":  # the released families' attention: heads of their own size, QK-norm
        from transformers import Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(vocab_size=32, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=48, max_position_embeddings=64,
                          rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.1, attention_bias=False,
                          use_sliding_window=False, **(hf_extra or {}))
        model = Qwen3ForCausalLM(cfg)
    elif arch == "gpt2":
        cfg = GPT2Config(vocab_size=32, n_positions=64, n_embd=128, n_layer=4, n_head=4, n_inner=512,
                         activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0, initializer_range=0.1)
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(vocab_size=32, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                          tie_word_embeddings=False, initializer_range=0.1,
                          **(hf_extra or {"rope_theta": 10000.0}))
        model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms and biases away from their initial 1 and 0, so that a mix-up shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    model.eval()
    tag = tag or arch + ("_" + sets[0].split("=")[1] if sets else "")
    src = os.path.join(a.work, f"hf_src_{tag}")
    model.save_pretrained(src, safe_serialization=True)
    ckpt = os.path.join(a.work, f"imported_{tag}")
    run([a.trident, "import", src, "--recipe", os.path.join(a.root, "configs", recipe), "--out", ckpt] +
        [x for kv in sets for x in ("--set", kv)])
    worst = 0.0
    for i, ids in enumerate(BATCH):
        worst = max(worst, compare(f"import {tag} sequence {i}", trident_logits(a, ckpt, ids, f"imp_{tag}_{i}"),
                                   hf_logits(model, ids)))
    # without --recipe: the recipe written from config.json makes the same model, to the last bit
    derived = ckpt + "_derived"
    run([a.trident, "import", src, "--out", derived])
    for i, ids in enumerate(BATCH):
        ours = trident_logits(a, derived, ids, f"der_{tag}_{i}")
        assert torch.equal(ours, trident_logits(a, ckpt, ids, f"imp_{tag}_{i}")), f"{tag}: the derived recipe differs"
    print(f"import {tag} without --recipe: {derived}/recipe.yaml gives the same logits bit for bit", flush=True)
    # round trip: import then export gives back transformers' tensors exactly
    back = os.path.join(a.work, f"hf_back_{tag}")
    run([a.trident, "export", ckpt, "--format", "hf", "--out", back])
    original, again = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
    skip = {k for k in original if k.endswith(".attn.bias") or k.endswith(".masked_bias")}
    assert set(original) - skip == set(again), f"tensor names differ: {sorted(set(original) ^ set(again))}"
    for k, v in again.items():
        assert torch.equal(original[k], v), f"round trip changed {k}"
    if hf_extra:  # the exported config.json builds the same model in transformers: the same logits
        reloaded = AutoModelForCausalLM.from_pretrained(back).eval()
        for ids in BATCH:
            compare(f"export {tag} reloaded", hf_logits(reloaded, ids), hf_logits(model, ids))
    print(f"import {tag}: import -> export gives back all {len(again)} tensors bit for bit", flush=True)
    return worst


# The equivalence matrix: (ranks, --set overrides).
IMPORT_MESHES = [
    (1, []),
    (2, ["parallel.data=2", "parallel.zero=0"]),
    (2, ["parallel.data=2", "parallel.zero=1"]),
    (2, ["parallel.data=2", "parallel.zero=2"]),
    (2, ["parallel.data=2", "parallel.zero=3"]),
    (2, ["parallel.tensor=2"]),
    (2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
    (2, ["parallel.pipeline=2", "parallel.schedule=gpipe"]),
    (2, ["parallel.pipeline=2", "parallel.schedule=1f1b"]),
    (2, ["parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"]),
    (2, ["parallel.pipeline=2", "parallel.schedule=zero_bubble"]),
    (2, ["parallel.context=2"]),
    (2, ["parallel.context=2", "parallel.context_mode=all_to_all"]),
    (4, ["parallel.data=2", "parallel.tensor=2", "parallel.zero=1"]),
    (4, ["parallel.data=2", "parallel.pipeline=2", "parallel.zero=2"]),
    (4, ["parallel.data=4", "parallel.zero=3"]),
    (4, ["parallel.data=2", "parallel.context=2", "parallel.zero=1"]),
    (4, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.schedule=interleaved_1f1b", "parallel.virtual_stages=2"]),
    (8, ["parallel.data=2", "parallel.tensor=2", "parallel.pipeline=2", "parallel.zero=1"]),
    (8, ["parallel.data=2", "parallel.tensor=2", "parallel.pipeline=2", "parallel.zero=3",
         "parallel.sequence_parallel=true"]),
]


def import_then_train(a):
    torch.manual_seed(11)
    cfg = GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=4, n_head=4, n_inner=256,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, initializer_range=0.2)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    model.eval()
    src = os.path.join(a.work, "hf_src_train")
    model.save_pretrained(src, safe_serialization=True)
    # one document of 8 x 32 + 1 byte tokens: one epoch = 8 windows of 33 = the global batch
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(32, 127, (8 * 32 + 1,), generator=g).tolist()
    text = "".join(chr(i) for i in ids)
    corpus = os.path.join(a.work, "epoch.jsonl")
    with open(corpus, "w") as f:
        f.write(json.dumps({"text": text}) + "\n")
    prefix = os.path.join(a.work, "epoch")
    run([a.trident, "prepare", "--input", corpus, "--out", prefix, "--tokenizer", "byte", "--eod-token", "none",
         "--valid-fraction", "0"])
    recipe = os.path.join(a.work, "import_train.yaml")
    with open(recipe, "w") as f:
        f.write("model: {arch: gpt2, layers: 4, hidden: 64, heads: 4, ffn_hidden: 256, seq_len: 32, vocab: 256}\n"
                "parallel: {data: 1, tensor: 1, pipeline: 1}\n"
                "train: {global_batch: 8, micro_batch: 1, steps: 4, recompute: none}\n"
                "optim: {lr: 1.0e-3, min_lr: 1.0e-4, warmup: 0, decay: cosine, betas: [0.9, 0.95], "
                "weight_decay: 0.1, grad_clip: 1.0}\n"
                f"data: {{train: {prefix}_train}}\n"
                "eval: {every: 0}\n"
                "log: {every: 1}\n"
                "seed: 1234\n")
    ckpt = os.path.join(a.work, "imported_train")
    run([a.trident, "import", src, "--recipe", recipe, "--out", ckpt])
    with torch.no_grad():  # transformers' loss over the epoch: every token of the 8 windows
        windows = torch.tensor([ids[32 * k: 32 * k + 33] for k in range(8)])
        logits = model(windows[:, :32]).logits.double()
        hf_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1)).item()
    reference = None
    worst_first, worst_after = 0.0, 0.0
    for k, (ranks, mesh) in enumerate(IMPORT_MESHES):
        metrics = os.path.join(a.work, f"import_train_{k}.jsonl")
        cmd = ([] if ranks == 1 else mpirun(ranks)) + [a.trident, "train", recipe, "--resume", ckpt,
                                                       "--set", f"log.metrics={metrics}"]
        for s in mesh:
            cmd += ["--set", s]
        run(cmd)
        with open(metrics) as f:
            losses = [r["loss"] for r in map(json.loads, f) if r.get("type") == "train"]
        what = " ".join(mesh) or "one rank"
        assert len(losses) == 4, f"{what}: {len(losses)} train records, expected 4"
        first = abs(losses[0] / hf_loss - 1)
        print(f"import+train ({what}): step-1 loss {losses[0]:.7f}, transformers {hf_loss:.7f} (rel {first:.1e}); "
              f"losses {' '.join(f'{x:.6f}' for x in losses)}", flush=True)
        assert first < 1e-5, f"{what}: step-1 loss {losses[0]} is not transformers' {hf_loss}"
        worst_first = max(worst_first, first)
        if reference is None:
            reference = losses
            continue
        for step, (x, r) in enumerate(zip(losses, reference)):
            rel = abs(x / r - 1)
            assert rel < 1e-4, f"{what}: step {step + 1} loss {x} vs one rank {r} (rel {rel:.1e})"
            worst_after = max(worst_after, rel)
    assert abs(reference[-1] / reference[0] - 1) > 1e-3, "training did not move the loss"
    return {"first_vs_transformers": worst_first, "steps_vs_one_rank": worst_after}


# Mixture of experts: transformers' families of configs/moe-tiny.yaml's sizes,
# each with the recipe overrides that make Trident's model the same one.
# configs/moe-tiny.yaml made DeepSeek-V3's shape (docs/mla.md)
DEEPSEEK_SETS = ["model.attention=mla", "model.kv_heads=4", "model.mla.kv_lora_rank=32", "model.mla.qk_nope_head_dim=32",
                 "model.mla.qk_rope_head_dim=16", "model.mla.v_head_dim=24", "model.moe.shared_experts=2",
                 "model.moe.router.score=sigmoid", "model.moe.router.groups=4", "model.moe.router.group_topk=2",
                 "model.moe.router.scaling=2.5"]


# configs/moe-tiny.yaml made gpt-oss's shape
GPT_OSS_SETS = ["model.moe.first_dense=0", "model.head_dim=48", "model.attention_bias=true", "model.o_bias=true",
                "model.attention_sinks=true", "model.sliding_window=16", "model.layer_types=[sliding,full,sliding,full]",
                "model.moe.router.bias=true", "model.moe.expert_bias=true", "model.moe.activation=clamped_swiglu",
                "model.moe.swiglu_limit=1.5", "model.rope_scaling.type=yarn", "model.rope_scaling.factor=4",
                "model.rope_scaling.original_seq_len=16", "model.rope_scaling.truncate=false"]


def moe_families():
    from transformers import DeepseekV3Config, Glm4MoeConfig, GptOssConfig, MixtralConfig, Qwen2MoeConfig
    from transformers import Qwen3MoeConfig
    common = dict(vocab_size=32, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.1)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    qwen = dict(common, intermediate_size=352, moe_intermediate_size=96, shared_expert_intermediate_size=64,
                num_experts=8, num_experts_per_tok=2, mlp_only_layers=[1], decoder_sparse_step=1,
                use_sliding_window=False, rope_parameters=rope)
    qwen_sets = ["model.moe.first_dense=0", "model.moe.shared_experts=1", "model.moe.shared_ffn_hidden=64",
                 "model.moe.shared_expert_gate=true", "model.moe.dense_layers=[1]"]
    return [
        ("mixtral", MixtralConfig(**common, intermediate_size=96, num_local_experts=8, num_experts_per_tok=2,
                                  router_jitter_noise=0.0, sliding_window=None, rope_parameters=rope),
         ["model.moe.first_dense=0"], dict(score="softmax", k=2, groups=1, group_topk=1)),
        ("qwen2_moe", Qwen2MoeConfig(**qwen, norm_topk_prob=False),
         qwen_sets + ["model.moe.router.norm_topk=false"], dict(score="softmax", k=2, groups=1, group_topk=1)),
        ("qwen2_moe_norm_topk", Qwen2MoeConfig(**qwen, norm_topk_prob=True),
         qwen_sets + ["model.moe.router.norm_topk=true"], dict(score="softmax", k=2, groups=1, group_topk=1)),
        ("qwen3_moe", Qwen3MoeConfig(**common, intermediate_size=352, moe_intermediate_size=96, num_experts=8,
                                     num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
                                     decoder_sparse_step=1, head_dim=32, attention_bias=False,
                                     use_sliding_window=False, rope_parameters=rope),
         ["model.moe.first_dense=0", "model.qk_norm=true", "model.moe.dense_layers=[1]",
          "model.moe.router.norm_topk=false"], dict(score="softmax", k=2, groups=1, group_topk=1)),
        ("qwen3_moe_norm_topk", Qwen3MoeConfig(**common, intermediate_size=352, moe_intermediate_size=96,
                                               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                               head_dim=32, attention_bias=False, use_sliding_window=False,
                                               rope_parameters=rope),
         ["model.moe.first_dense=0", "model.qk_norm=true"], dict(score="softmax", k=2, groups=1, group_topk=1)),
        # DeepSeek-V3: glm4_moe's MoE with multi-head latent attention, with and without the query latent
        *[(f"deepseek_v3{suffix}",
           DeepseekV3Config(**dict(common, num_key_value_heads=4), intermediate_size=352, moe_intermediate_size=96,
                            num_experts_per_tok=2, n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=2.5,
                            n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True, q_lora_rank=q_lora,
                            kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=24,
                            rope_interleave=True, attention_bias=False, rope_parameters=rope),
           DEEPSEEK_SETS + [f"model.mla.q_lora_rank={q_lora or 0}"], dict(score="sigmoid", k=2, groups=4, group_topk=2))
          for suffix, q_lora in (("", 48), ("_no_q_lora", None))],
        # gpt-oss: sinks, a window of 16 on every other layer, biases everywhere, the clamped SwiGLU (limit 1.5
        # is reached), the softmax over the chosen logits, heads of their own size, YaRN untruncated
        ("gpt_oss", GptOssConfig(**common, intermediate_size=96, num_local_experts=8, num_experts_per_tok=2,
                                 head_dim=48, sliding_window=16, swiglu_limit=1.5, attention_bias=True,
                                 layer_types=["sliding_attention", "full_attention"] * 2,
                                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                  "original_max_position_embeddings": 16, "beta_fast": 32.0,
                                                  "beta_slow": 1.0, "truncate": False}),
         GPT_OSS_SETS, dict(score="softmax", k=2, groups=1, group_topk=1)),
        ("glm4_moe", Glm4MoeConfig(**common, intermediate_size=352, moe_intermediate_size=96, num_experts_per_tok=2,
                                   n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=2.5, n_group=4,
                                   topk_group=2, first_k_dense_replace=1, norm_topk_prob=True, attention_bias=False,
                                   use_qk_norm=False, rope_parameters=dict(rope, partial_rotary_factor=1.0)),
         ["model.moe.shared_experts=2", "model.moe.router.score=sigmoid", "model.moe.router.groups=4",
          "model.moe.router.group_topk=2", "model.moe.router.scaling=2.5"],
         dict(score="sigmoid", k=2, groups=4, group_topk=2)),
    ]


def routing_margin(logits, bias, r):
    """The smallest gap, relative to the row's largest score (softmax: its
    largest logit), between the k-th and (k+1)-th choice of the kept groups
    and between the last kept and first dropped group: far above rounding, no
    route can flip between two implementations."""
    logits = logits.double()
    # softmax is monotone: its choice is the logits', whose rounding is what could flip it
    s = logits if r["score"] == "softmax" else logits.sigmoid()
    c = s + (bias.double() if bias is not None else 0)
    n, e = c.shape
    worst = float("inf")
    if r["groups"] > 1:
        g = c.view(n, r["groups"], e // r["groups"]).topk(2, dim=-1)[0].sum(-1).sort(-1, descending=True)[0]
        gap = (g[:, r["group_topk"] - 1] - g[:, r["group_topk"]]) / s.abs().max(-1)[0]
        worst = min(worst, gap.min().item())
        keep = c.view(n, r["groups"], e // r["groups"]).topk(2, dim=-1)[0].sum(-1).topk(r["group_topk"], -1)[1]
        mask = torch.zeros(n, r["groups"], dtype=torch.bool)
        mask.scatter_(1, keep, True)
        c = c.masked_fill(~mask.repeat_interleave(e // r["groups"], dim=1), float("-inf"))
    top = c.sort(-1, descending=True)[0]
    worst = min(worst, ((top[:, r["k"] - 1] - top[:, r["k"]]) / s.abs().max(-1)[0]).min().item())
    return worst


def moe_direction(a):
    out = {}
    recipe = os.path.join(a.root, "configs", "moe-tiny.yaml")
    def margin_on_batch(model, route):
        captured = []
        hooks = [m.register_forward_hook(lambda mod, inp, outp: captured.append(
            (outp[0].detach(), getattr(mod, "e_score_correction_bias", None))))
            for mn, m in model.named_modules() if mn.endswith("mlp.gate") or mn.endswith("mlp.router")]
        for ids in BATCH:
            hf_logits(model, ids)
        for h in hooks:
            h.remove()
        assert captured, "no router ran"
        return min(routing_margin(lg.view(-1, lg.shape[-1]), b, route) for lg, b in captured)

    for name, cfg, sets, route in moe_families():
        # the first seed whose routes on the test batch are all far from a tie
        for seed in range(5, 45):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
            with torch.no_grad():
                for pname, p in model.named_parameters():
                    if p.dim() == 1:  # norms away from 1
                        p.add_(0.3 * torch.randn_like(p))
                    if pname.endswith("mlp.gate.weight") or pname.endswith("mlp.router.weight"):
                        p.normal_(0.0, 0.5)  # routers with decisive scores
                    if pname.endswith("_proj.bias") and name.startswith("qwen2"):  # Trident has none: zero imports
                        p.zero_()
                    if pname.endswith("_proj_bias"):  # gpt-oss's experts' biases, zero-initialised
                        p.normal_(0.0, 0.3)
                for mname, m in model.named_modules():
                    if hasattr(m, "e_score_correction_bias"):  # a loaded, non-zero correction bias
                        m.e_score_correction_bias.copy_(0.1 * torch.randn_like(m.e_score_correction_bias))
            model.eval()
            margin = margin_on_batch(model, route)
            if margin > 1e-4:
                break
        print(f"import {name}: seed {seed}, routing margin {margin:.3e} (relative to each row's largest score)",
              flush=True)
        assert margin > 1e-4, f"{name}: no seed gives routes far from a tie"
        src = os.path.join(a.work, f"hf_src_{name}")
        model.save_pretrained(src, safe_serialization=True)
        ckpt = os.path.join(a.work, f"imported_{name}")
        cmd = [a.trident, "import", src, "--recipe", recipe, "--out", ckpt]
        for x in sets:
            cmd += ["--set", x]
        run(cmd)
        worst = 0.0
        for i, ids in enumerate(BATCH):
            worst = max(worst, compare(f"import {name} sequence {i}", trident_logits(a, ckpt, ids, f"imp_{name}_{i}"),
                                       hf_logits(model, ids)))
        # export: transformers loads back the same weights, exactly
        back = os.path.join(a.work, f"hf_back_{name}")
        run([a.trident, "export", ckpt, "--format", "hf", "--out", back])
        again = AutoModelForCausalLM.from_pretrained(back, dtype=torch.float32)
        assert type(again) is type(model), f"{name}: exported as {type(again).__name__}"
        mine, theirs = model.state_dict(), again.state_dict()
        assert set(mine) == set(theirs), f"{name}: names differ: {sorted(set(mine) ^ set(theirs))}"
        for k, v in mine.items():
            assert torch.equal(v, theirs[k]), f"{name}: round trip changed {k}"
        print(f"import {name}: import -> export loads back all {len(mine)} tensors bit for bit", flush=True)
        # the exported directory has the hub layout (one tensor per expert); transformers saved the fused one:
        # importing it gives the same model, logits bit for bit
        ckpt_hub = os.path.join(a.work, f"imported_hub_{name}")
        run(cmd[:2] + [back] + cmd[3:5] + ["--out", ckpt_hub] + cmd[7:])
        for i, ids in enumerate(BATCH):
            assert torch.equal(trident_logits(a, ckpt, ids, f"fused_{name}_{i}"),
                               trident_logits(a, ckpt_hub, ids, f"hub_{name}_{i}")), f"{name}: hub layout differs"
        # without --recipe: the recipe written from config.json makes the same model, logits bit for bit
        derived = os.path.join(a.work, f"imported_derived_{name}")
        run([a.trident, "import", src, "--out", derived])
        for i, ids in enumerate(BATCH):
            assert torch.equal(trident_logits(a, ckpt, ids, f"fused_{name}_{i}"),
                               trident_logits(a, derived, ids, f"derived_{name}_{i}")), f"{name}: derived recipe differs"
        print(f"import {name} without --recipe: {derived}/recipe.yaml gives the same logits bit for bit", flush=True)
        out[name] = {"logits": worst, "margin": margin}
    # bad input: exit 2 naming the key or tensor, no checkpoint left behind
    def refused(what, src, sets, fragment):
        bad = os.path.join(a.work, f"refused_{what}")
        cmd = [a.trident, "import", src, "--recipe", recipe, "--out", bad]
        for x in sets:
            cmd += ["--set", x]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 2 and fragment in r.stderr + r.stdout, f"{what}: exit {r.returncode}: {r.stderr}"
        assert not os.path.exists(bad), f"{what}: left {bad}"
        print(f"import refused ({what}): {fragment}", flush=True)
    refused("experts", os.path.join(a.work, "hf_src_mixtral"), ["model.moe.first_dense=0", "model.moe.experts=4"],
            "num_local_experts")
    refused("family", os.path.join(a.work, "hf_src_mixtral"), moe_families()[1][2],
            "key 'model_type' is 'mixtral', the recipe")
    refused("no family", os.path.join(a.work, "hf_src_mixtral"), [], "no transformers family holds this model")
    biased = os.path.join(a.work, "hf_src_qwen2_bias")
    _, cfg, sets, _ = moe_families()[1]
    torch.manual_seed(5)
    with_bias = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        with_bias.model.layers[0].self_attn.q_proj.bias.fill_(0.1)
    with_bias.save_pretrained(biased, safe_serialization=True)
    refused("qkv bias", biased, sets + ["model.moe.router.norm_topk=false"], "q_proj.bias' is not zero")
    # DeepSeek-V3's published config extends its context with YaRN: refused, naming the key
    yarn = os.path.join(a.work, "hf_src_deepseek_v3_yarn")
    ds_name, ds_cfg, ds_sets, _ = moe_families()[5]
    assert ds_name == "deepseek_v3"
    ds_cfg.rope_parameters = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                              "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                              "mscale": 1.0, "mscale_all_dim": 1.0}
    torch.manual_seed(5)
    AutoModelForCausalLM.from_config(ds_cfg, dtype=torch.float32).save_pretrained(yarn, safe_serialization=True)
    refused("yarn", yarn, ds_sets + ["model.mla.q_lora_rank=48"], "rope_type")
    refused("mla sizes", os.path.join(a.work, "hf_src_deepseek_v3"), ds_sets + ["model.mla.q_lora_rank=40"],
            "key 'q_lora_rank' is 48")

    # trained by Trident on a mesh, exported, loaded by transformers: the same logits
    for name, sets, mesh in [("mixtral", ["model.moe.first_dense=0"], ["parallel.tensor=2"]),
                             ("glm4_moe", ["model.moe.shared_experts=2", "model.moe.router.score=sigmoid",
                                           "model.moe.router.groups=4", "model.moe.router.group_topk=2",
                                           "model.moe.router.scaling=2.5", "model.moe.balance.bias_rate=0.05"],
                              ["parallel.data=2", "parallel.zero=3"]),
                             ("deepseek_v3", DEEPSEEK_SETS + ["model.mla.q_lora_rank=48",
                                                              "model.moe.balance.bias_rate=0.05"],
                              ["parallel.tensor=2"])]:
        ckpt = os.path.join(a.work, f"train_{name}")
        cmd = mpirun(2) + [a.trident, "train", recipe]
        for x in sets + mesh + ["train.steps=30", "eval.batches=0", "log.metrics=", f"checkpoint.dir={ckpt}"]:
            cmd += ["--set", x]
        run(cmd)
        hf = os.path.join(a.work, f"hf_{name}")
        run([a.trident, "export", ckpt, "--format", "hf", "--out", hf])
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
        assert type(model).__name__.lower().startswith(name.split("_")[0]), type(model).__name__
        worst = 0.0
        for i, ids in enumerate(BATCH):
            worst = max(worst, compare(f"export {name} ({' '.join(mesh)}) sequence {i}",
                                       trident_logits(a, ckpt, ids, f"exp_{name}_{i}"), hf_logits(model, ids)))
        out[f"export_{name}"] = worst
    # DeepSeek-V3 with multi-token prediction trained on pipeline 2 (the last stage's copy of the table):
    # exported with its module as DeepSeek's checkpoints name it (model.layers.4.*, its embed_tokens and
    # shared_head.head copies, num_nextn_predict_layers 1), which transformers loads (ignoring the module) to the
    # same logits; imported with model.mtp it comes back bit for bit, imported without it the module is dropped
    mtp_sets = DEEPSEEK_SETS + ["model.mla.q_lora_rank=48", "model.mtp.depth=1"]
    ckpt = os.path.join(a.work, "train_deepseek_v3_mtp")
    cmd = mpirun(2) + [a.trident, "train", recipe]
    for x in mtp_sets + ["parallel.pipeline=2", "train.steps=20", "eval.batches=0", "log.metrics=",
                         f"checkpoint.dir={ckpt}"]:
        cmd += ["--set", x]
    run(cmd)
    hf = os.path.join(a.work, "hf_deepseek_v3_mtp")
    run([a.trident, "export", ckpt, "--format", "hf", "--out", hf])
    files = load_file(os.path.join(hf, "model.safetensors"))
    module = sorted(k for k in files if k.startswith("model.layers.4."))
    for k in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight",
              "embed_tokens.weight", "self_attn.kv_b_proj.weight", "mlp.gate.e_score_correction_bias"):
        assert "model.layers.4." + k in module, f"the exported module lacks model.layers.4.{k}"
    assert torch.equal(files["model.layers.4.embed_tokens.weight"], files["model.embed_tokens.weight"])
    assert torch.equal(files["model.layers.4.shared_head.head.weight"], files["lm_head.weight"])
    assert json.load(open(os.path.join(hf, "config.json")))["num_nextn_predict_layers"] == 1
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    worst = 0.0
    for i, ids in enumerate(BATCH):
        worst = max(worst, compare(f"export deepseek_v3 with mtp sequence {i}",
                                   trident_logits(a, ckpt, ids, f"exp_mtp_{i}"), hf_logits(model, ids)))
    out["export_deepseek_v3_mtp"] = worst
    back = os.path.join(a.work, "imported_deepseek_v3_mtp")
    cmd = [a.trident, "import", hf, "--recipe", recipe, "--out", back]
    for x in mtp_sets:
        cmd += ["--set", x]
    run(cmd)
    again = os.path.join(a.work, "hf_deepseek_v3_mtp_again")
    run([a.trident, "export", back, "--format", "hf", "--out", again])
    second = load_file(os.path.join(again, "model.safetensors"))
    assert set(files) == set(second) and all(torch.equal(files[k], second[k]) for k in files), "mtp round trip"
    print(f"import deepseek_v3 with mtp: export -> import -> export gives all {len(files)} tensors bit for bit "
          f"({len(module)} of the module)", flush=True)
    dropped = os.path.join(a.work, "imported_deepseek_v3_no_mtp")
    cmd = [a.trident, "import", hf, "--recipe", recipe, "--out", dropped]
    for x in mtp_sets[:-1]:
        cmd += ["--set", x]
    r = run(cmd)
    assert "dropped" in r.stdout + r.stderr, "import without model.mtp: the module's tensors are dropped, and said"
    for i, ids in enumerate(BATCH):
        assert torch.equal(trident_logits(a, ckpt, ids, f"mtp_keep_{i}"), trident_logits(a, dropped, ids, f"mtp_drop_{i}"))
    print("import deepseek_v3 without model.mtp: the module dropped, the same logits bit for bit", flush=True)
    # a module whose embedding copy differs from the model's: refused
    bad = dict(files)
    bad["model.layers.4.embed_tokens.weight"] = bad["model.layers.4.embed_tokens.weight"] + 1
    bad_dir = os.path.join(a.work, "hf_src_deepseek_v3_mtp_bad")
    os.makedirs(bad_dir, exist_ok=True)
    from safetensors.torch import save_file
    save_file(bad, os.path.join(bad_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(hf, "config.json")) as src, open(os.path.join(bad_dir, "config.json"), "w") as dst:
        dst.write(src.read())
    cmd = [a.trident, "import", bad_dir, "--recipe", recipe, "--out", os.path.join(a.work, "refused_mtp_copy")]
    for x in mtp_sets:
        cmd += ["--set", x]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and "differs from 'model.embed_tokens.weight'" in r.stderr + r.stdout, r.stderr
    assert not os.path.exists(os.path.join(a.work, "refused_mtp_copy"))
    print("import refused (mtp copy): the module's embedding differs from the model's", flush=True)
    return out


def newton_schulz_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's _zeropower_via_newtonschulz in float32 (torch's runs it in bf16)."""
    a_, b_, c_ = ns_coefficients
    x = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b_, alpha=c_), x, beta=a_)
    return x.T if grad.size(0) > grad.size(1) else x


def muon_against_torch(a):
    """optim.name muon against torch.optim.Muon: a transformers LLaMA (2 layers,
    64 wide, grouped-query attention) imported and trained 20 steps by
    Trident and by PyTorch's own loop, torch.optim.Muon over the hidden
    matrices (q, k, v, o, gate, up, down: one matrix each) and
    torch.optim.AdamW over the rest (decay on the LM head only, as Trident's
    decay_ranges), a constant lr, no clipping, on one epoch = the global
    batch. With the Newton-Schulz iteration in float32 on both sides
    (torch's patched to float32) every step's loss agrees within 1e-5
    relative; with bf16 on both (torch's own) within 5e-3. Then the same run
    on 8 ranks (data 2 x pipeline 2 x context 2; data 4 with ZeRO 3 x
    pipeline 2; data 2 x tensor 2 x pipeline 2 with sequence parallelism and
    ZeRO 1; data 2 x tensor 4, the KV heads replicated, ZeRO 2) gives the
    one-rank losses."""
    import torch.optim._muon as muon_module
    torch.manual_seed(5)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, initializer_range=0.1, attention_bias=False, mlp_bias=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    src = os.path.join(a.work, "hf_src_muon")
    model.save_pretrained(src, safe_serialization=True)
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(32, 127, (8 * 32 + 1,), generator=g).tolist()
    corpus = os.path.join(a.work, "muon_epoch.jsonl")
    with open(corpus, "w") as f:
        f.write(json.dumps({"text": "".join(chr(i) for i in ids)}) + "\n")
    prefix = os.path.join(a.work, "muon_epoch")
    run([a.trident, "prepare", "--input", corpus, "--out", prefix, "--tokenizer", "byte", "--eod-token", "none",
         "--valid-fraction", "0"])
    lr, wd, steps = 0.02, 0.1, 20
    recipe = os.path.join(a.work, "muon.yaml")
    with open(recipe, "w") as f:
        f.write("model: {arch: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 176, seq_len: 32, "
                "vocab: 256, vocab_multiple: 1, norm_eps: 1.0e-5}\n"
                f"train: {{global_batch: 8, micro_batch: 2, steps: {steps}}}\n"
                f"optim: {{name: muon, lr: {lr}, warmup: 0, decay: constant, betas: [0.9, 0.95], weight_decay: {wd}, "
                "grad_clip: 0}\n"
                f"data: {{train: {prefix}_train}}\n"
                "eval: {every: 0}\nlog: {every: 1}\nseed: 1234\n")
    ckpt = os.path.join(a.work, "imported_muon")
    run([a.trident, "import", src, "--recipe", recipe, "--out", ckpt])
    windows = torch.tensor([ids[32 * k: 32 * k + 33] for k in range(8)])

    def trident_losses(tag, precision, ranks=1, mesh=()):
        metrics = os.path.join(a.work, f"muon_{tag}.jsonl")
        cmd = ([] if ranks == 1 else mpirun(ranks)) + [a.trident, "train", recipe, "--resume", ckpt, "--set",
                                                       f"log.metrics={metrics}", "--set",
                                                       f"optim.muon.ns_precision={precision}"]
        for x in mesh:
            cmd += ["--set", x]
        run(cmd)
        with open(metrics) as f:
            return [r["loss"] for r in map(json.loads, f) if r.get("type") == "train"]

    def torch_losses(precision):
        original = muon_module._zeropower_via_newtonschulz

        if precision == "fp32":
            muon_module._zeropower_via_newtonschulz = newton_schulz_fp32
        try:
            m = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32)
            hidden = [p for n, p in m.named_parameters() if p.dim() == 2 and ".layers." in n]
            head = [m.lm_head.weight]
            rest = [p for n, p in m.named_parameters() if p.dim() == 1 or n.endswith("embed_tokens.weight")]
            opt_muon = torch.optim.Muon(hidden, lr=lr, weight_decay=wd, momentum=0.95, nesterov=True,
                                        adjust_lr_fn="original")
            opt_adam = torch.optim.AdamW([{"params": head, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
                                         lr=lr, betas=(0.9, 0.95), eps=1e-8)
            out = []
            for _ in range(steps):
                logits = m(windows[:, :32]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1))
                out.append(loss.item())
                opt_muon.zero_grad(), opt_adam.zero_grad()
                loss.backward()
                opt_muon.step(), opt_adam.step()
            return out
        finally:
            muon_module._zeropower_via_newtonschulz = original

    result = {}
    for precision, tol in (("fp32", 1e-5), ("bf16", 5e-3)):
        ours, theirs = trident_losses(precision, precision), torch_losses(precision)
        # relative to the loss, down to 0.1 nats: a memorised batch's per-token losses (0.005 by the end) are
        # differences of logits of size 10, whose float32 rounding (1e-6 nats) is absolute, not relative
        worst = max(abs(x - y) / max(abs(y), 0.1) for x, y in zip(ours, theirs))
        print(f"muon ({precision} Newton-Schulz) against torch.optim.Muon: worst step loss rel diff {worst:.2e}; "
              f"trident {' '.join(f'{x:.6f}' for x in ours)}; torch {' '.join(f'{x:.6f}' for x in theirs)}",
              flush=True)
        assert len(ours) == steps and worst < tol, f"muon {precision}: {worst:.2e} >= {tol}"
        assert ours[-1] < ours[0] - 0.1, "Muon did not train"
        result[precision] = worst
    one = trident_losses("fp32", "fp32")
    for tag, mesh in [("mesh8", ["parallel.data=2", "parallel.pipeline=2", "parallel.context=2"]),
                      ("zero3", ["parallel.data=4", "parallel.zero=3", "parallel.pipeline=2"]),
                      ("tensor2", ["parallel.data=2", "parallel.tensor=2", "parallel.pipeline=2", "parallel.zero=1",
                                   "parallel.sequence_parallel=true"]),
                      ("tensor4", ["parallel.data=2", "parallel.tensor=4", "parallel.zero=2"])]:
        losses = trident_losses(tag, "fp32", 8, mesh)
        worst = max(abs(x - y) / max(abs(y), 0.1) for x, y in zip(losses, one))  # as above
        print(f"muon on {' '.join(mesh)}: worst step loss rel diff to one rank {worst:.2e}", flush=True)
        assert worst < 1e-4, f"muon on 8 ranks ({tag}): {worst:.2e}"
        result[f"{tag}_vs_one_rank"] = worst
    return result


def write_tokens(prefix, ids):
    """A Megatron indexed dataset (docs/data.md) of one document of u16 tokens."""
    import struct
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, 1, 2))
        f.write(struct.pack("<i", len(ids)) + struct.pack("<q", 0) + struct.pack("<qq", 0, 1))


def muon_matrices_of(model):
    """The matrices Trident's Muon orthogonalises (model::muon_matrices), as views of
    transformers' parameters in Trident's [out, in] orientation: each Linear of a
    layer; GPT-2's Conv1D transposed, c_attn cut into q, k and v; each routed
    expert's gate, up and down apart (the fused [E, 2I, C] and [E, C, I] tensors);
    not the routers. The rest is AdamW's: decay on the LM head and the routers,
    none on norms, biases and embeddings (Trident's decay_ranges)."""
    views, decay, no_decay = [], [], []
    for name, p in model.named_parameters():
        layer = ".layers." in name or ".h." in name
        router = name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight")
        if not layer or p.dim() == 1 or router:
            (decay if p.dim() == 2 and "embed" not in name and "wte" not in name and "wpe" not in name
             else no_decay).append(p)
        elif p.dim() == 3:  # [E, 2I, C] gate|up or [E, C, I] down
            for e in range(p.shape[0]):
                if name.endswith("gate_up_proj"):
                    half = p.shape[1] // 2
                    views += [(p, lambda t, e=e, h=half: t[e, :h]), (p, lambda t, e=e, h=half: t[e, h:])]
                else:
                    views.append((p, lambda t, e=e: t[e]))
        elif name.endswith("c_attn.weight"):  # Conv1D [C, 3C]
            c = p.shape[0]
            views += [(p, lambda t, k=k, c=c: t.T[k * c:(k + 1) * c]) for k in range(3)]
        elif ".attn.c_proj." in name or ".mlp.c_fc." in name or ".mlp.c_proj." in name:
            views.append((p, lambda t: t.T))
        else:
            views.append((p, lambda t: t))
    return views, decay, no_decay


def muon_shapes_against_torch(a):
    """optim.name muon against torch.optim.Muon on GPT-2 (c_attn's q, k, v
    apart, its Conv1D weights as [out, in]), a Qwen3 mixture of experts (each
    expert's gate, up and down apart, the router AdamW's) and DeepSeek-V3
    (multi-head latent attention's down and up projections, a dense first
    layer, shared and routed experts): made by transformers, imported, trained
    20 steps by Trident and by PyTorch's loop, torch.optim.Muon over the
    matrices (its Newton-Schulz in float32; each expert's matrices are
    parameters of their own, copied in and out of the fused tensors each step)
    and torch.optim.AdamW over the rest. Every step's loss within 1e-5
    relative. The mixtures of experts send every token to every expert
    (top-k = all 8, one group), so that no routing decision near a tie can
    flip between the two over 20 steps."""
    import torch.optim._muon as muon_module
    from transformers import GPT2Config, GPT2LMHeadModel
    # AdamW's eps 1e-4 on both sides: at eps 1e-8 its first steps turn the rounding of gradients that are nearly
    # zero (a few elements of a token's embedding row, a router's) into steps of lr x sign, different on each side
    lr, wd, eps, steps = 0.005, 0.1, 1e-4, 20
    torch.manual_seed(21)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=2, n_head=4, n_inner=256,
                                      activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.1, bos_token_id=0,
                                      eos_token_id=0))
    gpt2_src = os.path.join(a.work, "hf_src_muon_gpt2")
    gpt2.save_pretrained(gpt2_src, safe_serialization=True)
    # the mixtures of experts route every token to every expert (top-k = the 8 experts, one group): the same
    # expert matrices, and no routing decision that rounding could flip over 20 steps of training
    cases = [("gpt2", gpt2_src)]
    for name, cfg, _, _ in moe_families():
        if name not in ("qwen3_moe_norm_topk", "deepseek_v3"):
            continue
        cfg.num_experts_per_tok = 8
        if name == "deepseek_v3":
            cfg.n_group, cfg.topk_group = 1, 1
        torch.manual_seed(5)
        src = os.path.join(a.work, f"hf_src_muon_{name}")
        AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(src, safe_serialization=True)
        cases.append((name, src))

    def torch_losses(src, windows):
        """PyTorch's 20 steps from the checkpoint in src."""
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
        vocab, T = model.config.vocab_size, windows.shape[1] - 1
        views, decay, no_decay = muon_matrices_of(model)
        proxies = [torch.nn.Parameter(view(p).detach().clone()) for p, view in views]
        original = muon_module._zeropower_via_newtonschulz
        muon_module._zeropower_via_newtonschulz = newton_schulz_fp32
        losses = []
        try:
            opt_muon = torch.optim.Muon(proxies, lr=lr, weight_decay=wd, momentum=0.95, nesterov=True,
                                        adjust_lr_fn="original")
            opt_adam = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                          {"params": no_decay, "weight_decay": 0.0}],
                                         lr=lr, betas=(0.9, 0.95), eps=eps)
            for _ in range(steps):
                logits = model(windows[:, :T]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), windows[:, 1:].reshape(-1))
                losses.append(loss.item())
                model.zero_grad()  # the fused tensors' too: neither optimizer holds them
                loss.backward()
                with torch.no_grad():
                    for (p, view), q in zip(views, proxies):
                        q.grad = view(p.grad).clone()
                opt_muon.step(), opt_adam.step()
                with torch.no_grad():
                    for (p, view), q in zip(views, proxies):
                        view(p.data).copy_(q.data)
        finally:
            muon_module._zeropower_via_newtonschulz = original
        return losses, len(views)

    out = {}
    for name, src in cases:
        config = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).config
        vocab, T = config.vocab_size, config.max_position_embeddings  # the imported recipe's seq_len
        g = torch.Generator().manual_seed(9)
        ids = torch.randint(0, vocab, (8 * T + 1,), generator=g).tolist()  # one epoch: 8 windows of T + 1
        windows = torch.tensor([ids[T * k: T * k + T + 1] for k in range(8)])
        theirs, matrices = torch_losses(src, windows)
        prefix = os.path.join(a.work, f"muon_tokens_{name}")
        write_tokens(prefix, ids)
        ckpt = os.path.join(a.work, f"imported_muon_{name}")
        shutil.rmtree(ckpt, ignore_errors=True)
        run([a.trident, "import", src, "--out", ckpt])
        metrics = os.path.join(a.work, f"muon_{name}.jsonl")
        cmd = [a.trident, "train", os.path.join(ckpt, "recipe.yaml"), "--resume", ckpt]
        moe = name != "gpt2"
        for x in [f"data.train={prefix}", "train.global_batch=8", "train.micro_batch=2",
                         f"train.steps={steps}", "train.precision=fp32", "optim.name=muon",
                         "optim.muon.ns_precision=fp32", f"optim.lr={lr}", "optim.warmup=0", "optim.decay=constant",
                         f"optim.weight_decay={wd}", "optim.grad_clip=0", "optim.betas=[0.9, 0.95]", f"optim.eps={eps}",
                         "eval.every=0", "eval.batches=0", "log.every=1", f"log.metrics={metrics}", "checkpoint.dir="] + (
                ["model.moe.balance.kind=none", "model.moe.balance.bias_rate=0"] if moe else []):
            cmd += ["--set", x]
        run(cmd)
        with open(metrics) as f:
            ours = [r["loss"] for r in map(json.loads, f) if r.get("type") == "train"]
        # relative to the loss, down to 0.1 nats: a memorised batch's per-token losses (0.005 by the end) are
        # differences of logits of size 10, whose float32 rounding (1e-6 nats) is absolute, not relative
        worst = max(abs(x - y) / max(abs(y), 0.1) for x, y in zip(ours, theirs))
        print(f"muon {name} against torch.optim.Muon ({matrices} matrices): worst step loss rel diff {worst:.2e}; "
              f"trident {' '.join(f'{x:.6f}' for x in ours)}; torch {' '.join(f'{x:.6f}' for x in theirs)}",
              flush=True)
        assert len(ours) == steps and worst < 1e-5, f"muon {name}: {worst:.2e} >= 1e-5"
        assert ours[-1] < ours[0] - 0.1, f"muon {name}: did not train"
        out[name] = worst
    return out


def sequence_loss(logits, ids):
    """The mean next-token cross-entropy of one sequence's logits."""
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()


def user_flow(a):
    """A user's flow: a transformers-made tiny Qwen3-MoE and gpt-oss (the
    sources moe_direction saved) imported without a recipe, trained 20 steps
    from the derived recipe on 8 ranks (data 2 x tensor 2 x pipeline 2, and
    data 2 x tensor 2 x context 2 for gpt-oss's windows, both with experts
    over 2 ranks), exported, loaded by transformers: its loss on the test
    batch is the trained model's (Trident's, from the checkpoint) within
    1e-5, and training moved it."""
    out = {}
    for name, mesh in [("qwen3_moe", ["parallel.data=2", "parallel.tensor=2", "parallel.pipeline=2"]),
                       ("gpt_oss", ["parallel.data=2", "parallel.tensor=2", "parallel.context=2"])]:
        src = os.path.join(a.work, f"hf_src_{name}")
        ckpt = os.path.join(a.work, f"user_{name}")
        run([a.trident, "import", src, "--out", ckpt])
        trained = ckpt + "_trained"
        cmd = mpirun(8) + [a.trident, "train", os.path.join(ckpt, "recipe.yaml"), "--resume", ckpt]
        for x in mesh + ["parallel.expert=2", "train.steps=20", "train.global_batch=16", "train.micro_batch=1",
                         "train.precision=fp32", "optim.lr=3e-3", "optim.warmup=2", "eval.batches=0",
                         "log.metrics=", f"checkpoint.dir={trained}"]:
            cmd += ["--set", x]
        run(cmd)
        hf = os.path.join(a.work, f"hf_user_{name}")
        run([a.trident, "export", trained, "--format", "hf", "--out", hf])
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
        before = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
        worst, moved = 0.0, 0.0
        for i, ids in enumerate(BATCH):
            ours = sequence_loss(trident_logits(a, trained, ids, f"user_{name}_{i}"), ids)
            theirs = sequence_loss(hf_logits(model, ids), ids)
            worst = max(worst, abs(ours / theirs - 1))
            moved = max(moved, abs(sequence_loss(hf_logits(before, ids), ids) / theirs - 1))
            print(f"user flow {name} ({' '.join(mesh)}): sequence {i} loss {ours:.6f}, transformers {theirs:.6f}",
                  flush=True)
        assert worst < 1e-5, f"{name}: the exported model's loss differs from the trained one by {worst:.1e}"
        assert moved > 1e-3, f"{name}: training did not move the loss"
        out[name] = {"loss_vs_transformers": worst, "moved": moved}
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trident", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    results = {
        "export_gpt2_tensor2": export_direction(a, "gpt2", "demo.yaml", ["parallel.tensor=2"], 2),
        "export_llama_pipeline2": export_direction(a, "llama", "llama-tiny.yaml", ["parallel.pipeline=2"], 2),
        "import_gpt2": import_direction(a, "gpt2", "demo.yaml"),
        "import_llama": import_direction(a, "llama", "llama-tiny.yaml"),
        # Llama 3.1's rotary scaling, YaRN, and Qwen3's heads of their own size
        "import_llama3_rope": import_direction(
            a, "llama", "llama-tiny.yaml",
            {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
            ["model.rope_scaling.type=llama3", "model.rope_theta=500", "model.rope_scaling.factor=8",
             "model.rope_scaling.original_seq_len=16"]),
        "import_llama_yarn": import_direction(
            a, "llama", "llama-tiny.yaml",
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "beta_fast": 32.0,
                                 "beta_slow": 1.0, "original_max_position_embeddings": 16, "truncate": False}},
            ["model.rope_scaling.type=yarn", "model.rope_theta=500", "model.rope_scaling.factor=4",
             "model.rope_scaling.original_seq_len=16", "model.rope_scaling.truncate=false"]),
        "import_qwen2_biases": import_direction(a, "qwen2", "llama-tiny.yaml",
                                                {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                                                ["model.attention_bias=true"]),
        "import_llama_biases": import_direction(a, "llama", "llama-tiny.yaml",
                                                {"rope_theta": 10000.0, "attention_bias": True},
                                                ["model.attention_bias=true", "model.o_bias=true"]),
        "import_qwen3_head_dim": import_direction(a, "qwen3", "llama-tiny.yaml",
                                                  {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                                                  ["model.head_dim=48", "model.qk_norm=true"]),
        # sliding windows (16 of the 64 positions): Mistral's on every layer, Qwen2's on the layers it names
        "import_mistral_window": import_direction(a, "mistral", "llama-tiny.yaml",
                                                  {"sliding_window": 16,
                                                   "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                                                  ["model.sliding_window=16"]),
        "import_qwen2_sliding_layers": import_direction(
            a, "qwen2", "llama-tiny.yaml",
            {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 0,
             "layer_types": ["full_attention", "sliding_attention"],
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
            ["model.attention_bias=true", "model.sliding_window=16", "model.layer_types=[full,sliding]"],
            tag="qwen2_sliding"),
        "import_then_train_gpt2": import_then_train(a),
        "moe": moe_direction(a),
        "user_flow": user_flow(a),
        "muon": muon_against_torch(a),
        "muon_shapes": muon_shapes_against_torch(a),
    }
    print(json.dumps({"max_abs_logit_diff": results, "tolerance": TOL}))


if __name__ == "__main__":
    sys.exit(main())
