"""PyTorch reference for Trident's training-step benchmark.

The same GPT-2 model as Trident (pre-LayerNorm blocks, tanh GELU, learned
positions, tied embeddings, biases), the same initialisation scheme (normal
init_std, residual projections init_std / sqrt(2 * layers), zero biases, unit
norms), the same optimizer (AdamW, decay on matmul weights only, global-norm
clipping), fp32 on CPU with the same thread count. Prints one JSON line with
the measured tokens/s of a full training step.

Usage: python gpt_pytorch.py --recipe configs/gpt2-124m.yaml --threads 2 \
           [--micro-batch 4] [--seq-len 64] [--steps 10]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


class Block(nn.Module):
    def __init__(self, C, H, Fh):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, Fh)
        self.mlp_proj = nn.Linear(Fh, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, L, V, T = m["hidden"], m["layers"], m["vocab"], m["seq_len"]
        Fh = m.get("ffn_hidden", 4 * C)
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, m["heads"], Fh) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        std = m.get("init_std", 0.02)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * L))
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: the forward under torch.autocast (bf16 matmuls, fp32 weights and optimizer)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    with open(a.recipe) as f:
        r = yaml.safe_load(f)
    m = dict(r["model"], seq_len=a.seq_len)
    if m["arch"] != "gpt2":
        raise SystemExit("reference implements arch gpt2 only")
    model = GPT(m)
    o = r["optim"]
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "ln_" not in n and "wte" not in n and "wpe" not in n]
    no_decay = [p for n, p in model.named_parameters() if not any(p is d for d in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.get("weight_decay", 0.0)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=tuple(o.get("betas", [0.9, 0.95])), eps=o.get("eps", 1e-8))
    B, T, V = a.micro_batch, a.seq_len, m["vocab"]
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, V, (B, T), generator=g)
    tgt = torch.randint(0, V, (B, T), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.get("grad_clip", 1.0))
        opt.step()
        return loss.item()

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = (time.perf_counter() - t0) / a.steps
    print(json.dumps({"framework": "pytorch " + torch.__version__, "recipe": a.recipe, "threads": a.threads,
                      "precision": a.precision,
                      "step_ms": dt * 1e3, "tokens_per_s": B * T / dt,
                      "params": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
