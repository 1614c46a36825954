// kiln::cross_entropy fused: the loss from per-row statistics, never a [N, C] tensor of
// probabilities or log-probabilities. With lse the row's logsumexp (the row kernel,
// Backend::rows' logsumexp: one read of the logits), a kept row's loss is
// lse - (1 - s) x[t] - s mean(x) (s the label smoothing; the mean is a second read), and the loss
// is their mean; nothing [N, C] is written. Everything is computed in f32 whatever the logits'
// dtype (the loss is f32, as under autocast's f32 list). The gradient is one node whose backward is
// one element-wise program over the logits (src/autodiff/cross_entropy_node.cpp).
#include "frontend/ops_common.hpp"
#include "kiln/autograd.hpp"
#include "kiln/tensor.hpp"
#if KILN_WITH_AUTODIFF
#include "autodiff/nodes.hpp"
#endif

namespace kiln::detail {

Handle cross_entropy(const Handle& logits, const Handle& targets, int ignore_index,
                     double label_smoothing) {
  if (logits->shape[1] == 0) throw ValueError("cross_entropy: the logits have no classes (C = 0)");
  const bool record = grad_enabled() && requires_grad(logits);
  const Tensor<2> x(logits);
  const Tensor<1> t(targets);
  Handle lse, weight, loss;
  {
    NoGradGuard no_grad;  // the node below is the loss's only one
    const auto row_lse =
        Tensor<1>(run_rows(RowOp::logsumexp, logits, Handle{}, Handle{}, 0.0).y).unsqueeze(1);
    const auto kept_rows = t != ignore_index;
    const auto keep = kept_rows.unsqueeze(1);
    // (An ignored row's target may lie outside [0, C): it picks column 0 and is weighted 0.)
    const auto picked = x.gather(1, where(kept_rows, t, 0).unsqueeze(1)).to(DType::f32);
    auto row = row_lse - picked * static_cast<float>(1.0 - label_smoothing);
    if (label_smoothing != 0.0) {
      // (Its own statement: a temporary [N, C] value still alive when the next op closes the
      // fused group would be written.)
      const auto mean_x = x.to(DType::f32).mean(1, keepdim);
      row = row - mean_x * static_cast<float>(label_smoothing);
    }
    const auto kept = keep.to(DType::f32);
    const auto row_weight = kept / kept.sum();  // every row ignored: 0 / 0, a NaN loss as PyTorch's
    loss = (where(keep, row, 0.0f) * row_weight).sum().handle("cross_entropy");
    lse = row_lse.handle("cross_entropy");
    weight = row_weight.handle("cross_entropy");
  }
#if KILN_WITH_AUTODIFF
  if (record)
    autodiff::record_cross_entropy(logits, t.unsqueeze(1).handle("cross_entropy"), lse, weight,
                                   label_smoothing, *loss);
#else
  (void)record;
#endif
  return loss;
}

}  // namespace kiln::detail
