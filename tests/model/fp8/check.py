"""kernels/fp8.hpp against the reference definitions, bit for bit (ctest: fp8_reference).

Builds a tensor of hard cases (every FP8 value, the midpoints between
neighbours and one float32 ulp either side, subnormals of both formats,
values past each format's largest, infinities, NaNs, zeros of both signs,
and normal and heavy-tailed random values over many magnitudes), runs
fp8_dump on it and compares each output with:
  - PyTorch's float8_e4m3fn / float8_e5m2 casts (and clamped first:
    torchao's to_fp8_saturated), and the 256 codes' values;
  - torchao's tensorwise scaling: tensor_to_amax, amax_to_scale (with and
    without round_scales_to_power_of_2) and hp_tensor_and_scale_to_float8,
    and Float8TrainingTensor's dequantisation;
  - DeepSeek-V3's blockwise quantisation (inference/kernel.py act_quant and
    weight_quant: s = amax / 448, q = e4m3(x / s); weight_dequant: q x s),
    transcribed to torch; the ue8m0 form rounds s up to a power of two;
    a tile of zeros has s = 0 and q = 0 (the reference's 0 / 0 would be NaN);
  - Transformer Engine's delayed scaling (amax history, margin) as its
    _default_sf_compute defines it;
  - the model's linear layer (LayerOps under train.fp8), its three GEMMs
    over two steps, against torchao's Float8Linear with emulate=True
    (tensorwise), Transformer Engine's delayed scaling and DeepSeek-V3's
    blockwise quantisation built from torch's casts, to float32 rounding.
Exit 1 with the first differences on a mismatch.
  check.py FP8_DUMP WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np
import torch
from torchao.float8.float8_utils import amax_to_scale, tensor_to_amax, to_fp8_saturated
from torchao.float8.float8_training_tensor import hp_tensor_and_scale_to_float8

DUMP, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
failures = []


def hard_cases():
    vals = []
    for dt in FORMATS.values():
        codes = torch.arange(256, dtype=torch.uint8).view(dt).float()
        fin = codes[torch.isfinite(codes)].unique().sort().values
        mids = (fin[1:].double() + fin[:-1].double()) / 2
        for v in [fin, mids.float()]:
            vals.append(v)
            vals.append(torch.nextafter(v, torch.full_like(v, float("inf"))))
            vals.append(torch.nextafter(v, torch.full_like(v, -float("inf"))))
        top = float(torch.finfo(dt).max)
        vals.append(torch.tensor([top * 1.03, top * 1.07, top * 1.5, top * 2, 1e30, 3.4e38]))
    vals.append(torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan"), 1e-45, 1e-40]))
    g = torch.Generator().manual_seed(1234)
    for scale in [1e-8, 1e-5, 1e-3, 1.0, 30.0, 400.0, 1e4, 6e4]:
        vals.append(torch.randn(2048, generator=g) * scale)
    vals.append(torch.randn(4096, generator=g) ** 3 * 50)  # heavy tails
    x = torch.cat([v.float().flatten() for v in vals])
    x = torch.cat([x, -x])
    return x


def compare(name, ours, ref):
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.dtype == np.float32:  # bit patterns, NaN payloads aside
        a, b = ours.view(np.uint32), ref.astype(np.float32).view(np.uint32)
        nan = np.isnan(ours) & np.isnan(ref.astype(np.float32))
        bad = np.nonzero((a != b) & ~nan)[0]
    else:
        bad = np.nonzero(ours != ref)[0]
    if bad.size:
        i = bad[:5]
        failures.append(f"{name}: {bad.size} of {ours.size} differ, first at {list(i)}: ours {ours[i]}, reference {ref[i]}")
    else:
        print(f"  {name}: {ours.size} values equal")


def read(name, dtype):
    return np.fromfile(os.path.join(WORK, name), dtype=dtype)


# the tensor: hard cases, then random normal rows, padded to 256 x 384 (3 tiles a row, 2 x 3 blocks)
ROWS, COLS = 256, 384
hard = hard_cases()
g = torch.Generator().manual_seed(99)
x = torch.randn(ROWS * COLS, generator=g)
# the hard cases fill the second block row (rows 128-255); the first block row stays finite and normal, with a
# zero tile, a tile of subnormal-sized values and tiles of very different magnitudes
x[128 * COLS : 128 * COLS + hard.numel()] = hard[: 128 * COLS]
x = x.view(ROWS, COLS)
x[0, :128] = 0.0
x[1, 128:256] *= 1e-6
x[2, :] *= 1e4
x[3, 256:] *= 1e-30
x.numpy().astype(np.float32).tofile(os.path.join(WORK, "in.f32"))
subprocess.run([DUMP, os.path.join(WORK, "in.f32"), str(ROWS), str(COLS), WORK], check=True)
flat = x.flatten()
print(f"fp8 reference check: {flat.numel()} values ({hard.numel()} hard cases), torch {torch.__version__}")

for name, dt in FORMATS.items():
    top = torch.finfo(dt).max
    compare(f"cast {name} (torch .to)", read(f"cast_{name}.u8", np.uint8), flat.to(dt).view(torch.uint8).numpy())
    compare(f"saturated {name} (torchao to_fp8_saturated)", read(f"sat_{name}.u8", np.uint8),
            to_fp8_saturated(flat, dt).view(torch.uint8).numpy())
    compare(f"decode {name}", read(f"decode_{name}.f32", np.float32),
            torch.arange(256, dtype=torch.uint8).view(dt).float().numpy())
    # tensorwise on the finite first block row (the hard cases' NaN would make every scale NaN)
finite = x[:128].contiguous()
finite.numpy().astype(np.float32).tofile(os.path.join(WORK, "finite.f32"))
os.makedirs(os.path.join(WORK, "finite"), exist_ok=True)
subprocess.run([DUMP, os.path.join(WORK, "finite.f32"), "128", str(COLS), os.path.join(WORK, "finite")], check=True)
for name, dt in FORMATS.items():
    for pow2 in (False, True):
        base = f"finite/tensorwise_{name}{'_pow2' if pow2 else ''}"
        scale = amax_to_scale(tensor_to_amax(finite), dt, round_scales_to_power_of_2=pow2)
        t = hp_tensor_and_scale_to_float8(finite, scale, dt)
        compare(f"tensorwise {name}{' pow2' if pow2 else ''} scale (torchao amax_to_scale)",
                read(base + ".scale.f32", np.float32), scale.reshape(1).numpy())
        compare(f"tensorwise {name}{' pow2' if pow2 else ''} values (torchao hp_tensor_and_scale_to_float8)",
                read(base + ".u8", np.uint8), t._data.view(torch.uint8).flatten().numpy())
        compare(f"tensorwise {name}{' pow2' if pow2 else ''} dequantised (Float8TrainingTensor)",
                read(base + ".dequant.f32", np.float32), t.to_original_precision().flatten().numpy())


def deepseek(w, rows_per_block, pow2):
    """act_quant (rows_per_block 1) / weight_quant (128) of DeepSeek-V3's inference/kernel.py, in torch."""
    r, c = w.shape
    b = w.view(r // rows_per_block, rows_per_block, c // 128, 128).permute(0, 2, 1, 3)
    s = b.abs().amax(dim=(2, 3)) / 448.0
    if pow2:  # the power of two at or above s, exactly (from its exponent, as DeepSeek's ue8m0 rounding)
        m, e = torch.frexp(s)
        s = torch.where(s > 0, torch.where(m == 0.5, s, torch.ldexp(torch.ones_like(s), e)), s)
    y = b / s[:, :, None, None]
    y = torch.where(s[:, :, None, None] == 0, torch.zeros_like(y), y)  # a tile of zeros: q = 0
    q = y.to(torch.float8_e4m3fn)
    back = q.float() * s[:, :, None, None]
    unperm = lambda t: t.permute(0, 2, 1, 3).reshape(r, c)
    return unperm(q.view(torch.uint8)), s.flatten(), unperm(back)


for square in (False, True):
    for pow2 in (False, True):
        tag = ("blocks" if square else "tiles") + ("_pow2" if pow2 else "")
        q, s, back = deepseek(x, 128 if square else 1, pow2)
        what = ("weight_quant 128x128" if square else "act_quant 1x128") + (" ue8m0" if pow2 else "")
        compare(f"{what} scales", read(tag + ".scale.f32", np.float32), s.numpy())
        compare(f"{what} values", read(tag + ".u8", np.uint8), q.flatten().numpy())
        compare(f"{what} dequantised (weight_dequant)", read(tag + ".dequant.f32", np.float32), back.flatten().numpy())

# Transformer Engine's delayed scaling: sf = (fp8_max / amax) / 2^margin over the history's max, kept when the
# amax is 0 or not finite
history, scale, ref = [], torch.tensor(1.0), []
for v in flat[:64].abs():
    history = (history + [v])[-4:]
    amax = torch.stack(history).max()
    sf = (448.0 / amax) / (2.0**1)  # float32, as Transformer Engine computes it
    sf = torch.where(amax > 0.0, sf, scale)
    sf = torch.where(torch.isfinite(amax), sf, scale)
    scale = sf
    ref.append(float(scale))
compare("delayed scaling (Transformer Engine)", read("delayed.f32", np.float32), np.array(ref, dtype=np.float32))

# The model's linear layer (LayerOps with train.fp8), forward and backward, two steps on the same tensors, against:
#   tensorwise: torchao's Float8Linear with emulation (input and weight e4m3, the output's gradient e5m2 (hybrid)
#     or e4m3), the same fake-quantised operands and float32 GEMMs (summed in another order: to float32 rounding);
#   delayed: Transformer Engine's definition from torch's casts: the first step casts with scale 1, the second with
#     (max_fp8 / amax) of the first step's tensors;
#   blockwise: DeepSeek-V3's act_quant / weight_quant from torch's casts: the input and the output's gradient in
#     1 x 128 tiles along their rows for the forward and the input gradient, in 128 x 1 tiles along the tokens for
#     the weight gradient (its sum runs over them), the weight in 128 x 128 blocks; partial tiles at the edges
#     (N = 200 tokens, OC = 192 rows: a 64-row block) take their amax over what they cover.
from torchao.float8 import CastConfig, Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_utils import to_fp8_saturated as saturated

N, C, OC = 200, 256, 192
lin_dir = os.path.join(WORK, "linear")
os.makedirs(lin_dir, exist_ok=True)
g = torch.Generator().manual_seed(7)
xl, wl, gl = torch.randn(N, C, generator=g) * 3, torch.randn(OC, C, generator=g) * 0.05, torch.randn(N, OC, generator=g) * 1e-3
xl[:, 200:] *= 40.0  # tiles of other magnitudes
gl[150:] *= 1e-2
for name, t in (("x", xl), ("w", wl), ("g", gl)):
    t.numpy().astype(np.float32).tofile(os.path.join(lin_dir, name + ".f32"))
subprocess.run([DUMP, "--linear", str(N), str(C), str(OC), lin_dir], check=True)


def torchao_linear(grad_dtype):
    cfg = Float8LinearConfig(emulate=True, cast_config_grad_output=CastConfig(target_dtype=grad_dtype))
    m = torch.nn.Sequential(torch.nn.Linear(C, OC, bias=False))
    with torch.no_grad():
        m[0].weight.copy_(wl)
    m = convert_to_float8_training(m, config=cfg)
    xin = xl.clone().requires_grad_(True)
    out = m(xin)
    out.backward(gl)
    return out.detach(), xin.grad, m[0].weight.grad


def scaled(t, dtype, scale):
    return saturated(t * scale, dtype).float() / scale


def delayed_step(step):
    scale = lambda t, top: torch.tensor(1.0) if step == 1 else (top / t.abs().max()).float()
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    xq, wq, gq = scaled(xl, e4, scale(xl, 448.0)), scaled(wl, e4, scale(wl, 448.0)), scaled(gl, e5, scale(gl, 57344.0))
    return xq @ wq.T, gq @ wq, gq.T @ xq


def tiled(t, tr, tc, pow2):
    r, c = t.shape
    R, Cc = -(-r // tr) * tr, -(-c // tc) * tc
    p = torch.zeros(R, Cc)
    p[:r, :c] = t
    b = p.view(R // tr, tr, Cc // tc, tc).permute(0, 2, 1, 3)
    s = b.abs().amax(dim=(2, 3)) / 448.0
    if pow2:
        m, e = torch.frexp(s)
        s = torch.where(s > 0, torch.where(m == 0.5, s, torch.ldexp(torch.ones_like(s), e)), s)
    y = b / s[:, :, None, None]
    y = torch.where(s[:, :, None, None] == 0, torch.zeros_like(y), y)
    back = y.to(torch.float8_e4m3fn).float() * s[:, :, None, None]
    return back.permute(0, 2, 1, 3).reshape(R, Cc)[:r, :c]


def blockwise(pow2):
    xq, wq, gq = tiled(xl, 1, 128, pow2), tiled(wl, 128, 128, pow2), tiled(gl, 1, 128, pow2)
    xt, gt = tiled(xl, 128, 1, pow2), tiled(gl, 128, 1, pow2)
    return xq @ wq.T, gq @ wq, gt.T @ xt


cases = {
    "tensorwise_hybrid": ("torchao Float8Linear, emulate", lambda s: torchao_linear(torch.float8_e5m2)),
    "tensorwise_e4m3": ("torchao Float8Linear, emulate", lambda s: torchao_linear(torch.float8_e4m3fn)),
    "delayed_hybrid": ("Transformer Engine delayed scaling", delayed_step),
    "blockwise": ("DeepSeek-V3 act_quant / weight_quant", lambda s: blockwise(False)),
    "blockwise_pow2": ("DeepSeek-V3, ue8m0 scales", lambda s: blockwise(True)),
}
for tag, (what, ref_of) in cases.items():
    for step in (1, 2):
        for part, ref in zip(("out", "dx", "dw"), ref_of(step)):
            ours = torch.from_numpy(read(f"linear/{part}_{tag}_{step}.f32", np.float32)).view(ref.shape)
            rel = float((ours - ref).norm() / ref.norm())
            if rel <= 1e-6:
                print(f"  linear {tag} step {step} {part} ({what}): relative L2 {rel:.2e}")
            else:
                failures.append(f"linear {tag} step {step} {part}: relative L2 {rel:.3e} against {what}")
    # the quantisation is what the GEMMs saw: a plain float32 layer differs by far more
    out = torch.from_numpy(read(f"linear/out_{tag}_2.f32", np.float32)).view(N, OC)
    rel_plain = float((xl @ wl.T - out).norm() / out.norm())
    if rel_plain < 1e-3:
        failures.append(f"linear {tag}: the FP8 output is within {rel_plain:.1e} of the float32 layer's: nothing quantised?")
# delayed scaling's first step (scale 1) differs from its second
d1 = read("linear/out_delayed_hybrid_1.f32", np.float32)
d2 = read("linear/out_delayed_hybrid_2.f32", np.float32)
if np.array_equal(d1, d2):
    failures.append("linear delayed_hybrid: the second step cast with the same scales as the first")

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("fp8 reference check: every value equal")
