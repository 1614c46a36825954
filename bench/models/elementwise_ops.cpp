// Every unary and binary element-wise op, in f32 and bf16, over 2^26 elements (by default): the
// bytes each op moves per second beside the copy bandwidth of the same bytes, measured in the
// same run. Fusion is off, so each op is its own kernel (under fusion a result dropped before its
// group runs is never computed). A sample queues the op `batch` times between two syncs and
// divides by `batch`: with launches queued ahead, the device time per op.
//
//   kiln_elementwise_ops [--device cuda|cpu] [--log2n 26] [--runs 10] [--batch 20]
//
// The copy: cudaMemcpyAsync device to device between two buffers of the op's bytes (read plus
// written), or memcpy on the CPU. bench/peers/torch_elementwise_ops.py prints the same table for
// PyTorch eager.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#if KILN_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int log2n = 26, runs = 10, batch = 20;
};

// The minimum over `runs` samples of the seconds per call of `call`, queued `batch` times.
double seconds_per_call(const Options& o, const std::function<void()>& call,
                        const std::function<void()>& sync) {
  call();
  sync();
  double best = 1e30;
  for (int r = 0; r < o.runs; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.batch; ++i) call();
    sync();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / o.batch);
  }
  return best;
}

// Seconds to copy `bytes` / 2 bytes from one buffer to another (so `bytes` move), as the device
// copies memory.
double copy_seconds(const Options& o, std::size_t bytes) {
  const std::size_t half = bytes / 2;
#if KILN_BENCH_WITH_CUDA
  if (o.device.kind() == kiln::Device::Kind::cuda) {
    void *src = nullptr, *dst = nullptr;
    if (cudaSetDevice(o.device.index()) != cudaSuccess || cudaMalloc(&src, half) != cudaSuccess ||
        cudaMalloc(&dst, half) != cudaSuccess) {
      std::fprintf(stderr, "elementwise_ops: cannot allocate the copy's buffers\n");
      std::exit(1);
    }
    const double s = seconds_per_call(
        o, [&] { cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice, nullptr); },
        [] { cudaDeviceSynchronize(); });
    cudaFree(src);
    cudaFree(dst);
    return s;
  }
#endif
  std::vector<char> src(half, 1), dst(half);
  return seconds_per_call(
      o, [&] { std::memcpy(dst.data(), src.data(), half); }, [] {});
}

struct Op {
  const char* name;
  int inputs;  // 1 or 2
  std::function<Tensor<1>(const Tensor<1>&, const Tensor<1>&)> run;
};

std::vector<Op> ops() {
  using T = const Tensor<1>&;
  return {
      {"neg", 1, [](T x, T) { return -x; }},
      {"abs", 1, [](T x, T) { return x.abs(); }},
      {"relu", 1, [](T x, T) { return x.relu(); }},
      {"sin", 1, [](T x, T) { return x.sin(); }},
      {"cos", 1, [](T x, T) { return x.cos(); }},
      {"tan", 1, [](T x, T) { return x.tan(); }},
      {"exp", 1, [](T x, T) { return x.exp(); }},
      {"log", 1, [](T x, T) { return x.log(); }},
      {"sqrt", 1, [](T x, T) { return x.sqrt(); }},
      {"rsqrt", 1, [](T x, T) { return x.rsqrt(); }},
      {"tanh", 1, [](T x, T) { return x.tanh(); }},
      {"sigmoid", 1, [](T x, T) { return x.sigmoid(); }},
      {"gelu", 1, [](T x, T) { return x.gelu(); }},
      {"silu", 1, [](T x, T) { return x.silu(); }},
      {"erf", 1, [](T x, T) { return x.erf(); }},
      {"add", 2, [](T x, T y) { return x + y; }},
      {"sub", 2, [](T x, T y) { return x - y; }},
      {"mul", 2, [](T x, T y) { return x * y; }},
      {"div", 2, [](T x, T y) { return x / y; }},
      {"pow", 2, [](T x, T y) { return kiln::pow(x, y); }},
      {"minimum", 2, [](T x, T y) { return kiln::minimum(x, y); }},
      {"maximum", 2, [](T x, T y) { return kiln::maximum(x, y); }},
  };
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (k == "--log2n")
      o.log2n = std::stoi(v);
    else if (k == "--runs")
      o.runs = std::stoi(v);
    else if (k == "--batch")
      o.batch = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--log2n N] [--runs N] [--batch N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  kiln::Config c = kiln::config();
  c.fusion = false;
  kiln::set_config(c);
  const std::int64_t n = std::int64_t{1} << o.log2n;
  std::printf("name = %s, %lld elements per op, fusion off\n", o.device.backend_name().c_str(),
              static_cast<long long>(n));
  std::printf("%-8s %-5s %10s %10s %9s\n", "op", "dtype", "GB/s", "copy GB/s", "fraction");
  for (DType t : {DType::f32, DType::bf16}) {
    // Positive inputs in [0.5, 2): every op (log, sqrt, pow) takes its ordinary path.
    const auto x = Tensor<1>::random({n}, kiln::Distribution::uniform(0.5, 2), o.device, 1, t);
    const auto y = Tensor<1>::random({n}, kiln::Distribution::uniform(0.5, 2), o.device, 2, t);
    o.device.sync();
    const double copy_by_inputs[] = {0, copy_seconds(o, 2 * n * kiln::dtype_size(t)),
                                     copy_seconds(o, 3 * n * kiln::dtype_size(t))};
    for (const Op& op : ops()) {
      const double bytes = static_cast<double>((op.inputs + 1) * n * kiln::dtype_size(t));
      const double s = seconds_per_call(
          o, [&] { (void)op.run(x, y); }, [&] { o.device.sync(); });
      const double copy = copy_by_inputs[op.inputs];
      std::printf("%-8s %-5s %10.1f %10.1f %9.2f\n", op.name, kiln::dtype_name(t), bytes / s / 1e9,
                  bytes / copy / 1e9, copy / s);
      std::fflush(stdout);
    }
  }
  return 0;
}
