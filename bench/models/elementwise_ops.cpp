// Every unary and binary element-wise op, in f32 and bf16, over 2^26 elements (by default): the
// bytes each op moves per second beside the copy bandwidth of the same bytes, measured in the
// same run. Fusion is off, so each op is its own kernel (under fusion a result dropped before its
// group runs is never computed). A sample queues the op `batch` times between two syncs and
// divides by `batch`: with launches queued ahead, the device time per op.
//
//   kiln_elementwise_ops [--device cuda|cpu] [--log2n 26] [--runs 10] [--batch 20]
//
// The copy: cudaMemcpyAsync device to device between two buffers of the op's bytes (read plus
// written), or memcpy on the CPU. The last row per dtype, `normal`, is Tensor::random with
// Distribution::normal(), which only writes: its copy moves the same bytes (half read, half
// written). bench/peers/torch_elementwise_ops.py prints the same table for
// PyTorch eager.
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
  int log2n = 26, runs = 10, batch = 20;
};

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
    auto copy = [&](int operands) {
      return kiln_bench::copy_seconds(o.device, o.runs, o.batch,
                                      operands * n * kiln::dtype_size(t));
    };
    const double copy_by_inputs[] = {copy(1), copy(2), copy(3)};
    for (const Op& op : ops()) {
      const double bytes = static_cast<double>((op.inputs + 1) * n * kiln::dtype_size(t));
      const double s = kiln_bench::seconds_per_call(
          o.runs, o.batch, [&] { (void)op.run(x, y); }, [&] { o.device.sync(); });
      const double copy = copy_by_inputs[op.inputs];
      std::printf("%-8s %-5s %10.1f %10.1f %9.2f\n", op.name, kiln::dtype_name(t), bytes / s / 1e9,
                  bytes / copy / 1e9, copy / s);
      std::fflush(stdout);
    }
    // random normal: writes only (torch.randn beside it in the peer).
    const double bytes = static_cast<double>(n * kiln::dtype_size(t));
    std::uint64_t seed = 3;
    const double s = kiln_bench::seconds_per_call(
        o.runs, o.batch,
        [&] { (void)Tensor<1>::random({n}, kiln::Distribution::normal(), o.device, seed++, t); },
        [&] { o.device.sync(); });
    std::printf("%-8s %-5s %10.1f %10.1f %9.2f\n", "normal", kiln::dtype_name(t), bytes / s / 1e9,
                bytes / copy_by_inputs[0] / 1e9, copy_by_inputs[0] / s);
    std::fflush(stdout);
  }
  return 0;
}
