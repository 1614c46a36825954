#include "cuda/cuda_backend.hpp"

#include <fmt/format.h>

#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/cudnn_library.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_profile.hpp"
#include "cuda/matmul/cublaslt_state.hpp"
#include "cuda/nccl_library.hpp"
#include "cuda/precompile.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {

CudaBackend::CudaBackend(int index) : ctx_(context(index)) {
  prepare_lt_in_background(ctx_);
  precompile_in_background(ctx_);
}

std::string CudaBackend::name() const { return "cuda<" + ctx_.arch() + ">"; }

detail::Handle CudaBackend::empty(const Dims& shape, DType dtype) {
  return device_empty(ctx_, shape, dtype);
}

void CudaBackend::upload(const void* src, detail::Out out) {
  const detail::TensorImpl& t = *out;
  std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  if (!bytes) return;
  ctx_.make_current();
  // From pageable memory the call returns once src has been staged, so the caller may free it.
  KILN_CUDA_CHECK(cudaMemcpyAsync(t.data(), src, bytes, cudaMemcpyHostToDevice, ctx_.stream));
}

void CudaBackend::download(const detail::TensorImpl& t, void* dst) {
  std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  if (!bytes) return;
  ctx_.make_current();
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, t.data(), bytes, cudaMemcpyDeviceToHost, ctx_.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  raise_index_error(ctx_);  // an indexing kernel queued before met a bad index
}

void CudaBackend::elementwise(const ir::Program& program,
                              std::span<const detail::TensorImpl* const> inputs,
                              std::span<const double> scalars, detail::Outs outputs) {
  cuda::elementwise(ctx_, program, inputs, scalars, outputs.tensors);
}

void CudaBackend::reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim,
                         detail::Out out) {
  cuda::reduce(ctx_, op, x, dim, *out);
}

bool CudaBackend::reduce_prologue(detail::ReduceOp op, const detail::Prologue& prologue, int dim,
                                  detail::Out out) {
  return cuda::reduce_prologue(ctx_, op, prologue, dim, *out);
}

void CudaBackend::matmul(const detail::TensorImpl& a, const detail::TensorImpl& b,
                         detail::Out out) {
  detail::check_matmul_call(a, b, *out);
  cuda::matmul(ctx_, a, b, *out);
}

bool CudaBackend::matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                                  const detail::MatmulEpilogue& e, detail::Out out) {
  detail::check_matmul_epilogue_call(a, b, e, *out);
  return cuda::matmul_epilogue(ctx_, a, b, e, *out);
}

void CudaBackend::random(const detail::RandomSpec& spec, std::uint64_t seed, detail::Out out) {
  cuda::random(ctx_, spec, seed, *out);
}

void CudaBackend::sync() {
  ctx_.make_current();
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  collect_kernel_times();  // (KILN_LOG=profile only)
  raise_index_error(ctx_);
}

void CudaBackend::index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
                        const detail::TensorImpl& index, const detail::TensorImpl* src,
                        detail::Out out) {
  cuda::index(ctx_, op, x, dim, index, src, *out);
}

bool CudaBackend::adamw(std::span<const detail::AdamWTensors> params,
                        const detail::AdamWScalars& scalars) {
  return cuda::adamw(ctx_, params, scalars);
}

bool CudaBackend::sum_of_squares(std::span<const detail::TensorImpl* const> xs, detail::Out total) {
  return cuda::sum_of_squares(ctx_, xs, *total);
}

void CudaBackend::rows(detail::RowOp op, const detail::TensorImpl& x,
                       const detail::RowParams& params, detail::Out y,
                       const detail::RowStats& stats) {
  cuda::rows(ctx_, op, x, params, *y, stats);
}

bool CudaBackend::norm_backward(detail::RowOp op, const detail::TensorImpl& x,
                                const detail::TensorImpl& g, const detail::TensorImpl* weight,
                                const detail::TensorImpl* mean, const detail::TensorImpl& rstd,
                                const detail::NormGrads& grads) {
  return cuda::norm_backward(ctx_, op, x, g, weight, mean, rstd, grads);
}

void CudaBackend::order(detail::OrderOp op, const detail::TensorImpl& x,
                        const detail::OrderParams& params, detail::Out values,
                        std::optional<detail::Out> indices) {
  cuda::order(ctx_, op, x, params, *values, indices ? &**indices : nullptr);
}

bool CudaBackend::attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                            const detail::TensorImpl& v, const detail::AttentionParams& params,
                            detail::Out o, std::optional<detail::Out> lse) {
  return cuda::attention(ctx_, q, k, v, params, *o, lse ? &**lse : nullptr);
}

bool CudaBackend::attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                                     const detail::TensorImpl& v, const detail::TensorImpl& o,
                                     const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                                     const detail::AttentionParams& params, detail::Out dq,
                                     detail::Out dk, detail::Out dv) {
  return cuda::attention_backward(ctx_, q, k, v, o, dout, lse, params, *dq, *dk, *dv);
}

bool CudaBackend::supports(detail::BackendOp op, std::span<const DType> dtypes) const {
  return detail::supports_common_dtypes(op, dtypes);
}

std::vector<detail::BackendFeature> CudaBackend::features() const {
  return {
      {"gpu", ctx_.name},
      {"architecture", ctx_.arch() + ", " + std::to_string(ctx_.sm_count) + " SMs"},
      {"memory", fmt::format("{:.1f} GiB", static_cast<double>(ctx_.total_memory) / (1 << 30))},
      {"driver", driver_version()},
      {"runtime", runtime_version()},
      {"nvrtc", nvrtc_version()},
      {"cublasLt", cublas_version()},
      {"nccl", nccl_status()},
      {"cudnn", cudnn_status()},
      {"index accumulation",
       kiln::deterministic() ? "deterministic (index order per destination)" : "atomics"},
  };
}

}  // namespace kiln::cuda
