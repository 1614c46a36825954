#include "cuda/matmul/matmul_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

// n elements of dtype t (f32, bf16, f16) at `from` on the device, as floats on the host (exact).
std::vector<float> download_floats(const void* from, std::size_t n, DType t) {
  std::vector<float> v(n);
  if (n == 0) return v;
  if (t == DType::f32) {
    KILN_CUDA_CHECK(cudaMemcpy(v.data(), from, n * sizeof(float), cudaMemcpyDefault));
    return v;
  }
  std::vector<std::uint16_t> bits(n);
  KILN_CUDA_CHECK(cudaMemcpy(bits.data(), from, n * sizeof(std::uint16_t), cudaMemcpyDefault));
  for (std::size_t i = 0; i < n; ++i)
    v[i] =
        t == DType::bf16 ? detail::bf16_bits_to_float(bits[i]) : detail::f16_bits_to_float(bits[i]);
  return v;
}

// x on the host: the elements its view covers, read through `strides`.
struct HostView {
  std::vector<float> data;
  Dims strides;
  float at(std::int64_t p, std::int64_t i, std::int64_t j) const {
    return data[static_cast<std::size_t>(p * strides[0] + i * strides[1] + j * strides[2])];
  }
};

// The device memory x's view covers (from its first element to its last), downloaded whole;
// a contiguous copy instead when that span is much larger than the view.
HostView host_view(Context& ctx, const detail::TensorImpl& x) {
  std::int64_t span = 1;
  bool strided = true;
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    if (x.shape[d] == 0) return {{}, x.strides};
    strided = strided && x.strides[d] >= 0;
    span += (x.shape[d] - 1) * x.strides[d];
  }
  HostView v;
  detail::Handle copy;
  const void* from = x.data();
  if (strided && span <= 4 * x.numel()) {
    v.strides = x.strides;
  } else {
    copy = contiguous(ctx, std::make_shared<detail::TensorImpl>(x));
    from = copy->data();
    span = x.numel();
    v.strides = detail::contiguous_strides(x.shape);
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  v.data = download_floats(from, static_cast<std::size_t>(span), x.dtype);
  return v;
}

std::int64_t span_bytes(const detail::TensorImpl& x) {
  std::int64_t span = 1;
  for (std::size_t d = 0; d < x.shape.size(); ++d)
    span += (x.shape[d] - 1) * std::max<std::int64_t>(x.strides[d], 0);
  return span * static_cast<std::int64_t>(dtype_size(x.dtype));
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

std::vector<float> MatmulBench::download(const void* from, std::size_t n) const {
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return download_floats(from, n, out_.dtype);
}

std::vector<float> MatmulBench::download_out() const {
  return download(out_.data(), static_cast<std::size_t>(out_.numel()));
}

void MatmulBench::keep_reference() {
  // On the device, and downloaded at the first check only: a first call checks few candidates
  // or none, and the download of a large output (with the host's page faults) is what cost its
  // bound, where a device copy is nearly free (docs/autotune.md, "The reference", has the
  // figures). A device without room for the copy gets the download at once.
  const std::size_t n = static_cast<std::size_t>(out_.numel());
  const std::size_t bytes = n * dtype_size(out_.dtype);
  try {
    reference_on_device_ = device_alloc(ctx_, bytes);
    if (n > 0) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(reference_on_device_->data(), out_.data(), bytes,
                                      cudaMemcpyDeviceToDevice, ctx_.stream));
    }
  } catch (const OutOfMemoryError&) {
    reference_ = download_out();
  }
  // The download rate a check will see, from a sample of up to 4 MiB (host allocation, page
  // faults and copy: what the full downloads of a check pay per byte).
  const std::size_t sample = std::min<std::size_t>(n, std::size_t{1} << 20);
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  const auto t0 = tune::Clock::now();
  (void)download(out_.data(), sample);
  const double s = std::chrono::duration<double>(tune::Clock::now() - t0).count();
  seconds_per_byte_ =
      s / static_cast<double>(std::max<std::size_t>(sample, 1) * dtype_size(out_.dtype));
}

