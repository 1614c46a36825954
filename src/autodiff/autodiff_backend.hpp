// The autodiff decorator, outermost in a device's chain (dispatch<autodiff<fusion<cuda<...>>>>).
//
// It runs every call through the chain below it and, where a call reads a tensor that needs a
// gradient and grad mode is on (kiln::NoGradGuard turns it off), records a Node (nodes.hpp) and
// marks the call's floating outputs as needing a gradient. A call on tensors that need none
// costs one check per input. Backward (engine.hpp) issues ordinary calls on this chain with
// grad mode off, so its element-wise work goes through the fusion decorator like forward work.
//
// Recorded: elementwise, reduce, matmul, matmul_epilogue (a linear forward), index, rows, order,
// attention (where the backend ran it; when it declines, the caller composes the attention from
// calls that record themselves). random and upload make tensors that need no gradient.
#pragma once

#include "backend/backend.hpp"

namespace kiln::autodiff {

class Autodiff final : public detail::Decorator {
 public:
  explicit Autodiff(detail::Backend& inner) : Decorator("autodiff", inner) {}
  static_assert(detail::kBackendInterfaceVersion == 12);

  void elementwise(const ir::Program& program, std::span<const detail::TensorImpl* const> inputs,
                   std::span<const double> scalars, detail::Outs outputs) override;
  void reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim, detail::Out out) override;
  void matmul(const detail::TensorImpl& a, const detail::TensorImpl& c, detail::Out out) override;
  bool matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& c,
                       const detail::MatmulEpilogue& e, detail::Out out) override;
  void index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
             const detail::TensorImpl& index, const detail::TensorImpl* src,
             detail::Out out) override;
  void rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
            detail::Out y, const detail::RowStats& stats) override;
  void order(detail::OrderOp op, const detail::TensorImpl& x, const detail::OrderParams& params,
             detail::Out values, std::optional<detail::Out> indices) override;
  // Asks the call for lse (allocating it where the caller did not) when it records, so that
  // backward recomputes the probabilities instead of keeping them.
  bool attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                 const detail::TensorImpl& v, const detail::AttentionParams& params, detail::Out o,
                 std::optional<detail::Out> lse) override;
  std::vector<detail::BackendFeature> features() const override;
};

}  // namespace kiln::autodiff
