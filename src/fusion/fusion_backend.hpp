// Fusion: the decorator between dispatch and a backend that records element-wise ops lazily.
//
// Element-wise calls are appended to the device's open group (src/fusion/group.hpp) instead of
// running. The group closes, is planned (plan_cache.hpp) and runs as one call of the backend
// below, hence one kernel, when:
//   - an op cannot join it: matmul, a reduction of something other than the group's result
//     (one of a result takes the group as its prologue and leaves it open, where the backend
//     can: reduce_prologue), an element-wise call over another shape, one that writes into an
//     existing tensor (cat), or one that reads a result of the group through a view other than
//     element for element (a transpose, a broadcast);
//   - data is read (download) or the device is synced;
//   - it reaches its limits (kMaxOps ops, kMaxInputs inputs);
//   - fusion is switched off.
// Memory is bound to a result only when its group runs and only if a handle to it is still
// alive; dropped intermediates live in registers. Creation (upload, random) binds memory at
// once and runs without closing the group, as it cannot depend on it.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "fusion/fusion_stats.hpp"
#include "fusion/group.hpp"

namespace kiln::fusion {

class Fusion final : public detail::Decorator {
 public:
  static_assert(detail::kBackendInterfaceVersion == 12);
  explicit Fusion(detail::Backend& inner) : Decorator("fusion", inner) { summary_at_exit(); }

  detail::Handle empty(const Dims& shape, DType dtype) override;
  void upload(const void* src, detail::Out out) override;
  void download(const detail::TensorImpl& t, void* dst) override;
  void elementwise(const ir::Program& program, std::span<const detail::TensorImpl* const> inputs,
                   std::span<const double> scalars, detail::Outs outputs) override;
  void reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim, detail::Out out) override;
  void matmul(const detail::TensorImpl& a, const detail::TensorImpl& b, detail::Out out) override;
  bool matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                       const detail::MatmulEpilogue& e, detail::Out out) override;
  void random(const detail::RandomSpec& spec, std::uint64_t seed, detail::Out out) override;
  // Closes the open group like matmul: the indexing ops read and write memory.
  void index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
             const detail::TensorImpl& index, const detail::TensorImpl* src,
             detail::Out out) override;
  // Closes the open group too: the update reads every tensor from memory.
  bool adamw(std::span<const detail::AdamWTensors> params,
             const detail::AdamWScalars& scalars) override;
  // Closes the open group too: the sum reads every x from memory.
  bool sum_of_squares(std::span<const detail::TensorImpl* const> xs, detail::Out total) override;
  void collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                  const detail::TensorImpl& x, detail::Out out) override;
  // Closes the open group too: a row op reads whole rows of x from memory (the group's pending
  // values of x are written first) and writes y and the statistics.
  void rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
            detail::Out y, const detail::RowStats& stats) override;
  // Closes the open group too, as rows does.
  bool norm_backward(detail::RowOp op, const detail::TensorImpl& x, const detail::TensorImpl& g,
                     const detail::TensorImpl* weight, const detail::TensorImpl* mean,
                     const detail::TensorImpl& rstd, const detail::NormGrads& grads) override;
  // Closes the open group too: sort, scan and the indexed max/min read whole rows of x.
  void order(detail::OrderOp op, const detail::TensorImpl& x, const detail::OrderParams& params,
             detail::Out values, std::optional<detail::Out> indices) override;
  // Closes the open group too: attention reads whole rows of q, k and v.
  bool attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                 const detail::TensorImpl& v, const detail::AttentionParams& params, detail::Out o,
                 std::optional<detail::Out> lse) override;
  bool attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                          const detail::TensorImpl& v, const detail::TensorImpl& o,
                          const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                          const detail::AttentionParams& params, detail::Out dq, detail::Out dk,
                          detail::Out dv) override;
  void sync() override;
  // Runs the open group, if any.
  void flush() override;

 private:
  void flush_locked();
  void bind(const detail::TensorImpl& t);  // gives t memory if it has none yet

  std::mutex mu_;
  Group group_;
  std::uint64_t serial_ = 1;

  // What a flush builds, kept between flushes so that a repeated group allocates only its
  // outputs: the group being run (swapped with group_, so both keep their vectors' capacity)
  // and the operand lists of the call below.
  Group running_;
  std::vector<std::shared_ptr<PendingBuffer>> live_;
  std::vector<const detail::TensorImpl*> run_inputs_, run_outputs_;
  std::vector<double> run_scalars_;
  std::vector<detail::Handle> run_handles_;
};

}  // namespace kiln::fusion
