#!/usr/bin/env python3
"""The row ops in PyTorch: bench/models/row_ops.cpp's table, same shapes ([8192, 4096] and GPT-2
small's [16 * 1024, 768]), same dtypes (f32, bf16), same byte counts (x read once, y written once),
same format: eager (F.softmax, F.log_softmax, F.layer_norm, F.rms_norm, and x + r with its
F.layer_norm as kiln's add_layer_norm) beside torch.compile of the same call, and the copy bandwidth of the same bytes, measured in the same run.

  python3 bench/peers/torch_row_ops.py [--device cuda|cpu] [--runs 5] [--batch 10]
                                       [--rows R --cols N] [--no-compile]
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


def rms_norm(x, w, eps=1e-6):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def add_layer_norm(x, r, w, b):
    s = x + r
    return s, F.layer_norm(s, (x.shape[-1],), w, b, 1e-5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--rows", type=int, default=0)
    p.add_argument("--cols", type=int, default=0)
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    shapes = [(args.rows, args.cols)] if args.rows and args.cols else [(8192, 4096), (16 * 1024, 768)]
    print(f"name = torch {torch.__version__} {dev}, min over {args.runs} runs of the mean of "
          f"{args.batch} calls")
    print(f"{'op':<14} {'dtype':<5} {'shape':<14} {'eager us':>10} {'compile us':>11} "
          f"{'GB/s':>10} {'copy GB/s':>10} {'fraction':>9}")
    ops = {
        "softmax": lambda x, w, b: F.softmax(x, dim=-1),
        "log_softmax": lambda x, w, b: F.log_softmax(x, dim=-1),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        "rms_norm": lambda x, w, b: rms_norm(x, w),
        # x + r kept (the residual stream) and its layer norm: kiln's add_layer_norm.
        "add_layer_norm": lambda x, w, b: add_layer_norm(x, r, w, b),
    }
    moved = {"add_layer_norm": 4.0}  # tensors of x's size read and written; 2 for the others
    g = torch.Generator().manual_seed(1)
    for rows, cols in shapes:
        for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            size = torch.tensor([], dtype=dt).element_size()
            x = torch.randn(rows, cols, generator=g).to(dev, dt)
            r = torch.randn(rows, cols, generator=g).to(dev, dt)
            w = (torch.rand(cols, generator=g) + 0.5).to(dev, dt)
            b = torch.randn(cols, generator=g).to(dev, dt)
            for op, fn in ops.items():
                nbytes = moved.get(op, 2.0) * rows * cols * size
                half = int(nbytes) // 2
                src = torch.empty(half, dtype=torch.uint8, device=dev)
                dst = torch.empty_like(src)
                c = seconds_per_call(args, lambda: dst.copy_(src), sync)
                s = seconds_per_call(args, lambda: fn(x, w, b), sync)
                sc = float("nan")
                if not args.no_compile:
                    compiled = torch.compile(fn)
                    sc = seconds_per_call(args, lambda: compiled(x, w, b), sync)
                best = min(s, sc) if sc == sc else s
                print(f"{op:<14} {name:<5} {f'[{rows}, {cols}]':<14} {s * 1e6:10.1f} "
                      f"{sc * 1e6:11.1f} {nbytes / best / 1e9:10.1f} {nbytes / c / 1e9:10.1f} "
                      f"{c / best:9.2f}")


if __name__ == "__main__":
    main()
