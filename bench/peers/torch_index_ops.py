#!/usr/bin/env python3
"""The embedding at GPT-2 small sizes in PyTorch: bench/models/index_ops.cpp's table, same shapes,
same byte counts, same format (gather: F.embedding; backward: index_add_ into zeros, atomic, and
under torch.use_deterministic_algorithms(True)).

  python3 bench/peers/torch_index_ops.py [--device cuda|cpu] [--rows 50304] [--features 768]
                                         [--ids 16384] [--runs 5] [--batch 10]
"""
import argparse
import time

import torch
import torch.nn.functional as F


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
    p.add_argument("--rows", type=int, default=50304)
    p.add_argument("--features", type=int, default=768)
    p.add_argument("--ids", type=int, default=16384)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    args = p.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.rows, (args.ids,), generator=g, dtype=torch.int32).to(dev)
    print(f"name = torch {torch.__version__} {dev}, weight [{args.rows}, {args.features}], "
          f"{args.ids} ids")
    print(f"{'op':<22} {'dtype':<5} {'GB/s':>10} {'copy GB/s':>10} {'fraction':>9}")
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        size = torch.tensor([], dtype=dt).element_size()
        weight = torch.randn(args.rows, args.features, device=dev).to(dt)
        grad = torch.randn(args.ids, args.features, device=dev).to(dt)
        zero = torch.zeros(args.rows, args.features, device=dev, dtype=dt)

        def report(label, nbytes, call):
            s = seconds_per_call(args, call, sync)
            half = int(nbytes) // 2
            src = torch.empty(half, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            c = seconds_per_call(args, lambda: dst.copy_(src), sync)
            print(f"{label:<22} {name:<5} {nbytes / s / 1e9:10.1f} {nbytes / c / 1e9:10.1f} "
                  f"{c / s:9.2f}")

        report("embedding gather", 2.0 * args.ids * args.features * size + 4.0 * args.ids,
               lambda: F.embedding(ids, weight))
        add_bytes = (2.0 * args.rows + args.ids) * args.features * size + 4.0 * args.ids
        for det in (False, True):
            torch.use_deterministic_algorithms(det)
            report("embedding bwd (determ)" if det else "embedding bwd (atomic)", add_bytes,
                   lambda: zero.index_add(0, ids, grad))
        torch.use_deterministic_algorithms(False)


if __name__ == "__main__":
    main()
