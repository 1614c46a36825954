// `kiln bench`: the seed's two workloads on every device, timed the way the seed times them, so
// that kiln's lines and the seed's (or NumPy's, bench/numpy_compare.py) can be read side by side.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kiln::cli {

struct BenchOptions {
  std::string device = "all";  // "cpu", "cuda" or "all" (every present device)
  int runs = 100;              // timed calls after the first
  bool json = false;           // one JSON object on stdout instead of the text lines
  // How many processes run the workloads, one after the other (bench_processes.hpp); 1: this
  // process runs them itself.
  int processes = 2;
  bool one_process = false;  // hidden: this process is one of them
  int report_fd = -1;        // hidden: where its figures go for the process that started it, or -1
  // Hidden: this process runs only the "first call of a new shape" workloads (on each CUDA
  // device), its store a fresh directory that the process that started it made.
  bool new_shape = false;
  std::int64_t new_shape_side = 1024;  // of the square matmul of the new-shape rows
  // The training steps (bench_train.hpp) instead of the seed's workloads.
  bool train = false;
};

// A workload computed a wrong result: the timings would describe broken code, so none are kept.
class CheckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs the workloads in this process and prints the report on stdout. On CUDA they end with the
// "first call of a new shape" rows ("new-shape matmul 1024x1024 f32", and tf32; the side is
// new_shape_side): a matmul whose
// first call meets an empty store, measured in a child process (`--new-shape`) whose store is a
// fresh temporary directory, so that neither an earlier process nor this one can have tuned it;
// its first call pays cuBLASLt's set-up and the bounded tuning (docs/autotune.md).
//
// Runs the workloads in this process and prints the report on stdout (and, with a report_fd,
// one tab-separated line per workload on it: device, backend name, workload, first-call seconds,
// kernels compiled, compile seconds, kernels loaded from the store, load seconds, then the min
// and median seconds of the timed calls and their count; bench_processes.cpp reads it). Throws
// kiln::DeviceError when the asked-for device is absent (naming the reason kiln::devices()
// gives) and CheckError on a wrong result.
void run_bench(const BenchOptions& options);

// The seed's unit rule: milliseconds with two decimals, microseconds below one millisecond.
std::string format_duration(double seconds);

}  // namespace kiln::cli
