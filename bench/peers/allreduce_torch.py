#!/usr/bin/env python3
"""PyTorch beside bench/models/allreduce.cpp (kiln_allreduce): torch.distributed.all_reduce (sum,
NCCL) of f32 and bf16 tensors from 1 MiB to 256 MiB, the median of 20 timed calls after 5 warm-up
calls, each timed from queue to torch.cuda.synchronize; algbw = bytes / time, busbw = algbw *
2 (N - 1) / N. One process per GPU: torchrun --nproc-per-node N allreduce_torch.py [--max-mib 256].
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-mib", type=int, default=256)
    a = p.parse_args()
    dist.init_process_group("nccl")
    dev = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    torch.cuda.set_device(dev)
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        print(f"torch {torch.__version__} all_reduce (sum) over {n} ranks, NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))}; median of 20 calls")
        print(f"{'bytes':>10} {'dtype':>6} {'algbw GB/s':>12} {'busbw GB/s':>12}")
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        mib = 1
        while mib <= a.max_mib:
            nbytes = mib << 20
            x = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype,
                           device=dev)
            samples = []
            for i in range(25):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                torch.cuda.synchronize()
                if i >= 5:
                    samples.append(time.perf_counter() - t0)
            samples.sort()
            algbw = nbytes / samples[len(samples) // 2] / 1e9
            if rank == 0:
                print(f"{nbytes:>10} {name:>6} {algbw:>12.1f} {algbw * 2 * (n - 1) / n:>12.1f}")
            mib *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
