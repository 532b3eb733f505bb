#!/usr/bin/env python3
"""The planner against published training runs (docs/planner.md, "Against
published results"): plans every row of configs/published/rows.yaml on its
mesh (`trident plan --mesh ... --json`) and prints measured vs predicted step
time, the errors of the fitted and the unfitted rows apart, the rows planned
out of memory, and the ranking check (for each model planned on one GPU count
at several meshes, the planner's fastest of them against the published
fastest). Usage: bench/published_rows.py TRIDENT [--markdown]"""
import json, subprocess, sys
from collections import defaultdict

import yaml

ROWS = "configs/published/rows.yaml"


def shape(row):
    """The row's model and train sections: the recipe's with the row's --set keys."""
    rc = yaml.safe_load(open(f"configs/published/{row['recipe']}"))
    model, train = dict(rc["model"]), dict(rc["train"])
    for s in row["set"]:
        key, value = s.split("=", 1)
        section, name = key.split(".", 1)
        if section in ("model", "train"):
            (model if section == "model" else train)[name] = yaml.safe_load(value)
    return model, train


def megatron_flops(m, batch):
    """Megatron-LM's num_floating_point_operations (dense models)."""
    s, l, h, a = m["seq_len"], m["layers"], m["hidden"], m["heads"]
    g, F, V = m.get("kv_heads", a), m.get("ffn_hidden", 4 * h), m["vocab"]
    gated = 1.5 if m["arch"] == "llama" else 1.0
    return 12 * batch * s * l * h * h * ((1 + g / a + s / h) + F / h * gated + V / (2 * l * h))


def measured_step(row, m, t, gpus, plan):
    pub, batch = row["published"], t["global_batch"]
    if "step_s" in pub:
        return pub["step_s"]
    if "tokens_per_s_per_gpu" in pub:
        return batch * m["seq_len"] / (gpus * pub["tokens_per_s_per_gpu"])
    tflops = pub["tflops_per_gpu"] * 1e12
    if pub["flops"] == "megatron":
        return megatron_flops(m, batch) / (gpus * tflops)
    if pub["flops"] == "sc21":
        s, l, h, V = m["seq_len"], m["layers"], m["hidden"], m["vocab"]
        return 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (gpus * tflops)
    # Trident's model FLOPs: the plan's predicted rate times its step time
    return plan["step_time_s"] * plan["tflops_per_device"] * 1e12 / tflops


def plan(trident, row, gpus):
    cmd = [trident, "plan", f"configs/published/{row['recipe']}", "--cluster", f"configs/clusters/{row['cluster']}",
           "--gpus", str(gpus), "--mesh", ",".join(map(str, row["mesh"])), "--json"]
    for s in row["set"]:
        cmd += ["--set", s]
    for s in row.get("cluster_set", []):
        cmd += ["--cluster-set", s]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)[0]


def main():
    trident = sys.argv[1]
    md = "--markdown" in sys.argv
    results = []
    for row in yaml.safe_load(open(ROWS)):
        m, t = shape(row)
        gpus = 1
        for n in row["mesh"][:4]:
            gpus *= n
        p = plan(trident, row, gpus)
        results.append((row, m, gpus, measured_step(row, m, t, gpus, p), p))
    if md:
        print("| source | model | GPUs | mesh D x T x P (x C x E) | fitted | measured s/step | predicted | error | memory GiB |")
        print("|---|---|---|---|---|---|---|---|---|")
    errors = {True: [], False: []}
    out_of_memory = []
    for row, m, gpus, measured, p in results:
        pred = p["step_time_s"]
        err = pred / measured - 1
        errors[row["fitted"]].append(err)
        mesh = " x ".join(map(str, row["mesh"]))
        if row.get("cluster_set"):
            mesh += " (" + ", ".join(k.removeprefix("software.") for k in row["cluster_set"]) + ")"
        mem = p["memory_bytes"]["total"] / 2**30
        if not p["feasible"]:
            out_of_memory.append(f"{row['name']} on {gpus} ({row['source']}): {p['reason']}")
        if md:
            flag = "yes" if row["fitted"] else ""
            oom = "" if p["feasible"] else " (over)"
            print(f"| {row['source']} | {row['name']} | {gpus} | {mesh} | {flag} | {measured:.3f} | {pred:.3f} | "
                  f"{100 * err:+.1f}% | {mem:.1f}{oom} |")
        else:
            parts = " ".join(f"{k}={v:.3g}" for k, v in p["time_s"].items() if v)
            print(f"{row['name']:14} {gpus:6} {mesh:16.40} {'F' if row['fitted'] else ' '} measured {measured:8.3f} "
                  f"predicted {pred:8.3f} {100 * err:+6.1f}%  {mem:5.1f} GiB  {parts}")
    for fitted in (False, True):
        e = errors[fitted]
        if e:
            print(f"{'fitted' if fitted else 'unfitted'} rows: {len(e)}, {sum(abs(x) <= 0.10 for x in e)} within 10%, "
                  f"{sum(abs(x) <= 0.20 for x in e)} within 20%, largest {100 * max(e, key=abs):+.1f}%")
    print(f"out of memory: {len(out_of_memory)}" + "".join(f"\n  {o}" for o in out_of_memory))
    # ranking: for each source with one model on several meshes, the mesh the planner would pick (its best
    # predicted tokens/s per GPU) against the published best
    groups = defaultdict(list)
    for row, m, gpus, measured, p in results:
        tokens = shape(row)[1]["global_batch"] * m["seq_len"] / gpus
        if row.get("cluster_set"):  # a software variant, not a mesh choice
            continue
        groups[(row["source"], row["name"])].append((row, gpus, tokens / measured, tokens / p["step_time_s"]))
    for (source, name), g in groups.items():
        if len({(tuple(r["mesh"]), gpus) for r, gpus, _, _ in g}) < 2:
            continue
        best = max(published for _, _, published, _ in g)
        row, gpus, published, _ = max(g, key=lambda x: x[3])
        print(f"ranking {name} ({source}): the planner picks {row['mesh']} on {gpus}, published {published:.4g} "
              f"tokens/s per GPU against the best {best:.4g} ({100 * (published / best - 1):+.1f}%)")

main()