double MatmulBench::agrees_estimate() const {
  // The downloads at the sampled rate, and about as long again twice over to read them on the
  // host (a rough rule: the loops below touch each element once).
  const double out_bytes = static_cast<double>(out_.numel()) * dtype_size(out_.dtype);
  double bytes = out_bytes;
  if (reference_on_device_) bytes += out_bytes;
  if (row_max_.empty()) bytes += static_cast<double>(span_bytes(a_) + span_bytes(b_));
  return 3 * seconds_per_byte_ * bytes;
}

void MatmulBench::compute_bounds() {
  const std::int64_t m = out_.shape[1], n = out_.shape[2];
  const std::int64_t k = a_.shape[2];
  const std::int64_t a_batches = a_.shape[0], b_batches = b_.shape[0];
  const HostView a = host_view(ctx_, a_), b = host_view(ctx_, b_);
  const double kd = static_cast<double>(k);
  // Half-type operands multiply exactly in fp32: their products' bound is strict fp32's.
  const Precision p = out_.dtype == DType::f32 ? precision_ : Precision::highest;
  const double gamma = p == Precision::high     ? 2 * (0x1p-10 + kd * 0x1p-24)
                       : p == Precision::medium ? 2 * (0x1p-7 + kd * 0x1p-24)
                                                : 2 * (2 * kd * 0x1p-24);
  row_max_.assign(static_cast<std::size_t>(a_batches * m), 0.0);
  col_sum_.assign(static_cast<std::size_t>(b_batches * n), 0.0);
  for (std::int64_t p = 0; p < a_batches; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      double r = 0;
      for (std::int64_t q = 0; q < k; ++q) r = std::max(r, std::fabs(double{a.at(p, i, q)}));
      row_max_[static_cast<std::size_t>(p * m + i)] = gamma * r;
    }
  }
  for (std::int64_t p = 0; p < b_batches; ++p) {
    double* sums = col_sum_.data() + p * n;
    for (std::int64_t q = 0; q < k; ++q)
      for (std::int64_t j = 0; j < n; ++j) sums[j] += std::fabs(double{b.at(p, q, j)});
  }
}

bool MatmulBench::agrees(std::string& why) {
  if (row_max_.empty()) compute_bounds();
  if (reference_on_device_) {
    reference_ = download(reference_on_device_->data(), static_cast<std::size_t>(out_.numel()));
    reference_on_device_.reset();
  }
  const std::int64_t batch = out_.shape[0], m = out_.shape[1], n = out_.shape[2];
  const bool a_broadcast = a_.shape[0] == 1, b_broadcast = b_.shape[0] == 1;
  const std::vector<float> got = download_out();
  const double rounding = out_.dtype == DType::bf16  ? 2 * 0x1p-7
                          : out_.dtype == DType::f16 ? 2 * 0x1p-10
                                                     : 0.0;
  for (std::int64_t p = 0; p < batch; ++p) {
    const double* rows = row_max_.data() + (a_broadcast ? 0 : p * m);
    const double* cols = col_sum_.data() + (b_broadcast ? 0 : p * n);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t e = static_cast<std::size_t>((p * m + i) * n + j);
        const double g = got[e], r = reference_[e];
        // Each half-type output is also rounded once: up to one unit at its magnitude apiece.
        const double bound =
            rows[i] * cols[j] + rounding * std::max(std::fabs(g), std::fabs(r)) + 1e-37;
        bool ok;
        if (std::isnan(g) || std::isnan(r))
          ok = std::isnan(g) && std::isnan(r);
        else if (std::isinf(g) || std::isinf(r))
          ok = g == r;
        else
          ok = std::fabs(g - r) <= bound;
        if (!ok) {
          why = fmt::format("element {} is {}, the reference candidate gives {} (bound {:.3g})", e,
                            g, r, bound);
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace kiln::cuda
