// Batched f32 matrix products on the CPU through CBLAS sgemm.
//
// Views go to sgemm as they are whenever BLAS can describe them (one unit inner stride and a
// leading dimension no smaller than the row), so transposes and row slices cost no copy; any
// other layout is copied into a contiguous temporary first. The BLAS thread count follows
// kiln's thread limit. The CBLAS is loaded at run time (blas_library.hpp says why and how).

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "cpu/blas_library.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

using detail::TensorImpl;

// Below this many multiply-adds a product is done before BLAS threads would have woken up.
constexpr std::int64_t kThreadedMinWork = std::int64_t{1} << 18;

// One operand of a batch of products, rows x cols per batch, as sgemm will see it.
struct Operand {
  const float* data;          // batch 0
  std::int64_t batch_stride;  // elements
  std::int64_t rows, cols, row_stride, col_stride;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  std::int64_t ld = 1;
  bool copy = false;  // sgemm cannot describe this layout
};

Operand describe(const TensorImpl& t) {
  Operand o{static_cast<const float*>(t.data()),
            t.strides[0],
            t.shape[1],
            t.shape[2],
            t.strides[1],
            t.strides[2]};
  // A stride along a dim of extent 1 is never used; BLAS only needs ld >= max(1, row length).
  const bool unit_cols = o.cols <= 1 || o.col_stride == 1;
  const bool unit_rows = o.rows <= 1 || o.row_stride == 1;
  if (unit_cols && (o.rows <= 1 || o.row_stride >= std::max<std::int64_t>(1, o.cols))) {
    o.trans = CblasNoTrans;
    o.ld = o.rows <= 1 ? std::max<std::int64_t>(1, o.cols) : o.row_stride;
  } else if (unit_rows && (o.cols <= 1 || o.col_stride >= std::max<std::int64_t>(1, o.rows))) {
    // Column-major storage: the transpose of a row-major cols x rows matrix.
    o.trans = CblasTrans;
    o.ld = o.cols <= 1 ? std::max<std::int64_t>(1, o.rows) : o.col_stride;
  } else {
    o.copy = true;
  }
  if (o.ld > INT_MAX) o.copy = true;
  if (o.copy) {
    o.trans = CblasNoTrans;
    o.ld = std::max<std::int64_t>(1, o.cols);
  }
  return o;
}

// Batch b of o as sgemm reads it: the view itself, or a row-major copy in tmp.
const float* batch_data(const Operand& o, std::int64_t b, float* tmp) {
  const float* src = o.data + b * o.batch_stride;
  if (!o.copy) return src;
  // A broadcast batch (stride 0) is the same matrix every time: copy it once.
  if (b > 0 && o.batch_stride == 0) return tmp;
  for (std::int64_t r = 0; r < o.rows; ++r) {
    const float* row = src + r * o.row_stride;
    float* dst = tmp + r * o.cols;
    for (std::int64_t c = 0; c < o.cols; ++c) dst[c] = row[c * o.col_stride];
  }
  return tmp;
}

}  // namespace

void matmul(const TensorImpl& a, const TensorImpl& b, const TensorImpl& out) {
  detail::check_matmul_call(a, b, out);
  if (a.dtype != DType::f32)  // the half types come through matmul_half's f32 copies
    throw DTypeError(std::string("matmul: sgemm multiplies f32, got ") + dtype_name(a.dtype));
  const std::int64_t batch = a.shape[0], m = a.shape[1], k = a.shape[2], n = b.shape[2];
  if (batch == 0 || m == 0 || n == 0) return;
  float* c = static_cast<float*>(out.data());
  if (k == 0) {
    std::fill(c, c + batch * m * n, 0.0f);
    return;
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    throw ValueError("matmul: " + format_dims(a.shape) + " x " + format_dims(b.shape) +
                     ": a matrix dimension exceeds the BLAS's 32-bit int");
  }

  const Operand oa = describe(a), ob = describe(b);
  std::unique_ptr<float[]> tmp_a, tmp_b;
  if (oa.copy) tmp_a.reset(new float[static_cast<std::size_t>(m * k)]);
  if (ob.copy) tmp_b.reset(new float[static_cast<std::size_t>(k * n)]);

  const BlasLibrary& lib = blas();
  if (lib.sgemm == nullptr) {
    throw DeviceError("matmul: CPU matmul needs a CBLAS, and " + lib.name +
                      " cannot be loaded: " + lib.error +
                      " (KILN_BLAS names another: a path or a library name such as "
                      "libopenblas.so.0 or libblis.so.4)");
  }
  set_blas_threads(m * n * k < kThreadedMinWork ? 1 : thread_count());
  for (std::int64_t i = 0; i < batch; ++i) {
    const float* pa = batch_data(oa, i, tmp_a.get());
    const float* pb = batch_data(ob, i, tmp_b.get());
    lib.sgemm(CblasRowMajor, oa.trans, ob.trans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, pa, static_cast<int>(oa.ld), pb, static_cast<int>(ob.ld),
              0.0f, c + i * m * n, static_cast<int>(n));
  }
}

}  // namespace kiln::cpu
