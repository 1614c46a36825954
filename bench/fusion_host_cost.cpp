// Host cost of the fusion decorator (src/fusion/), on the CPU and on cuda:0 when present, each
// figure printed beside what it compares with, measured in the same run. Tensors are tiny (1 or
// 1024 f32 elements) so that the device work is negligible and the figures are the host's.
//
// BM_FusionRecordOp/<device>/ops:N
//   Counts the host time to *record* N element-wise ops with fusion on: the front end (shape
//   and dtype checks, a new tensor handle), dispatch, and Fusion::elementwise appending the op to
//   the open group, plus dropping the previous intermediate's handle. Nothing is computed or
//   launched inside the timed region: N <= 32 (the group limit, kMaxOps) and the result is kept
//   alive, so the group closes only at the sync after the clock has stopped. That sync (untimed,
//   once per iteration) runs the group, so memory stays bounded.
//   Counters: us_per_op (median over iterations of batch time / N), min_us_per_op, target_us
//   (1 us), and eager_us_per_op: the same N ops with fusion off, timed the same way (each op then
//   computes over the tensor on the CPU, or is launched without waiting on CUDA). The label says
//   whether the median meets the target. "Time" is the mean manual time of one batch of N ops.
//
// BM_FusionGroupLaunch/<device>/n:E
//   Counts the host time per *cache-hit group*: recording chain8 (tools/kiln/bench.cpp: eight ops,
//   y = |sin(x*0.5+0.25)|, z = |sin(y*0.5+0.25)|) plus closing the group, the plan-cache lookup,
//   binding the output and running it (CPU: computing the E elements there and then; CUDA:
//   queuing one kernel, not waiting for it). A group is closed without a sync: successive chains
//   alternate between x (shape [E]) and a view of it of shape [1, E], and an op over another
//   shape closes the open group; each chain's result is held until that happens, so the group has
//   a live output and runs. Both shapes coalesce to the same kernel. One timed batch records
//   kChains chains and closes kChains groups (one was left open, untimed, before the clock
//   started); the device is synced after each batch, untimed, so queues and memory stay bounded.
//   The eager path (fusion off) runs the same loop: eight kernels per chain.
//   Counters: fused_us (median per group), eager_us (median per chain of eight eager ops),
//   eager/fused, min_fused_us, min_eager_us, groups_per_chain (fusion_stats: must be 1) and
//   plan_hit_rate (must be 1 after the warm-up batch). "Time" is the mean fused time per group.
//
// Both run a fixed number of iterations (the medians need no more), so --benchmark_min_time does
// not change them; --benchmark_filter='FusionRecordOp/cpu' etc. picks cases.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
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

constexpr double kTargetUsPerOp = 1.0;  // host cost of one recorded op
constexpr int kChains = 64;             // chain8 groups per timed batch
// Fixed iteration counts: each iteration also runs untimed work (the sync, the eager batch)
// several times longer than its manual time, which --benchmark_min_time would not see.
constexpr int kRecordIterations = 2000;  // batches of N recorded ops
constexpr int kLaunchIterations = 200;   // batches of kChains groups

