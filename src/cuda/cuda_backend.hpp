// The CUDA backend: generated NVRTC kernels, stream-ordered memory, cuBLASLt matmul.
//
// Every op is queued on the device's one non-blocking stream and returns at once; download
// and sync wait. Tensors keep their buffers alive, and buffers are freed in stream order, so
// no op can see memory reused under it.
#pragma once

#include "backend/backend.hpp"
#include "cuda/context.hpp"

namespace kiln::cuda {

class CudaBackend final : public detail::Backend {
 public:
  static_assert(detail::kBackendInterfaceVersion == 12);
  explicit CudaBackend(int index);
  std::string name() const override;  // "cuda<sm_90>"
  Device device() const override { return ctx_.device; }
  std::uint64_t memory_capacity() const override { return ctx_.total_memory; }
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
  bool adamw(std::span<const detail::AdamWTensors> params,
             const detail::AdamWScalars& scalars) override;
  bool sum_of_squares(std::span<const detail::TensorImpl* const> xs, detail::Out total) override;
  void rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
            detail::Out y, const detail::RowStats& stats) override;
  bool norm_backward(detail::RowOp op, const detail::TensorImpl& x, const detail::TensorImpl& g,
                     const detail::TensorImpl* weight, const detail::TensorImpl* mean,
                     const detail::TensorImpl& rstd, const detail::NormGrads& grads) override;
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
  // NCCL, loaded on first use (src/cuda/collective.cpp, nccl_library.hpp).
  std::vector<std::byte> communicator_id() override;
  std::unique_ptr<detail::Communicator> communicator(std::span<const std::byte> id, int rank,
                                                     int world_size, double timeout_s) override;
  void collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                  const detail::TensorImpl& x, detail::Out out) override;
  void sync() override;
  bool supports(detail::BackendOp op, std::span<const DType> dtypes) const override;
  // The GPU, its architecture and memory, and the CUDA libraries kiln runs with.
  std::vector<detail::BackendFeature> features() const override;

 private:
  Context& ctx_;
};

}  // namespace kiln::cuda
