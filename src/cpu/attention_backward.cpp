// The CPU's attention backward (Backend::attention_backward), blockwise as its forward
// (attention.cpp): a task takes one (b, h) and walks its queries in blocks of kBlock. For each
// block it recomputes the scores [rows, Tk] by sgemm (the scale as alpha), the probabilities
// P = exp(s - lse) from the forward's lse (0 where the causal mask hides a key), dP = dO V^T by a
// second sgemm and dS = P (dP - delta) with delta_i = dO_i . o_i (in double); then the block's
// dq = scale dS K (a third sgemm, written at once), and its shares dk += scale dS^T Q and
// dv += P^T dO (sgemm with beta = 1) into f32 accumulators of the whole (b, h). A task owns its
// (b, h)'s dk and dv, so no two tasks add into one row: no atomics, no reduction across tasks.
// Only one block of scores exists per task at a time; a causal block stops at its last query's
// key, as the forward's does. Everything computes in f32 (bf16, f16 operands converted per block,
// as the forward converts them), and dq, dk, dv are rounded once to q's dtype.
//
// The tasks split over kiln's threads with the BLAS single-threaded inside them; a single (b, h)
// gives the BLAS the threads instead.
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "cpu/attention_slab.hpp"
#include "cpu/blas_library.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

using detail::TensorImpl;

// Queries per block: the forward's block, for the same reasons (a [64, Tk] block of scores and
// one of dP stay in L2 for key counts up to a few thousand; 64 rows keep sgemm busy).
constexpr std::int64_t kBlock = 64;

struct Job {
  const TensorImpl &q, &k, &v, &o, &dout;
  const float* lse;
  const TensorImpl &dq, &dk, &dv;
  bool causal;
  float scale;
  const KernelTable& kernels;
};

// The per-task buffers, reused across the (b, h) of one thread's range.
struct Scratch {
  std::vector<float> q, k, v, o, g, p, ds, dq, dk, dv;
};

// Where n f32 results for t's elements [at, at + n) go (t contiguous, q's dtype): t's memory itself
// for f32, else scratch, rounded into t by finish().
float* result(const TensorImpl& t, std::int64_t at, std::int64_t n, std::vector<float>& scratch) {
  if (t.dtype == DType::f32) return static_cast<float*>(t.data()) + at;
  scratch.resize(static_cast<std::size_t>(n));
  return scratch.data();
}

// Rounds result()'s scratch into t once (nothing to do for f32: the result was written in place).
void finish(const TensorImpl& t, std::int64_t at, std::int64_t n, const float* r,
            const KernelTable& k) {
  if (t.dtype == DType::f32) return;
  k.f32_to_half(t.dtype, r, static_cast<std::uint16_t*>(t.data()) + at,
                static_cast<std::size_t>(n));
}

// A dimension as the BLAS takes it (checked to fit before any task runs).
int bi(std::int64_t x) { return static_cast<int>(x); }

