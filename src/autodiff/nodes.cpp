// Backward of each recorded backend call.
#include "autodiff/nodes.hpp"

#include <utility>

#include "autodiff/tensor_ops.hpp"
#include "ir/derivative.hpp"

namespace kiln::autodiff {

namespace {

Handle keep(const TensorImpl& t) { return std::make_shared<TensorImpl>(t); }

class ElementwiseNode final : public Node {
 public:
  ElementwiseNode(const ir::Program& p, std::span<const TensorImpl* const> in,
                  std::span<const double> scalars, std::span<const bool> wanted)
      : program_(p), scalars_(scalars.begin(), scalars.end()), wanted_(wanted.size()) {
    for (std::size_t i = 0; i < in.size(); ++i) {
      saved_.push_back(keep(*in[i]));
      wanted_[i] = wanted[i];
      if (wanted[i]) edges.push_back({meta_for(*in[i]), View::of(*in[i])});
    }
  }
  const char* name() const override { return "elementwise"; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    std::unique_ptr<bool[]> seeded(new bool[grads.size()]), wanted(new bool[wanted_.size()]);
    for (std::size_t j = 0; j < grads.size(); ++j) seeded[j] = grads[j] != nullptr;
    for (std::size_t i = 0; i < wanted_.size(); ++i) wanted[i] = wanted_[i];
    const ir::Gradient g =
        ir::gradient(program_, {seeded.get(), grads.size()}, {wanted.get(), wanted_.size()});
    std::vector<const TensorImpl*> in;
    for (const Handle& h : saved_) in.push_back(h.get());
    for (const Handle& h : grads)
      if (h) in.push_back(h.get());
    std::vector<double> scalars = scalars_;
    scalars.insert(scalars.end(), g.constants.begin(), g.constants.end());
    return run(be, g.program, in, scalars, saved_[0]->shape);
  }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

 private:
  ir::Program program_;
  std::vector<double> scalars_;
  std::vector<char> wanted_;
};

class ReduceNode final : public Node {
 public:
  ReduceNode(detail::ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out)
      : op_(op), dim_(dim), x_shape_(x.shape), dtype_(x.dtype) {
    edges.push_back({meta_for(x), View::of(x)});
    if (op == detail::ReduceOp::max || op == detail::ReduceOp::min) {
      saved_.push_back(keep(x));
      saved_.push_back(keep(out));
    }
  }
  const char* name() const override { return detail::reduce_name(op_); }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const TensorImpl g = broadcast(*grads[0], x_shape_);
    std::int64_t n = 1;  // the elements reduced into one
    for (std::size_t d = 0; d < x_shape_.size(); ++d)
      if (dim_ < 0 || static_cast<int>(d) == dim_) n *= x_shape_[d];
    ir::Program p;
    const DType t = compute_dtype(dtype_);
    const auto gv = p.cast(p.input(g.dtype), t);
    if (op_ == detail::ReduceOp::sum) {
      p.output(p.cast(gv, dtype_));
      const TensorImpl* in[] = {&g};
      return run(be, p, in, {}, x_shape_);
    }
    if (op_ == detail::ReduceOp::mean) {
      p.output(p.cast(p.binary(ir::Op::div, gv, p.scalar(t)), dtype_));
      const TensorImpl* in[] = {&g};
      const double count = static_cast<double>(n);
      return run(be, p, in, std::span(&count, 1), x_shape_);
    }
    // max / min: the elements equal to the result share its gradient.
    const TensorImpl y = broadcast(*saved_[1], x_shape_);
    ir::Program hit;
    hit.output(hit.cast(hit.binary(ir::Op::eq, hit.input(dtype_), hit.input(dtype_)), t));
    const TensorImpl* xy[] = {saved_[0].get(), &y};
    Handle mask = run(be, hit, xy, {}, x_shape_)[0];
    Handle count = mask;
    for (std::size_t d = 0; d < x_shape_.size(); ++d)
      if (dim_ < 0 || static_cast<int>(d) == dim_) count = sum_dim(be, *count, static_cast<int>(d));
    const TensorImpl c = broadcast(*count, x_shape_);
    const auto m = p.input(t), cnt = p.input(t);
    p.output(p.cast(p.binary(ir::Op::mul, m, p.binary(ir::Op::div, gv, cnt)), dtype_));
    const TensorImpl* in[] = {&g, mask.get(), &c};
    return run(be, p, in, {}, x_shape_);
  }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

