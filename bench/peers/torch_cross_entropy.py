#!/usr/bin/env python3
"""Cross-entropy in PyTorch: bench/models/cross_entropy.cpp's table, same shapes ([16384, 50304]
and [8192, 4096]), same dtypes (bf16, f32), same byte counts: F.cross_entropy eager and under
torch.compile, forward alone and forward + backward. bf16 logits go to F.cross_entropy as they
are (eager computes its log_softmax in the logits' dtype; under bf16 autocast it would cast them
to f32 first).

  python3 bench/peers/torch_cross_entropy.py [--runs 5] [--batch 5] [--no-compile]
"""
import argparse

import torch
import torch.nn.functional as F

from peer_timing import seconds_per_call


def row(args, dtype, n, c):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(n, c, device="cuda", generator=gen) * 2).to(dtype)
    t = torch.randint(0, c, (n,), device="cuda", generator=gen)
    logits_bytes = n * c * x.element_size()
    fns = [("eager", F.cross_entropy)]
    if not args.no_compile:
        fns.append(("compile", torch.compile(F.cross_entropy)))
    for label, fn in fns:
        f = seconds_per_call(args, lambda: fn(x, t))
        leaf = x.detach().requires_grad_(True)

        def step():
            leaf.grad = None
            fn(leaf, t).backward()

        fb = seconds_per_call(args, step)
        print(f"cross_entropy [{n}, {c}] {str(dtype).replace('torch.', '')} torch {label}: "
              f"forward {f * 1e3:.3f} ms ({2 * logits_bytes / f * 1e-9:.0f} GB/s), forward+backward "
              f"{fb * 1e3:.3f} ms ({4 * logits_bytes / fb * 1e-9:.0f} GB/s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    print(f"name = torch {torch.__version__} cuda, min over {args.runs} runs of the mean of "
          f"{args.batch} calls")
    for n, c in ((16 * 1024, 50304), (8192, 4096)):
        for dtype in (torch.bfloat16, torch.float32):
            row(args, dtype, n, c)


if __name__ == "__main__":
    main()
