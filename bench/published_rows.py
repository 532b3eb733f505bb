#!/usr/bin/env python3
"""The planner against published step times (docs/planner.md): runs
`trident plan --mesh ... --json` for each published configuration and prints
measured vs predicted step time. Usage: bench/published_rows.py TRIDENT [--markdown]"""
import json, subprocess, sys

# SC21 Table 1 (Narayanan et al. 2021): name, GPUs, mesh D,T,P, published
# TFLOP/s per GPU. Their FLOPs per step count the recomputed forward:
# 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
SC21 = [("gpt-1.7b", 32, (32, 1, 1), 137), ("gpt-3.6b", 64, (32, 2, 1), 138), ("gpt-7.5b", 128, (32, 4, 1), 142),
        ("gpt-18b", 256, (32, 8, 1), 135), ("gpt-39b", 512, (32, 8, 2), 138), ("gpt-76b", 1024, (32, 8, 4), 140),
        ("gpt-145b", 1536, (24, 8, 8), 148), ("gpt-310b", 1920, (15, 8, 16), 155),
        ("gpt-530b", 2520, (9, 8, 35), 163), ("gpt-1t", 3072, (6, 8, 64), 163)]
# GPT-3 175B on H100, bf16, NeMo (dgxc-benchmarking nemo_megatron/README_175b.md): GPUs, measured s/step
H100_175B = [(128, 8.309), (256, 8.408), (512, 8.42), (1024, 8.453), (2048, 8.49)]
# Mixtral 8x7B on 64 H100, bf16, expert 8 x pipeline 4 (Megatron-Core MoE README, MCore v0.9): 468 TFLOP/s per
# GPU; their FLOPs per token (num_floating_point_operations) equal the planner's model FLOPs for this model
MIXTRAL_TFLOPS = 468


def plan(trident, recipe, cluster, gpus, mesh, sets=()):
    cmd = [trident, "plan", recipe, "--cluster", cluster, "--gpus", str(gpus), "--mesh", ",".join(map(str, mesh)),
           "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def main():
    trident = sys.argv[1]
    md = "--markdown" in sys.argv
    rows = []
    for name, gpus, mesh, tflops in SC21:
        import yaml  # noqa: the recipe's shape
        rc = yaml.safe_load(open(f"configs/published/{name}.yaml"))
        m, t = rc["model"], rc["train"]
        B, s, l, h, V = t["global_batch"], m["seq_len"], m["layers"], m["hidden"], m["vocab"]
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        measured = flops / (gpus * tflops * 1e12)
        p = plan(trident, f"configs/published/{name}.yaml", "configs/clusters/selene-a100-2021.yaml", gpus, mesh)
        rows.append(("SC21 Table 1", name, gpus, mesh, measured, p))
    for gpus, step in H100_175B:
        d = gpus // 32
        p = plan(trident, "configs/published/gpt3-175b-h100.yaml", "configs/clusters/dgx-h100.yaml", gpus, (d, 4, 8),
                 [f"parallel.data={d}", f"train.global_batch={16 * gpus // 8}"])
        rows.append(("NeMo GPT-3 175B H100 bf16", "gpt3-175b-h100", gpus, (d, 4, 8), step, p))
    p = plan(trident, "configs/published/mixtral-8x7b-h100.yaml", "configs/clusters/dgx-h100.yaml", 64, (16, 1, 4, 1, 8))
    # the planner's TFLOP/s are model FLOPs at its predicted rate: the measured step time follows from 468
    measured = p["step_time_s"] * p["tflops_per_device"] / MIXTRAL_TFLOPS
    rows.append(("Megatron-Core Mixtral 8x7B H100 bf16", "mixtral-8x7b-h100", 64, (16, 1, 4, 1, 8), measured, p))
    within10 = within15 = 0
    if md:
        print("| source | config | GPUs | mesh D x T x P (x C x E) | measured s/step | predicted | error |")
        print("|---|---|---|---|---|---|---|")
    for src, name, gpus, mesh, measured, p in rows:
        pred = p["step_time_s"]
        err = pred / measured - 1
        within10 += abs(err) <= 0.10
        within15 += abs(err) <= 0.15
        meshs = " x ".join(map(str, mesh))
        if md:
            print(f"| {src} | {name} | {gpus} | {meshs} | {measured:.3f} | {pred:.3f} | {100 * err:+.1f}% |")
        else:
            t = p["time_s"]
            parts = " ".join(f"{k}={v:.3g}" for k, v in t.items() if v)
            print(f"{name:16} {gpus:5} {meshs:12} measured {measured:8.3f} predicted {pred:8.3f} {100 * err:+6.1f}%  {parts}")
    print(f"{within15}/{len(rows)} within 15%, {within10}/{len(rows)} within 10%")


main()
