"""Chart of a `trident sweep` directory: measured vs predicted tokens/s and
peak memory per device for each mesh, written to DIR/sweep.png.

Usage: python3 bench/plot_sweep.py DIR [DIR ...]   (matplotlib required)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(directory):
    rows = [r for r in json.load(open(os.path.join(directory, "sweep.json"))) if r["valid"]]
    labels = [f"{r['data']}x{r['tensor']}x{r['pipeline']}" for r in rows]
    x = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    w = 0.38
    ax1.bar([i - w / 2 for i in x], [r["measured"]["tokens_per_s"] for r in rows], w, label="measured")
    ax1.bar([i + w / 2 for i in x], [r["predicted"]["tokens_per_s"] for r in rows], w, label="predicted")
    ax1.set_title("tokens/s")
    ax2.bar([i - w / 2 for i in x], [r["measured"]["memory_bytes"]["total"] / 2**20 for r in rows], w, label="measured")
    ax2.bar([i + w / 2 for i in x], [r["predicted"]["memory_bytes"]["total"] / 2**20 for r in rows], w,
            label="predicted")
    ax2.set_title("peak memory per rank (MiB)")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels)
        ax.set_xlabel("data x tensor x pipeline")
        ax.legend()
    fig.suptitle(directory)
    fig.tight_layout()
    out = os.path.join(directory, "sweep.png")
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for d in sys.argv[1:]:
        plot(d)
