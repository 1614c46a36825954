// Square matmuls in bf16 and f16 (4096 and 8192 by default): the first call, the min and median
// of the next runs, and TFLOP/s (2 N^3 / min), in kiln bench's form. `torch_matmul.py cuda-half`
// prints the same lines for PyTorch.
//
//   kiln_half_matmul [--device cuda|cpu] [--runs 20] [N ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string duration(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1e-3 ? "%.2fus" : "%.2fms", s < 1e-3 ? s * 1e6 : s * 1e3);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::Device device = kiln::Device::best();
  int runs = 20;
  std::vector<std::int64_t> sides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = std::string(argv[++i]) == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (!a.empty() && a[0] != '-') {
      sides.push_back(std::atoll(a.c_str()));
    } else {
      std::fprintf(stderr, "usage: %s [--device cuda|cpu] [--runs N] [N ...]\n", argv[0]);
      return 2;
    }
  }
  if (sides.empty()) sides = {4096, 8192};
  std::printf("name = %s\n", device.backend_name().c_str());
  for (std::int64_t n : sides) {
    for (kiln::DType t : {kiln::DType::bf16, kiln::DType::f16}) {
      const auto d = kiln::Distribution::uniform(0, 1);
      const auto a = kiln::Tensor<2>::random({n, n}, d, device, 1, t);
      const auto b = kiln::Tensor<2>::random({n, n}, d, device, 2, t);
      device.sync();
      auto timed = [&] {
        const auto t0 = Clock::now();
        const auto c = kiln::matmul(a, b);
        device.sync();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      const double first = timed();
      std::vector<double> rest;
      for (int r = 0; r < runs; ++r) rest.push_back(timed());
      std::sort(rest.begin(), rest.end());
      std::printf("matmul %lldx%lld %s: first %s, next %d min %s median %s\n",
                  static_cast<long long>(n), static_cast<long long>(n), kiln::dtype_name(t),
                  duration(first).c_str(), runs, duration(rest.front()).c_str(),
                  duration(rest[rest.size() / 2]).c_str());
      std::printf("  %.1f TFLOP/s\n", 2.0 * n * n * n / rest.front() / 1e12);
      std::fflush(stdout);
    }
  }
  return 0;
}
