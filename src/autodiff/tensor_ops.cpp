// Tensor operations on a Backend for the backward pass.
#include "autodiff/tensor_ops.hpp"

#include <utility>

namespace kiln::autodiff {

std::vector<Handle> run(Backend& be, const ir::Program& program,
                        std::span<const TensorImpl* const> inputs, std::span<const double> scalars,
                        const Dims& shape) {
  std::vector<Handle> outs;
  std::vector<const TensorImpl*> ptrs;
  ir::Program computed = program;
  computed.outputs.clear();
  for (std::int32_t o : program.outputs) {
    // An output that is an input as it is (a sum's gradient passed to each addend, a cast to the
    // dtype it has) shares that input's buffer: a copy would be a kernel of its own wherever a
    // matmul or a reduction reads it.
    const ir::Node& node = program.nodes[static_cast<std::size_t>(o)];
    if (node.op == ir::Op::input) {
      const TensorImpl& in = *inputs[static_cast<std::size_t>(node.a)];
      if (in.dtype == node.dtype && in.shape == shape && in.is_contiguous()) {
        outs.push_back(std::make_shared<TensorImpl>(in));
        continue;
      }
    }
    computed.output(o);
    outs.push_back(be.empty(shape, program.dtype(o)));
    ptrs.push_back(outs.back().get());
  }
  if (!ptrs.empty() && detail::numel(shape) > 0)
    be.elementwise(computed, inputs, scalars, detail::Outs(ptrs));
  return outs;
}

Handle zeros(Backend& be, std::int64_t n, DType dtype) {
  ir::Program p;
  p.output(p.cast(p.scalar(DType::f32), dtype));
  const double zero = 0.0;
  return run(be, p, {}, std::span(&zero, 1), {n})[0];
}

namespace {
// a + b in a's dtype (computed in its compute dtype).
ir::Program sum_program(DType a, DType b) {
  ir::Program p;
  const DType t = compute_dtype(a);
  // (One input a statement: as arguments of one call their order would be the compiler's, and
  // input 0 must be a's. GCC's right-to-left order made input 0 b's dtype.)
  const auto av = p.cast(p.input(a), t);
  const auto bv = p.cast(p.input(b), t);
  p.output(p.cast(p.binary(ir::Op::add, av, bv), a));
  return p;
}
}  // namespace

Handle add(Backend& be, const TensorImpl& a, const TensorImpl& b) {
  const TensorImpl* in[] = {&a, &b};
  return run(be, sum_program(a.dtype, b.dtype), in, {}, a.shape)[0];
}

void add_into(Backend& be, const TensorImpl& src, const TensorImpl& dst) {
  if (dst.numel() == 0) return;
  const TensorImpl* in[] = {&dst, &src};
  const TensorImpl* out[] = {&dst};
  be.elementwise(sum_program(dst.dtype, src.dtype), in, {}, detail::Outs(out));
}

Handle keep(const TensorImpl& t) { return std::make_shared<TensorImpl>(t); }

Handle sum_dim(Backend& be, const TensorImpl& x, int dim) {
  Dims shape = x.shape;
  shape[dim] = 1;
  Handle out = be.empty(shape, detail::reduce_result_dtype(detail::ReduceOp::sum, x.dtype));
  if (out->numel() > 0) be.reduce(detail::ReduceOp::sum, x, dim, detail::Out(*out));
  return out;
}

void copy_into(Backend& be, const TensorImpl& src, const TensorImpl& dst) {
  if (dst.numel() == 0) return;
  ir::Program p;
  p.output(p.cast(p.input(src.dtype), dst.dtype));
  const TensorImpl* in[] = {&src};
  const TensorImpl* out[] = {&dst};
  be.elementwise(p, in, {}, detail::Outs(out));
}

TensorImpl broadcast(const TensorImpl& t, const Dims& shape) {
  TensorImpl v = t;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (v.shape[d] != shape[d]) v.strides[d] = 0;
  v.shape = shape;
  return v;
}

TensorImpl iota_along(Backend& be, std::int64_t n, int dim, const Dims& shape) {
  ir::Program p;
  p.output(p.index());
  const Handle h = run(be, p, {}, {}, {n})[0];
  TensorImpl v = *h;
  v.shape = shape;
  v.strides.assign(shape.size(), 0);
  v.strides[static_cast<std::size_t>(dim)] = 1;
  return v;
}

TensorImpl reshaped(const TensorImpl& t, const Dims& shape) {
  TensorImpl v = t;
  v.shape = shape;
  v.strides = detail::contiguous_strides(shape);
  return v;
}

TensorImpl swapped(const TensorImpl& t, int d0, int d1) {
  TensorImpl v = t;
  std::swap(v.shape[d0], v.shape[d1]);
  std::swap(v.strides[d0], v.strides[d1]);
  return v;
}

Handle contiguous(Backend& be, const Handle& t) {
  if (t->is_contiguous()) return t;
  Handle c = be.empty(t->shape, t->dtype);
  copy_into(be, *t, *c);
  return c;
}

namespace {
// Whether `into` reaches every element of a buffer of numel elements exactly once (its dims, in
// some order, are the buffer's row-major dims: contiguous, or transposed as a weight is in
// x @ W^T) and `grad` lays its elements out with the same strides: then grad's buffer, read in
// order, is the gradient of the buffer in order.
bool same_dense_layout(const View& into, const TensorImpl& grad, std::int64_t numel) {
  if (into.offset != 0 || grad.shape != into.shape || detail::numel(into.shape) != numel ||
      !detail::dense_strides(into.shape, into.strides))
    return false;
  for (std::size_t d = 0; d < into.shape.size(); ++d)
    if (into.shape[d] > 1 && grad.strides[d] != into.strides[d]) return false;
  return true;
}
}  // namespace

void accumulate(Backend& be, Handle& slot, const Meta& m, const View& view, const Handle& g) {
  Handle grad = g;
  View into = view;
  // A broadcast dim the node summed already (a weight's gradient over the batch, as one product)
  // comes with extent 1.
  for (std::size_t d = 0; d < into.shape.size(); ++d)
    if (into.strides[d] == 0 && grad->shape[d] == 1) into.shape[d] = 1;
  // Summed over each run of adjacent broadcast dims (every element read the same) at once when
  // the gradient is contiguous: its dims merge into one, so a bias's gradient [B, T, N] -> [N]
  // is one column sum over B T rows, not a short sum over B (slow, and rounded) and then T.
  auto broadcast_dim = [&](std::size_t d) { return into.strides[d] == 0 && into.shape[d] > 1; };
  for (std::size_t d = 0; d < view.shape.size();) {
    if (!broadcast_dim(d)) {
      ++d;
      continue;
    }
    std::size_t end = d + 1;
    if (grad->is_contiguous())
      while (end < view.shape.size() && broadcast_dim(end)) ++end;
    Dims merged = grad->shape, kept = grad->shape;
    merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(d) + 1,
                 merged.begin() + static_cast<std::ptrdiff_t>(end));
    for (std::size_t k = d; k < end; ++k) {
      merged[d] *= k > d ? grad->shape[k] : 1;
      kept[k] = into.shape[k] = 1;
    }
    TensorImpl x = *grad;
    x.shape = merged;
    x.strides = end > d + 1 ? detail::contiguous_strides(merged) : grad->strides;
    auto sum = std::make_shared<TensorImpl>(*sum_dim(be, x, static_cast<int>(d)));
    sum->shape = kept;
    sum->strides = detail::contiguous_strides(kept);
    grad = sum;
    d = end;
  }
  if (grad->dtype != m.dtype) {
    Handle cast = be.empty(grad->shape, m.dtype);
    copy_into(be, *grad, *cast);
    grad = cast;
  }
  if (same_dense_layout(into, *grad, m.numel)) {
    // grad's buffer in order (a transposed grad too) as the flat gradient.
    if (slot && grad->is_contiguous()) {
      // Added in the gradient's shape, so that under fusion it joins its group.
      grad = add(be, reshaped(*slot, grad->shape), *grad);
    } else if (slot) {
      grad = add(be, *slot, reshaped(*grad, {m.numel}));
    }
    slot = std::make_shared<TensorImpl>(reshaped(*grad, {m.numel}));
    return;
  }
  // A view that covers part of the buffer (q, k and v slices of one projection): added in place
  // into the slot where nothing else can see it change (this handle the only one of a flat
  // buffer), else into a flat of zeros that is then added (a full-size fill and sum per view).
  if (slot && slot.use_count() == 1 && slot->buffer.use_count() == 1 && slot->offset == 0 &&
      slot->is_contiguous() && slot->numel() == m.numel && slot->dtype == m.dtype) {
    add_into(be, *grad, into.over(*slot));
    return;
  }
  Handle flat = zeros(be, m.numel, m.dtype);
  copy_into(be, *grad, into.over(*flat));
  slot = slot ? add(be, *slot, *flat) : flat;
}

}  // namespace kiln::autodiff
