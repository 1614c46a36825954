// The CUDA backend's row family (Backend::rows): kernels/rows.cuh, one block per row, queued on the
// device's stream with no host sync. logsumexp runs the softmax kernels, which then write one f32
// per row instead of y's row.
//
// The launch shape: V = 16 bytes of elements per load where n and the row stride are multiples of
// it and x, y, weight and bias are 16-byte aligned, else 1. A row of W = ceil(n / V) loads fits in
// registers when some K of kRowRegisterCounts (K * V <= 32 values a thread) covers it with at most
// 1024 threads: the smallest K that needs at most 256 threads is taken (a 4096-f32 row: K = 4,
// 256 threads; a 768-bf16 row: K = 1, 96 threads), else the largest K with at most 1024. Longer
// rows take the streaming kernel (512 threads, two reads of x). A norm of x + residual (version 13)
// runs the same kernels with the residual read beside x and the sum written on the first pass.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_ops.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/rows_source.hpp"

namespace kiln::cuda {
namespace {

using detail::RowOp;

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

struct Shape {
  int v = 1, k = 0;  // k == 0: the streaming kernel
  unsigned threads = 512;
};

long long round_up(long long a, long long b) { return (a + b - 1) / b * b; }

Shape rows_shape(long long n, int v) {
  Shape s;
  s.v = v;
  const long long w = (n + v - 1) / v;
  int best = 0;
  for (int k : kRowRegisterCounts) {
    if (k * v > kRowMaxHeld) break;
    const long long threads = round_up((w + k - 1) / k, 32);
    if (threads <= 256) {
      s.k = k;
      s.threads = static_cast<unsigned>(threads);
      return s;
    }
    if (threads <= 1024) best = k;
  }
  if (best) {
    s.k = best;
    s.threads = static_cast<unsigned>(round_up((w + best - 1) / best, 32));
  }
  return s;
}

}  // namespace

void rows(Context& ctx, RowOp op, const TensorImpl& x, const detail::RowParams& params,
          const TensorImpl& y, const detail::RowStats& stats) {
  const detail::RowView view = detail::check_rows_call(op, x, params, y, stats);
  if (view.rows == 0 || view.n == 0) return;
  const int vec = rows_vector(x.dtype);
  const void* w = params.weight ? params.weight->data() : nullptr;
  const void* b = params.bias ? params.bias->data() : nullptr;
  const TensorImpl* res = params.residual;
  const void* sum = stats.sum ? (*stats.sum)->data() : nullptr;
  const bool wide = view.n % vec == 0 && (view.rows == 1 || view.stride % vec == 0) &&
                    aligned(x.data()) && aligned(y.data()) && (!w || aligned(w)) &&
                    (!b || aligned(b)) && (!res || (aligned(res->data()) && aligned(sum)));
  const Shape shape = rows_shape(view.n, wide ? vec : 1);
  const bool norm = detail::row_op_normalises(op);
  // (y's dtype names the kernel only where it differs: a norm of f32 rows into a half type.)
  const DType out = detail::row_op_reduces(op) ? x.dtype : y.dtype;
  const std::optional<DType> res_dtype = res ? std::optional<DType>(res->dtype) : std::nullopt;
  const std::string name = rows_kernel_name(res    ? "addnorm"
                                            : norm ? "norm"
                                                   : "softmax",
                                            x.dtype, shape.v, shape.k, out, res_dtype);
  cudaKernel_t kernel =
      cached_kernel(rows_source(x.dtype, out, res_dtype), "kiln_rows.cu", name, ctx.arch());
  ctx.make_current();
  KernelArgs args;
  args.pointer(x.data());
  if (res) args.pointer(res->data());
  args.pointer(y.data());
  if (res) args.pointer(sum);
  if (norm) {
    args.pointer(w);
    args.pointer(b);
  }
  args.value(static_cast<long long>(view.rows));
  args.value(static_cast<long long>(view.n));
  args.value(static_cast<long long>(view.stride));
  if (norm) {
    args.value(static_cast<float>(params.eps));
    args.pointer(stats.mean ? (*stats.mean)->data() : nullptr);
    args.pointer(stats.rstd ? (*stats.rstd)->data() : nullptr);
    args.value(static_cast<int>(op == RowOp::rms_norm));
  } else {  // the softmax kernels' mode (kernels/rows.cuh)
    args.value(op == RowOp::logsumexp ? 2 : static_cast<int>(op == RowOp::log_softmax));
  }
  const auto grid = static_cast<unsigned>(std::min<long long>(view.rows, 1LL << 30));
  launch(ctx, kernel, grid, shape.threads, args.pointers());
}

}  // namespace kiln::cuda
