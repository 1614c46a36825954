// The CPU's scaled dot-product attention (Backend::attention), blockwise as a flash kernel is:
// a task takes one (b, h) and a block of up to kBlock queries, computes that block's scores
// [rows, Tk] with the BLAS's sgemm (the scale as its alpha), takes each row's softmax in f32 in
// place (max, exp with the kernel table, the sum in double), writes lse = max + log(sum), and
// multiplies the unnormalised probabilities by v with a second sgemm, dividing each output row by
// its sum and rounding o once. Only one block of scores per task exists at a time, never the
// B * H * Tq * Tk of them. A causal block stops at its last query's key: the keys after it are
// masked for every row of the block, so neither product reads them.
//
// Operands are read in place where sgemm can describe their rows, else converted into the task's
// f32 scratch (attention_slab.hpp). The tasks split over kiln's threads with the BLAS
// single-threaded inside them (one task alone gives the BLAS the threads instead).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/attention_slab.hpp"
#include "cpu/blas_library.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

using detail::TensorImpl;

// Queries per task: a block of scores of 64 rows stays in L2 for key counts up to a few thousand,
// and 64 rows keep sgemm's kernels busy.
constexpr std::int64_t kBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Job {
  const TensorImpl &q, &k, &v, &o;
  float* lse;  // null when not asked for
  bool causal;
  float scale;
  std::int64_t blocks;  // query blocks per (b, h)
  const KernelTable& kernels;
};

// The per-task buffers, reused across the tasks of one thread's range.
struct Scratch {
  std::vector<float> q, k, v, s, o;
};

// Row i's softmax numerator over its n visible scores (in place: e = exp(s - max)), the masked
// tail [n, width) zeroed; returns the sum of e and sets max.
double softmax_row(float* s, std::int64_t n, std::int64_t width, float& max, const KernelTable& k) {
  float m = kNegInf;
  for (std::int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  max = m;
  const auto un = static_cast<std::size_t>(n);
  k.binary(ir::Op::sub, DType::f32, Lanes{s}, Lanes{&m, true}, s, un);
  k.unary(ir::Op::exp, DType::f32, DType::f32, Lanes{s}, s, un);
  std::fill(s + n, s + width, 0.0f);
  double lane[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] += s[j + l];
  double t =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; j < n; ++j) t += s[j];
  return t;
}

void task(const Job& j, std::int64_t t, Scratch& w) {
  const BlasLibrary& lib = blas();
  const std::int64_t heads = j.q.shape[1], tq = j.q.shape[2], d = j.q.shape[3];
  const std::int64_t bh = t / j.blocks, b = bh / heads, h = bh % heads;
  const std::int64_t i0 = (t % j.blocks) * kBlock, rows = std::min(kBlock, tq - i0);
  // The keys any row of this block sees.
  const std::int64_t tk = j.causal ? std::min(j.k.shape[2], i0 + rows) : j.k.shape[2];

  const Mat q = slab_rows(j.q, b, h, i0, rows, w.q, j.kernels);
  const Mat k = slab_rows(j.k, b, h, 0, tk, w.k, j.kernels);
  const Mat v = slab_rows(j.v, b, h, 0, tk, w.v, j.kernels);
  w.s.resize(static_cast<std::size_t>(rows * tk));
  if (d == 0) {
    std::fill(w.s.begin(), w.s.end(), 0.0f);  // empty dot products (sgemm wants k >= 1)
  } else {
    lib.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(tk),
              static_cast<int>(d), j.scale, q.p, static_cast<int>(q.ld), k.p,
              static_cast<int>(k.ld), 0.0f, w.s.data(), static_cast<int>(tk));
  }
  std::vector<double> inv(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t visible = j.causal ? std::min(tk, i0 + r + 1) : tk;
    float m = 0;
    const double sum = softmax_row(w.s.data() + r * tk, visible, tk, m, j.kernels);
    inv[static_cast<std::size_t>(r)] = 1.0 / sum;
    if (j.lse) j.lse[bh * tq + i0 + r] = static_cast<float>(static_cast<double>(m) + std::log(sum));
  }
  if (d == 0) return;
  const std::size_t size = dtype_size(j.o.dtype);
  const std::int64_t ld = j.o.strides[2];  // o's rows: any stride (o may be a transposed view)
  char* dst = static_cast<char*>(j.o.data()) +
              static_cast<std::size_t>(b * j.o.strides[0] + h * j.o.strides[1] + i0 * ld) * size;
  const bool direct = j.o.dtype == DType::f32;
  if (!direct) w.o.resize(static_cast<std::size_t>(rows * d));
  float* out = direct ? reinterpret_cast<float*>(dst) : w.o.data();
  const std::int64_t ldo = direct ? ld : d;
  lib.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(d),
            static_cast<int>(tk), 1.0f, w.s.data(), static_cast<int>(tk), v.p,
            static_cast<int>(v.ld), 0.0f, out, static_cast<int>(ldo));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float f = static_cast<float>(inv[static_cast<std::size_t>(r)]);
    j.kernels.binary(ir::Op::mul, DType::f32, Lanes{out + r * ldo}, Lanes{&f, true}, out + r * ldo,
                     static_cast<std::size_t>(d));
    if (!direct)
      j.kernels.f32_to_half(j.o.dtype, out + r * ldo,
                            reinterpret_cast<std::uint16_t*>(dst) + r * ld,
                            static_cast<std::size_t>(d));
  }
}

// Tk == 0: no key to attend to, o = 0 and lse = -inf.
void no_keys(const TensorImpl& o, float* lse) {
  const std::size_t size = dtype_size(o.dtype), row = static_cast<std::size_t>(o.shape[3]) * size;
  for (std::int64_t b = 0; b < o.shape[0]; ++b)
    for (std::int64_t h = 0; h < o.shape[1]; ++h)
      for (std::int64_t t = 0; t < o.shape[2]; ++t)
        std::memset(
            static_cast<char*>(o.data()) +
                static_cast<std::size_t>(b * o.strides[0] + h * o.strides[1] + t * o.strides[2]) *
                    size,
            0, row);
  if (lse) std::fill(lse, lse + o.shape[0] * o.shape[1] * o.shape[2], kNegInf);
}

}  // namespace

void attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
               const detail::AttentionParams& params, const TensorImpl& o, const TensorImpl* lse,
               const KernelTable& kernels) {
  detail::check_attention_call(q, k, v, params, o, lse);
  const std::int64_t batch = q.shape[0], heads = q.shape[1], tq = q.shape[2], tk = k.shape[2];
  float* l = lse ? static_cast<float*>(lse->data()) : nullptr;
  if (batch * heads * tq == 0) return;
  if (tk == 0) return no_keys(o, l);
  check_attention_blas("attention", q, k);
  const std::int64_t blocks = (tq + kBlock - 1) / kBlock, tasks = batch * heads * blocks;
  const Job job{q, k, v, o, l, params.causal, static_cast<float>(params.scale), blocks, kernels};
  set_blas_threads(tasks == 1 ? thread_count() : 1);
  parallel_for(tasks, 1, [&job](std::int64_t begin, std::int64_t end) {
    Scratch w;
    for (std::int64_t t = begin; t < end; ++t) task(job, t, w);
  });
}

}  // namespace kiln::cpu
