// `kiln bench --train`: training steps timed as kiln bench times its workloads (the first step
// apart: it pays for compiles, tuning and module loads; then min and median of the next).
//   - "mlp step 128x784 f32": an MLP 784-512-512-10 (ReLU, nn::Linear), cross-entropy, backward,
//     AdamW without weight decay (Adam, PyTorch's defaults); every device. Issue 20's step, as
//     bench/models/mlp_step.cpp times it with a hand-written Adam.
//   - "gpt2 step 16x1024 f32 tf32": GPT-2 small (nn::GPT2, 124M parameters) on a batch of 16 x
//     1024 random tokens, backward, clip_grad_norm(1.0), AdamW (lr 6e-4, betas 0.9/0.95, weight
//     decay 0.1 on rank >= 2), f32 under Precision::high; then "gpt2 step 16x1024 bf16", the same
//     under kiln::Autocast(bf16) (f32 master weights); CUDA only (a CPU step takes minutes), at
//     most 20 timed steps each. Reports tokens/s, MFU (nanoGPT's estimate_mfu against a 989
//     TFLOP/s dense bf16 peak) and the peak bytes of kiln's buffers.
// Each step ends with the device synced, not with reading the loss; the loss of the first and
// last step must be finite (a CheckError otherwise).
#pragma once

#include <optional>

#include "bench_measure.hpp"

namespace kiln::cli {

WorkloadResult run_mlp_step(const Device& device, int runs);
// autocast: nullopt for f32 (TF32 products), or the dtype of a kiln::Autocast guard around the
// steps.
WorkloadResult run_gpt2_step(const Device& device, int runs, std::optional<DType> autocast);

// " (12345 tokens/s, MFU 12.3 %, peak memory 1.23 GiB)", or the part that applies (memory in MiB
// below 1 GiB); empty for a workload that is not a training step.
std::string step_facts_text(const WorkloadResult& w);

}  // namespace kiln::cli