 private:
  detail::ReduceOp op_;
  int dim_;
  Dims x_shape_;
  DType dtype_;
};

class MatmulNode final : public Node {
 public:
  MatmulNode(const TensorImpl& a, const TensorImpl& c, bool want_a, bool want_c)
      : want_a_(want_a), want_c_(want_c) {
    saved_ = {keep(a), keep(c)};
    if (want_a) edges.push_back({meta_for(a), View::of(a)});
    if (want_c) edges.push_back({meta_for(c), View::of(c)});
  }
  const char* name() const override { return "matmul"; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const TensorImpl& a = *saved_[0];
    const TensorImpl& c = *saved_[1];
    const TensorImpl& g = *grads[0];
    std::vector<Handle> out;
    if (want_a_) {  // [B, m, n] @ [B, n, k]
      Handle da = be.empty(a.shape, a.dtype);
      if (da->numel() > 0) be.matmul(g, swapped(c, 1, 2), detail::Out(*da));
      out.push_back(da);
    }
    if (want_c_) {  // [B, k, m] @ [B, m, n]
      Handle dc = be.empty(c.shape, c.dtype);
      if (dc->numel() > 0) be.matmul(swapped(a, 1, 2), g, detail::Out(*dc));
      out.push_back(dc);
    }
    return out;
  }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

 private:
  bool want_a_, want_c_;
};

class IndexNode final : public Node {
 public:
  IndexNode(detail::IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
            const TensorImpl* src, bool want_x, bool want_src)
      : op_(op),
        dim_(dim),
        x_shape_(x.shape),
        dtype_(x.dtype),
        want_x_(want_x),
        want_src_(want_src) {
    saved_.push_back(keep(index));
    if (want_x) edges.push_back({meta_for(x), View::of(x)});
    if (want_src) edges.push_back({meta_for(*src), View::of(*src)});
  }
  const char* name() const override { return detail::index_op_name(op_); }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    using detail::IndexOp;
    const Handle g = contiguous(be, grads[0]);
    const TensorImpl& index = *saved_[0];
    std::vector<Handle> out;
    if (op_ == IndexOp::gather || op_ == IndexOp::index_select) {
      // x's gradient: zeros, plus g at the positions read.
      Handle zero = zeros(be, detail::numel(x_shape_), dtype_);
      TensorImpl z = *zero;
      z.shape = x_shape_;
      z.strides = detail::contiguous_strides(x_shape_);
      Handle dx = be.empty(x_shape_, dtype_);
      const IndexOp back = op_ == IndexOp::gather ? IndexOp::scatter_add : IndexOp::index_add;
      be.index(back, z, dim_, index, g.get(), detail::Out(*dx));
      out.push_back(dx);
      return out;
    }
    // scatter_add / index_add: x's gradient is g; src's is g read where src was added.
    if (want_x_) out.push_back(g);
    if (want_src_) {
      Dims shape = op_ == IndexOp::scatter_add ? index.shape : g->shape;
      if (op_ == IndexOp::index_add) shape[dim_] = index.shape[0];
      Handle ds = be.empty(shape, dtype_);
      const IndexOp back = op_ == IndexOp::scatter_add ? IndexOp::gather : IndexOp::index_select;
      be.index(back, *g, dim_, index, nullptr, detail::Out(*ds));
      out.push_back(ds);
    }
    return out;
  }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

 private:
  detail::IndexOp op_;
  int dim_;
  Dims x_shape_;
  DType dtype_;
  bool want_x_, want_src_;
};

}  // namespace

std::shared_ptr<Node> elementwise_node(const ir::Program& program,
                                       std::span<const TensorImpl* const> inputs,
                                       std::span<const double> scalars,
                                       std::span<const bool> wanted) {
  return std::make_shared<ElementwiseNode>(program, inputs, scalars, wanted);
}

std::shared_ptr<Node> reduce_node(detail::ReduceOp op, const TensorImpl& x, int dim,
                                  const TensorImpl& out) {
  return std::make_shared<ReduceNode>(op, x, dim, out);
}

std::shared_ptr<Node> matmul_node(const TensorImpl& a, const TensorImpl& c, bool want_a,
                                  bool want_c) {
  return std::make_shared<MatmulNode>(a, c, want_a, want_c);
}

std::shared_ptr<Node> index_node(detail::IndexOp op, const TensorImpl& x, int dim,
                                 const TensorImpl& index, const TensorImpl* src, bool want_x,
                                 bool want_src) {
  return std::make_shared<IndexNode>(op, x, dim, index, src, want_x, want_src);
}

}  // namespace kiln::autodiff
