// Cross-entropy at GPT-2 small's loss shape (N = 16 * 1024 rows of C = 50304 logits) and at
// [8192, 4096], bf16 and f32: kiln::cross_entropy (fused: per-row statistics, one element-wise
// kernel for the gradient) beside the same loss composed from public ops as a user writes it
// (log_softmax, then the picked log-probabilities' mean), forward alone and forward + backward,
// with the bytes the fused form must move (forward: the logits read twice; backward: read once
// more and the gradient written) per second.
//
//   kiln_cross_entropy [--device cuda|cpu] [--runs 5] [--batch 5] [--rows N --cols C]
//
// bench/peers/torch_cross_entropy.py is the same table for F.cross_entropy (eager, compiled).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_timing.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 5, batch = 5;
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{16 * 1024, 50304}, {8192, 4096}};
};

Options parse(int argc, char** argv) {
  Options o;
  std::int64_t rows = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") {
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (k == "--runs") {
      o.runs = std::stoi(v);
    } else if (k == "--batch") {
      o.batch = std::stoi(v);
    } else if (k == "--rows") {
      rows = std::stoll(v);
    } else if (k == "--cols" && rows > 0) {
      o.shapes = {{rows, std::stoll(v)}};
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device cuda|cpu] [--runs N] [--batch N] [--rows N --cols C]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// The loss as written without a fused op: log_softmax (the row kernel) and the targets' mean.
Tensor<0> composed(const Tensor<2>& logits, const Tensor<1>& targets) {
  const auto log_probs = logits.to(DType::f32).log_softmax(1);
  return -log_probs.gather(1, targets.unsqueeze(1)).mean();
}

void row(const Options& o, DType dtype, std::int64_t n, std::int64_t c) {
  const auto x =
      Tensor<2>::random({n, c}, kiln::Distribution::normal(0.0, 2.0), o.device, 1).to(dtype);
  const auto t = Tensor<2>::random({n, 1}, kiln::Distribution::uniform(0.0, c - 1.0), o.device, 2)
                     .to(DType::i32)
                     .reshape({n});
  const auto sync = [&] { o.device.sync(); };
  const double logits_bytes = static_cast<double>(n) * c * kiln::dtype_size(dtype);
  const double diff = std::fabs(kiln::cross_entropy(x, t).item() - composed(x, t).item());
  for (const bool fused : {true, false}) {
    const auto loss = [&](const Tensor<2>& a) {
      return fused ? kiln::cross_entropy(a, t) : composed(a, t);
    };
    const double f = kiln_bench::seconds_per_call(
        o.runs, o.batch, [&] { (void)loss(x); }, sync);
    const Tensor<2> leaf = x.detach().requires_grad(true);
    const double fb = kiln_bench::seconds_per_call(
        o.runs, o.batch,
        [&] {
          leaf.zero_grad();
          loss(leaf).backward();
        },
        sync);
    std::printf(
        "cross_entropy [%lld, %lld] %s %s: forward %.3f ms (%.0f GB/s), forward+backward %.3f ms "
        "(%.0f GB/s)",
        static_cast<long long>(n), static_cast<long long>(c), kiln::dtype_name(dtype),
        fused ? "kiln" : "composed", f * 1e3, 2 * logits_bytes / f * 1e-9, fb * 1e3,
        4 * logits_bytes / fb * 1e-9);
    if (fused) std::printf(", |kiln - composed| %.3g", diff);
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("name = %s, min over %d runs of the mean of %d calls\n",
              o.device.backend_name().c_str(), o.runs, o.batch);
  for (const auto& [n, c] : o.shapes)
    for (const DType dtype : {DType::bf16, DType::f32}) row(o, dtype, n, c);
  return 0;
}
