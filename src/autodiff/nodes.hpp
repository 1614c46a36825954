// The recorded ops, one Node type per backend call that has a gradient.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "autodiff/graph.hpp"
#include "ir/program.hpp"

namespace kiln::autodiff {

// An element-wise program: its gradient program (ir::gradient) over the saved inputs.
std::shared_ptr<Node> elementwise_node(const ir::Program& program,
                                       std::span<const TensorImpl* const> inputs,
                                       std::span<const double> scalars,
                                       std::span<const bool> wanted);
// sum and mean broadcast the gradient back; max and min share it evenly among the elements
// equal to the result (as PyTorch's amax/amin and full max/min).
std::shared_ptr<Node> reduce_node(detail::ReduceOp op, const TensorImpl& x, int dim,
                                  const TensorImpl& out);
// out = a @ c (batched): da = g @ c^T, dc = a^T @ g.
std::shared_ptr<Node> matmul_node(const TensorImpl& a, const TensorImpl& c, bool want_a,
                                  bool want_c);
// c's gradient a^T g of out = a @ c (batched).
Handle matmul_c_gradient(Backend& be, const TensorImpl& a, const TensorImpl& c,
                         const TensorImpl& g);
// Backend::matmul_epilogue's linear forward out = act(a @ c + bias) (linear_node.cpp): keeps a, c
// and act_input (the pre-activation for GELU, out for ReLU; null without an activation).
std::shared_ptr<Node> linear_node(const TensorImpl& a, const TensorImpl& c, const TensorImpl* bias,
                                  detail::EpilogueActivation act, const TensorImpl* act_input,
                                  bool want_a, bool want_c, bool want_bias);
// gather / index_select take their gradient back by scatter_add / index_add, and the other way.
std::shared_ptr<Node> index_node(detail::IndexOp op, const TensorImpl& x, int dim,
                                 const TensorImpl& index, const TensorImpl* src, bool want_x,
                                 bool want_src);

// softmax / log_softmax / layer_norm / rms_norm over the last dim (rows_node.cpp); the norms
// need their row statistics (the front end always asks for them). A norm of x + residual has two
// outputs, y (0) and the sum (1), and edges x, residual, weight, bias (those wanted).
std::shared_ptr<Node> rows_node(detail::RowOp op, const TensorImpl& x,
                                const detail::RowParams& params, const TensorImpl& y,
                                const detail::RowStats& stats, bool want_x, bool want_w,
                                bool want_b, bool want_residual);

// max / min / sort / topk (values scattered back through the indices) and cumsum (the reverse
// cumsum of the gradient) over the last dim (order_node.cpp); indices is null for cumsum.
std::shared_ptr<Node> order_node(detail::OrderOp op, const TensorImpl& x,
                                 const detail::OrderParams& params, const TensorImpl* indices);

// Backend::attention (attention_node.cpp): keeps q, k, v, lse and (weakly) o, never a T x T
// tensor; backward is attention_backward. want: whether q, k, v take a gradient.
std::shared_ptr<Node> attention_node(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                                     const TensorImpl& o, const TensorImpl& lse,
                                     const detail::AttentionParams& params,
                                     std::array<bool, 3> want);
// The gradients of attention's q, k, v (null where not wanted), of their shapes and dtypes, from
// the forward's o and lse and o's gradient dout, composed from calls on be (matmul, element-wise
// programs, a row sum) in f32. One function, so that a backend kernel can replace it.
struct AttentionGrads {
  Handle dq, dk, dv;
};
AttentionGrads attention_backward(Backend& be, const TensorImpl& q, const TensorImpl& k,
                                  const TensorImpl& v, const TensorImpl& o, const TensorImpl& dout,
                                  const TensorImpl& lse, const detail::AttentionParams& params,
                                  std::array<bool, 3> want = {true, true, true});

// kiln::cross_entropy (cross_entropy_node.cpp): `loss`, computed by the front end with recording
// off, takes its gradient to logits [N, C] (which needs one) as one element-wise program, from
// the targets, the rows' logsumexp lse (f32) and their weights in the mean (f32), each [N, 1].
void record_cross_entropy(const Handle& logits, const Handle& targets, const Handle& lse,
                          const Handle& weight, double smoothing, const TensorImpl& loss);

// kiln::checkpoint: `region` computed out (a fresh result, whose buffer no recorded op wrote)
// from `inputs` with recording off; backward runs it again from the saved inputs.
using Region = std::function<Handle(const std::vector<Handle>&)>;
void record_checkpoint(Region region, std::span<const Handle> inputs, const TensorImpl& out,
                       std::function<Backend&(Device)> backend);

}  // namespace kiln::autodiff
