// Backward of Backend::matmul_epilogue's linear forward, out = act(a @ c + bias):
//   dz = g act'(z)  (one element-wise program; z is the pre-activation the forward wrote aside for
//                    GELU, and ReLU's mask is out > 0),
//   da = dz c^T,  dc = a^T dz (matmul_c_gradient),  dbias = dz summed over every row, one column
// sum (cuBLASLt's BGRADB epilogue, the sum inside dc's product, saved no time: docs/ops.md).
#include <utility>

#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"

namespace kiln::autodiff {

namespace {

using detail::EpilogueActivation;

std::int32_t as_f32(ir::Program& p, std::int32_t node) {
  return p.dtype(node) == DType::f32 ? node : p.cast(node, DType::f32);
}

// g act'(v) in f32, cast to g's dtype, for v the pre-activation (GELU) or the output (ReLU).
// Scalars: relu {0}; gelu_tanh {0.5, 1, sqrt(2 / pi), 0.044715, 3 * 0.044715}.
ir::Program activation_gradient(EpilogueActivation act, DType g_dtype, DType v_dtype) {
  ir::Program p;
  const auto g = as_f32(p, p.input(g_dtype)), v = as_f32(p, p.input(v_dtype));
  std::int32_t r = g;
  if (act == EpilogueActivation::relu) {
    const auto zero = p.scalar(DType::f32);
    r = p.where(p.binary(ir::Op::gt, v, zero), g, zero);
  } else if (act == EpilogueActivation::gelu_tanh) {
    const auto half = p.scalar(DType::f32), one = p.scalar(DType::f32);
    const auto s = p.scalar(DType::f32), c = p.scalar(DType::f32), c3 = p.scalar(DType::f32);
    // u = s (v + c v^3), t = tanh(u): gelu' = 0.5 (1 + t) + 0.5 v (1 - t^2) s (1 + 3 c v^2)
    const auto v2 = p.binary(ir::Op::mul, v, v);
    const auto inner = p.binary(ir::Op::add, one, p.binary(ir::Op::mul, c, v2));
    const auto t = p.unary(ir::Op::tanh, p.binary(ir::Op::mul, s, p.binary(ir::Op::mul, v, inner)));
    const auto sech2 = p.binary(ir::Op::sub, one, p.binary(ir::Op::mul, t, t));
    const auto du =
        p.binary(ir::Op::mul, s, p.binary(ir::Op::add, one, p.binary(ir::Op::mul, c3, v2)));
    const auto d = p.binary(
        ir::Op::add, p.binary(ir::Op::mul, half, p.binary(ir::Op::add, one, t)),
        p.binary(ir::Op::mul, p.binary(ir::Op::mul, half, v), p.binary(ir::Op::mul, sech2, du)));
    r = p.binary(ir::Op::mul, g, d);
  }
  p.output(p.dtype(r) == g_dtype ? r : p.cast(r, g_dtype));
  return p;
}

class LinearNode final : public Node {
 public:
  LinearNode(const TensorImpl& a, const TensorImpl& c, const TensorImpl* bias,
             EpilogueActivation act, const TensorImpl* act_input, bool want_a, bool want_c,
             bool want_bias)
      : act_(act), want_a_(want_a), want_c_(want_c), want_bias_(want_bias) {
    saved_ = {keep(a), keep(c), act_input ? keep(*act_input) : Handle{}};
    if (want_a) edges.push_back(edge_to(a));
    if (want_c) edges.push_back(edge_to(c));
    if (want_bias) edges.push_back(edge_to(*bias));
    bias_shape_ = bias ? bias->shape : Dims{};
  }
  const char* name() const override { return "linear"; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const TensorImpl& a = *saved_[0];
    const TensorImpl& c = *saved_[1];
    Handle dz = grads[0];
    if (act_ != EpilogueActivation::none) {
      const TensorImpl& v = *saved_[2];
      const ir::Program p = activation_gradient(act_, dz->dtype, v.dtype);
      static constexpr double kRelu[] = {0.0};
      static constexpr double kGelu[] = {0.5, 1.0, 0.7978845608028654, 0.044715, 3 * 0.044715};
      const TensorImpl* in[] = {dz.get(), &v};
      const std::span<const double> scalars =
          act_ == EpilogueActivation::relu ? std::span<const double>(kRelu) : kGelu;
      dz = run(be, p, in, scalars, dz->shape)[0];
    }
    std::vector<Handle> out;
    if (want_a_) {
      Handle da = be.empty(a.shape, a.dtype);
      if (da->numel() > 0) be.matmul(*dz, swapped(c, 1, 2), detail::Out(*da));
      out.push_back(da);
    }
    if (want_c_) out.push_back(matmul_c_gradient(be, a, c, *dz));
    if (want_bias_) out.push_back(row_sums(be, *dz));
    return out;
  }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

 private:
  // dz [B, m, n] summed over B and m, as the bias [n].
  Handle row_sums(Backend& be, const TensorImpl& dz) const {
    const std::int64_t n = dz.shape[2];
    if (n == 0) return be.empty(bias_shape_, dz.dtype);
    const Handle flat = contiguous(be, keep(dz));
    const Handle s = sum_dim(be, reshaped(*flat, {flat->numel() / n, n}), 0);
    return std::make_shared<TensorImpl>(reshaped(*s, bias_shape_));
  }

  EpilogueActivation act_;
  bool want_a_, want_c_, want_bias_;
  Dims bias_shape_;
};

}  // namespace

std::shared_ptr<Node> linear_node(const TensorImpl& a, const TensorImpl& c, const TensorImpl* bias,
                                  EpilogueActivation act, const TensorImpl* act_input, bool want_a,
                                  bool want_c, bool want_bias) {
  return std::make_shared<LinearNode>(a, c, bias, act, act_input, want_a, want_c, want_bias);
}

}  // namespace kiln::autodiff
