// Fused against unfused element-wise chains, by chain length and size, on the CPU and on cuda:0
// when present: where fusion pays and by how much, fused and unfused measured in the same run.
//
// BM_FusionScaling/<device>/ops:L/n:2^E
//   The chain is L ops of chain8's pattern (tools/kiln/bench.cpp), * 0.5, + 0.25, sin, abs,
//   repeated (L = 8 is chain8 itself), over a contiguous f32 tensor of 2^E elements, uniform on
//   [0, 1). L = 1, 2, 4, 8, 16, 32 (32 is the longest group, kMaxOps); E = 16, 18, ..., 26.
//   Each iteration times one fused call (Config::fusion on: one group, one kernel that reads x
//   once and writes the result once) and one unfused call (fusion off: L kernels, L passes), each
//   the seed's way: host clock around the call and device.sync(), the result released after the
//   clock stops. One untimed call of each comes first (plans, NVRTC, first touch of memory).
//   Counters: fused_us and unfused_us (min over the iterations), speedup (unfused / fused) and
//   fused_GB/s (8 * 2^E bytes, the fused kernel's input and output, over fused_us). "Time" is the
//   mean fused time. After the timings the fused and unfused results are compared element for
//   element; a difference stops the case with an error naming the element.
//
// The iteration count falls with the work (L * 2^E): from 100 for the smallest cases to 3 for
// the largest, so that the whole table takes a few minutes on a 2-core machine. Pick rows with
// --benchmark_filter, e.g. 'FusionScaling/cpu/ops:8/' or 'FusionScaling/cuda'.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "fusion_switch.hpp"
#include "kiln/kiln.hpp"

namespace {

using kiln_bench::FusionSwitch;

using Clock = std::chrono::steady_clock;
using kiln::Device;
using kiln::Tensor;

constexpr int kLengths[] = {1, 2, 4, 8, 16, 32};
constexpr int kMinLog2 = 16, kMaxLog2 = 26, kLog2Step = 2;

bool fusion_compiled() {
  for (const kiln::FeatureState& f : kiln::features())
    if (f.name == "fusion") return f.compiled;
  return false;
}

std::optional<Device> bench_device(benchmark::State& state, bool cuda) {
  if (!fusion_compiled()) {
    state.SkipWithError("kiln was built without fusion (-DKILN_FUSION=OFF)");
    return std::nullopt;
  }
  if (!cuda) return Device::cpu();
  for (const kiln::DeviceInfo& d : kiln::devices())
    if (d.name == "cuda:0" && d.present) return Device::cuda(0);
  state.SkipWithError("no CUDA device: kiln::devices() lists no cuda:0");
  return std::nullopt;
}

// L ops of chain8's pattern; each intermediate handle is dropped as the next op is recorded.
Tensor<1> chain(const Tensor<1>& x, int length) {
  Tensor<1> y = x;
  for (int k = 0; k < length; ++k) {
    switch (k % 4) {
      case 0:
        y = y * 0.5f;
        break;
      case 1:
        y = y + 0.25f;
        break;
      case 2:
        y = y.sin();
        break;
      default:
        y = y.abs();
    }
  }
  return y;
}

// The seed's method: host clock around the call and the sync; the result outlives the clock.
double timed_chain(const Device& device, const Tensor<1>& x, int length,
                   std::optional<Tensor<1>>& result) {
  const auto t0 = Clock::now();
  auto z = chain(x, length);
  device.sync();
  const auto t1 = Clock::now();
  result = std::move(z);
  return std::chrono::duration<double>(t1 - t0).count();
}

void BM_FusionScaling(benchmark::State& state, bool cuda, int length, int log2n) {
  const auto device = bench_device(state, cuda);
  if (!device) return;
  const std::int64_t n = std::int64_t{1} << log2n;
  FusionSwitch fusion;
  const auto x = Tensor<1>::random({n}, kiln::Distribution::uniform(0, 1), *device, 1);
  std::optional<Tensor<1>> fused_z, unfused_z;
  for (bool on : {true, false}) {  // warm-up, untimed
    fusion.set(on);
    timed_chain(*device, x, length, on ? fused_z : unfused_z);
  }
  double fused = 1e30, unfused = 1e30;
  for (auto _ : state) {
    fusion.set(true);
    fused_z.reset();  // the previous result is freed before the clock starts
    const double f = timed_chain(*device, x, length, fused_z);
    state.SetIterationTime(f);
    fused = std::min(fused, f);
    fusion.set(false);
    unfused_z.reset();
    unfused = std::min(unfused, timed_chain(*device, x, length, unfused_z));
  }
  state.counters["fused_us"] = fused * 1e6;
  state.counters["unfused_us"] = unfused * 1e6;
  state.counters["speedup"] = unfused / fused;
  state.counters["fused_GB/s"] = 8.0 * static_cast<double>(n) / fused / 1e9;

  // Fused and unfused compute the same float ops in the same order: the results must agree.
  const std::vector<float> a = fused_z->to_vector<float>(), b = unfused_z->to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - b[i]) <= 1e-6f)) {
      char msg[200];
      std::snprintf(msg, sizeof msg,
                    "fused and unfused chains differ: element %zu of %lld is %.9g fused, %.9g "
                    "unfused (ops %d)",
                    i, static_cast<long long>(n), a[i], b[i], length);
      return state.SkipWithError(msg);
    }
  }
}

// Iterations for L ops over 2^E elements: about 2^28 element-ops per case on the CPU, between 3
// and 100 iterations; more on CUDA, where each is fast and small cases are noisier.
int iterations(bool cuda, int length, int log2n) {
  const double work = static_cast<double>(length) * std::ldexp(1.0, log2n);
  const double budget = cuda ? std::ldexp(1.0, 33) : std::ldexp(1.0, 28);
  return static_cast<int>(std::clamp(budget / work, cuda ? 20.0 : 3.0, cuda ? 200.0 : 100.0));
}

const bool registered = [] {
  for (bool cuda : {false, true}) {
    for (int length : kLengths) {
      for (int log2n = kMinLog2; log2n <= kMaxLog2; log2n += kLog2Step) {
        const std::string name = std::string("BM_FusionScaling/") + (cuda ? "cuda" : "cpu") +
                                 "/ops:" + std::to_string(length) + "/n:2^" + std::to_string(log2n);
        benchmark::RegisterBenchmark(name.c_str(), BM_FusionScaling, cuda, length, log2n)
            ->UseManualTime()
            ->Iterations(iterations(cuda, length, log2n))
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}();

}  // namespace
