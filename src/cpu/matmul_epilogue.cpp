// Backend::matmul_epilogue on the CPU for f32: sgemm over panels of rows, each panel's bias and
// activation applied while it is still in cache (a panel is about 1 MiB of output), instead of
// a second pass over the whole product. The half types and the bias gradient are declined: the
// caller composes them (matmul_half's f32 copies; a row sum).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu {
namespace {

using detail::EpilogueActivation;
using detail::TensorImpl;

constexpr std::int64_t kPanelElements = std::int64_t{1} << 18;

float activate(EpilogueActivation act, float z) {
  switch (act) {
    case EpilogueActivation::none:
      return z;
    case EpilogueActivation::relu:
      return z > 0.0f ? z : 0.0f;
    case EpilogueActivation::gelu_tanh: {
      constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
      return 0.5f * z * (1.0f + std::tanh(kSqrt2OverPi * (z + kCubic * z * z * z)));
    }
  }
  return z;
}

// Rows [r0, r1) of batch b of x [B, m, k] (any strides) as a [1, r1 - r0, k] view.
TensorImpl rows_of(const TensorImpl& x, std::int64_t b, std::int64_t r0, std::int64_t r1) {
  TensorImpl v = x;
  v.offset = x.offset + b * x.strides[0] + r0 * x.strides[1];
  v.shape = {1, r1 - r0, x.shape[2]};
  return v;
}

}  // namespace

bool matmul_epilogue(const TensorImpl& a, const TensorImpl& b, const detail::MatmulEpilogue& e,
                     const TensorImpl& out) {
  if (a.dtype != DType::f32 || e.a_row_sums) return false;
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2];
  if (out.numel() == 0) return true;
  const float* bias = e.bias ? static_cast<const float*>(e.bias->data()) : nullptr;
  float* z = e.pre_activation ? static_cast<float*>((*e.pre_activation)->data()) : nullptr;
  const std::int64_t panel = std::max<std::int64_t>(1, kPanelElements / n);
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    for (std::int64_t r0 = 0; r0 < m; r0 += panel) {
      const std::int64_t r1 = std::min(m, r0 + panel);
      const TensorImpl y = rows_of(out, bi, r0, r1);
      matmul(rows_of(a, bi, r0, r1), rows_of(b, bi, 0, b.shape[1]), y);
      float* yp = static_cast<float*>(y.data());
      float* zp = z ? z + (bi * m + r0) * n : nullptr;
      parallel_for(r1 - r0, std::max<std::int64_t>(1, 16384 / n),
                   [&](std::int64_t i0, std::int64_t i1) {
                     for (std::int64_t i = i0; i < i1; ++i) {
                       float* row = yp + i * n;
                       for (std::int64_t j = 0; j < n; ++j) {
                         const float v = bias ? row[j] + bias[j] : row[j];
                         if (zp) zp[i * n + j] = v;
                         row[j] = activate(e.activation, v);
                       }
                     }
                   });
    }
  }
  return true;
}

}  // namespace kiln::cpu
