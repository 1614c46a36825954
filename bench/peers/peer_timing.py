"""The timing every PyTorch peer shares with kiln's benchmarks (bench/models/bench_timing.hpp):
one call first (compile, allocate), then the minimum over `runs` of the mean of `batch` calls
between two synchronisations."""
import time

import torch


def seconds_per_call(args, call):
    call()
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(args.runs):
        t0 = time.perf_counter()
        for _ in range(args.batch):
            call()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / args.batch)
    return best
