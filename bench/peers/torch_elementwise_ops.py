#!/usr/bin/env python3
"""PyTorch eager beside kiln_elementwise_ops: the same ops, dtypes and sizes, timed the same way.

  torch_elementwise_ops.py [--log2n 26] [--runs 10] [--batch 20]

Each op is queued `batch` times between two synchronizes (min over `runs` samples, divided by
`batch`); the copy is `dst.copy_(src)` of the op's bytes (read plus written). Prints the table
kiln_elementwise_ops prints: op, dtype, GB/s, copy GB/s, fraction; the last row per dtype is
torch.randn (writes only; its copy moves the same bytes).
"""
import argparse
import time

import torch


def seconds_per_call(fn, runs, batch):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / batch)
    return best


OPS = [
    ("neg", 1, lambda x, y: -x), ("abs", 1, lambda x, y: x.abs()),
    ("relu", 1, lambda x, y: torch.relu(x)), ("sin", 1, lambda x, y: x.sin()),
    ("cos", 1, lambda x, y: x.cos()), ("tan", 1, lambda x, y: x.tan()),
    ("exp", 1, lambda x, y: x.exp()), ("log", 1, lambda x, y: x.log()),
    ("sqrt", 1, lambda x, y: x.sqrt()), ("rsqrt", 1, lambda x, y: x.rsqrt()),
    ("tanh", 1, lambda x, y: x.tanh()), ("sigmoid", 1, lambda x, y: x.sigmoid()),
    ("gelu", 1, lambda x, y: torch.nn.functional.gelu(x)),
    ("silu", 1, lambda x, y: torch.nn.functional.silu(x)), ("erf", 1, lambda x, y: x.erf()),
    ("add", 2, lambda x, y: x + y), ("sub", 2, lambda x, y: x - y),
    ("mul", 2, lambda x, y: x * y), ("div", 2, lambda x, y: x / y),
    ("pow", 2, lambda x, y: torch.pow(x, y)), ("minimum", 2, lambda x, y: torch.minimum(x, y)),
    ("maximum", 2, lambda x, y: torch.maximum(x, y)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2n", type=int, default=26)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20)
    o = ap.parse_args()
    n = 1 << o.log2n
    print(f"name = torch {torch.__version__} cuda ({torch.cuda.get_device_name()}), "
          f"{n} elements per op")
    print(f"{'op':<8} {'dtype':<5} {'GB/s':>10} {'copy GB/s':>10} {'fraction':>9}")
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        x = (torch.rand(n, device="cuda") * 1.5 + 0.5).to(dtype)
        y = (torch.rand(n, device="cuda") * 1.5 + 0.5).to(dtype)
        size = x.element_size()
        copies = {}
        for inputs in (0, 1, 2):
            src = torch.empty((inputs + 1) * n * size // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copies[inputs] = seconds_per_call(lambda: dst.copy_(src), o.runs, o.batch)
        for op, inputs, fn in OPS:
            nbytes = (inputs + 1) * n * size
            s = seconds_per_call(lambda: fn(x, y), o.runs, o.batch)
            c = copies[inputs]
            print(f"{op:<8} {name:<5} {nbytes / s / 1e9:10.1f} {nbytes / c / 1e9:10.1f} "
                  f"{c / s:9.2f}", flush=True)
        # randn writes only: its copy moves the same bytes (half read, half written)
        nbytes = n * size
        s = seconds_per_call(lambda: torch.randn(n, device="cuda", dtype=dtype), o.runs, o.batch)
        c = copies[0]
        print(f"{'normal':<8} {name:<5} {nbytes / s / 1e9:10.1f} {nbytes / c / 1e9:10.1f} "
              f"{c / s:9.2f}", flush=True)


if __name__ == "__main__":
    main()
