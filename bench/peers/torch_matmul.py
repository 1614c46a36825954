#!/usr/bin/env python3
"""PyTorch eager beside `kiln bench` on the same matmul shapes, timed the same way.

  torch_matmul.py cpu [N]           CPU matmul N^3 f32 (default 1024): first call, then min and
                                    median of the next 100 (time.perf_counter around the call).
  torch_matmul.py cuda-first [N]    CUDA matmul N^3 f32 in this fresh process: the first strict
                                    call, then the first TF32 call, each with its synchronize,
                                    then min of the next 20 of each (what kiln's "new-shape
                                    matmul" rows compare with).
  torch_matmul.py cuda-half [N...]  CUDA matmul N^3 in bf16 and f16 (default 4096 8192): min of
                                    20 calls after a warm-up, and TFLOP/s (2 N^3 / min), beside
                                    kiln_half_matmul's lines.

Operands are made before the clock, as kiln bench makes them. Prints lines in kiln bench's form,
under `name = torch <version> ...`.
"""
import sys
import time

import torch


def fmt(s):
    return f"{s * 1e3:.2f}ms" if s >= 1e-3 else f"{s * 1e6:.2f}us"


def timed(fn, sync):
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def line(label, first, rest):
    rest = sorted(rest)
    print(f"{label}: first {fmt(first)}, next {len(rest)} min {fmt(rest[0])} "
          f"median {fmt(rest[len(rest) // 2])}")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    if mode == "cpu":
        print(f"name = torch {torch.__version__} cpu ({torch.get_num_threads()} threads)")
        a, b = torch.rand(n, n), torch.rand(n, n)
        first = timed(lambda: torch.mm(a, b), lambda: None)
        line(f"matmul {n}x{n} f32", first, [timed(lambda: torch.mm(a, b), lambda: None)
                                             for _ in range(100)])
    elif mode == "cuda-first":
        print(f"name = torch {torch.__version__} cuda ({torch.cuda.get_device_name()})")
        a = torch.rand(n, n, device="cuda")
        b = torch.rand(n, n, device="cuda")
        torch.cuda.synchronize()
        sync = torch.cuda.synchronize
        for label, tf32 in ((f"new-shape matmul {n}x{n} f32", False),
                            (f"new-shape matmul {n}x{n} f32 tf32", True)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            first = timed(lambda: torch.mm(a, b), sync)
            line(label, first, [timed(lambda: torch.mm(a, b), sync) for _ in range(20)])
    elif mode == "cuda-half":
        print(f"name = torch {torch.__version__} cuda ({torch.cuda.get_device_name()})")
        sync = torch.cuda.synchronize
        for side in [int(a) for a in sys.argv[2:]] or [4096, 8192]:
            for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
                a = torch.rand(side, side, device="cuda").to(dtype)
                b = torch.rand(side, side, device="cuda").to(dtype)
                first = timed(lambda: torch.mm(a, b), sync)
                rest = sorted(timed(lambda: torch.mm(a, b), sync) for _ in range(20))
                line(f"matmul {side}x{side} {name}", first, rest)
                print(f"  {2 * side ** 3 / rest[0] / 1e12:.0f} TFLOP/s")
    else:
        sys.exit(f"usage: {sys.argv[0]} cpu|cuda-first|cuda-half [N]")


if __name__ == "__main__":
    main()
