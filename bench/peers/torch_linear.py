#!/usr/bin/env python3
"""A linear layer with its epilogue in PyTorch: bench/models/linear_ops.cpp's rows, same shape
(x [16384, 768] @ W^T, W [3072, 768], bias [3072]), same dtype (bf16), same timing: the plain
product, F.linear with and without bias, bias + tanh GELU, bias + exact GELU, bias + ReLU,
eager and under torch.compile, then forward + backward of bias + tanh GELU and of the bias alone.
TFLOP/s count 2 m n k per product (forward + backward: 3 products).

  python3 bench/peers/torch_linear.py [--runs 5] [--batch 10] [--no-compile]
"""
import argparse

import torch
import torch.nn.functional as F

from peer_timing import seconds_per_call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--m", type=int, default=16384)
    p.add_argument("--k", type=int, default=768)
    p.add_argument("--n", type=int, default=3072)
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    m, k, n = args.m, args.k, args.n
    gen = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda *s: (torch.rand(*s, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    x, w, b, g = mk(m, k), mk(n, k), mk(n), mk(m, n)
    flops = 2.0 * m * n * k
    print(f"name = torch {torch.__version__} cuda, bf16, x [{m}, {k}] @ W^T [{k}, {n}], min over "
          f"{args.runs} runs of the mean of {args.batch} calls")
    plain = [0.0]

    def row(label, products, call):
        s = seconds_per_call(args, call)
        tflops = products * flops / s * 1e-12
        if plain[0] == 0:
            plain[0] = tflops
        print(f"  {label:<44} {s * 1e6:9.1f} us  {tflops:6.1f} TFLOP/s  "
              f"{100 * tflops / plain[0]:5.1f} % of the plain product's", flush=True)

    forwards = [
        ("linear, no bias", lambda x, w, b: F.linear(x, w)),
        ("linear + bias", lambda x, w, b: F.linear(x, w, b)),
        ("linear + bias + gelu_tanh", lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")),
        ("linear + bias + gelu (exact)", lambda x, w, b: F.gelu(F.linear(x, w, b))),
        ("linear + bias + relu", lambda x, w, b: F.relu(F.linear(x, w, b))),
    ]
    with torch.no_grad():
        row("torch matmul x @ W^T (the plain product)", 1, lambda: x @ w.t())
        for label, f in forwards:
            row(f"torch eager {label}", 1, lambda f=f: f(x, w, b))
        if not args.no_compile:
            for label, f in forwards[1:3]:
                cf = torch.compile(f)
                row(f"torch compile {label}", 1, lambda cf=cf: cf(x, w, b))
    xl, wl, bl = (t.detach().requires_grad_(True) for t in (x, w, b))
    backwards = [
        ("linear + bias + gelu_tanh", lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")),
        ("linear + bias", lambda x, w, b: F.linear(x, w, b)),
    ]
    for label, f in backwards:
        modes = [("eager", f)] + ([] if args.no_compile else [("compile", torch.compile(f))])
        for mode, fn in modes:
            def step(fn=fn):
                xl.grad = wl.grad = bl.grad = None
                (fn(xl, wl, bl) * g).sum().backward()
            row(f"torch {mode} fwd+bwd {label}", 3, step)


if __name__ == "__main__":
    main()