double seconds(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool fusion_compiled() {
  for (const kiln::FeatureState& f : kiln::features())
    if (f.name == "fusion") return f.compiled;
  return false;
}

// Device 0 is the CPU, 1 is cuda:0; nullopt (and the benchmark skipped with the reason) when
// that device or the fusion decorator is absent.
std::optional<Device> bench_device(benchmark::State& state, int which) {
  if (!fusion_compiled()) {
    state.SkipWithError("kiln was built without fusion (-DKILN_FUSION=OFF)");
    return std::nullopt;
  }
  if (which == 0) return Device::cpu();
  for (const kiln::DeviceInfo& d : kiln::devices())
    if (d.name == "cuda:0" && d.present) return Device::cuda(0);
  state.SkipWithError("no CUDA device: kiln::devices() lists no cuda:0");
  return std::nullopt;
}

// Op k of the chain8 pattern: * 0.5, + 0.25, sin, abs, repeated.
template <std::size_t D>
Tensor<D> chain_op(const Tensor<D>& t, int k) {
  switch (k % 4) {
    case 0:
      return t * 0.5f;
    case 1:
      return t + 0.25f;
    case 2:
      return t.sin();
    default:
      return t.abs();
  }
}

// The seed's chain8, written as the seed writes it.
template <std::size_t D>
Tensor<D> chain8(const Tensor<D>& x) {
  auto y = (x * 0.5f + 0.25f).sin().abs();
  return (y * 0.5f + 0.25f).sin().abs();
}

void BM_FusionRecordOp(benchmark::State& state, int which) {
  const auto device = bench_device(state, which);
  if (!device) return;
  const int ops = static_cast<int>(state.range(0));
  FusionSwitch fusion;
  const auto x = Tensor<1>::random({1024}, kiln::Distribution::uniform(0, 1), *device, 1);

  // One batch: the N ops timed, then (untimed) the sync that runs them, with y still alive.
  auto batch = [&] {
    const auto t0 = Clock::now();
    Tensor<1> y = x;
    for (int k = 0; k < ops; ++k) y = chain_op(y, k);
    const auto t1 = Clock::now();
    device->sync();
    benchmark::DoNotOptimize(y);
    return seconds(t0, t1);
  };
  for (bool on : {true, false}) {  // warm-up: plans, kernels, memory pools
    fusion.set(on);
    batch();
  }
  std::vector<double> fused, eager;
  const kiln::FusionStats before = kiln::fusion_stats();
  for (auto _ : state) {
    fusion.set(true);
    const double s = batch();
    fused.push_back(s / ops);
    state.SetIterationTime(s);
    fusion.set(false);
    eager.push_back(batch() / ops);
  }
  const kiln::FusionStats after = kiln::fusion_stats();
  if (after.ops_recorded - before.ops_recorded !=
      static_cast<long long>(fused.size()) * ops) {  // the decorator did not record them all
    return state.SkipWithError("fusion_stats().ops_recorded does not match the ops recorded");
  }
  const double us = median(fused) * 1e6;
  state.counters["us_per_op"] = us;
  state.counters["min_us_per_op"] = *std::min_element(fused.begin(), fused.end()) * 1e6;
  state.counters["target_us"] = kTargetUsPerOp;
  state.counters["eager_us_per_op"] = median(eager) * 1e6;
  char label[96];
  std::snprintf(label, sizeof label, "record %.3fus/op, target <= %.1fus: %s", us, kTargetUsPerOp,
                us <= kTargetUsPerOp ? "met" : "MISSED");
  state.SetLabel(label);
}
BENCHMARK_CAPTURE(BM_FusionRecordOp, cpu, 0)
    ->ArgName("ops")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Iterations(kRecordIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FusionRecordOp, cuda, 1)
    ->ArgName("ops")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Iterations(kRecordIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_FusionGroupLaunch(benchmark::State& state, int which) {
  const auto device = bench_device(state, which);
  if (!device) return;
  const std::int64_t n = state.range(0);
  FusionSwitch fusion;
  const auto xa = Tensor<1>::random({n}, kiln::Distribution::uniform(0, 1), *device, 1);
  const auto xb = xa.reshape(kiln::Shape<2>{1, n});  // a view of another shape: closes a group

  // One batch of kChains chains, returning the seconds per chain. The group of the chain
  // recorded before the clock starts is closed by the first chain inside; the last one is
  // closed by the untimed sync.
  auto batch = [&] {
    std::optional<Tensor<1>> za;
    std::optional<Tensor<2>> zb = chain8(xb);
    const auto t0 = Clock::now();
    for (int c = 0; c < kChains; c += 2) {
      za = chain8(xa);  // its first op closes zb's group, zb still alive
      zb = chain8(xb);  // its first op closes za's group
    }
    const auto t1 = Clock::now();
    device->sync();
    benchmark::DoNotOptimize(za);
    benchmark::DoNotOptimize(zb);
    return seconds(t0, t1) / kChains;
  };
  for (bool on : {true, false}) {  // warm-up: the plan (and on CUDA its kernel) is made here
    fusion.set(on);
    batch();
  }
  std::vector<double> fused, eager;
  const kiln::FusionStats before = kiln::fusion_stats();
  for (auto _ : state) {
    fusion.set(true);
    const double s = batch();
    fused.push_back(s);
    state.SetIterationTime(s);
    fusion.set(false);
    eager.push_back(batch());
  }
  const kiln::FusionStats after = kiln::fusion_stats();
  const double chains = static_cast<double>(fused.size()) * (kChains + 1);
  const double groups = static_cast<double>(after.groups_run - before.groups_run);
  const double hits = static_cast<double>(after.plan_hits - before.plan_hits);
  state.counters["fused_us"] = median(fused) * 1e6;
  state.counters["eager_us"] = median(eager) * 1e6;
  state.counters["eager/fused"] = median(eager) / median(fused);
  state.counters["min_fused_us"] = *std::min_element(fused.begin(), fused.end()) * 1e6;
  state.counters["min_eager_us"] = *std::min_element(eager.begin(), eager.end()) * 1e6;
  state.counters["groups_per_chain"] = groups / chains;
  state.counters["plan_hit_rate"] = groups > 0 ? hits / groups : 0;
  if (groups != chains) {  // then the figure is not "per group": say so rather than print it
    return state.SkipWithError(
        "fusion_stats().groups_run is not one group per chain8: the decorator merged or split "
        "the chains");
  }
}
BENCHMARK_CAPTURE(BM_FusionGroupLaunch, cpu, 0)
    ->ArgName("n")
    ->Arg(1)
    ->Arg(1024)
    ->Iterations(kLaunchIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_FusionGroupLaunch, cuda, 1)
    ->ArgName("n")
    ->Arg(1)
    ->Arg(1024)
    ->Iterations(kLaunchIterations)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
