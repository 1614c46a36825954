#!/usr/bin/env python3
"""One training step of an MLP 784-512-512-10 in PyTorch: bench/models/mlp_step.cpp's step (ReLU,
batch 128, cross-entropy, Adam with PyTorch's defaults), timed the same way: the minimum and
median over samples of `batch` steps, each sample ended by reading the loss. Eager with the
default Adam (foreach) and with fused=True, then torch.compile of the model and loss (the
optimizer step stays eager).

  python3 bench/peers/torch_mlp_step.py [--device cuda|cpu] [--runs 20] [--batch 10]
                                        [--hidden 512] [--rows 128] [--threads N] [--no-compile]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def make(args, dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 10)).to(dev)
    x = torch.rand(args.rows, 784, device=dev)
    y = torch.randint(0, 10, (args.rows,), device=dev)
    return model, x, y


def run(args, dev, label, fused, compiled):
    model, x, y = make(args, dev)
    opt = torch.optim.Adam(model.parameters(), fused=fused) if fused else torch.optim.Adam(
        model.parameters())
    forward = torch.compile(lambda: F.cross_entropy(model(x), y)) if compiled else (
        lambda: F.cross_entropy(model(x), y))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward()
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    first_loss = step().item()
    first = time.perf_counter() - t0
    samples = []
    loss = first_loss
    for _ in range(args.runs):
        s0 = time.perf_counter()
        for _ in range(args.batch):
            last = step()
        loss = last.item()
        samples.append((time.perf_counter() - s0) / args.batch)
    samples.sort()
    print(f"{label}: first step {first * 1e3:.2f} ms; step min {samples[0] * 1e3:.3f} ms, "
          f"median {samples[len(samples) // 2] * 1e3:.3f} ms; loss {first_loss:.4f} -> {loss:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    print(f"torch {torch.__version__} on {dev}, MLP 784-{args.hidden}-{args.hidden}-10, "
          f"batch {args.rows}")
    run(args, dev, "eager, Adam (foreach)", False, False)
    if dev.type == "cuda":
        run(args, dev, "eager, Adam (fused)", True, False)
    if not args.no_compile:
        run(args, dev, "torch.compile model+loss, Adam (foreach)", False, True)


if __name__ == "__main__":
    main()
