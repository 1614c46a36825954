// The order and scan ops at the shapes issue 19 names: sort and argsort of [4096, 4096] f32 along
// the last dim, topk k = 50 of [64, 50304] (a GPT-2 vocabulary row per sequence), cumsum of
// [8192, 4096], max with indices along dim 1 of [8192, 4096], randperm(1e7) and bincount of 1e7
// ids into 50304 bins. Each row prints the time per call and the bytes the op must move at least
// (x read once, its outputs written once) per second, beside the copy bandwidth of the same bytes
// measured in the same run. A sample queues the op `batch` times between two syncs and divides by
// `batch`; every result of a batch is kept alive.
//
//   kiln_order_ops [--device cuda|cpu] [--runs 5] [--batch 10] [--scale S]
//
// --scale divides every size by S (the CPU's quick look: --device cpu --scale 8).
// bench/peers/torch_order_ops.py prints the same table for PyTorch.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 5, batch = 10;
  std::int64_t scale = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") {
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (k == "--runs") {
      o.runs = std::stoi(v);
    } else if (k == "--batch") {
      o.batch = std::stoi(v);
    } else if (k == "--scale") {
      o.scale = std::max<std::int64_t>(1, std::stoll(v));
    } else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--runs N] [--batch N] [--scale S]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const std::int64_t s = o.scale;
  std::printf("name = %s, min over %d runs of the mean of %d calls\n",
              o.device.backend_name().c_str(), o.runs, o.batch);
  std::printf("%-10s %-20s %12s %10s %10s %9s\n", "op", "shape", "us", "GB/s", "copy GB/s",
              "fraction");
  auto sync = [&] { o.device.sync(); };
  std::vector<Tensor<2>> keep2(static_cast<std::size_t>(o.batch + 1));
  std::vector<Tensor<1>> keep1(static_cast<std::size_t>(o.batch + 1));
  auto report = [&](const char* op, const std::string& shape, double bytes,
                    const std::function<void(std::size_t)>& call) {
    std::size_t i = 0;
    const double t = kiln_bench::seconds_per_call(
        o.runs, o.batch, [&] { call(i++ % keep2.size()); }, sync);
    const double c =
        kiln_bench::copy_seconds(o.device, o.runs, o.batch, static_cast<std::size_t>(bytes / 2));
    std::printf("%-10s %-20s %12.1f %10.1f %10.1f %9.2f\n", op, shape.c_str(), t * 1e6,
                bytes / t / 1e9, bytes / c / 1e9, c / t);
  };
  auto dims = [](std::int64_t a, std::int64_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
  };
  {
    const std::int64_t r = 4096 / s, n = 4096;
    const auto x = Tensor<2>::random({r, n}, kiln::Distribution::normal(), o.device, 1);
    const double b = static_cast<double>(r * n) * (4 + 4 + 4);  // x, values, indices
    report("sort", dims(r, n), b, [&](std::size_t i) { keep2[i] = x.sort(-1).values; });
    report("argsort", dims(r, n), b, [&](std::size_t i) { keep2[i] = x.argsort(-1); });
  }
  {
    const std::int64_t r = 64, n = 50304 / s, k = 50;
    const auto x = Tensor<2>::random({r, n}, kiln::Distribution::normal(), o.device, 2);
    const double b = static_cast<double>(r * n) * 4 + static_cast<double>(r * k) * 8;
    report("topk", dims(r, n) + " k=50", b, [&](std::size_t i) { keep2[i] = x.topk(k).values; });
  }
  {
    const std::int64_t r = 8192 / s, n = 4096;
    const auto x = Tensor<2>::random({r, n}, kiln::Distribution::normal(), o.device, 3);
    report("cumsum", dims(r, n), static_cast<double>(r * n) * 8,
           [&](std::size_t i) { keep2[i] = x.cumsum(1); });
    report("max(dim)", dims(r, n), static_cast<double>(r * n) * 4 + static_cast<double>(r) * 8,
           [&](std::size_t i) { keep1[i] = x.max_with_indices(1).values; });
  }
  {
    const std::int64_t n = 10000000 / s;
    report("randperm", "[" + std::to_string(n) + "]", static_cast<double>(n) * 4,
           [&](std::size_t i) { keep1[i] = kiln::randperm(n, 7, o.device); });
    const auto ids =
        (Tensor<1>::random({n}, kiln::Distribution::uniform(0, 50304), o.device, 4)).to(DType::i32);
    report("bincount", "[" + std::to_string(n) + "] 50304", static_cast<double>(n) * 4,
           [&](std::size_t i) { keep1[i] = kiln::bincount(ids, 50304); });
  }
  return 0;
}
