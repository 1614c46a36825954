#!/usr/bin/env python3
"""The PyTorch half of issue 21's parity check: GPT-2 small initialised by PyTorch (nanoGPT's
initialisation, bench/peers/gpt2_torch.py's model), its weights written under nanoGPT's names to
DIR/weights.safetensors, a batch of random tokens to DIR/batch.safetensors (int32 x, y), then
`--steps` training steps in strict f32 (no TF32; attention written out as kiln composes it;
clip_grad_norm 1.0; single-tensor AdamW lr 6e-4, betas 0.9/0.95, weight decay 0.1 on rank >= 2)
whose losses, first the loss before any step, go to DIR/torch_losses.txt, one per line.
kiln_gpt2_parity DIR (bench/models/gpt2_parity.cpp) loads both files and compares its losses.

  gpt2_parity.py DIR [--device cuda|cpu] [--batch 4] [--seq 1024] [--steps 10]
"""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import GPT  # noqa: E402


def nanogpt_name(name):
    """gpt2_torch.py's parameter names as nanoGPT's (and kiln's) state_dict spells them."""
    if name == "lm_head.weight":
        return name
    parts = name.split(".")
    if parts[0] == "h" and parts[2] in ("c_fc", "c_proj"):
        parts.insert(2, "mlp")
    return "transformer." + ".".join(parts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(a.device)
    cfg = argparse.Namespace(vocab=50304, seq=a.seq, layers=12, heads=12, embd=768,
                             attention="written")
    torch.manual_seed(1337)
    model = GPT(cfg).to(dev)
    weights = {nanogpt_name(n): t.detach().clone().contiguous().cpu()
               for n, t in model.state_dict().items()}
    save_file(weights, os.path.join(a.dir, "weights.safetensors"))
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, cfg.vocab, (a.batch, a.seq), generator=g, dtype=torch.int32)
    y = torch.randint(0, cfg.vocab, (a.batch, a.seq), generator=g, dtype=torch.int32)
    save_file({"x": x, "y": y}, os.path.join(a.dir, "batch.safetensors"))
    x, y = x.to(dev).long(), y.to(dev).long()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), foreach=False)
    losses = []
    for _ in range(a.steps):
        loss = model(x, y)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        losses.append(model(x, y).item())
    with open(os.path.join(a.dir, "torch_losses.txt"), "w") as f:
        f.write("".join(f"{v!r}\n" for v in losses))
    print(f"torch {torch.__version__} on {dev}: losses " + " ".join(f"{v:.6f}" for v in losses))


if __name__ == "__main__":
    main()
