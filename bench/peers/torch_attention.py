#!/usr/bin/env python3
"""Scaled dot-product attention in PyTorch: bench/models/attention_ops.cpp's table, same shapes
(B=16, H=12, T=1024, D=64 and H=6, D=128, causal), same dtypes (bf16, f32 with TF32), same counts
(forward 4 B H T^2 D / 2, backward 2.5 times that): F.scaled_dot_product_attention with the
backend PyTorch picks (cuDNN's on Hopper for bf16, memory-efficient for f32), for bf16 also each of
PyTorch's flash (FlashAttention-2) and cuDNN backends by name, beside the written-out attention.

  python3 bench/peers/torch_attention.py [--runs 5] [--batch 5] [--seq 1024]
"""
import argparse
import contextlib
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_timing import seconds_per_call


def written(q, k, v):
    t = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return s.masked_fill(mask, float("-inf")).softmax(-1) @ v


def row(args, dtype, heads, d):
    b, t = 16, args.seq
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, g = (torch.randn(b, heads, t, d, device="cuda", generator=gen).to(dtype)
                  for _ in range(4))
    flop = 4.0 * b * heads * t * t * d / 2
    name = f"attention causal {b}x{heads}x{t}x{d} {str(dtype).replace('torch.', '')}" + (
        " tf32" if dtype == torch.float32 else "")
    def sdpa(a, c, e):
        return F.scaled_dot_product_attention(a, c, e, is_causal=True)

    forms = [("sdpa", sdpa, None)]
    if dtype == torch.bfloat16:
        forms += [("sdpa flash", sdpa, SDPBackend.FLASH_ATTENTION),
                  ("sdpa cudnn", sdpa, SDPBackend.CUDNN_ATTENTION)]
    forms.append(("written", written, None))
    for label, fn, backend in forms:
        with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
            f = seconds_per_call(args, lambda: fn(q, k, v))
            ql, kl, vl = (x.detach().requires_grad_(True) for x in (q, k, v))
            fb = seconds_per_call(args, lambda: fn(ql, kl, vl).backward(g))
        print(f"{name} torch {label}: forward {f * 1e3:.3f} ms ({flop / f * 1e-12:.1f} TFLOP/s), "
              f"forward+backward {fb * 1e3:.3f} ms ({3.5 * flop / fb * 1e-12:.1f} TFLOP/s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--seq", type=int, default=1024)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"name = torch {torch.__version__} cuda, min over {args.runs} runs of the mean of "
          f"{args.batch} calls, cuDNN {torch.backends.cudnn.version()}")
    for dtype in (torch.bfloat16, torch.float32):
        row(args, dtype, 12, 64)
        row(args, dtype, 6, 128)


if __name__ == "__main__":
    main()
