#!/usr/bin/env python3
"""PyTorch beside bench/models/gpt2_block.cpp (kiln_gpt2_block): the same GPT-2 small block
forward (pre-norm, causal attention written as matmul + mask + softmax + matmul, GELU MLP), the
same shapes and the same timing, in a fresh process.

  torch_gpt2_block.py [--device cuda|cpu] [--batch 16] [--seq 1024] [--runs 20]
                      [--precision high|highest] [--compile] [--flash] [--autocast bf16]

Prints the process start (this script's first line) to the weights made, the first forward (its
result synchronised), and min / median of the next runs, in kiln bench's form. --compile times
torch.compile (its default mode) instead of eager; --flash uses F.scaled_dot_product_attention instead of the written-out attention;
--autocast bf16 runs it under torch.autocast(bfloat16), as kiln_gpt2_block --ops module --autocast bf16.
"""
import time

START = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import math  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

C, H = 768, 12
D = C // H


def fmt(s):
    return f"{s * 1e3:.2f}ms" if s >= 1e-3 else f"{s * 1e6:.2f}us"


def make_weights(dev, seq):
    g = torch.Generator(device=dev).manual_seed(0)

    def normal(r, c):
        return torch.randn(r, c, device=dev, generator=g) * 0.02

    w = dict(ln1_g=torch.ones(C, device=dev), ln1_b=torch.zeros(C, device=dev),
             ln2_g=torch.ones(C, device=dev), ln2_b=torch.zeros(C, device=dev),
             b_qkv=torch.zeros(3 * C, device=dev), b_proj=torch.zeros(C, device=dev),
             b_fc=torch.zeros(4 * C, device=dev), b_out=torch.zeros(C, device=dev),
             w_qkv=normal(C, 3 * C), w_proj=normal(C, C), w_fc=normal(C, 4 * C),
             w_out=normal(4 * C, C))
    i = torch.arange(seq, device=dev)
    w["mask"] = torch.where(i[:, None] >= i[None, :], 0.0, -math.inf)
    return w


def block(x, w, B, T, flash):
    def heads(t):
        return t.reshape(B, T, H, D).transpose(1, 2)

    qkv = F.layer_norm(x, (C,), w["ln1_g"], w["ln1_b"]) @ w["w_qkv"] + w["b_qkv"]
    q, k, v = (heads(t) for t in qkv.split(C, dim=1))
    if flash:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D)) + w["mask"]
        y = att.softmax(-1) @ v
    y = y.transpose(1, 2).reshape(B * T, C)
    x1 = x + (y @ w["w_proj"] + w["b_proj"])
    h = F.gelu(F.layer_norm(x1, (C,), w["ln2_g"], w["ln2_b"]) @ w["w_fc"] + w["b_fc"])
    return x1 + (h @ w["w_out"] + w["b_out"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--precision", default="high", choices=["high", "highest"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--flash", action="store_true")
    p.add_argument("--autocast", default="none", choices=["none", "bf16"])
    a = p.parse_args()
    torch.set_float32_matmul_precision(a.precision)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    w = make_weights(dev, a.seq)
    x = torch.randn(a.batch * a.seq, C, device=dev)
    sync()
    setup = time.perf_counter() - START
    fn = torch.compile(block) if a.compile else block
    kind = ("torch.compile" if a.compile else "eager") + (" flash" if a.flash else "") + (
        " bf16 autocast" if a.autocast == "bf16" else "")
    cast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if a.autocast == "bf16" else (
        contextlib.nullcontext)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print(f"name = torch {torch.__version__} {kind} ({name}), gpt2 block B={a.batch} T={a.seq} "
          f"{'tf32' if a.precision == 'high' else 'strict fp32'}")
    print(f"process start to weights made: {fmt(setup)}")

    def forward():
        t = time.perf_counter()
        with torch.no_grad(), cast():
            fn(x, w, a.batch, a.seq, a.flash)
        sync()
        return time.perf_counter() - t

    first = forward()
    rest = sorted(forward() for _ in range(a.runs))
    line = f"gpt2 block forward: first {fmt(first)} (process start to result {fmt(setup + first)})"
    if rest:
        line += f", next {len(rest)} min {fmt(rest[0])} median {fmt(rest[len(rest) // 2])}"
    print(line)


if __name__ == "__main__":
    main()
