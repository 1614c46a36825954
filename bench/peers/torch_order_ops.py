#!/usr/bin/env python3
"""The order and scan ops in PyTorch: bench/models/order_ops.cpp's table, same shapes, same byte
counts, same format: sort and argsort of [4096, 4096] f32 along the last dim, topk k=50 of
[64, 50304], cumsum and max(dim=1) with indices of [8192, 4096], randperm(1e7), and bincount of 1e7
ids into 50304 bins, each beside the copy bandwidth of the same bytes, measured in the same run.

  python3 bench/peers/torch_order_ops.py [--device cuda|cpu] [--runs 5] [--batch 10] [--scale S]
"""
import argparse
import time

import torch


def seconds_per_call(args, call, sync):
    call()
    sync()
    best = 1e30
    for _ in range(args.runs):
        t0 = time.perf_counter()
        for _ in range(args.batch):
            call()
        sync()
        best = min(best, (time.perf_counter() - t0) / args.batch)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--scale", type=int, default=1)
    args = p.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    s = max(1, args.scale)
    print(f"name = torch {torch.__version__} {dev}, min over {args.runs} runs of the mean of "
          f"{args.batch} calls")
    print(f"{'op':<10} {'shape':<20} {'us':>12} {'GB/s':>10} {'copy GB/s':>10} {'fraction':>9}")
    g = torch.Generator().manual_seed(1)

    def report(op, shape, nbytes, fn):
        t = seconds_per_call(args, fn, sync)
        src = torch.empty(int(nbytes) // 2, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        c = seconds_per_call(args, lambda: dst.copy_(src), sync)
        print(f"{op:<10} {shape:<20} {t * 1e6:12.1f} {nbytes / t / 1e9:10.1f} "
              f"{nbytes / c / 1e9:10.1f} {c / t:9.2f}")

    r, n = 4096 // s, 4096
    x = torch.randn(r, n, generator=g).to(dev)
    report("sort", f"[{r}, {n}]", r * n * 12.0, lambda: torch.sort(x, dim=-1, stable=True))
    report("argsort", f"[{r}, {n}]", r * n * 12.0, lambda: torch.argsort(x, dim=-1, stable=True))
    r, n, k = 64, 50304 // s, 50
    x = torch.randn(r, n, generator=g).to(dev)
    report("topk", f"[{r}, {n}] k=50", r * n * 4.0 + r * k * 8.0, lambda: torch.topk(x, k))
    r, n = 8192 // s, 4096
    x = torch.randn(r, n, generator=g).to(dev)
    report("cumsum", f"[{r}, {n}]", r * n * 8.0, lambda: torch.cumsum(x, 1))
    report("max(dim)", f"[{r}, {n}]", r * n * 4.0 + r * 8.0, lambda: torch.max(x, 1))
    n = 10000000 // s
    report("randperm", f"[{n}]", n * 4.0,
           lambda: torch.randperm(n, device=dev, dtype=torch.int32))
    ids = torch.randint(0, 50304, (n,), generator=g).to(dev)
    report("bincount", f"[{n}] 50304", n * 4.0, lambda: torch.bincount(ids, minlength=50304))


if __name__ == "__main__":
    main()
