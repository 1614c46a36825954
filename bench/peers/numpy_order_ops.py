#!/usr/bin/python3
"""The order and scan ops in NumPy on the CPU: bench/models/order_ops.cpp's table (run it with
--device cpu and the same --scale), same shapes, byte counts and format, beside the copy bandwidth
of the same bytes. NumPy's forms: np.sort/argsort(kind="stable"), topk as argpartition then a sort
of the k, cumsum, max(dim) as max and argmax (two passes), randperm as
default_rng(seed).permutation, bincount(minlength=50304). Run with Debian's /usr/bin/python3.

  /usr/bin/python3 bench/peers/numpy_order_ops.py [--runs 5] [--batch 10] [--scale S]
"""
import argparse
import time

import numpy as np


def seconds_per_call(args, call):
    call()
    best = 1e30
    for _ in range(args.runs):
        t0 = time.perf_counter()
        for _ in range(args.batch):
            call()
        best = min(best, (time.perf_counter() - t0) / args.batch)
    return best


def topk(x, k):
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]
    vals = np.take_along_axis(x, part, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, axis=-1), np.take_along_axis(part, order, axis=-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--scale", type=int, default=1)
    args = p.parse_args()
    s = max(1, args.scale)
    print(f"name = numpy {np.__version__} cpu, min over {args.runs} runs of the mean of "
          f"{args.batch} calls")
    print(f"{'op':<10} {'shape':<20} {'us':>12} {'GB/s':>10} {'copy GB/s':>10} {'fraction':>9}")
    rng = np.random.default_rng(1)

    def report(op, shape, nbytes, fn):
        t = seconds_per_call(args, fn)
        src = np.zeros(int(nbytes) // 2, dtype=np.uint8)
        dst = np.empty_like(src)
        c = seconds_per_call(args, lambda: np.copyto(dst, src))
        print(f"{op:<10} {shape:<20} {t * 1e6:12.1f} {nbytes / t / 1e9:10.1f} "
              f"{nbytes / c / 1e9:10.1f} {c / t:9.2f}")

    r, n = 4096 // s, 4096
    x = rng.standard_normal((r, n), dtype=np.float32)
    report("sort", f"[{r}, {n}]", r * n * 12.0, lambda: np.sort(x, axis=-1, kind="stable"))
    report("argsort", f"[{r}, {n}]", r * n * 12.0, lambda: np.argsort(x, axis=-1, kind="stable"))
    r, n, k = 64, 50304 // s, 50
    x = rng.standard_normal((r, n), dtype=np.float32)
    report("topk", f"[{r}, {n}] k=50", r * n * 4.0 + r * k * 8.0, lambda: topk(x, k))
    r, n = 8192 // s, 4096
    x = rng.standard_normal((r, n), dtype=np.float32)
    report("cumsum", f"[{r}, {n}]", r * n * 8.0, lambda: np.cumsum(x, axis=1))
    report("max(dim)", f"[{r}, {n}]", r * n * 4.0 + r * 8.0,
           lambda: (x.max(axis=1), x.argmax(axis=1)))
    n = 10000000 // s
    report("randperm", f"[{n}]", n * 4.0,
           lambda: np.random.default_rng(7).permutation(n).astype(np.int32))
    ids = rng.integers(0, 50304, n, dtype=np.int32)
    report("bincount", f"[{n}] 50304", n * 4.0, lambda: np.bincount(ids, minlength=50304))


if __name__ == "__main__":
    main()
