// Uses an installed kiln: prints the CPU backend and the features, then runs an element-wise
// chain and a matmul on the CPU, checks both against a float64 reference computed here and prints
// a corner of the product. Exits 1 on a mismatch. scripts/consumer builds it twice: with CMake
// (CMakeLists.txt here) and with `g++ -std=c++20 main.cpp $(pkg-config --cflags --libs kiln)`.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <kiln/kiln.hpp>
#include <vector>

namespace {

// Counts the elements where got and want differ by more than tol[i]; prints the first.
int mismatches(const char* what, const std::vector<float>& got, const std::vector<double>& want,
               const std::vector<double>& tol) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= tol[i]) && bad++ == 0)
      std::printf("%s: element %zu is %.9g, float64 says %.9g (error %.3g > %.3g)\n", what, i,
                  static_cast<double>(got[i]), want[i], err, tol[i]);
  }
  std::printf("%s: %zu elements, %d mismatches\n", what, want.size(), bad);
  return bad;
}

}  // namespace

int main() {
  using kiln::Tensor;
  const kiln::Device cpu = kiln::Device::cpu();
  std::printf("kiln %s, cpu backend %s\n", kiln::version().c_str(), cpu.backend_name().c_str());
  for (const kiln::FeatureState& f : kiln::features())
    std::printf("  %-12s %-8s %s\n", f.name.c_str(),
                f.live ? "live" : (f.compiled ? "off" : "absent"), f.why.c_str());

  const auto uniform = kiln::Distribution::uniform(-1, 1);
  const int m = 64, k = 48, n = 32;
  auto a = Tensor<2>::random({m, k}, uniform, cpu, /*seed=*/1);
  auto b = Tensor<2>::random({k, n}, uniform, cpu, /*seed=*/2);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();

  // Element-wise chain (one fused kernel when fusion is live): tanh(2a - 1) * a + sin(a).
  const std::vector<float> chain = ((a * 2.0f - 1.0f).tanh() * a + a.sin()).to_vector<float>();
  std::vector<double> chain_ref(av.size()), chain_tol(av.size());
  for (std::size_t i = 0; i < av.size(); ++i) {
    const double x = av[i];
    chain_ref[i] = std::tanh(2 * x - 1) * x + std::sin(x);
    chain_tol[i] = 1e-6 * (1 + std::abs(chain_ref[i]));  // about 8 float ULPs near 1
  }

  // Matmul: within a few float roundings of sum |a||b| per element.
  const std::vector<float> prod = kiln::matmul(a, b).to_vector<float>();
  std::vector<double> prod_ref(static_cast<std::size_t>(m * n)), prod_tol(prod_ref.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int p = 0; p < k; ++p) {
        const double t = double{av[i * k + p]} * double{bv[p * n + j]};
        sum += t;
        abs_sum += std::abs(t);
      }
      prod_ref[i * n + j] = sum;
      prod_tol[i * n + j] = k * 0x1p-23 * abs_sum;
    }

  const int bad = mismatches("chain tanh(2a-1)*a+sin(a)", chain, chain_ref, chain_tol) +
                  mismatches("matmul 64x48 * 48x32", prod, prod_ref, prod_tol);
  std::cout << "matmul corner: " << kiln::matmul(a, b).slice(0, 0, 2).slice(1, 0, 3) << "\n";
  std::printf("%s\n", bad == 0 ? "ok" : "FAILED");
  return bad == 0 ? 0 : 1;
}
