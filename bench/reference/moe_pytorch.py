"""PyTorch reference for Trident's MoE training-step benchmark.

The same model as Trident's LLaMA family with model.moe (RMSNorm, RoPE,
attention via scaled_dot_product_attention, untied head; every layer MoE:
a softmax router over E experts, top-k renormalised as Mixtral, SwiGLU
experts stored [E, 2I, C] and [E, C, I] as transformers 5 stores them, the
experts run eagerly one after the other on their tokens (index_select /
index_add_, transformers' eager path), the Switch aux loss with the recipe's
coefficient), the same optimizer (AdamW, decay on matmul weights only,
global-norm clipping), fp32 on CPU with the same thread count. Prints one
JSON line with the measured tokens/s of a full training step.

Usage: python moe_pytorch.py --recipe configs/moe-124m.yaml --threads 2 \
           [--micro-batch 4] [--seq-len 64] [--steps 10]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.w, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rope(x, cos, sin):  # x [B, H, T, D], rotate-half convention
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Moe(nn.Module):
    def __init__(self, C, e):
        super().__init__()
        self.E, self.k, I = e["experts"], e["top_k"], e["ffn_hidden"]
        self.gate = nn.Linear(C, self.E, bias=False)
        self.gate_up = nn.Parameter(torch.empty(self.E, 2 * I, C))
        self.down = nn.Parameter(torch.empty(self.E, C, I))
        self.coef = e.get("balance", {}).get("coef", 0.01)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        N = x.shape[0]
        p = F.softmax(self.gate(x), dim=-1)
        w, idx = p.topk(self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        counts = torch.zeros(self.E)
        for e in range(self.E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            counts[e] = tok.numel()
            if tok.numel() == 0:
                continue
            g, u = F.linear(x.index_select(0, tok), self.gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(g) * u, self.down[e]) * w[tok, slot].unsqueeze(-1)
            out.index_add_(0, tok, y)
        aux = self.coef * self.E / (self.k * N * N) * (counts * p.sum(0)).sum()
        return out.view(shape), aux


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, self.H, self.KV = m["hidden"], m["heads"], m.get("kv_heads", m["heads"])
        D = C // self.H
        eps = m.get("norm_eps", 1e-5)
        self.n1, self.n2 = RMSNorm(C, eps), RMSNorm(C, eps)
        self.qkv = nn.Linear(C, (self.H + 2 * self.KV) * D, bias=False)
        self.o = nn.Linear(self.H * D, C, bias=False)
        self.moe = Moe(C, m["moe"])

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        D = C // self.H
        q, k, v = self.qkv(self.n1(x)).split([self.H * D, self.KV * D, self.KV * D], dim=-1)
        q, k, v = (t.view(B, T, -1, D).transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.KV != self.H)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        h, aux = self.moe(self.n2(x))
        return x + h, aux


class Model(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, V = m["hidden"], m["vocab"]
        self.embed = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.norm = RMSNorm(C, m.get("norm_eps", 1e-5))
        self.head = nn.Linear(C, V, bias=False)
        D = C // m["heads"]
        inv = 1.0 / (m.get("rope_theta", 10000.0) ** (torch.arange(0, D, 2).float() / D))
        ang = torch.outer(torch.arange(m["seq_len"]).float(), inv)
        self.cos, self.sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
        std = m.get("init_std", 0.02)
        for name, p in self.named_parameters():
            if name.endswith(".w"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.embed(idx)
        aux = 0
        for b in self.layers:
            x, a = b(x, self.cos, self.sin)
            aux = aux + a
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1)) + aux


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--precision", choices=["fp32"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    with open(a.recipe) as f:
        r = yaml.safe_load(f)
    m = dict(r["model"], seq_len=a.seq_len)
    if m["arch"] != "llama" or "moe" not in m:
        raise SystemExit("reference implements arch llama with model.moe (every layer MoE) only")
    model = Model(m)
    o = r["optim"]
    decay = [p for n, p in model.named_parameters() if not n.endswith(".w") and "embed" not in n]
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
                      "precision": a.precision, "step_ms": dt * 1e3, "tokens_per_s": B * T / dt,
                      "params": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
