// Backward of Backend::order over the last dim:
//   max, min, sort, topk  the values were read from x at the indices: dx is zeros with g added at
//                         those indices (scatter_add along the last dim); indices carry none
//   cumsum                y[j] = sum of x[i <= j]: dx[i] = sum of g[j >= i], cumsum's reverse
//                         (and a reverse cumsum's gradient is the forward one)
#include <utility>

#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"

namespace kiln::autodiff {

namespace {

using detail::OrderOp;

class OrderNode final : public Node {
 public:
  OrderNode(OrderOp op, const TensorImpl& x, const detail::OrderParams& params,
            const TensorImpl* indices)
      : op_(op), params_(params), x_shape_(x.shape), dtype_(x.dtype) {
    if (indices) saved_.push_back(keep(*indices));
    edges.push_back(edge_to(x));
  }
  const char* name() const override { return detail::order_op_name(op_); }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const Handle g = contiguous(be, grads[0]);
    Handle dx = be.empty(x_shape_, dtype_);
    if (op_ == OrderOp::cumsum) {
      detail::OrderParams back;
      back.reverse = !params_.reverse;
      be.order(OrderOp::cumsum, *g, back, detail::Out(*dx), std::nullopt);
      return {dx};
    }
    Handle zero = zeros(be, detail::numel(x_shape_), dtype_);
    TensorImpl z = *zero;
    z.shape = x_shape_;
    z.strides = detail::contiguous_strides(x_shape_);
    const int last = static_cast<int>(x_shape_.size()) - 1;
    be.index(detail::IndexOp::scatter_add, z, last, *saved_[0], g.get(), detail::Out(*dx));
    return {dx};
  }

 private:
  OrderOp op_;
  detail::OrderParams params_;
  Dims x_shape_;
  DType dtype_;
};

}  // namespace

std::shared_ptr<Node> order_node(OrderOp op, const TensorImpl& x, const detail::OrderParams& params,
                                 const TensorImpl* indices) {
  return std::make_shared<OrderNode>(op, x, params, indices);
}

}  // namespace kiln::autodiff
