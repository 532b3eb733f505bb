"""Writes tests/model/reference/tiny.safetensors with the reference implementation
(the `safetensors` package, via PyTorch) for test_safetensors: the C++ reader
must read what Hugging Face writes.

    python3 -m venv build/bench-venv && build/bench-venv/bin/pip install torch safetensors
    build/bench-venv/bin/python tests/model/reference/make_safetensors.py
"""
import os

import torch
from safetensors.torch import save_file

tensors = {
    "a.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
    "b": torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.bfloat16),
    "c": torch.arange(5, dtype=torch.int32),
    "d": torch.tensor([[1.25, -7.5]], dtype=torch.float64),
    "e": torch.tensor([0.5, -1.0, 2.0], dtype=torch.float16),
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.safetensors")
save_file(tensors, out, metadata={"format": "pt", "step": "7"})
print("wrote", out)
