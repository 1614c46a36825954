// The row ops (softmax, log_softmax, layer_norm, rms_norm over the last dim) at [8192, 4096] and at
// GPT-2 small's activations [16 * 1024, 768], f32 and bf16: the row kernel (one Backend::rows call)
// beside the same op written with reductions and element-wise ops (the composed form kiln ran
// before, fused as the fusion decorator fuses it), and the bytes the kernel must move (x read
// once, y written once) per second beside the copy bandwidth of the same bytes, measured in the
// same run. A sample queues the op `batch` times between two syncs and divides by `batch`; every
// result of a batch is kept alive, so fusion cannot drop any of them.
//
//   kiln_row_ops [--device cuda|cpu] [--runs 5] [--batch 10] [--rows R --cols N]
//
// bench/peers/torch_row_ops.py prints the same table for PyTorch (eager and torch.compile).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/norm.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 5, batch = 10;
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{8192, 4096}, {16 * 1024, 768}};
};

double seconds_per_call(const Options& o, const std::function<void()>& call,
                        const std::function<void()>& sync) {
  return kiln_bench::seconds_per_call(o.runs, o.batch, call, sync);
}

double copy_seconds(const Options& o, std::size_t bytes) {
  return kiln_bench::copy_seconds(o.device, o.runs, o.batch, bytes);
}

Options parse(int argc, char** argv) {
  Options o;
  std::int64_t rows = 0, cols = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (k == "--runs")
      o.runs = std::stoi(v);
    else if (k == "--batch")
      o.batch = std::stoi(v);
    else if (k == "--rows")
      rows = std::stoll(v);
    else if (k == "--cols")
      cols = std::stoll(v);
    else {
      std::fprintf(stderr,
                   "usage: %s [--device cuda|cpu] [--runs N] [--batch N] [--rows R --cols N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (rows > 0 && cols > 0) o.shapes = {{rows, cols}};
  return o;
}

// The composed forms, with public ops only, in f32 (as the row kernels compute), rounded once.
Tensor<2> composed_softmax(const Tensor<2>& x, bool log) {
  const Tensor<2> xf = x.to(DType::f32);
  const Tensor<2> d = xf - xf.max(1, kiln::keepdim);
  const Tensor<2> y =
      log ? d - d.exp().sum(1, kiln::keepdim).log() : d.exp() / d.exp().sum(1, kiln::keepdim);
  return y.to(x.dtype());
}

Tensor<2> composed_norm(const Tensor<2>& x, const Tensor<1>& w, const Tensor<1>& b, bool rms) {
  const Tensor<2> xf = x.to(DType::f32);
  const Tensor<2> c = rms ? xf : xf - xf.mean(1, kiln::keepdim);
  const Tensor<2> rstd = ((c * c).mean(1, kiln::keepdim) + (rms ? 1e-6f : 1e-5f)).rsqrt();
  const Tensor<2> y =
      rms ? c * rstd * w.to(DType::f32) : c * rstd * w.to(DType::f32) + b.to(DType::f32);
  return y.to(x.dtype());
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("name = %s, fusion %s, min over %d runs of the mean of %d calls\n",
              o.device.backend_name().c_str(), kiln::config().fusion ? "on" : "off", o.runs,
              o.batch);
  std::printf("%-14s %-5s %-14s %10s %12s %9s %10s %10s %9s\n", "op", "dtype", "shape", "kernel us",
              "composed us", "speedup", "GB/s", "copy GB/s", "fraction");
  auto sync = [&] { o.device.sync(); };
  std::vector<Tensor<2>> keep(static_cast<std::size_t>(o.batch + 1));
  for (const auto& [rows, cols] : o.shapes) {
    for (DType t : {DType::f32, DType::bf16}) {
      // (The element count as a plain variable: C++20 lambdas may name structured bindings, but
      // clang 14 refuses it.)
      const double elements = static_cast<double>(rows * cols);
      const double size = static_cast<double>(kiln::dtype_size(t));
      const auto x =
          Tensor<2>::random({rows, cols}, kiln::Distribution::normal(), o.device, 2).to(t);
      const auto w =
          Tensor<1>::random({cols}, kiln::Distribution::uniform(0.5, 1.5), o.device, 3).to(t);
      const auto b = Tensor<1>::random({cols}, kiln::Distribution::normal(), o.device, 4).to(t);
      char shape[40];
      std::snprintf(shape, sizeof shape, "[%lld, %lld]", static_cast<long long>(rows),
                    static_cast<long long>(cols));
      // (moved: the tensors of x's size the op reads and writes; 2 for x and y.)
      auto report = [&](const char* name, const std::function<Tensor<2>()>& kernel,
                        const std::function<Tensor<2>()>& composed, double moved = 2) {
        const double bytes = moved * elements * size;
        const double c = copy_seconds(o, static_cast<std::size_t>(bytes));
        std::size_t i = 0;
        const double s = seconds_per_call(
            o, [&] { keep[i++ % keep.size()] = kernel(); }, sync);
        const double sc = seconds_per_call(
            o, [&] { keep[i++ % keep.size()] = composed(); }, sync);
        std::printf("%-14s %-5s %-14s %10.1f %12.1f %9.2f %10.1f %10.1f %9.2f\n", name,
                    kiln::dtype_name(t), shape, s * 1e6, sc * 1e6, sc / s, bytes / s / 1e9,
                    bytes / c / 1e9, c / s);
      };
      report(
          "softmax", [&] { return x.softmax(1); }, [&] { return composed_softmax(x, false); });
      report(
          "log_softmax", [&] { return x.log_softmax(1); },
          [&] { return composed_softmax(x, true); });
      report(
          "layer_norm", [&] { return kiln::layer_norm(x, w, b); },
          [&] { return composed_norm(x, w, b, false); });
      report(
          "rms_norm", [&] { return kiln::rms_norm(x, w); },
          [&] { return composed_norm(x, w, b, true); });
      // A pre-norm block's residual step: the sum (kept, as the residual stream is) and its norm;
      // composed, the add and the norm kernel.
      const auto r =
          Tensor<2>::random({rows, cols}, kiln::Distribution::normal(), o.device, 5).to(t);
      std::vector<Tensor<2>> sums(keep.size());
      std::size_t k = 0;
      report(
          "add_layer_norm",
          [&] {
            auto s = kiln::add_layer_norm(x, r, w, b);
            sums[k++ % sums.size()] = s.sum;
            return s.y;
          },
          [&] {
            sums[k++ % sums.size()] = x + r;
            return kiln::layer_norm(sums[(k - 1) % sums.size()], w, b);
          },
          4);
    }
  }
  return 0;
}
