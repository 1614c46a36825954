// A linear layer with its epilogue at GPT-2 small's MLP shape (x [16384, 768] @ W^T, W [3072,
// 768], bias [3072]), bf16 by default: kiln::linear with no epilogue, the bias, bias + tanh GELU
// (cuBLASLt's epilogues) and bias + exact GELU (bias epilogue, then the element-wise GELU), beside
// the plain product and the same layer composed from matmul, + and the activation's ops; then
// forward + backward of bias + tanh GELU, kiln::linear beside the composed ops. TFLOP/s count the
// product's 2 m n k flops (forward + backward: 3 products). The bar: the epilogue at 90 %
// or more of the plain product's TFLOP/s.
//
//   kiln_linear_ops [--device cuda|cpu] [--dtype bf16|f16|f32] [--runs 5] [--batch 10]
//                   [--m 16384 --k 768 --n 3072]
//
// bench/peers/torch_linear.py prints the same rows for PyTorch (eager and torch.compile).
#include <cstdio>
#include <functional>
#include <kiln/kiln.hpp>
#include <string>

#include "bench_timing.hpp"

namespace {

using kiln::Activation;
using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  DType dtype = DType::bf16;
  int runs = 5, batch = 10;
  std::int64_t m = 16384, k = 768, n = 3072;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], v = argv[i + 1];
    if (key == "--device") {
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (key == "--dtype") {
      o.dtype = v == "f32" ? DType::f32 : v == "f16" ? DType::f16 : DType::bf16;
    } else if (key == "--runs") {
      o.runs = std::stoi(v);
    } else if (key == "--batch") {
      o.batch = std::stoi(v);
    } else if (key == "--m") {
      o.m = std::stoll(v);
    } else if (key == "--k") {
      o.k = std::stoll(v);
    } else if (key == "--n") {
      o.n = std::stoll(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device cuda|cpu] [--dtype bf16|f16|f32] [--runs N] [--batch N] "
                   "[--m M --k K --n N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

Tensor<2> gelu_tanh_composed(const Tensor<2>& z) {
  return z * 0.5 * ((z + z * z * z * 0.044715) * 0.7978845608028654).tanh() + z * 0.5;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto d = kiln::Distribution::uniform(-1, 1);
  const auto x = Tensor<2>::random({o.m, o.k}, d, o.device, 1, o.dtype);
  const auto w = Tensor<2>::random({o.n, o.k}, d, o.device, 2, o.dtype);
  const auto b = Tensor<1>::random({o.n}, d, o.device, 3, o.dtype);
  const auto g = Tensor<2>::random({o.m, o.n}, d, o.device, 4, o.dtype);
  const auto wt = w.transpose(0, 1);
  auto sync = [&] { o.device.sync(); };
  const double flops = 2.0 * o.m * o.n * o.k;
  std::printf(
      "name = %s, %s, x [%lld, %lld] @ W^T [%lld, %lld], min over %d runs of the mean "
      "of %d calls\n",
      o.device.backend_name().c_str(), kiln::dtype_name(o.dtype), static_cast<long long>(o.m),
      static_cast<long long>(o.k), static_cast<long long>(o.k), static_cast<long long>(o.n), o.runs,
      o.batch);
  double plain = 0;
  auto row = [&](const char* label, double products, const std::function<void()>& call) {
    const double s = kiln_bench::seconds_per_call(o.runs, o.batch, call, sync);
    const double tflops = products * flops / s * 1e-12;
    if (plain == 0) plain = tflops;
    std::printf("  %-44s %9.1f us  %6.1f TFLOP/s  %5.1f %% of the plain product's\n", label,
                s * 1e6, tflops, 100 * tflops / plain);
    std::fflush(stdout);
  };
  // Each result is kept until the next call replaces it: a fused group whose result is dropped
  // before it runs is never written (the fusion decorator's rule), which would time nothing.
  Tensor<2> kept;
  row("matmul x @ W^T (the plain product)", 1, [&] { kept = kiln::matmul(x, wt); });
  row("linear, no bias", 1, [&] { kept = kiln::linear(x, w); });
  row("linear + bias", 1, [&] { kept = kiln::linear(x, w, b); });
  row("linear + bias + gelu_tanh", 1, [&] { kept = kiln::linear(x, w, b, Activation::gelu_tanh); });
  row("linear + bias + gelu (exact, element-wise)", 1,
      [&] { kept = kiln::linear(x, w, b, Activation::gelu); });
  row("linear + bias + relu", 1, [&] { kept = kiln::linear(x, w, b, Activation::relu); });
  row("composed: matmul, + bias and gelu_tanh fused", 1,
      [&] { kept = gelu_tanh_composed(kiln::matmul(x, wt) + b); });
  row("composed: matmul, + bias and gelu fused", 1,
      [&] { kept = (kiln::matmul(x, wt) + b).gelu(); });

  auto leaf = [](const Tensor<2>& t) {
    auto l = t.detach();
    l.requires_grad(true);
    return l;
  };
  auto xl = leaf(x), wl = leaf(w);
  auto bl = b.detach();
  bl.requires_grad(true);
  row("fwd+bwd linear + bias + gelu_tanh", 3, [&] {
    xl.zero_grad(), wl.zero_grad(), bl.zero_grad();
    (kiln::linear(xl, wl, bl, Activation::gelu_tanh) * g).sum().backward();
  });
  row("fwd+bwd composed (matmul, + bias, gelu_tanh ops)", 3, [&] {
    xl.zero_grad(), wl.zero_grad(), bl.zero_grad();
    (gelu_tanh_composed(kiln::matmul(xl, wl.transpose(0, 1)) + bl) * g).sum().backward();
  });
  row("fwd+bwd linear + bias (no activation)", 3, [&] {
    xl.zero_grad(), wl.zero_grad(), bl.zero_grad();
    (kiln::linear(xl, wl, bl) * g).sum().backward();
  });
  row("fwd+bwd composed (matmul, + bias)", 3, [&] {
    xl.zero_grad(), wl.zero_grad(), bl.zero_grad();
    ((kiln::matmul(xl, wl.transpose(0, 1)) + bl) * g).sum().backward();
  });
  return 0;
}
