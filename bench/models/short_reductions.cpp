// Reductions over a short innermost dim (issue 19): sum, min and argmin of [rows, w] over dim 1
// for w = 8 and 2, as GB/s of the bytes they must move (input plus output) beside the device's
// copy of the same bytes, and beside the same sum written element-wise over the columns (one
// fused kernel). Then the program the issue found slower fused than unfused: a named
// intermediate that a reduction consumes, `d = x[:, None] - c[None]; r = (d * d).sum(2)` with d
// alive when the group closes, timed with fusion on and off. Last, the column sums of GPT-2
// small's bias gradients (sum over dim 0 of [16384, n], bf16 and f32), beside the copy.
//
//   kiln_short_reductions [--device cuda|cpu] [--rows 1000000] [--runs 10] [--batch 20]
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>

#include "../fusion_switch.hpp"
#include "bench_timing.hpp"

namespace {

using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  std::int64_t rows = 1000000;
  int runs = 10, batch = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") {
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (k == "--rows") {
      o.rows = std::stoll(v);
    } else if (k == "--runs") {
      o.runs = std::stoi(v);
    } else if (k == "--batch") {
      o.batch = std::stoi(v);
    } else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--rows N] [--runs N] [--batch N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// The sum over dim 1 written as w - 1 element-wise additions of column slices.
Tensor<1> sum_of_columns(const Tensor<2>& x) {
  const std::int64_t w = x.shape()[1];
  Tensor<2> s = x.slice(1, 0, 1);
  for (std::int64_t j = 1; j < w; ++j) s = s + x.slice(1, j, j + 1);
  return s.squeeze(1);
}

// One table row: seconds a call s for `bytes` moved, beside the copy's seconds for them.
void print_row(const std::string& name, double s, double bytes, double copy) {
  std::printf("%-36s %10.1f %10.1f %10.1f %9.2f\n", name.c_str(), s * 1e6, bytes / s / 1e9,
              bytes / copy / 1e9, copy / s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto sync = [&] { o.device.sync(); };
  auto time = [&](const std::function<void()>& call) {
    return kiln_bench::seconds_per_call(o.runs, o.batch, call, sync);
  };
  std::printf("name = %s, %lld rows\n", o.device.backend_name().c_str(),
              static_cast<long long>(o.rows));
  std::printf("%-36s %10s %10s %10s %9s\n", "workload", "time us", "GB/s", "copy GB/s", "fraction");
  for (const std::int64_t w : {8, 2}) {
    const auto x = Tensor<2>::random({o.rows, w}, kiln::Distribution::uniform(-1, 1), o.device, 1);
    sync();
    const double bytes = static_cast<double>(o.rows * (w + 1) * 4);
    const double copy =
        kiln_bench::copy_seconds(o.device, o.runs, o.batch, static_cast<std::size_t>(bytes));
    auto row = [&](const std::string& name, double s) { print_row(name, s, bytes, copy); };
    char shape[48];
    std::snprintf(shape, sizeof shape, " [%lld, %lld]", static_cast<long long>(o.rows),
                  static_cast<long long>(w));
    // Reductions run when called (the fusion decorator closes its group first), so `kept` holds
    // two buffers in turn, as the copy's destination is one.
    Tensor<1> kept = x.sum(1);
    row(std::string("sum(1)") + shape, time([&] { kept = x.sum(1); }));
    row(std::string("min(1)") + shape, time([&] { kept = x.min(1); }));
    row(std::string("argmin(1)") + shape, time([&] { kept = x.argmin(1); }));
    // The additions are one fused group, which a result dropped before it runs would skip:
    // each call syncs, so the row includes a sync's latency.
    row(std::string("columns added, synced") + shape, time([&] {
          kept = sum_of_columns(x);
          sync();
        }));
  }
  // Column sums: a thread-per-column reduction over a strided dim (src/cuda/reduce.cpp).
  for (const kiln::DType t : {kiln::DType::bf16, kiln::DType::f32}) {
    for (const std::int64_t n : {768, 3072}) {
      const std::int64_t m = 16384;
      const auto g =
          Tensor<2>::random({m, n}, kiln::Distribution::uniform(-1, 1), o.device, 4).to(t);
      Tensor<1> kept = g.sum(0);
      sync();
      const double bytes = static_cast<double>((m + 1) * n * kiln::dtype_size(t));
      const double copy =
          kiln_bench::copy_seconds(o.device, o.runs, o.batch, static_cast<std::size_t>(bytes));
      const double s = time([&] { kept = g.sum(0); });
      char name[48];
      std::snprintf(name, sizeof name, "sum(0) [16384, %lld] %s", static_cast<long long>(n),
                    kiln::dtype_name(t));
      print_row(name, s, bytes, copy);
    }
  }
  // The named intermediate: d [rows, 8, 2] is kept, r reduces it.
  const auto x = Tensor<2>::random({o.rows, 2}, kiln::Distribution::uniform(-1, 1), o.device, 2);
  const auto c = Tensor<2>::random({8, 2}, kiln::Distribution::uniform(-1, 1), o.device, 3);
  Tensor<3> d = x.unsqueeze(1) - c.unsqueeze(0);
  Tensor<2> r = (d * d).sum(2);
  auto distances = [&] {
    d = x.unsqueeze(1) - c.unsqueeze(0);
    r = (d * d).sum(2);
  };
  double fused = 0, unfused = 0;
  {
    kiln_bench::FusionSwitch on(true);
    fused = time(distances);
  }
  {
    kiln_bench::FusionSwitch off(false);
    unfused = time(distances);
  }
  std::printf("named intermediate [%lld, 8, 2]: fused %.1f us, unfused %.1f us, ratio %.2f\n",
              static_cast<long long>(o.rows), fused * 1e6, unfused * 1e6, fused / unfused);
  return 0;
}
