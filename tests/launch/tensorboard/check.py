#!/usr/bin/env python3
"""`log.tensorboard` read back by TensorBoard's own reader: a run of 6 steps
with checkpoints, resumed to 10 steps (a second events file), every number of
every metrics record equal to the TensorBoard scalar of the same tag and
step, no scalar without a metrics value, one continuous loss curve, and the
resolved recipe as text. The run trains with Muon and QK-clip, whose
max_logit per layer and qk_clipped are among the scalars."""
import argparse, glob, json, math, os, subprocess, sys

from tensorboard.backend.event_processing import event_accumulator


def leaves(prefix, v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            leaves(f"{prefix}/{k}", x, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            leaves(f"{prefix}/{i}", x, out)
    elif isinstance(v, bool):
        out[prefix] = 1.0 if v else 0.0
    elif isinstance(v, (int, float)):
        out[prefix] = float(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trident", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    tb, metrics, ckpt = (os.path.join(a.work, x) for x in ("tb", "metrics.jsonl", "ckpt"))
    sets = ["train.steps=6", f"log.tensorboard={tb}", f"log.metrics={metrics}", f"checkpoint.dir={ckpt}",
            "checkpoint.every=3", "eval.every=2", "eval.batches=2", "log.every=1",
            # Muon with QK-clip: each layer's largest logit (max_logit/<layer>) and the heads clipped
            "optim.name=muon", "optim.muon.qk_clip.on=true", "optim.muon.qk_clip.threshold=0.1"]
    def train(extra, more=()):
        cmd = [a.trident, "train", os.path.join(a.root, "configs/demo.yaml"), *more]
        for s in sets + extra:
            cmd += ["--set", s]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    train([])
    train(["train.steps=10"], ["--resume", "auto"])
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    if len(files) != 2:
        sys.exit(f"FAIL: expected an events file per run (2), found {files}")

    expected = {}  # (tag, step) -> value
    for line in open(metrics):
        r = json.loads(line)
        if "step" not in r:
            continue
        vals = {}
        for k, v in r.items():
            if k not in ("type", "step", "time"):  # the wall clock is not a curve (launch/train/tensorboard.cpp)
                leaves(f"{r['type']}/{k}", v, vals)
        for tag, v in vals.items():
            expected[(tag, r["step"])] = v

    for tag in ("train/max_logit/0", "train/max_logit/3", "train/qk_clipped", "train/optimizer_s"):
        if (tag, 1) not in expected:
            sys.exit(f"FAIL: the metrics have no {tag} at step 1")
    ea = event_accumulator.EventAccumulator(tb, size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    got = {}
    for tag in ea.Tags()["scalars"]:
        for e in ea.Scalars(tag):
            if (tag, e.step) in got:
                sys.exit(f"FAIL: {tag} step {e.step} written twice")
            got[(tag, e.step)] = e.value
    bad = 0
    for key, v in sorted(expected.items()):
        if key not in got:
            print(f"missing in TensorBoard: {key[0]} at step {key[1]} (metrics: {v})")
            bad += 1
        elif not math.isclose(got[key], v, rel_tol=1e-6, abs_tol=1e-30) and got[key] != float(v):
            # TensorBoard keeps float32: compare at its precision
            import struct
            f32 = struct.unpack("f", struct.pack("f", v))[0]
            if got[key] != f32:
                print(f"differs: {key[0]} at step {key[1]}: TensorBoard {got[key]}, metrics {v}")
                bad += 1
    for key in sorted(set(got) - set(expected)):
        print(f"in TensorBoard only: {key[0]} at step {key[1]}")
        bad += 1
    losses = [e.step for e in ea.Scalars("train/loss")]
    if losses != list(range(1, 11)):
        print(f"train/loss steps {losses}, expected 1..10 in one curve")
        bad += 1
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/mfu",
                "train/peak_bytes/activations", "train/bubble/0", "train/checkpoint_s", "eval/val_loss"):
        if tag not in ea.Tags()["scalars"]:
            print(f"no series {tag}")
            bad += 1
    texts = ea.Tensors("recipe") if "recipe" in ea.Tags()["tensors"] else []
    if not texts or b"model:" not in texts[0].tensor_proto.string_val[0]:
        print("the resolved recipe is not in the text plugin")
        bad += 1
    if bad:
        sys.exit(f"FAIL: {bad} problems")
    print(f"OK: {len(expected)} scalars in {len(files)} event files equal the metrics file; "
          f"{len(ea.Tags()['scalars'])} series, loss steps 1-10 in one curve, recipe text present")


main()
