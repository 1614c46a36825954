// Backend::matmul_epilogue on the CPU for f32: one sgemm over the whole product, then the bias,
// the pre-activation's copy and the activation in one pass over its rows, across kiln's threads
// (tanh through the kernel table's SIMD tanh). The product was tried in panels of rows with each
// panel's epilogue applied while it is in cache: OpenBLAS on panels of 256-341 rows ran 15-20 %
// slower than on the whole product ([2048, 768] x [768, 3072] f32, 2 threads, 2026-12-06), more
// than the pass over the output costs. The half types are declined: the caller composes them
// (matmul_half's f32 copies).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu {
namespace {

using detail::EpilogueActivation;
using detail::TensorImpl;

// One output row in place: + bias, the pre-activation copied to z, the activation (tanh through
// the kernel table's SIMD tanh, over the scratch row u).
void finish_row(float* row, std::int64_t n, const float* bias, float* z, EpilogueActivation act,
                const KernelTable& kernels, std::vector<float>& u) {
  if (bias)
    for (std::int64_t j = 0; j < n; ++j) row[j] += bias[j];
  if (z) std::copy(row, row + n, z);
  switch (act) {
    case EpilogueActivation::none:
      return;
    case EpilogueActivation::relu:
      for (std::int64_t j = 0; j < n; ++j) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
      return;
    case EpilogueActivation::gelu_tanh: {
      constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
      u.resize(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j)
        u[j] = kSqrt2OverPi * (row[j] + kCubic * row[j] * row[j] * row[j]);
      kernels.unary(ir::Op::tanh, DType::f32, DType::f32, Lanes{u.data()}, u.data(),
                    static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) row[j] = 0.5f * row[j] * (1.0f + u[j]);
      return;
    }
  }
}

}  // namespace

bool matmul_epilogue(const TensorImpl& a, const TensorImpl& b, const detail::MatmulEpilogue& e,
                     const TensorImpl& out, const KernelTable& kernels) {
  if (a.dtype != DType::f32) return false;
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2];
  if (out.numel() == 0) return true;
  const float* bias = e.bias ? static_cast<const float*>(e.bias->data()) : nullptr;
  float* z = e.pre_activation ? static_cast<float*>((*e.pre_activation)->data()) : nullptr;
  matmul(a, b, out);
  float* y = static_cast<float*>(out.data());
  parallel_for(
      batch * m, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t i0, std::int64_t i1) {
        std::vector<float> u;
        for (std::int64_t i = i0; i < i1; ++i)
          finish_row(y + i * n, n, bias, z ? z + i * n : nullptr, e.activation, kernels, u);
      });
  return true;
}

}  // namespace kiln::cpu
