#include "cuda/rows_source.hpp"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "embed/cuda/kernels/rows.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

// Every entry point may be launched with up to 1024 threads (rows_shape in rows.cpp): bounded so,
// the compiler keeps a thread within the 64 registers that allows. y of dtype `out`: the softmax
// entry points only where it is t. With a residual dtype r, the addnorm entry points alone.
std::string entry_points(DType t, DType out, std::optional<DType> r) {
  const char *T = ir::cuda_storage_type(t), *Y = ir::cuda_storage_type(out);
  const char* R = ir::cuda_storage_type(r.value_or(t));
  std::string s;
  for (int v : {1, rows_vector(t)}) {
    for (int k : {0, 1, 2, 4, 8}) {
      if (k * v > kRowMaxHeld) continue;
      const std::string tmpl = k ? fmt::format("{}, {}, {}", T, v, k) : fmt::format("{}, {}", T, v);
      const char* shape = k ? "fit" : "stream";
      if (r) {
        s += fmt::format(
            "extern \"C\" __global__ void __launch_bounds__(1024) {}(const {}* x, const {}* res, "
            "{}* y, {}* sum, const {}* w, const {}* b, long long rows, long long n, long long "
            "stride, float eps, float* mean, float* rstd, int rms) {{\n  kr::norm_{}<{}, {}, "
            "{}>(x, y, w, b, rows, n, stride, eps, mean, rstd, rms, res, sum);\n}}\n",
            rows_kernel_name("addnorm", t, v, k, out, r), T, R, Y, T, T, T, shape, tmpl, Y, R);
        continue;
      }
      if (out == t) {
        s += fmt::format(
            "extern \"C\" __global__ void __launch_bounds__(1024) {}(const {}* x, {}* y, long long "
            "rows, long long n, "
            "long long stride, int mode) {{\n  kr::softmax_{}<{}>(x, y, rows, n, stride, "
            "mode);\n}}\n",
            rows_kernel_name("softmax", t, v, k), T, T, shape, tmpl);
      }
      s += fmt::format(
          "extern \"C\" __global__ void __launch_bounds__(1024) {}(const {}* x, {}* y, const {}* "
          "w, const {}* b, "
          "long long rows, long long n, long long stride, float eps, float* mean, float* rstd, "
          "int rms) {{\n  kr::norm_{}<{}, {}>(x, y, w, b, rows, n, stride, eps, mean, rstd, "
          "rms, static_cast<const {}*>(nullptr), static_cast<{}*>(nullptr));\n}}\n",
          rows_kernel_name("norm", t, v, k, out), T, Y, T, T, shape, tmpl, Y, T, T);
    }
  }
  return s;
}

}  // namespace

std::string rows_kernel_name(const char* family, DType t, int v, int k, std::optional<DType> y,
                             std::optional<DType> r) {
  std::string types = y && *y != t ? fmt::format("{}_y{}", dtype_name(t), dtype_name(*y))
                                   : std::string(dtype_name(t));
  if (r) types += fmt::format("_r{}", dtype_name(*r));
  return k ? fmt::format("kiln_rows_{}_{}_v{}_k{}", family, types, v, k)
           : fmt::format("kiln_rows_{}_{}_v{}_stream", family, types, v);
}

std::vector<std::string> rows_kernel_names(DType t, DType y, std::optional<DType> r) {
  std::vector<std::string> out;
  for (const char* family : {"softmax", "norm", "addnorm"}) {
    const std::string f = family;
    if ((f == "addnorm") != r.has_value() || (y != t && f == "softmax")) continue;
    for (int v : {1, rows_vector(t)})
      for (int k : {0, 1, 2, 4, 8})
        if (k * v <= kRowMaxHeld) out.push_back(rows_kernel_name(family, t, v, k, y, r));
  }
  return out;
}

const std::string& rows_source(DType t, DType y, std::optional<DType> r) {
  static std::mutex mu;
  static std::map<std::tuple<DType, DType, std::optional<DType>>, std::string> sources;
  const std::lock_guard lock(mu);
  std::string& s = sources[{t, y, r}];
  if (s.empty())
    s = ir::cuda_prelude() + std::string(embed::cuda_kernels_rows_cuh) + entry_points(t, y, r);
  return s;
}

}  // namespace kiln::cuda
