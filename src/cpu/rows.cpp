// The CPU's row family (Backend::rows): softmax, log_softmax, layer_norm, rms_norm and logsumexp
// over the last dim.
//
// oneTBB splits the rows; a task works one row at a time in a per-task f32 scratch row that stays
// in cache (a half-type row is converted into it first, with the kernel table's conversions), so
// x is read from memory once and y written once; the passes over the row after the first hit
// cache. The exp and the element-wise steps are the kernel table's (Highway, or the scalar loops
// under KILN_SIMD=0), so they carry the bounds docs/accuracy.md gives those ops. A norm of x +
// residual forms that sum in the scratch row (f32 adds, rounded as the sum is stored) and writes
// its row before normalising it.
//
// Accuracy: every row sum (softmax's sum of exp, the norms' sums of x and of squares) accumulates
// in double with eight interleaved accumulators, as reduce.cpp's f32 sums do; the norms take
// their variance in two passes (sum of (x - mean)^2 in double about the double mean), so a row of
// 1e4 + noise keeps its variance, and y = (x - mean) * rstd is taken in double before the f32
// weight and bias. softmax: y = e / s with e = exp(x - max) in f32 (1 ULP) and s rounded once to
// f32; log_softmax: (x - max) - log(s), log in double; logsumexp: max + log(s) in double, rounded
// once to f32. Half types compute in f32 and round once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu {
namespace {

using detail::RowOp;

// The sum of f(p[j]) in double, in a fixed order the compiler can vectorise.
template <class F>
double sum_of(const float* p, std::int64_t n, F f) {
  double lane[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += f(static_cast<double>(p[i + k]));
  double t =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; ++i) t += f(static_cast<double>(p[i]));
  return t;
}

// The largest value of the row, NaNs skipped (a NaN spoils the sum of exp instead).
float row_max(const float* p, std::int64_t n) {
  float lane[8];
  std::fill(lane, lane + 8, -std::numeric_limits<float>::infinity());
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = p[i + k] > lane[k] ? p[i + k] : lane[k];
  float m = lane[0];
  for (int k = 1; k < 8; ++k) m = lane[k] > m ? lane[k] : m;
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  return m;
}

// A contiguous f32 copy of an [n] parameter, or an empty vector.
std::vector<float> param_f32(const detail::TensorImpl* p, const KernelTable& k) {
  if (!p || p->numel() == 0) return {};
  const auto n = static_cast<std::size_t>(p->numel());
  std::vector<float> out(n);
  if (p->dtype == DType::f32) {
    std::copy_n(static_cast<const float*>(p->data()), n, out.data());
  } else {
    k.half_to_f32(p->dtype, static_cast<const std::uint16_t*>(p->data()), out.data(), n);
  }
  return out;
}

struct Job {
  RowOp op;
  detail::RowView v;
  DType t, y_t;   // x's dtype, y's (a norm of an f32 x may write a half type)
  const char* x;  // element 0 of x
  char* y;
  std::size_t size;  // bytes per element of x
  const float *w, *b;
  double eps;
  float *mean, *rstd;
  const KernelTable& k;
  const char* res;  // a norm's residual (or null): rows of n elements of res_t
  DType res_t;
  char* sum;  // x + res, rows of n elements of t
};

// Row r's x + residual into `load` (f32), written to the sum's row as well and read back as it
// was stored (a half sum is normalised as an add and a norm would normalise it); `work` is
// scratch. x is contiguous here (the contract), so its row starts at r * n.
const float* add_residual(const Job& j, std::int64_t r, float* load, float* work) {
  const auto un = static_cast<std::size_t>(j.v.n);
  const std::size_t at = static_cast<std::size_t>(r) * un;
  const auto as_f32 = [&](DType t, const char* base, float* to) {
    const char* src = base + at * dtype_size(t);
    if (t == DType::f32) {
      std::copy_n(reinterpret_cast<const float*>(src), un, to);
    } else {
      j.k.half_to_f32(t, reinterpret_cast<const std::uint16_t*>(src), to, un);
    }
  };
  as_f32(j.t, j.x, load);
  as_f32(j.res_t, j.res, work);
  j.k.binary(ir::Op::add, DType::f32, Lanes{load}, Lanes{work}, load, un);
  char* dst = j.sum + at * j.size;
  if (j.t == DType::f32) {
    std::copy_n(load, un, reinterpret_cast<float*>(dst));
  } else {
    j.k.f32_to_half(j.t, load, reinterpret_cast<std::uint16_t*>(dst), un);
    j.k.half_to_f32(j.t, reinterpret_cast<const std::uint16_t*>(dst), load, un);
  }
  return load;
}

// One row r: reads it (into xr, converting a half type into `load`), computes into `work`, and
// stores y's row.
void row(const Job& j, std::int64_t r, float* load, float* work) {
  const std::int64_t n = j.v.n;
  const auto un = static_cast<std::size_t>(n);
  const char* src = j.x + static_cast<std::size_t>(r * j.v.stride) * j.size;
  const float* xr = reinterpret_cast<const float*>(src);
  if (j.res) {
    xr = add_residual(j, r, load, work);
  } else if (j.t != DType::f32) {
    j.k.half_to_f32(j.t, reinterpret_cast<const std::uint16_t*>(src), load, un);
    xr = load;
  }
  if (j.op == RowOp::logsumexp) {
    const float m = row_max(xr, n);
    j.k.binary(ir::Op::sub, DType::f32, Lanes{xr}, Lanes{&m, true}, work, un);
    j.k.unary(ir::Op::exp, DType::f32, DType::f32, Lanes{work}, work, un);
    const double s = sum_of(work, n, [](double v) { return v; });
    reinterpret_cast<float*>(j.y)[r] = static_cast<float>(static_cast<double>(m) + std::log(s));
    return;
  }
  char* dst = j.y + static_cast<std::size_t>(r * n) * dtype_size(j.y_t);
  float* out = j.y_t == DType::f32 ? reinterpret_cast<float*>(dst) : work;
  const Lanes xl{xr};
  switch (j.op) {
    case RowOp::softmax:
    case RowOp::log_softmax: {
      const float m = row_max(xr, n);
      j.k.binary(ir::Op::sub, DType::f32, xl, Lanes{&m, true}, work, un);
      j.k.unary(ir::Op::exp, DType::f32, DType::f32, Lanes{work}, out, un);
      const double s = sum_of(out, n, [](double v) { return v; });
      if (j.op == RowOp::softmax) {
        const float sf = static_cast<float>(s);
        j.k.binary(ir::Op::div, DType::f32, Lanes{out}, Lanes{&sf, true}, out, un);
      } else {
        const float ls = static_cast<float>(std::log(s));
        j.k.binary(ir::Op::sub, DType::f32, xl, Lanes{&m, true}, work, un);
        j.k.binary(ir::Op::sub, DType::f32, Lanes{work}, Lanes{&ls, true}, out, un);
      }
      break;
    }
    case RowOp::layer_norm:
    case RowOp::rms_norm: {
      const bool rms = j.op == RowOp::rms_norm;
      const double dn = static_cast<double>(n);
      const double mean = rms ? 0.0 : sum_of(xr, n, [](double v) { return v; }) / dn;
      const double var = sum_of(xr, n, [mean](double v) { return (v - mean) * (v - mean); }) / dn;
      const double rd = 1.0 / std::sqrt(var + j.eps);
      if (j.mean) j.mean[r] = static_cast<float>(mean);
      if (j.rstd) j.rstd[r] = static_cast<float>(rd);
      // (x - mean) * rstd in double: a mean far from zero costs no accuracy.
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = static_cast<float>((static_cast<double>(xr[i]) - mean) * rd);
      if (j.w && j.b) {
        for (std::int64_t i = 0; i < n; ++i) out[i] = out[i] * j.w[i] + j.b[i];
      } else if (j.w) {
        for (std::int64_t i = 0; i < n; ++i) out[i] *= j.w[i];
      } else if (j.b) {
        for (std::int64_t i = 0; i < n; ++i) out[i] += j.b[i];
      }
      break;
    }
    case RowOp::logsumexp:
      break;  // (returned above: no row of y)
  }
  if (j.y_t != DType::f32) j.k.f32_to_half(j.y_t, out, reinterpret_cast<std::uint16_t*>(dst), un);
}

}  // namespace

