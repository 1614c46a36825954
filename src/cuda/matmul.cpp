// Matrix products on CUDA through cuBLASLt, rank 2 and batched rank 3, without copying views.
//
// kiln's tensors are row-major, cuBLASLt's matrices column-major. A row-major [m, n] C = A B is
// the column-major n x m matrix C^T = B^T A^T, so the call passes B first: a row-major operand
// with unit column stride is, untouched, the column-major transpose cuBLASLt wants (op N), and
// a transposed view (unit row stride) is the matrix itself (op T). Only an operand with neither
// stride 1 is copied. Broadcast batches are a batch stride of 0.
//
// The cuBLASLt heuristic's first algorithm is cached per problem (it costs tens of
// microseconds, as much as a small matmul), with the descriptors, so a repeated shape is one
// cublasLtMatmul call.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// One operand as cuBLASLt sees it: a column-major rows x cols matrix (after `trans`).
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  std::int64_t rows = 0, cols = 0, ld = 0;  // of the stored column-major matrix
  std::int64_t batch_stride = 0;
  const void* data = nullptr;
};

// The column-major view of row-major x [B, r, c] as the transpose cuBLASLt multiplies, or
// nothing when neither matrix stride is 1.
bool as_column_major(const TensorImpl& x, Operand* o) {
  const std::int64_t r = x.shape[1], c = x.shape[2];
  std::int64_t sr = x.strides[1], sc = x.strides[2];
  if (r == 1) sr = c;  // a size-1 dim's stride is free: make it the dense one
  if (c == 1) sc = 1;
  o->batch_stride = x.shape[0] == 1 ? 0 : x.strides[0];
  o->data = x.data();
  if (sc == 1 && sr >= std::max<std::int64_t>(c, 1)) {
    // Row-major [r, c] with row stride sr is column-major c x r with ld sr: x^T, op N.
    *o = {CUBLAS_OP_N, c, r, sr, o->batch_stride, o->data};
    return true;
  }
  if (sr == 1 && sc >= std::max<std::int64_t>(r, 1)) {
    // A transposed view: column-major r x c with ld sc, which op T turns into x^T.
    *o = {CUBLAS_OP_T, r, c, sc, o->batch_stride, o->data};
    return true;
  }
  return false;
}

int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int bytes = 256;
  while (bytes > 4 && a % bytes != 0) bytes /= 2;
  return bytes;
}

template <class T, cublasStatus_t (*Destroy)(T)>
struct Owned {
  T h = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (h) Destroy(h);
  }
};
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// Everything a repeated problem needs: descriptors and the chosen algorithm.
struct Plan {
  MatmulDesc desc;
  Layout a, b, c;
  cublasLtMatmulAlgo_t algo{};
};

void make_layout(Layout& l, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                 std::int64_t batch, std::int64_t batch_stride) {
  KILN_CUDA_CHECK(cublasLtMatrixLayoutCreate(&l.h, CUDA_R_32F, rows, cols, ld));
  const int count = static_cast<int>(batch);
  KILN_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                   sizeof(count)));
  KILN_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &batch_stride, sizeof(batch_stride)));
}

// Per device: the cuBLASLt handle, a workspace, and the plans by problem.
struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<detail::Buffer> workspace;
  using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, int, int>;
  std::map<Key, std::unique_ptr<Plan>> plans;
  std::mutex mu;
};

DeviceState& state(Context& ctx) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<DeviceState>>* states =
      new std::map<int, std::unique_ptr<DeviceState>>;  // never destroyed: outlives tensors
  std::lock_guard lock(mu);
  auto& s = (*states)[ctx.index];
  if (!s) {
    s = std::make_unique<DeviceState>();
    ctx.make_current();
    KILN_CUDA_CHECK(cublasLtCreate(&s->handle));
    s->workspace = device_alloc(ctx, kWorkspaceBytes);
  }
  return *s;
}

}  // namespace

void matmul(Context& ctx, const TensorImpl& a_in, const TensorImpl& b_in, const TensorImpl& out) {
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2];
  const std::int64_t k = a_in.shape[2];
  // Copies of operands cuBLASLt cannot read as they are; held until the call is queued.
  detail::Handle a_copy, b_copy;
  Operand a, b;
  if (!as_column_major(a_in, &a)) {
    a_copy = contiguous(ctx, std::make_shared<TensorImpl>(a_in));
    as_column_major(*a_copy, &a);
  }
  if (!as_column_major(b_in, &b)) {
    b_copy = contiguous(ctx, std::make_shared<TensorImpl>(b_in));
    as_column_major(*b_copy, &b);
  }
  if (k == 0) {
    // cuBLASLt rejects k = 0; the product of empty sums is zero.
    ctx.make_current();
    KILN_CUDA_CHECK(cudaMemsetAsync(out.data(), 0, out.numel() * sizeof(float), ctx.stream));
    return;
  }
  const bool tf32 = float32_matmul_precision() == Precision::high;
  DeviceState& s = state(ctx);
  const int align = std::min({alignment(a.data), alignment(b.data), alignment(out.data())});
  DeviceState::Key key{tf32,
                       align,
                       m,
                       n,
                       k,
                       batch,
                       a.ld,
                       b.ld,
                       a.batch_stride,
                       b.batch_stride,
                       static_cast<int>(a.op),
                       static_cast<int>(b.op),
                       0};
  std::lock_guard lock(s.mu);
  auto& plan = s.plans[key];
  if (!plan) {
    auto p = std::make_unique<Plan>();
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    KILN_CUDA_CHECK(cublasLtMatmulDescCreate(&p->desc.h, compute, CUDA_R_32F));
    // C^T (n x m) = B^T (n x k) * A^T (k x m): B's operand first.
    KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &b.op,
                                                   sizeof(b.op)));
    KILN_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &a.op,
                                                   sizeof(a.op)));
    make_layout(p->a, b.rows, b.cols, b.ld, batch, b.batch_stride);
    make_layout(p->b, a.rows, a.cols, a.ld, batch, a.batch_stride);
    make_layout(p->c, n, m, n, batch, m * n);
    Preference pref;
    KILN_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
    std::uint64_t ws = kWorkspaceBytes;
    KILN_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // The real alignment of the operands: the heuristic otherwise assumes 256 bytes.
    const std::uint32_t al = static_cast<std::uint32_t>(align);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      KILN_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &al, sizeof(al)));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    KILN_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(s.handle, p->desc.h, p->a.h, p->b.h, p->c.h,
                                                   p->c.h, pref.h, 1, &result, &found));
    if (found == 0) {
      throw DeviceError(fmt::format(
          "matmul: cuBLASLt has no algorithm for [{}, {}, {}] x [{}, {}, {}] (precision {})", batch,
          m, k, batch, k, n, tf32 ? "high" : "highest"));
    }
    p->algo = result.algo;
    plan = std::move(p);
  }
  const float one = 1.0f, zero = 0.0f;
  ctx.make_current();
  KILN_CUDA_CHECK(cublasLtMatmul(s.handle, plan->desc.h, &one, b.data, plan->a.h, a.data, plan->b.h,
                                 &zero, out.data(), plan->c.h, out.data(), plan->c.h, &plan->algo,
                                 s.workspace->data(), kWorkspaceBytes, ctx.stream));
}

}  // namespace kiln::cuda
