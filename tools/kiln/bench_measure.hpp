// How `kiln bench` times a workload, and what it keeps of one: shared by the seed's workloads
// (bench.cpp) and the training steps (bench_train.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::cli {

struct Timing {
  double first_s = 0;          // the first call: it pays for any compilation, tuning and warm-up
  CompileStats first_compile;  // the run-time compilation inside the first call
  double min_s = 0;            // of the next `runs` calls
  double median_s = 0;         // of the next `runs` calls
  int runs = 0;
};

// A training step's size, for tokens/s and MFU, and the memory it held.
struct StepFacts {
  std::int64_t tokens = 0;   // per step (GPT-2: batch x sequence); 0: not a language model
  double flops = 0;          // per step, as nanoGPT's estimate_mfu counts them; 0: not counted
  long long peak_bytes = 0;  // kiln::memory_stats().peak_bytes over the first and timed steps
};

struct WorkloadResult {
  std::string name;       // "chain8", "matmul", "mlp step", "gpt2 step"
  std::string precision;  // matmul (and f32 training): "highest" or "high" (TF32); else empty
  std::int64_t rows = 0, cols = 0;
  Timing timing;
  DType dtype = DType::f32;
  StepFacts step;  // training steps only
};

inline double median_of_sorted(const std::vector<double>& s) {
  const std::size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// Times `call` as the seed does: the host clock around the call and device.sync(). The result is
// kept alive until the clock has stopped, for two reasons: a lazy (fused) device must not be
// allowed to skip work whose result nobody holds, and freeing it is not part of the workload.
// `check` sees the first and the last result, outside the timing.
template <class Call, class Check>
Timing measure(const Device& device, int runs, Call&& call, Check&& check) {
  using Clock = std::chrono::steady_clock;
  auto timed_call = [&] {
    const auto t0 = Clock::now();
    auto result = call();
    device.sync();
    const auto t1 = Clock::now();
    return std::pair{std::chrono::duration<double>(t1 - t0).count(), std::move(result)};
  };
  Timing t;
  t.runs = runs;
  {
    const CompileStats before = compile_stats();
    auto [seconds, result] = timed_call();
    const CompileStats after = compile_stats();
    t.first_s = seconds;
    t.first_compile = {after.kernels - before.kernels, after.seconds - before.seconds,
                       after.loaded - before.loaded, after.load_seconds - before.load_seconds};
    check(result);
  }
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    auto [seconds, result] = timed_call();
    samples.push_back(seconds);
    if (i == runs - 1) check(result);
  }
  std::sort(samples.begin(), samples.end());
  t.min_s = samples.front();
  t.median_s = median_of_sorted(samples);
  return t;
}

}  // namespace kiln::cli