void rows(RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
          const detail::TensorImpl& y, const detail::RowStats& stats, const KernelTable& k) {
  const detail::RowView v = detail::check_rows_call(op, x, params, y, stats);
  if (v.rows == 0 || v.n == 0) return;
  const std::vector<float> w = param_f32(params.weight, k), b = param_f32(params.bias, k);
  auto stat = [](const std::optional<detail::Out>& s) {
    return s ? static_cast<float*>((*s)->data()) : nullptr;
  };
  const Job job{op,
                v,
                x.dtype,
                y.dtype,
                static_cast<const char*>(x.data()),
                static_cast<char*>(y.data()),
                dtype_size(x.dtype),
                w.empty() ? nullptr : w.data(),
                b.empty() ? nullptr : b.data(),
                params.eps,
                stat(stats.mean),
                stat(stats.rstd),
                k,
                params.residual ? static_cast<const char*>(params.residual->data()) : nullptr,
                params.residual ? params.residual->dtype : x.dtype,
                stats.sum ? static_cast<char*>((*stats.sum)->data()) : nullptr};
  // About 16K elements a task: rows of 4096 go four to a task, long rows one each.
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / v.n);
  parallel_for(v.rows, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(2 * v.n));
    for (std::int64_t r = begin; r < end; ++r) row(job, r, scratch.data(), scratch.data() + v.n);
  });
}

}  // namespace kiln::cpu
