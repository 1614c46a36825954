#include "cuda/rows_source.hpp"

#include <fmt/format.h>

#include "embed/cuda/kernels/rows.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

// Every entry point may be launched with up to 1024 threads (rows_shape in rows.cpp): bounded so,
// the compiler keeps a thread within the 64 registers that allows.
std::string entry_points(DType t) {
  const char* T = ir::cuda_storage_type(t);
  std::string s;
  for (int v : {1, rows_vector(t)}) {
    for (int k : {0, 1, 2, 4, 8}) {
      if (k * v > kRowMaxHeld) continue;
      const std::string tmpl = k ? fmt::format("{}, {}, {}", T, v, k) : fmt::format("{}, {}", T, v);
      const char* shape = k ? "fit" : "stream";
      s += fmt::format(
          "extern \"C\" __global__ void __launch_bounds__(1024) {}(const {}* x, {}* y, long long "
          "rows, long long n, "
          "long long stride, int mode) {{\n  kr::softmax_{}<{}>(x, y, rows, n, stride, "
          "mode);\n}}\n",
          rows_kernel_name("softmax", t, v, k), T, T, shape, tmpl);
      s += fmt::format(
          "extern \"C\" __global__ void __launch_bounds__(1024) {}(const {}* x, {}* y, const {}* "
          "w, const {}* b, "
          "long long rows, long long n, long long stride, float eps, float* mean, float* rstd, "
          "int rms) {{\n  kr::norm_{}<{}>(x, y, w, b, rows, n, stride, eps, mean, rstd, "
          "rms);\n}}\n",
          rows_kernel_name("norm", t, v, k), T, T, T, T, shape, tmpl);
    }
  }
  return s;
}

}  // namespace

std::string rows_kernel_name(const char* family, DType t, int v, int k) {
  return k ? fmt::format("kiln_rows_{}_{}_v{}_k{}", family, dtype_name(t), v, k)
           : fmt::format("kiln_rows_{}_{}_v{}_stream", family, dtype_name(t), v);
}

std::vector<std::string> rows_kernel_names(DType t) {
  std::vector<std::string> out;
  for (const char* family : {"softmax", "norm"})
    for (int v : {1, rows_vector(t)})
      for (int k : {0, 1, 2, 4, 8})
        if (k * v <= kRowMaxHeld) out.push_back(rows_kernel_name(family, t, v, k));
  return out;
}

const std::string& rows_source(DType t) {
  static const std::string f32 =
      ir::cuda_prelude() + std::string(embed::cuda_kernels_rows_cuh) + entry_points(DType::f32);
  static const std::string bf16 =
      ir::cuda_prelude() + std::string(embed::cuda_kernels_rows_cuh) + entry_points(DType::bf16);
  static const std::string f16 =
      ir::cuda_prelude() + std::string(embed::cuda_kernels_rows_cuh) + entry_points(DType::f16);
  return t == DType::bf16 ? bf16 : t == DType::f16 ? f16 : f32;
}

}  // namespace kiln::cuda
