// Losses as torch.nn.functional's, with reduction "mean". nll_loss and mse_loss are composed from
// kiln's ops (so each is differentiable through the ops it is made of); cross_entropy is fused
// (src/frontend/loss.cpp): per-row statistics of the logits, never a [N, C] tensor of
// probabilities, and a gradient that is one element-wise program over the logits. The losses are
// on autocast's f32 list (kiln/autocast.hpp): they compute in f32 from half inputs and the loss
// is f32.
#pragma once

#include <string>

#include "kiln/autocast.hpp"
#include "kiln/error.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

namespace detail {
inline void check_class_targets(const char* op, const Tensor<2>& scores, const Tensor<1>& targets) {
  if (!is_floating(scores.dtype()))
    throw DTypeError(std::string(op) + ": the scores must be f32, bf16 or f16, got " +
                     dtype_name(scores.dtype()));
  if (targets.dtype() != DType::i32)
    throw DTypeError(std::string(op) + ": targets must be i32 class indices, got " +
                     dtype_name(targets.dtype()));
  if (targets.size(0) != scores.size(0))
    throw ShapeError(std::string(op) + ": " + std::to_string(targets.size(0)) + " targets for " +
                     std::to_string(scores.size(0)) + " rows of scores");
}
}  // namespace detail

// -mean over the rows whose target is not ignore_index of log_probs[i, targets[i]]
// (torch.nn.functional.nll_loss). A target outside [0, C) other than ignore_index raises
// IndexError; with every row ignored the result is NaN (0 / 0), as PyTorch's.
inline Tensor<0> nll_loss(const Tensor<2>& log_probs_in, const Tensor<1>& targets,
                          int ignore_index = -100) {
  detail::check_class_targets("nll_loss", log_probs_in, targets);
  const Tensor<2> log_probs(detail::autocast_f32(log_probs_in.handle("nll_loss")));
  const auto keep = targets != ignore_index;
  const auto picked = log_probs.gather(1, where(keep, targets, 0).unsqueeze(1)).squeeze(1);
  const auto weight = keep.to(log_probs.dtype());
  return -(picked * weight).sum() / weight.sum();
}

// torch.nn.functional.cross_entropy(logits [N, C], targets [N] i32, ignore_index,
// label_smoothing): each kept row's loss is (1 - s) * -log p[target] + s * mean_c(-log p[c]).
inline Tensor<0> cross_entropy(const Tensor<2>& logits, const Tensor<1>& targets,
                               int ignore_index = -100, double label_smoothing = 0.0) {
  detail::check_class_targets("cross_entropy", logits, targets);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " +
                     std::to_string(label_smoothing));
  return Tensor<0>(detail::cross_entropy(logits.handle("cross_entropy"),
                                         targets.handle("cross_entropy"), ignore_index,
                                         label_smoothing));
}

// mean((a - b)^2) over every element (torch.nn.functional.mse_loss).
template <std::size_t D>
Tensor<0> mse_loss(const Tensor<D>& a, const Tensor<D>& b) {
  const auto d = Tensor<D>(detail::autocast_f32(a.handle("mse_loss"))) -
                 Tensor<D>(detail::autocast_f32(b.handle("mse_loss")));
  return (d * d).mean();
}

}  // namespace kiln
