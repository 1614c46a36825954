// Run-time configuration and the state of every performance feature.
//
// Defaults come from the environment when kiln is first used: KILN_SIMD=0 runs scalar loops,
// KILN_SIMD=avx2 (a Highway target this CPU supports, lower case) caps SIMD at that target,
// KILN_THREADS=0 runs one CPU thread, KILN_THREADS=N caps the pool at N threads, KILN_FUSION=0
// runs every op eagerly, KILN_PERSISTENCE=0 keeps tuned choices and compiled kernels in memory,
// KILN_AUTOTUNE=0 gives matmul the cuBLASLt heuristic's first choice without timing anything,
// KILN_CUDNN=0 runs bf16/f16 attention on kiln's own kernels instead of cuDNN's.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct Config {
  bool simd = true;    // Highway kernels (if compiled in); false runs scalar loops
  int threads = -1;    // -1: all hardware threads; 0: threads off (one thread); N: at most N
  bool fusion = true;  // the fusion decorator (if compiled in); false runs every op eagerly
  // The on-disk store (if compiled in, docs/store.md); false: tuned choices and compiled kernels
  // live in memory only, so every process tunes and compiles again.
  bool persistence = true;
  // Matmul autotune (if compiled in, docs/autotune.md); false: the cuBLASLt heuristic's first
  // choice, no timing, no tuning cost.
  bool autotune = true;
  // cuDNN's fused attention for bf16/f16 on CUDA (if compiled in and libcudnn loads,
  // docs/ops.md); false: kiln's own attention kernels run every dtype.
  bool cudnn = true;
  // With simd on: the best Highway target to use ("avx2", "sse4"; `kiln doctor` lists this CPU's),
  // as if the CPU had nothing better; empty: the best this CPU supports.
  std::string simd_target{};
};

// The configuration now in force.
Config config();
// Replaces it; takes effect for the next op (switching fusion runs what was recorded first).
// Throws ValueError on a bad value.
void set_config(const Config& c);

struct FeatureState {
  std::string name;  // "simd", "threads", ...
  bool compiled;     // built in (CMake option)
  bool live;         // compiled and switched on now
  std::string why;   // e.g. "on", "KILN_SIMD=0 in the environment", "built with -DKILN_SIMD=OFF"
};

// Every feature kiln knows, compiled-in or not, live or not, and why.
std::vector<FeatureState> features();

// The precision of float32 matrix products on devices that offer a choice, as PyTorch's
// torch.set_float32_matmul_precision and JAX's default precision:
//   highest: strict fp32 (the default); every product and sum rounds as float does.
//   high:    TF32 tensor cores on CUDA: operands rounded to 10 mantissa bits, fp32 accumulation;
//            error within about 2^-10 of the sum of |a||b| (docs/accuracy.md).
//   medium:  bf16 tensor cores on CUDA: operands rounded to 7 mantissa bits, fp32 accumulation;
//            error within about 2^-7 of the sum of |a||b|.
// The CPU computes in strict fp32 under all three. Products of bf16 or f16 tensors are not
// affected: they multiply in fp32 (exactly) and accumulate in fp32.
enum class Precision { highest, high, medium };
void set_float32_matmul_precision(Precision p);
Precision float32_matmul_precision();
// "highest", "high", "medium": as PyTorch names them, and as tuned-choice keys record them.
const char* precision_name(Precision p);

// Deterministic accumulation for the ops that sum into shared destinations (scatter_add,
// index_add, the embedding's backward), as torch.use_deterministic_algorithms: off (the default),
// CUDA adds with atomics, fast but in an order that varies from run to run (floating sums may
// differ in the last bits); on, every destination sums its contributions in index order, bit-
// identical across runs, at a cost (docs/ops.md). The CPU is deterministic either way. The
// default comes from KILN_DETERMINISTIC=1 in the environment; `kiln info` shows the mode.
void set_deterministic(bool on);
bool deterministic();

// Kernels this process compiled at run time (NVRTC) and the seconds that took: what the first
// call of a workload pays, and what the persistent store removes.
struct CompileStats {
  long long kernels = 0;  // compiled by NVRTC
  double seconds = 0;
  long long loaded = 0;  // read from the persistent store instead (docs/store.md)
  double load_seconds = 0;
};
CompileStats compile_stats();

// What the fusion decorator did in this process, over all devices (src/fusion/).
struct FusionStats {
  long long ops_recorded = 0;     // element-wise ops appended to a group instead of running
  long long groups_run = 0;       // groups launched as one kernel (reductions_fused included)
  long long plan_hits = 0;        // groups whose plan came from the plan cache
  long long plan_misses = 0;      // groups lowered anew (each a new kernel to compile on CUDA)
  long long outputs_written = 0;  // tensors the fused kernels wrote (live results only)
  long long bytes_written = 0;    // and their bytes
  // Reductions that evaluated the open group inside their kernel (its prologue) instead of
  // closing it and reading the reduced tensor from memory.
  long long reductions_fused = 0;
};
FusionStats fusion_stats();
// The same and more as text, as KILN_LOG=fusion:summary prints it at exit: ops recorded, groups
// run, ops per group (min, mean, max and a histogram), plan cache hits and misses, kernels
// compiled, bytes read and written, intermediates never written (docs/fusion.md).
std::string fusion_summary();

// Device and host buffers alive now and at most since the last reset_peak_buffers(), and the
// bytes they hold (as torch.cuda.memory_allocated / max_memory_allocated count tensors' bytes,
// over every device and the host together): what a long recorded loop or a training step holds.
struct MemoryStats {
  long long live_buffers = 0;
  long long peak_buffers = 0;
  long long live_bytes = 0;
  long long peak_bytes = 0;
};
MemoryStats memory_stats();
void reset_peak_buffers();

std::string version();

}  // namespace kiln
