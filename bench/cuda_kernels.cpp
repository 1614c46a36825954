// Device-side throughput of the CUDA backend's kernels, each printed beside what bounds it, in
// one run: the device-to-device copy bandwidth, each of chain8's element-wise kernels (bytes
// moved per second and their fraction of the copy bandwidth), the whole unfused chain, and the
// 1024^3 matmul under both precisions.
//
// A sample queues the same op kBatch times between two syncs and divides the host time by
// kBatch: with launches queued ahead, that is the device time per op (launch gaps hide behind
// the running kernels), and it needs no access to kiln's internal stream.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <chrono>
#include <functional>

#include "kiln/kiln.hpp"

namespace {

using kiln::Device;
using kiln::Tensor;

constexpr std::int64_t kSide = 2048;
constexpr int kBatch = 50;  // ops queued per timed sample: launch gaps vanish behind the GPU
double g_copy_bytes_per_s = 0;

bool have_cuda() { return kiln::devices().size() > 1 && kiln::devices()[1].present; }

// Seconds per op of `op`, queued kBatch times between two syncs.
double seconds_per_op(const std::function<void()>& op) {
  Device d = Device::cuda(0);
  op();
  d.sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kBatch; ++i) op();
  d.sync();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kBatch;
}

void BM_CudaCopy1GiB(benchmark::State& state) {
  if (!have_cuda()) return state.SkipWithError("no CUDA device");
  const std::size_t bytes = std::size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  double best = 1e30;
  for (auto _ : state) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr);
    cudaDeviceSynchronize();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10;
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  g_copy_bytes_per_s = 2.0 * bytes / best;  // read + write
  state.counters["TB/s"] = g_copy_bytes_per_s / 1e12;
  cudaFree(a);
  cudaFree(b);
}
BENCHMARK(BM_CudaCopy1GiB)->UseManualTime()->Iterations(5);

// One element-wise kernel of chain8 over a 2048x2048 f32 tensor: 16 MiB in, 16 MiB out.
void chain_op(benchmark::State& state, std::function<Tensor<2>(const Tensor<2>&)> op) {
  if (!have_cuda()) return state.SkipWithError("no CUDA device");
  auto x = Tensor<2>::random({kSide, kSide}, kiln::Distribution::uniform(0, 1), Device::cuda(0), 1);
  double best = 1e30;
  for (auto _ : state) {
    const double s = seconds_per_op([&] { benchmark::DoNotOptimize(op(x)); });
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  const double rate = 2.0 * 4 * kSide * kSide / best;
  state.counters["TB/s"] = rate / 1e12;
  if (g_copy_bytes_per_s > 0) state.counters["of_copy"] = rate / g_copy_bytes_per_s;
  state.counters["us"] = best * 1e6;
}
BENCHMARK_CAPTURE(chain_op, mul, [](const Tensor<2>& x) { return x * 0.5f; })
    ->UseManualTime()
    ->Iterations(20);
BENCHMARK_CAPTURE(chain_op, add, [](const Tensor<2>& x) { return x + 0.25f; })
    ->UseManualTime()
    ->Iterations(20);
BENCHMARK_CAPTURE(chain_op, sin, [](const Tensor<2>& x) { return x.sin(); })
    ->UseManualTime()
    ->Iterations(20);
BENCHMARK_CAPTURE(chain_op, abs, [](const Tensor<2>& x) { return x.abs(); })
    ->UseManualTime()
    ->Iterations(20);

void BM_CudaChain8(benchmark::State& state) {
  if (!have_cuda()) return state.SkipWithError("no CUDA device");
  auto x = Tensor<2>::random({kSide, kSide}, kiln::Distribution::uniform(0, 1), Device::cuda(0), 1);
  double best = 1e30;
  for (auto _ : state) {
    const double s = seconds_per_op([&] {
      auto y = (x * 0.5f + 0.25f).sin().abs();
      benchmark::DoNotOptimize((y * 0.5f + 0.25f).sin().abs());
    });
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  state.counters["us"] = best * 1e6;
}
BENCHMARK(BM_CudaChain8)->UseManualTime()->Iterations(20);

void BM_CudaMatmul1024(benchmark::State& state) {
  if (!have_cuda()) return state.SkipWithError("no CUDA device");
  const auto precision = state.range(0) ? kiln::Precision::high : kiln::Precision::highest;
  kiln::set_float32_matmul_precision(precision);
  auto a = Tensor<2>::random({1024, 1024}, kiln::Distribution::uniform(0, 1), Device::cuda(0), 2);
  auto b = Tensor<2>::random({1024, 1024}, kiln::Distribution::uniform(0, 1), Device::cuda(0), 3);
  double best = 1e30;
  for (auto _ : state) {
    const double s = seconds_per_op([&] { benchmark::DoNotOptimize(kiln::matmul(a, b)); });
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  kiln::set_float32_matmul_precision(kiln::Precision::highest);
  state.counters["us"] = best * 1e6;
  state.counters["TFLOP/s"] = 2.0 * 1024 * 1024 * 1024 / best / 1e12;
}
BENCHMARK(BM_CudaMatmul1024)->Arg(0)->Arg(1)->ArgName("tf32")->UseManualTime()->Iterations(20);

// Host cost of queuing one op (front end, backend, allocation, launch), without waiting: the
// budget an op has before the GPU, not the host, sets the pace of a chain.
void host_cost(benchmark::State& state, std::function<void(const Tensor<2>&)> op) {
  if (!have_cuda()) return state.SkipWithError("no CUDA device");
  auto x = Tensor<2>::random({1024, 1024}, kiln::Distribution::uniform(0, 1), Device::cuda(0), 1);
  op(x);
  Device::cuda(0).sync();
  double best = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) op(x);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100;
    Device::cuda(0).sync();
    best = std::min(best, s);
    state.SetIterationTime(s);
  }
  state.counters["us"] = best * 1e6;
}
BENCHMARK_CAPTURE(host_cost, mul, [](const Tensor<2>& x) { benchmark::DoNotOptimize(x * 0.5f); })
    ->UseManualTime()
    ->Iterations(20);
BENCHMARK_CAPTURE(host_cost, matmul,
                  [](const Tensor<2>& x) { benchmark::DoNotOptimize(kiln::matmul(x, x)); })
    ->UseManualTime()
    ->Iterations(20);
BENCHMARK_CAPTURE(host_cost, empty,
                  [](const Tensor<2>& x) {
                    benchmark::DoNotOptimize(x.reshape(kiln::Shape<2>{512, 2048}));
                  })
    ->UseManualTime()
    ->Iterations(20);

}  // namespace
