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
    }
    print(json.dumps({"max_abs_logit_diff": results, "tolerance": TOL}))


if __name__ == "__main__":
    sys.exit(main())
