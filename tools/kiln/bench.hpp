// `kiln bench`: the seed's two workloads on every device, timed the way the seed times them, so
// that kiln's lines and the seed's (or NumPy's, bench/numpy_compare.py) can be read side by side.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln::cli {

struct BenchOptions {
  std::string device = "all";  // "cpu", "cuda" or "all" (every present device)
  int runs = 100;              // timed calls after the first
  bool json = false;           // one JSON object on stdout instead of the text lines
};

// A workload computed a wrong result: the timings would describe broken code, so none are kept.
class CheckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs the workloads and prints the report on stdout. Throws kiln::DeviceError when the asked-for
// device is absent (naming the reason kiln::devices() gives) and CheckError on a wrong result.
void run_bench(const BenchOptions& options);

}  // namespace kiln::cli
