#include "cuda/matmul_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"

namespace kiln::cuda {
namespace {

// x as a contiguous host array of its shape (broadcast batches expanded).
std::vector<float> host_copy(Context& ctx, const detail::TensorImpl& x) {
  const detail::Handle c = contiguous(ctx, std::make_shared<detail::TensorImpl>(x));
  std::vector<float> v(static_cast<std::size_t>(c->numel()));
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  KILN_CUDA_CHECK(cudaMemcpy(v.data(), c->data(), v.size() * sizeof(float), cudaMemcpyDefault));
  return v;
}

}  // namespace

MatmulBench::MatmulBench(Context& ctx, const detail::TensorImpl& a, const detail::TensorImpl& b,
                         const detail::TensorImpl& out, Precision precision)
    : ctx_(ctx), a_(a), b_(b), out_(out), precision_(precision) {
  ctx_.make_current();
  int l2 = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, ctx_.index));
  flush_ = device_alloc(ctx_, 2 * static_cast<std::size_t>(std::max(l2, 1 << 20)));
  KILN_CUDA_CHECK(cudaEventCreate(&start_));
  KILN_CUDA_CHECK(cudaEventCreate(&stop_));
}

MatmulBench::~MatmulBench() {
  // (A destructor cannot throw; destroying valid events does not fail.)
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

double MatmulBench::time(const tune::Candidate& c) {
  KILN_CUDA_CHECK(cudaMemsetAsync(flush_->data(), 0, flush_->bytes(), ctx_.stream));
  KILN_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream));
  c.run();
  KILN_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream));
  KILN_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms * 1e-3;
}

std::vector<float> MatmulBench::download_out() const {
  std::vector<float> v(static_cast<std::size_t>(out_.numel()));
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  KILN_CUDA_CHECK(cudaMemcpy(v.data(), out_.data(), v.size() * sizeof(float), cudaMemcpyDefault));
  return v;
}

void MatmulBench::keep_reference() { reference_ = download_out(); }

void MatmulBench::compute_bounds() {
  const std::int64_t batch = out_.shape[0], m = out_.shape[1], n = out_.shape[2];
  const std::int64_t k = a_.shape[2];
  const std::vector<float> a = host_copy(ctx_, a_), b = host_copy(ctx_, b_);
  const bool a_broadcast = a_.shape[0] == 1, b_broadcast = b_.shape[0] == 1;
  const double kd = static_cast<double>(k);
  const double gamma =
      precision_ == Precision::high ? 2 * (0x1p-10 + kd * 0x1p-24) : 2 * (2 * kd * 0x1p-24);
  bound_.assign(static_cast<std::size_t>(batch * m * n), 0.0);
  std::vector<double> row_max(static_cast<std::size_t>(m)), col_sum(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < batch; ++p) {
    const float* ap = a.data() + (a_broadcast ? 0 : p * m * k);
    const float* bp = b.data() + (b_broadcast ? 0 : p * k * n);
    std::fill(row_max.begin(), row_max.end(), 0.0);
    std::fill(col_sum.begin(), col_sum.end(), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t q = 0; q < k; ++q)
        row_max[i] = std::max(row_max[i], std::fabs(static_cast<double>(ap[i * k + q])));
    for (std::int64_t q = 0; q < k; ++q)
      for (std::int64_t j = 0; j < n; ++j)
        col_sum[j] += std::fabs(static_cast<double>(bp[q * n + j]));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        bound_[(p * m + i) * n + j] = gamma * row_max[i] * col_sum[j] + 1e-37;
  }
}

bool MatmulBench::agrees(std::string& why) {
  if (bound_.empty()) compute_bounds();
  const std::vector<float> got = download_out();
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double g = got[e], r = reference_[e];
    bool ok;
    if (std::isnan(g) || std::isnan(r))
      ok = std::isnan(g) && std::isnan(r);
    else if (std::isinf(g) || std::isinf(r))
      ok = g == r;
    else
      ok = std::fabs(g - r) <= bound_[e];
    if (!ok) {
      why = fmt::format("element {} is {}, the reference candidate gives {} (bound {:.3g})", e, g,
                        r, bound_[e]);
      return false;
    }
  }
  return true;
}

}  // namespace kiln::cuda
