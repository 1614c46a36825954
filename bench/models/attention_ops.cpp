// kiln::scaled_dot_product_attention at GPT-2 small's head shape (H = 12, D = 64), causal, f32 and
// bf16: the attention kernel (one Backend::attention call; its backward the composed
// attention_backward) beside the same attention written with matmul, masked_fill, softmax and
// matmul (the composition the front end falls back to where a backend declines), forward alone
// and forward + backward, measured in the same run, with the flops of the two products per second
// (4 B H Tq Tk D forward, counting the masked half; backward adds 2.5x that). A forward sample
// queues the call `batch` times between two syncs and divides by `batch`, keeping every result.
//
//   kiln_attention_ops [--device cuda|cpu] [--runs 3] [--batch 3] [--b B --t T]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <vector>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 3, batch = 3;
  std::vector<std::int64_t> b = {4, 1}, t = {256, 1024};
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
    } else if (k == "--b") {
      o.b = {std::stoll(v)};
    } else if (k == "--t") {
      o.t = {std::stoll(v)};
    } else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--runs N] [--batch N] [--b B --t T]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (o.b.size() != o.t.size()) o.b.assign(o.t.size(), o.b.front());
  return o;
}

// The composition, with public ops only (src/frontend/attention.cpp's fallback).
Tensor<4> composed(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v) {
  const auto s = q.shape();
  auto fold = [](const Tensor<4>& x) {
    const auto d = x.shape();
    return x.contiguous().reshape({d[0] * d[1], d[2], d[3]});
  };
  const auto above = Tensor<2>::ones({s[2], s[2]}, DType::boolean, q.device()).triu(1);
  const auto scores = (kiln::matmul(fold(q), fold(k).transpose(1, 2)) *
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(s[3]))))
                          .masked_fill(above, -std::numeric_limits<float>::infinity());
  return kiln::matmul(scores.softmax(2), fold(v)).reshape({s[0], s[1], s[2], s[3]});
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("name = %s, fusion %s, min over %d runs (forward: of the mean of %d calls)\n",
              o.device.backend_name().c_str(), kiln::config().fusion ? "on" : "off", o.runs,
              o.batch);
  std::printf("%-5s %-18s %-9s %12s %12s %9s %14s\n", "dtype", "[B, H, T, D]", "pass", "kernel ms",
              "composed ms", "speedup", "kernel GFLOP/s");
  auto sync = [&] { o.device.sync(); };
  const std::int64_t H = 12, D = 64;
  for (std::size_t n = 0; n < o.t.size(); ++n) {
    const std::int64_t B = o.b[n], T = o.t[n];
    for (DType dt : {DType::f32, DType::bf16}) {
      auto make = [&](std::uint64_t seed) {
        return Tensor<4>::random({B, H, T, D}, kiln::Distribution::normal(), o.device, seed).to(dt);
      };
      const auto q = make(1), k = make(2), v = make(3);
      char shape[48];
      std::snprintf(shape, sizeof shape, "[%lld, %lld, %lld, %lld]", static_cast<long long>(B),
                    static_cast<long long>(H), static_cast<long long>(T),
                    static_cast<long long>(D));
      const double flops = 4.0 * static_cast<double>(B * H * T * T * D);
      std::vector<Tensor<4>> keep(static_cast<std::size_t>(o.batch + 1));
      auto forward = [&](const std::function<Tensor<4>()>& f) {
        std::size_t i = 0;
        return kiln_bench::seconds_per_call(
            o.runs, o.batch, [&] { keep[i++ % keep.size()] = f(); }, sync);
      };
      // Forward and backward of sum(o * w) into fresh leaves.
      const auto w = make(4);
      auto both = [&](bool kernel) {
        return kiln_bench::seconds_per_call(
            o.runs, 1,
            [&] {
              const auto lq = q.detach().requires_grad(true), lk = k.detach().requires_grad(true),
                         lv = v.detach().requires_grad(true);
              const auto out = kernel ? kiln::scaled_dot_product_attention(lq, lk, lv, true)
                                      : composed(lq, lk, lv);
              (out * w).sum().backward();
            },
            sync);
      };
      const double fk = forward([&] { return kiln::scaled_dot_product_attention(q, k, v, true); });
      const double fc = forward([&] { return composed(q, k, v); });
      std::printf("%-5s %-18s %-9s %12.2f %12.2f %9.2f %14.1f\n", kiln::dtype_name(dt), shape,
                  "forward", fk * 1e3, fc * 1e3, fc / fk, flops / fk / 1e9);
      const double bk = both(true), bc = both(false);
      std::printf("%-5s %-18s %-9s %12.2f %12.2f %9.2f %14.1f\n", kiln::dtype_name(dt), shape,
                  "fwd+bwd", bk * 1e3, bc * 1e3, bc / bk, 3.5 * flops / bk / 1e9);
    }
  }
  return 0;
}
