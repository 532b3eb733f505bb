"""Hugging Face interoperability, both directions, GPT-2 and LLaMA.

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

Usage: interop.py --trident BUILD/launch/trident --root SOURCE_DIR --work DIR
"""
import argparse
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


def import_direction(a, arch, recipe):
    torch.manual_seed(7)
    if arch == "gpt2":
        cfg = GPT2Config(vocab_size=32, n_positions=64, n_embd=128, n_layer=4, n_head=4, n_inner=512,
                         activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0, initializer_range=0.1)
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(vocab_size=32, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                          rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.1)
        model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms and biases away from their initial 1 and 0, so that a mix-up shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    model.eval()
    src = os.path.join(a.work, f"hf_src_{arch}")
    model.save_pretrained(src, safe_serialization=True)
    ckpt = os.path.join(a.work, f"imported_{arch}")
    run([a.trident, "import", src, "--recipe", os.path.join(a.root, "configs", recipe), "--out", ckpt])
    worst = 0.0
    for i, ids in enumerate(BATCH):
        worst = max(worst, compare(f"import {arch} sequence {i}", trident_logits(a, ckpt, ids, f"imp_{arch}_{i}"),
                                   hf_logits(model, ids)))
    # round trip: import then export gives back transformers' tensors exactly
    back = os.path.join(a.work, f"hf_back_{arch}")
    run([a.trident, "export", ckpt, "--format", "hf", "--out", back])
    original, again = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
    skip = {k for k in original if k.endswith(".attn.bias") or k.endswith(".masked_bias")}
    assert set(original) - skip == set(again), f"tensor names differ: {sorted(set(original) ^ set(again))}"
    for k, v in again.items():
        assert torch.equal(original[k], v), f"round trip changed {k}"
    print(f"import {arch}: import -> export gives back all {len(again)} tensors bit for bit", flush=True)
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
        "import_then_train_gpt2": import_then_train(a),
    }
    print(json.dumps({"max_abs_logit_diff": results, "tolerance": TOL}))


if __name__ == "__main__":
    sys.exit(main())
