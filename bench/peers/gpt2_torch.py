#!/usr/bin/env python3
"""PyTorch beside bench/models/gpt2_train.cpp (kiln_gpt2_train): nanoGPT's GPT-2 (pre-norm blocks,
exact GELU, lm_head tied to wte, nanoGPT's initialisation), the same training step (random token
batch, mean cross-entropy, backward, clip_grad_norm 1.0, AdamW lr 6e-4, betas 0.9/0.95, weight
decay 0.1 on rank >= 2 parameters, fused) and the same report: the first step apart, min and
median ms/step over the timed steps (each ending by reading its loss), tokens/s at the median,
MFU as nanoGPT's estimate_mfu against 989 TFLOP/s, and torch.cuda.max_memory_allocated.

  gpt2_torch.py [--device cuda|cpu] [--batch 16] [--seq 1024] [--layers 12] [--heads 12]
                [--embd 768] [--vocab 50304] [--steps 10]
                [--dtype bf16|tf32|f32] [--compile] [--attention flash|written] [--ddp]

--dtype bf16 is torch.autocast(bfloat16) over f32 weights (issue 21's PyTorch figures), tf32 is
f32 with torch.set_float32_matmul_precision("high") (kiln's Precision::high), f32 is strict.
--attention written spells attention as matmul, mask, softmax, matmul, as kiln composes it;
flash (default) is F.scaled_dot_product_attention, as nanoGPT. --ddp trains through
DistributedDataParallel, one process per GPU as `torchrun --nproc-per-node N gpt2_torch.py --ddp`
starts them (each on cuda:LOCAL_RANK, --batch a rank, its own tokens); rank 0 reports, tokens/s
counting every rank's, as kiln_gpt2_train --ddp on.
"""
import argparse
import contextlib
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.flash = a.heads, a.attention == "flash"
        self.c_attn = nn.Linear(a.embd, 3 * a.embd)
        self.c_proj = nn.Linear(a.embd, a.embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(a.embd), Attention(a)
        self.ln_2 = nn.LayerNorm(a.embd)
        self.c_fc, self.c_proj = nn.Linear(a.embd, 4 * a.embd), nn.Linear(4 * a.embd, a.embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(a.vocab, a.embd), nn.Embedding(a.seq, a.embd)
        self.h = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.embd)
        self.lm_head = nn.Linear(a.embd, a.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * a.layers))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in (("batch", 16), ("seq", 1024), ("layers", 12), ("heads", 12),
                          ("embd", 768), ("vocab", 50304), ("steps", 10)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--dtype", choices=("bf16", "tf32", "f32"), default="bf16")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--attention", choices=("flash", "written"), default="flash")
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="after the timed steps, device time per kernel over 3 more steps")
    a = p.parse_args()
    rank, ranks = 0, 1
    if a.ddp:
        torch.distributed.init_process_group("nccl")
        rank, ranks = torch.distributed.get_rank(), torch.distributed.get_world_size()
        a.device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(a.device)
    dev = torch.device(a.device)
    torch.set_float32_matmul_precision("highest" if a.dtype == "f32" else "high")
    torch.manual_seed(1337)
    model = GPT(a).to(dev)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=dev.type == "cuda")
    wrapped = (torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
               if a.ddp else model)
    forward = torch.compile(wrapped) if a.compile else wrapped
    torch.manual_seed(1337 + rank)  # each rank its own tokens
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    autocast = (torch.autocast(dev.type, dtype=torch.bfloat16) if a.dtype == "bf16"
                else contextlib.nullcontext())

    def step():
        with autocast:
            loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    params = sum(q.numel() for q in model.parameters())
    say = print if rank == 0 else (lambda *_: None)
    say(f"torch {torch.__version__} on {dev}, GPT-2 {a.layers} layers, {a.heads} heads, "
          f"{a.embd} wide, vocab {a.vocab}, {params} parameters; batch {a.batch} x {a.seq} "
          f"tokens, AdamW (fused), {a.dtype}, {'torch.compile' if a.compile else 'eager'}, "
          f"{a.attention} attention" + (f", DDP over {ranks} ranks" if a.ddp else ""))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    first_loss = step()
    first = time.perf_counter() - t0
    samples, loss = [], first_loss
    for _ in range(a.steps):
        s0 = time.perf_counter()
        loss = step()
        samples.append(time.perf_counter() - s0)
    samples.sort()
    median = samples[len(samples) // 2]
    tokens_per_s = a.batch * a.seq * ranks / median
    n = params - a.seq * a.embd
    mfu = (6 * n + 12 * a.layers * a.seq * a.embd) * tokens_per_s / ranks / 989e12
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    say(f"first step {first:.2f} s; step min {samples[0] * 1e3:.2f} ms, median "
          f"{median * 1e3:.2f} ms ({a.steps} steps): {tokens_per_s:.0f} tokens/s, MFU "
          f"{mfu * 100:.1f} % (of 989 TFLOP/s bf16)")
    say(f"loss {first_loss:.4f} after the first step, {loss:.4f} after {a.steps + 1}; "
          f"peak memory {peak:.2f} GiB")
    if a.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
        say(prof.key_averages().table(sort_by="self_device_time_total", row_limit=45,
                                      max_name_column_width=90))
    if a.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
