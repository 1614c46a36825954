// The embedding at GPT-2 small sizes: its gather (index_select of weight [50304, 768] at ids
// [16, 1024]) and its backward (index_add of the output's gradient [16384, 768] into a zero
// [50304, 768]), in f32 and bf16, atomic and deterministic: the bytes each moves per second beside
// the copy bandwidth of the same bytes, measured in the same run. A sample queues the op `batch`
// times between two syncs and divides by `batch`.
//
//   kiln_index_ops [--device cuda|cpu] [--rows 50304] [--features 768] [--ids 16384]
//                  [--runs 5] [--batch 10]
//
// Bytes counted: gather reads and writes ids x features elements (plus the ids); the backward
// reads x and writes out (rows x features each) and reads the gradient (ids x features).
// bench/peers/torch_index_ops.py prints the same table for PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  std::int64_t rows = 50304, features = 768, ids = 16384;
  int runs = 5, batch = 10;
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
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (k == "--rows")
      o.rows = std::stoll(v);
    else if (k == "--features")
      o.features = std::stoll(v);
    else if (k == "--ids")
      o.ids = std::stoll(v);
    else if (k == "--runs")
      o.runs = std::stoi(v);
    else if (k == "--batch")
      o.batch = std::stoi(v);
    else {
      std::fprintf(stderr,
                   "usage: %s [--device cuda|cpu] [--rows N] [--features N] [--ids N] [--runs N] "
                   "[--batch N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  kiln::Config cfg = kiln::config();
  cfg.fusion = false;  // each op its own kernel
  kiln::set_config(cfg);
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(o.rows - 1));
  std::vector<std::int32_t> id_values(static_cast<std::size_t>(o.ids));
  for (auto& v : id_values) v = pick(rng);
  const auto ids = Tensor<1>::from_data(id_values, {o.ids}, o.device);
  std::printf("name = %s, weight [%lld, %lld], %lld ids, fusion off\n",
              o.device.backend_name().c_str(), static_cast<long long>(o.rows),
              static_cast<long long>(o.features), static_cast<long long>(o.ids));
  std::printf("%-22s %-5s %10s %10s %9s\n", "op", "dtype", "GB/s", "copy GB/s", "fraction");
  auto sync = [&] { o.device.sync(); };
  for (DType t : {DType::f32, DType::bf16}) {
    const double size = static_cast<double>(kiln::dtype_size(t));
    const auto weight =
        Tensor<2>::random({o.rows, o.features}, kiln::Distribution::normal(), o.device, 2).to(t);
    const auto grad =
        Tensor<2>::random({o.ids, o.features}, kiln::Distribution::normal(), o.device, 3).to(t);
    const auto zero = Tensor<2>::zeros({o.rows, o.features}, t, o.device);
    auto report = [&](const char* name, double bytes, const std::function<void()>& call) {
      const double s = seconds_per_call(o, call, sync);
      const double c = copy_seconds(o, static_cast<std::size_t>(bytes));
      std::printf("%-22s %-5s %10.1f %10.1f %9.2f\n", name, kiln::dtype_name(t), bytes / s / 1e9,
                  bytes / c / 1e9, c / s);
    };
    const double gather_bytes = 2.0 * o.ids * o.features * size + 4.0 * o.ids;
    report("embedding gather", gather_bytes, [&] { (void)kiln::embedding(weight, ids); });
    const double add_bytes = (2.0 * o.rows + o.ids) * o.features * size + 4.0 * o.ids;
    for (bool det : {false, true}) {
      kiln::set_deterministic(det);
      report(det ? "embedding bwd (determ)" : "embedding bwd (atomic)", add_bytes,
             [&] { (void)zero.index_add(0, ids, grad); });
    }
    kiln::set_deterministic(false);
  }
  return 0;
}
