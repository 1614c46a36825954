// Run-time configuration and the state of every performance feature.
//
// Defaults come from the environment when kiln is first used: KILN_SIMD=0 runs scalar loops,
// KILN_THREADS=0 runs one CPU thread, KILN_THREADS=N caps the pool at N threads.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct Config {
  bool simd = true;  // Highway kernels (if compiled in); false runs scalar loops
  int threads = -1;  // -1: all hardware threads; 0: threads off (one thread); N: at most N
};

// The configuration now in force.
Config config();
// Replaces it; takes effect for the next op. Throws ValueError on a bad value.
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
// The CPU computes in strict fp32 under both.
enum class Precision { highest, high };
void set_float32_matmul_precision(Precision p);
Precision float32_matmul_precision();

// Kernels this process compiled at run time (NVRTC) and the seconds that took: what the first
// call of a workload pays, and what the persistent store removes.
struct CompileStats {
  long long kernels = 0;
  double seconds = 0;
};
CompileStats compile_stats();

std::string version();

}  // namespace kiln
