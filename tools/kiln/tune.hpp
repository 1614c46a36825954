// `kiln tune`: the persistent store filled ahead of time (--matmul, as PyTorch TunableOp's
// offline mode), listed (--list) and cleared (--clear). docs/autotune.md, "Tuning ahead of time".
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cli {

struct TuneOptions {
  std::string matmul;                 // "1024x1024x1024,4096x4096x4096"; empty: not asked
  std::string precision = "highest";  // "highest" or "high"
  std::string device = "cuda:0";      // "cuda" or "cuda:N"
  std::int64_t batch = 1;             // B of out[B, m, n] = a[B, m, k] @ b[B, k, n]
  std::string layout = "NN";          // per operand, N: as stored, T: a transposed view
  std::string dtype = "f32";          // of the operands and the output: f32, bf16 or f16
  bool bias = false;                  // a linear layer's product: x @ w^T + bias in one pass
  // Every candidate, more samples, no bound (tune::Policy::exhaustive()), and the problems'
  // keys tuned again even when the store has them; else tune::Policy::offline().
  bool exhaustive = false;
  bool list = false;
  bool clear = false;
  std::string table;  // --list / --clear: "tune" or "kernels"; empty: both
};

// Does what the options ask and prints it on stdout. Throws kiln::Error (the CLI's exit status 2)
// for a malformed MxNxK, --exhaustive without --matmul, --precision high with a half dtype,
// --bias with a batch, autotune or persistence off (saying why), an absent device, a store that
// cannot be written, and a problem whose choice did not reach the store.
void run_tune(const TuneOptions& options);

}  // namespace kiln::cli
