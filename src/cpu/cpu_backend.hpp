// The CPU backend: Highway SIMD (or scalar) element-wise kernels, oneTBB loops, CBLAS gemm.
#pragma once

#include "backend/backend.hpp"

namespace kiln::cpu {

class CpuBackend final : public detail::Backend {
 public:
  static_assert(detail::kBackendInterfaceVersion == 12);
  std::string name() const override;  // "cpu<avx2>", "cpu<scalar>"
  Device device() const override { return Device::cpu(); }
  std::uint64_t memory_capacity() const override;
  detail::Handle empty(const Dims& shape, DType dtype) override;
  void upload(const void* src, detail::Out out) override;
  void download(const detail::TensorImpl& t, void* dst) override;
  void elementwise(const ir::Program& program, std::span<const detail::TensorImpl* const> inputs,
                   std::span<const double> scalars, detail::Outs outputs) override;
  void reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim, detail::Out out) override;
  bool reduce_prologue(detail::ReduceOp op, const detail::Prologue& prologue, int dim,
                       detail::Out out) override;
  void matmul(const detail::TensorImpl& a, const detail::TensorImpl& b, detail::Out out) override;
  bool matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                       const detail::MatmulEpilogue& e, detail::Out out) override;
  void random(const detail::RandomSpec& spec, std::uint64_t seed, detail::Out out) override;
  void index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
             const detail::TensorImpl& index, const detail::TensorImpl* src,
             detail::Out out) override;
  void rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
            detail::Out y, const detail::RowStats& stats) override;
  void order(detail::OrderOp op, const detail::TensorImpl& x, const detail::OrderParams& params,
             detail::Out values, std::optional<detail::Out> indices) override;
  bool attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                 const detail::TensorImpl& v, const detail::AttentionParams& params, detail::Out o,
                 std::optional<detail::Out> lse) override;
  bool attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                          const detail::TensorImpl& v, const detail::TensorImpl& o,
                          const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                          const detail::AttentionParams& params, detail::Out dq, detail::Out dk,
                          detail::Out dv) override;
  // A group of one only: kiln writes no transport of its own (src/cpu/collective.cpp).
  std::vector<std::byte> communicator_id() override { return {}; }
  std::unique_ptr<detail::Communicator> communicator(std::span<const std::byte> id, int rank,
                                                     int world_size, double timeout_s) override;
  void collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                  const detail::TensorImpl& x, detail::Out out) override;
  void sync() override {}  // CPU ops run to completion on the calling thread
  bool supports(detail::BackendOp op, std::span<const DType> dtypes) const override;
  // The SIMD target, the thread limit, the BLAS and the kernels it picked for this CPU.
  std::vector<detail::BackendFeature> features() const override;
};

}  // namespace kiln::cpu