// One query block of one (b, h): rows [i0, i0 + rows), adding into the (b, h)'s dk and dv.
void block(const Job& j, std::int64_t b, std::int64_t h, std::int64_t i0, const Mat& k,
           const Mat& v, float* dk, float* dv, Scratch& w) {
  const BlasLibrary& lib = blas();
  const KernelTable& kt = j.kernels;
  const std::int64_t heads = j.q.shape[1], tq = j.q.shape[2], d = j.q.shape[3];
  const std::int64_t bh = b * heads + h, rows = std::min(kBlock, tq - i0);
  // The keys any row of this block sees.
  const std::int64_t keys = j.causal ? std::min(j.k.shape[2], i0 + rows) : j.k.shape[2];
  const Mat q = slab_rows(j.q, b, h, i0, rows, w.q, kt);
  const Mat g = slab_rows(j.dout, b, h, i0, rows, w.g, kt);
  const Mat o = slab_rows(j.o, b, h, i0, rows, w.o, kt);
  w.p.resize(static_cast<std::size_t>(rows * keys));
  w.ds.resize(static_cast<std::size_t>(rows * keys));
  float* p = w.p.data();
  float* ds = w.ds.data();
  lib.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(rows), bi(keys), bi(d), j.scale, q.p,
            bi(q.ld), k.p, bi(k.ld), 0.0f, p, bi(keys));
  lib.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(rows), bi(keys), bi(d), 1.0f, g.p, bi(g.ld),
            v.p, bi(v.ld), 0.0f, ds, bi(keys));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t visible = j.causal ? std::min(keys, i0 + r + 1) : keys;
    const auto n = static_cast<std::size_t>(visible);
    float* pr = p + r * keys;
    float* dsr = ds + r * keys;
    const float lse = j.lse[bh * tq + i0 + r];
    kt.binary(ir::Op::sub, DType::f32, Lanes{pr}, Lanes{&lse, true}, pr, n);
    kt.unary(ir::Op::exp, DType::f32, DType::f32, Lanes{pr}, pr, n);
    double dot = 0;  // delta, in double: it is subtracted from dP, which may nearly cancel it
    for (std::int64_t c = 0; c < d; ++c)
      dot += static_cast<double>(g.p[r * g.ld + c]) * o.p[r * o.ld + c];
    const auto delta = static_cast<float>(dot);
    kt.binary(ir::Op::sub, DType::f32, Lanes{dsr}, Lanes{&delta, true}, dsr, n);
    kt.binary(ir::Op::mul, DType::f32, Lanes{dsr}, Lanes{pr}, dsr, n);
    // Masked keys: P = 0 and dS = 0 (set, not computed, so a non-finite dP there cannot leak).
    std::fill(pr + visible, pr + keys, 0.0f);
    std::fill(dsr + visible, dsr + keys, 0.0f);
  }
  lib.sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(keys), bi(d), bi(rows), 1.0f, p, bi(keys),
            g.p, bi(g.ld), 1.0f, dv, bi(d));
  lib.sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(keys), bi(d), bi(rows), j.scale, ds,
            bi(keys), q.p, bi(q.ld), 1.0f, dk, bi(d));
  const std::int64_t at = (bh * tq + i0) * d;
  float* dq = result(j.dq, at, rows * d, w.dq);
  lib.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(rows), bi(d), bi(keys), j.scale, ds,
            bi(keys), k.p, bi(k.ld), 0.0f, dq, bi(d));
  finish(j.dq, at, rows * d, dq, kt);
}

// Every query block of (b, h) = (bh / H, bh % H), then its dk and dv.
void task(const Job& j, std::int64_t bh, Scratch& w) {
  const std::int64_t heads = j.q.shape[1], tq = j.q.shape[2], tk = j.k.shape[2], d = j.q.shape[3];
  const std::int64_t b = bh / heads, h = bh % heads, at = bh * tk * d, n = tk * d;
  const Mat k = slab_rows(j.k, b, h, 0, tk, w.k, j.kernels);
  const Mat v = slab_rows(j.v, b, h, 0, tk, w.v, j.kernels);
  float* dk = result(j.dk, at, n, w.dk);
  float* dv = result(j.dv, at, n, w.dv);
  std::fill(dk, dk + n, 0.0f);
  std::fill(dv, dv + n, 0.0f);
  for (std::int64_t i0 = 0; i0 < tq; i0 += kBlock) block(j, b, h, i0, k, v, dk, dv, w);
  finish(j.dk, at, n, dk, j.kernels);
  finish(j.dv, at, n, dv, j.kernels);
}

void zero(const TensorImpl& t) {
  if (t.numel() > 0)
    std::memset(t.data(), 0, static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
}

}  // namespace

bool attention_backward(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                        const TensorImpl& o, const TensorImpl& dout, const TensorImpl& lse,
                        const detail::AttentionParams& params, const TensorImpl& dq,
                        const TensorImpl& dk, const TensorImpl& dv, const KernelTable& kernels) {
  detail::check_attention_backward_call(q, k, v, o, dout, lse, params, dq, dk, dv);
  // Contiguous gradients only (strided ones are declined after the check: the caller asks again
  // with contiguous ones).
  if (!dq.is_contiguous() || !dk.is_contiguous() || !dv.is_contiguous()) return false;
  const std::int64_t batch = q.shape[0], heads = q.shape[1], tq = q.shape[2], tk = k.shape[2],
                     d = q.shape[3];
  // No query or no key: every gradient is 0 (an empty product); D == 0 leaves nothing to write.
  if (batch * heads == 0 || tq == 0 || tk == 0 || d == 0) {
    for (const TensorImpl* t : {&dq, &dk, &dv}) zero(*t);
    return true;
  }
  check_attention_blas("attention_backward", q, k);
  const Job job{q,
                k,
                v,
                o,
                dout,
                static_cast<const float*>(lse.data()),
                dq,
                dk,
                dv,
                params.causal,
                static_cast<float>(params.scale),
                kernels};
  const std::int64_t tasks = batch * heads;
  set_blas_threads(tasks == 1 ? thread_count() : 1);
  parallel_for(tasks, 1, [&job](std::int64_t begin, std::int64_t end) {
    Scratch w;
    for (std::int64_t t = begin; t < end; ++t) task(job, t, w);
  });
  return true;
}

}  // namespace kiln::cpu
