// kiln::cross_entropy's node: the loss is computed by the front end from per-row statistics
// (src/frontend/loss.cpp), never from a [N, C] tensor of probabilities, and its gradient is one
// element-wise program over the logits, which the fusion decorator runs as one kernel:
//   dlogits[r, c] = g * w[r] * (exp(x[r, c] - lse[r]) - (1 - s) [c == t[r]] - s / C)
// with g the loss's gradient, w[r] = kept[r] / (number of kept rows) the row's weight in the mean,
// s the label smoothing and t the targets. It keeps the logits, the targets and the two per-row
// f32 vectors lse and w: nothing the size of the logits besides the logits themselves.
#include <utility>

#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"

namespace kiln::autodiff {

namespace {

constexpr DType kF32 = DType::f32;

class CrossEntropyNode final : public Node {
 public:
  CrossEntropyNode(const Handle& logits, const Handle& targets, const Handle& lse,
                   const Handle& weight, double smoothing)
      : smoothing_(smoothing) {
    saved_ = {logits, targets, lse, weight};
    edges.push_back(edge_to(*logits));
  }
  const char* name() const override { return "cross_entropy"; }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const TensorImpl& x = *saved_[0];
    const Dims& shape = x.shape;  // [N, C]
    const auto classes = static_cast<double>(shape[1]);
    // The per-row [N, 1] tensors as [N, C] (constant along a row), the loss's gradient [] likewise.
    const TensorImpl targets = broadcast(*saved_[1], shape), lse = broadcast(*saved_[2], shape),
                     weight = broadcast(*saved_[3], shape);
    TensorImpl g = *grads[0];
    g.shape = shape;
    g.strides = {0, 0};
    const TensorImpl cols = iota_along(be, shape[1], 1, shape);

    ir::Program p;  // (operands named one by one: argument order is unspecified in C++)
    const auto xv = p.cast(p.input(x.dtype), kF32), lv = p.input(kF32), tv = p.input(DType::i32),
               wv = p.input(kF32), gv = p.input(kF32), cv = p.input(DType::i32);
    const auto hit = p.scalar(kF32), zero = p.scalar(kF32), spread = p.scalar(kF32);
    const auto prob = p.unary(ir::Op::exp, p.binary(ir::Op::sub, xv, lv));
    const auto target = p.where(p.binary(ir::Op::eq, cv, tv), hit, zero);
    const auto d = p.binary(ir::Op::sub, p.binary(ir::Op::sub, prob, target), spread);
    p.output(p.cast(p.binary(ir::Op::mul, d, p.binary(ir::Op::mul, wv, gv)), x.dtype));
    const TensorImpl* in[] = {&x, &lse, &targets, &weight, &g, &cols};
    const double scalars[] = {1.0 - smoothing_, 0.0, smoothing_ / classes};
    return {run(be, p, in, scalars, shape)[0]};
  }

 private:
  double smoothing_;
};

}  // namespace

void record_cross_entropy(const Handle& logits, const Handle& targets, const Handle& lse,
                          const Handle& weight, double smoothing, const TensorImpl& loss) {
  record_writer(std::make_shared<CrossEntropyNode>(logits, targets, lse, weight, smoothing), loss);
}

}  // namespace kiln::autodiff
