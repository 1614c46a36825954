// Scaled dot-product attention at GPT-2 small's shape (B=16, H=12, T=1024, D=64, causal) and at
// D=128 (H=6), bf16 and f32 (TF32): kiln::scaled_dot_product_attention (the fused kernel where
// the device has one) beside the same attention composed from public ops (matmul, a causal
// mask, softmax, matmul), forward alone and forward + backward, in TFLOP/s as FlashAttention
// counts them (forward 4 B H T^2 D, halved when causal; backward 2.5 times the forward), with the
// largest difference between the two forwards.
//
//   kiln_attention_ops [--device cuda|cpu] [--runs 5] [--batch 5] [--seq 1024]
//
// bench/peers/torch_attention.py is the same table for F.scaled_dot_product_attention.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 5, batch = 5;
  std::int64_t seq = 1024;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (k == "--runs")
      o.runs = std::stoi(v);
    else if (k == "--batch")
      o.batch = std::stoi(v);
    else if (k == "--seq")
      o.seq = std::stoll(v);
    else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--runs N] [--batch N] [--seq T]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// softmax(q k^T scale + causal mask) v with public ops, in q's dtype as a user would write it.
Tensor<4> composed(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v) {
  const auto s = q.shape();
  const auto fold = [&](const Tensor<4>& t) { return t.reshape({s[0] * s[1], s[2], s[3]}); };
  auto scores = kiln::matmul(fold(q), fold(k).transpose(1, 2)) *
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(s[3])));
  const auto above = Tensor<2>::ones({s[2], s[2]}, DType::boolean, q.device()).triu(1);
  scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  return kiln::matmul(scores.softmax(2), fold(v)).reshape({s[0], s[1], s[2], s[3]});
}

void row(const Options& o, DType dtype, std::int64_t heads, std::int64_t d) {
  const std::int64_t b = 16, t = o.seq;
  const auto make = [&](std::uint64_t seed) {
    return Tensor<4>::random({b, heads, t, d}, kiln::Distribution::normal(0.0, 1.0), o.device, seed)
        .to(dtype);
  };
  const Tensor<4> q = make(1), k = make(2), v = make(3), g = make(4);
  const auto sync = [&] { o.device.sync(); };
  const double fwd_flop = 4.0 * b * heads * t * t * d / 2;  // causal
  char name[96];
  std::snprintf(name, sizeof name, "attention causal %lldx%lldx%lldx%lld %s%s",
                static_cast<long long>(b), static_cast<long long>(heads), static_cast<long long>(t),
                static_cast<long long>(d), kiln::dtype_name(dtype),
                dtype == DType::f32 ? " tf32" : "");
  const double diff = (kiln::scaled_dot_product_attention(q, k, v, true).to(DType::f32) -
                       composed(q, k, v).to(DType::f32))
                          .abs()
                          .max()
                          .item<float>();
  for (const bool fused : {true, false}) {
    const auto attend = [&](const Tensor<4>& a, const Tensor<4>& c, const Tensor<4>& e) {
      return fused ? kiln::scaled_dot_product_attention(a, c, e, true) : composed(a, c, e);
    };
    const double f = kiln_bench::seconds_per_call(
        o.runs, o.batch, [&] { (void)attend(q, k, v); }, sync);
    std::printf("%s %s: forward %.3f ms (%.1f TFLOP/s)", name, fused ? "kiln" : "composed", f * 1e3,
                fwd_flop / f * 1e-12);
    if (fused) std::printf(", max |kiln - composed| %.3g", diff);
    std::printf("\n");
    std::fflush(stdout);
    const Tensor<4> ql = q.detach().requires_grad(true), kl = k.detach().requires_grad(true),
                    vl = v.detach().requires_grad(true);
    const double fb = kiln_bench::seconds_per_call(
        o.runs, o.batch, [&] { attend(ql, kl, vl).backward(g); }, sync);
    std::printf("%s %s: forward+backward %.3f ms (%.1f TFLOP/s)\n", name,
                fused ? "kiln" : "composed", fb * 1e3, 3.5 * fwd_flop / fb * 1e-12);
    std::fflush(stdout);  // (a crash after the last row, seen twice on the H100, lost it)
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  kiln::set_float32_matmul_precision(kiln::Precision::high);
  std::string cudnn = "not built";  // bf16 runs on cuDNN's attention when on (and libcudnn loads)
  for (const kiln::FeatureState& f : kiln::features())
    if (f.name == "cudnn") cudnn = f.why;
  std::printf("name = %s, cudnn %s, min over %d runs of the mean of %d calls\n",
              o.device.backend_name().c_str(), cudnn.c_str(), o.runs, o.batch);
  for (const DType dtype : {DType::bf16, DType::f32}) {
    row(o, dtype, 12, 64);
    row(o, dtype, 6, 128);
  }
  return 0;
}
