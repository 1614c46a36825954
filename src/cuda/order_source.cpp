#include "cuda/order_source.hpp"

#include <fmt/format.h>

#include "embed/cuda/kernels/order.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

constexpr const char* kKernels[] = {"fill",    "tile",   "step",       "gather",
                                    "extreme", "cumsum", "chunk_sums", "chunk_scan"};

std::string entry_points(DType t) {
  const char* T = ir::cuda_storage_type(t);
  const bool floating = is_floating(t);
  // cumsum writes T for the floating dtypes (accumulating in f32), i32 otherwise.
  const char* O = floating ? T : "int";
  const char* A = floating ? "float" : "unsigned";
  std::string s;
  auto entry = [&](const char* kernel, const std::string& params, const std::string& body) {
    s += fmt::format("extern \"C\" __global__ void __launch_bounds__(1024) {}({}) {{\n  {};\n}}\n",
                     order_kernel_name(kernel, t), params, body);
  };
  entry("fill",
        fmt::format("const {}* x, ko::u64* s, long long rows, long long n, long long P, "
                    "int descending",
                    T),
        "ko::fill(x, s, rows, n, P, descending)");
  entry("tile", "ko::u64* s, long long P, int T, long long k_first, long long k_last",
        "ko::tile_network(s, P, T, k_first, k_last)");
  entry("step", "ko::u64* s, long long rows, long long P, long long k, long long j",
        "ko::global_step(s, rows, P, k, j)");
  entry("gather",
        fmt::format("const {0}* x, const ko::u64* s, {0}* values, int* indices, long long rows, "
                    "long long n, long long P, long long K",
                    T),
        "ko::gather(x, s, values, indices, rows, n, P, K)");
  entry("extreme",
        fmt::format("const {0}* x, {0}* values, int* indices, long long rows, long long n, "
                    "int largest",
                    T),
        "ko::extreme(x, values, indices, rows, n, largest)");
  entry("cumsum", fmt::format("const {}* x, {}* y, long long rows, long long n, int reverse", T, O),
        fmt::format("ko::cumsum<{}, {}, {}>(x, y, rows, n, reverse)", T, O, A));
  entry("chunk_sums",
        fmt::format("const {}* x, {}* sums, long long rows, long long n, long long chunk, "
                    "int reverse",
                    T, A),
        fmt::format("ko::chunk_sums<{}, {}>(x, sums, rows, n, chunk, reverse)", T, A));
  entry("chunk_scan",
        fmt::format("const {}* x, {}* y, const {}* scanned, long long rows, long long n, "
                    "long long chunk, int reverse",
                    T, O, A),
        fmt::format("ko::chunk_scan<{}, {}, {}>(x, y, scanned, rows, n, chunk, reverse)", T, O, A));
  return s;
}

std::string make_source(DType t) {
  return ir::cuda_prelude() + std::string(embed::cuda_kernels_order_cuh) + entry_points(t);
}

}  // namespace

std::string order_kernel_name(const char* kernel, DType t) {
  return fmt::format("kiln_order_{}_{}", kernel, dtype_name(t));
}

std::vector<std::string> order_kernel_names(DType t) {
  std::vector<std::string> out;
  for (const char* k : kKernels) out.push_back(order_kernel_name(k, t));
  return out;
}

const std::string& order_source(DType t) {
  static const std::string f32 = make_source(DType::f32), i32 = make_source(DType::i32),
                           boolean = make_source(DType::boolean), bf16 = make_source(DType::bf16),
                           f16 = make_source(DType::f16);
  switch (t) {
    case DType::i32:
      return i32;
    case DType::boolean:
      return boolean;
    case DType::bf16:
      return bf16;
    case DType::f16:
      return f16;
    case DType::f32:
      break;
  }
  return f32;
}

}  // namespace kiln::cuda
