// Recording calls that need a gradient.
#include "autodiff/autodiff_backend.hpp"

#include <array>

#include "autodiff/nodes.hpp"
#include "ir/derivative.hpp"

namespace kiln::autodiff {

namespace {

// Whether t's elements need a gradient: its buffer carries a Meta.
bool needs(const detail::TensorImpl& t) { return t.buffer && t.buffer->autograd != nullptr; }

// Makes `node` the writer of output `index`, `out`, of a floating dtype.
void attach(const std::shared_ptr<Node>& node, std::size_t index, const detail::TensorImpl& out) {
  if (node->outputs.size() <= index) node->outputs.resize(index + 1);
  if (!ir::differentiable(out.dtype)) return;
  std::shared_ptr<Meta> m = meta_for(out);
  m->writers.push_back(node);
  node->outputs[index] = {m, View::of(out)};
}

void finish(const std::shared_ptr<Node>& node, Device device) {
  node->sequence = next_sequence();
  node->device = device;
}

}  // namespace

void Autodiff::elementwise(const ir::Program& program,
                           std::span<const detail::TensorImpl* const> inputs,
                           std::span<const double> scalars, detail::Outs outputs) {
  inner().elementwise(program, inputs, scalars, outputs);
  // The common case, no input needing a gradient, costs this loop only.
  bool any = false;
  for (const detail::TensorImpl* t : inputs) any |= needs(*t);
  if (!any || !grad_enabled()) return;
  std::unique_ptr<bool[]> wanted(new bool[inputs.size()]);
  any = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    wanted[i] = needs(*inputs[i]) && ir::differentiable(program.inputs[i]);
    any |= wanted[i];
  }
  if (!any) return;
  auto node = elementwise_node(program, inputs, scalars, {wanted.get(), inputs.size()});
  finish(node, device());
  for (std::size_t o = 0; o < outputs.tensors.size(); ++o) attach(node, o, *outputs.tensors[o]);
}

void Autodiff::reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim, detail::Out out) {
  inner().reduce(op, x, dim, out);
  if (!needs(x) || !grad_enabled() || !ir::differentiable(out->dtype)) return;
  auto node = reduce_node(op, x, dim, *out);
  finish(node, device());
  attach(node, 0, *out);
}

void Autodiff::matmul(const detail::TensorImpl& a, const detail::TensorImpl& c, detail::Out out) {
  inner().matmul(a, c, out);
  if ((!needs(a) && !needs(c)) || !grad_enabled()) return;
  auto node = matmul_node(a, c, needs(a), needs(c));
  finish(node, device());
  attach(node, 0, *out);
}

bool Autodiff::matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& c,
                               const detail::MatmulEpilogue& e, detail::Out out) {
  const bool want_a = needs(a), want_c = needs(c), want_bias = e.bias && needs(*e.bias);
  if ((!want_a && !want_c && !want_bias) || !grad_enabled())
    return inner().matmul_epilogue(a, c, e, out);
  // GELU's gradient reads the pre-activation: written aside by the same call when the caller
  // did not ask for it. ReLU's reads the output.
  detail::MatmulEpilogue with_z = e;
  detail::Handle z;
  if (e.activation == detail::EpilogueActivation::gelu_tanh && !e.pre_activation) {
    z = empty(out->shape, out->dtype);
    with_z.pre_activation.emplace(*z);
  }
  if (!inner().matmul_epilogue(a, c, with_z, out)) return false;
  const detail::TensorImpl* act_input = nullptr;
  if (e.activation == detail::EpilogueActivation::gelu_tanh) act_input = &**with_z.pre_activation;
  if (e.activation == detail::EpilogueActivation::relu) act_input = &*out;
  auto node = linear_node(a, c, e.bias, e.activation, act_input, want_a, want_c, want_bias);
  finish(node, device());
  attach(node, 0, *out);
  return true;
}

void Autodiff::index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
                     const detail::TensorImpl& index, const detail::TensorImpl* src,
                     detail::Out out) {
  inner().index(op, x, dim, index, src, out);
  const bool want_x = needs(x), want_src = src && needs(*src);
  if ((!want_x && !want_src) || !grad_enabled() || !ir::differentiable(out->dtype)) return;
  auto node = index_node(op, x, dim, index, src, want_x, want_src);
  finish(node, device());
  attach(node, 0, *out);
}

void Autodiff::rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
                    detail::Out y, const detail::RowStats& stats) {
  inner().rows(op, x, params, y, stats);
  const bool want_x = needs(x), want_w = params.weight && needs(*params.weight),
             want_b = params.bias && needs(*params.bias),
             want_r = params.residual && needs(*params.residual);
  if ((!want_x && !want_w && !want_b && !want_r) || !grad_enabled()) return;
  auto node = rows_node(op, x, params, *y, stats, want_x, want_w, want_b, want_r);
  finish(node, device());
  attach(node, 0, *y);
  if (stats.sum) attach(node, 1, **stats.sum);
}

void Autodiff::order(detail::OrderOp op, const detail::TensorImpl& x,
                     const detail::OrderParams& params, detail::Out values,
                     std::optional<detail::Out> indices) {
  inner().order(op, x, params, values, indices);
  if (!needs(x) || !grad_enabled() || !ir::differentiable(values->dtype)) return;
  auto node = order_node(op, x, params, indices ? &**indices : nullptr);
  finish(node, device());
  attach(node, 0, *values);  // the indices (i32) carry no gradient
}

bool Autodiff::attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                         const detail::TensorImpl& v, const detail::AttentionParams& params,
                         detail::Out o, std::optional<detail::Out> lse) {
  const std::array<bool, 3> want = {needs(q), needs(k), needs(v)};
  if ((!want[0] && !want[1] && !want[2]) || !grad_enabled() || !ir::differentiable(o->dtype))
    return inner().attention(q, k, v, params, o, lse);
  // Checked before lse's shape is read from q's.
  detail::check_attention_call(q, k, v, params, *o, lse ? &**lse : nullptr);
  detail::Handle made;
  if (!lse) {
    made = empty({q.shape[0], q.shape[1], q.shape[2]}, DType::f32);
    lse.emplace(*made);
  }
  if (!inner().attention(q, k, v, params, o, lse)) return false;
  auto node = attention_node(q, k, v, *o, **lse, params, want);
  finish(node, device());
  attach(node, 0, *o);  // lse carries no gradient
  return true;
}

std::vector<detail::BackendFeature> Autodiff::features() const {
  return {{"autodiff", "reverse mode; records only ops on tensors that need a gradient"}};
}

}  // namespace kiln::autodiff
