#include "cpu/cpu_backend.hpp"

#include <sys/sysinfo.h>

#include <cstring>
#include <string>

#include "core/runtime_config.hpp"
#include "cpu/blas_info.hpp"
#include "cpu/cpu_evaluator.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/half_ops.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"

namespace kiln::cpu {
namespace {

const KernelTable& live_kernels() {
#if KILN_WITH_SIMD
  if (detail::simd_live()) return simd_kernels();
#endif
  return scalar_kernels();
}

}  // namespace

std::string CpuBackend::name() const { return std::string("cpu<") + live_kernels().target() + ">"; }

std::uint64_t CpuBackend::memory_capacity() const {
  static const std::uint64_t bytes = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return ~std::uint64_t{0};  // unknown: let the allocator decide
    return (std::uint64_t{si.totalram} + si.totalswap) * si.mem_unit;
  }();
  return bytes;
}

detail::Handle CpuBackend::empty(const Dims& shape, DType dtype) {
  return host_empty(shape, dtype);
}

void CpuBackend::upload(const void* src, detail::Out out) {
  const detail::TensorImpl& t = *out;
  std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes) std::memcpy(t.data(), src, bytes);
}

void CpuBackend::download(const detail::TensorImpl& t, void* dst) {
  std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes) std::memcpy(dst, t.data(), bytes);
}

void CpuBackend::elementwise(const ir::Program& program,
                             std::span<const detail::TensorImpl* const> inputs,
                             std::span<const double> scalars, detail::Outs outputs) {
  ir::evaluate_cpu(program, inputs, scalars, outputs.tensors, live_kernels());
}

void CpuBackend::reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim,
                        detail::Out out) {
  if (is_half(x.dtype)) return reduce_half(op, x, dim, *out, live_kernels());
  cpu::reduce(op, x, dim, *out, live_kernels());
}

bool CpuBackend::reduce_prologue(detail::ReduceOp op, const detail::Prologue& prologue, int dim,
                                 detail::Out out) {
  // A half-type value is reduced from memory (reduce_half), not fused.
  if (is_half(detail::prologue_value(prologue).dtype)) return false;
  return cpu::reduce_prologue(op, prologue, dim, *out, live_kernels());
}

void CpuBackend::matmul(const detail::TensorImpl& a, const detail::TensorImpl& b, detail::Out out) {
  if (is_half(a.dtype)) return matmul_half(a, b, *out, live_kernels());
  cpu::matmul(a, b, *out);
}

bool CpuBackend::matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                                 const detail::MatmulEpilogue& e, detail::Out out) {
  detail::check_matmul_epilogue_call(a, b, e, *out);
  return cpu::matmul_epilogue(a, b, e, *out, live_kernels());
}

void CpuBackend::random(const detail::RandomSpec& spec, std::uint64_t seed, detail::Out out) {
  cpu::random(spec, seed, *out);
}

void CpuBackend::index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
                       const detail::TensorImpl& index, const detail::TensorImpl* src,
                       detail::Out out) {
  cpu::index(op, x, dim, index, src, *out, live_kernels());
}

void CpuBackend::rows(detail::RowOp op, const detail::TensorImpl& x,
                      const detail::RowParams& params, detail::Out y,
                      const detail::RowStats& stats) {
  cpu::rows(op, x, params, *y, stats, live_kernels());
}

void CpuBackend::order(detail::OrderOp op, const detail::TensorImpl& x,
                       const detail::OrderParams& params, detail::Out values,
                       std::optional<detail::Out> indices) {
  cpu::order(op, x, params, *values, indices ? &**indices : nullptr);
}

bool CpuBackend::attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                           const detail::TensorImpl& v, const detail::AttentionParams& params,
                           detail::Out o, std::optional<detail::Out> lse) {
  cpu::attention(q, k, v, params, *o, lse ? &**lse : nullptr, live_kernels());
  return true;  // every shape: the CPU needs no head-dim limit
}

bool CpuBackend::attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                                    const detail::TensorImpl& v, const detail::TensorImpl& o,
                                    const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                                    const detail::AttentionParams& params, detail::Out dq,
                                    detail::Out dk, detail::Out dv) {
  return cpu::attention_backward(q, k, v, o, dout, lse, params, *dq, *dk, *dv, live_kernels());
}

bool CpuBackend::supports(detail::BackendOp op, std::span<const DType> dtypes) const {
  return detail::supports_common_dtypes(op, dtypes);
}

std::vector<detail::BackendFeature> CpuBackend::features() const {
  std::vector<detail::BackendFeature> out{
      {"simd target", live_kernels().target()},
      {"threads", std::to_string(detail::thread_limit())},
      {"blas", blas_library()},
  };
  out.push_back({"index accumulation", "deterministic (each destination owned by one task)"});
  out.push_back(
      {"collectives", "a group of one (CPU tensors have no transport; NCCL carries CUDA ones)"});
  if (const std::string core = blas_core(); !core.empty())
    out.push_back({"blas kernels", core + " (" + blas_core_origin() + ")"});
  return out;
}

}  // namespace kiln::cpu
