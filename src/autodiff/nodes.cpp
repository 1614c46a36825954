// Backward of each recorded backend call.
#include "autodiff/nodes.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autodiff/recipe.hpp"
#include "autodiff/tensor_ops.hpp"
#include "ir/derivative.hpp"

namespace kiln::autodiff {

namespace {

bool same_view(const View& a, const View& b) {
  return a.dtype == b.dtype && a.device == b.device && a.shape == b.shape &&
         a.strides == b.strides && a.offset == b.offset;
}

// Which inputs the gradient of `program` reads with every output seeded (a superset of what any
// backward of it reads), for the inputs `wanted`. Cached per thread: a training loop records the
// same few programs every step.
std::vector<bool> gradient_reads(const ir::Program& program, std::span<const bool> wanted) {
  struct Entry {
    ir::Program program;
    std::vector<bool> wanted, reads;
  };
  thread_local std::unordered_map<std::uint64_t, std::vector<Entry>> cache;
  std::uint64_t key = program.structure_hash();
  for (bool w : wanted) key = key * 31 + (w ? 2 : 1);
  std::vector<Entry>& bucket = cache[key];
  for (const Entry& e : bucket)
    if (e.program == program &&
        std::equal(wanted.begin(), wanted.end(), e.wanted.begin(), e.wanted.end()))
      return e.reads;
  if (cache.size() > 4096) {  // programs a loop does not repeat: start over rather than grow
    cache.clear();
    return gradient_reads(program, wanted);
  }
  const std::unique_ptr<bool[]> seeded(new bool[program.outputs.size()]);
  std::fill_n(seeded.get(), program.outputs.size(), true);
  const ir::Gradient g = ir::gradient(program, {seeded.get(), program.outputs.size()}, wanted);
  std::vector<bool> reads = inputs_read(g.program);
  reads.resize(program.inputs.size());  // (the upstream gradients follow the forward inputs)
  bucket.push_back({program, std::vector<bool>(wanted.begin(), wanted.end()), reads});
  return reads;
}

// An element-wise call. An input its gradient reads is kept, unless an element-wise call of the
// same shape wrote it (with this view, in f32): then its writer's Recipe is kept instead
// (autodiff/recipe.hpp), and backward computes the input inside the gradient program. An input
// the gradient does not read (the raw scores that attention scales, say) is held weakly, for a
// reader's recipe while it lives, so that it is freed when the forward pass lets go of it.
class ElementwiseNode final : public Node {
 public:
  ElementwiseNode(const ir::Program& p, std::span<const TensorImpl* const> in,
                  std::span<const double> scalars, std::span<const bool> wanted)
      : program_(p),
        scalars_(scalars.begin(), scalars.end()),
        wanted_(wanted.size()),
        via_(in.size()),
        unread_(in.size()),
        shape_(in[0]->shape) {
    saved_.resize(in.size());
    const std::vector<bool> reads = gradient_reads(p, wanted);
    for (std::size_t i = 0; i < in.size(); ++i) {
      wanted_[i] = wanted[i];
      if (wanted[i]) edges.push_back(edge_to(*in[i]));
      if (reads[i]) {
        via_[i] = writers_recipe(*in[i]);
        if (!via_[i]) saved_[i] = keep(*in[i]);
      } else {
        via_[i] = placeholder(in[i]->dtype);
        Unread& u = unread_[i].emplace();
        if (auto [writer, o] = writer_of(*in[i]); writer) {
          u.writer = writer;
          u.output = o;
        }
        u.view = *in[i];
        u.buffer = in[i]->buffer;
        u.view.buffer = nullptr;
      }
    }
  }
  // The recipes' tensors go to saved_, so that ~Node frees a long chain behind them iteratively.
  ~ElementwiseNode() override {
    for (auto* list : {&via_, &recipes_})
      for (auto& r : *list)
        if (r && r.use_count() == 1)
          saved_.insert(saved_.end(), r->inputs.begin(), r->inputs.end());
    via_.clear();
    recipes_.clear();
  }
  const char* name() const override { return "elementwise"; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    std::unique_ptr<bool[]> seeded(new bool[grads.size()]), wanted(new bool[wanted_.size()]);
    for (std::size_t j = 0; j < grads.size(); ++j) seeded[j] = grads[j] != nullptr;
    for (std::size_t i = 0; i < wanted_.size(); ++i) wanted[i] = wanted_[i];
    const ir::Gradient g =
        ir::gradient(program_, {seeded.get(), grads.size()}, {wanted.get(), wanted_.size()});
    std::vector<Handle> in = saved_;
    for (const Handle& h : grads)
      if (h) in.push_back(h);
    std::vector<double> scalars = scalars_;
    scalars.insert(scalars.end(), g.constants.begin(), g.constants.end());
    const ir::Program program = with_recipes(g.program, in, scalars, via_);
    std::vector<const TensorImpl*> ptrs;
    for (const Handle& h : in) ptrs.push_back(h.get());
    return run(be, program, ptrs, scalars, shape_);
  }
  bool release() override {
    recipes_.clear();
    via_.assign(via_.size(), nullptr);
    unread_.assign(unread_.size(), std::nullopt);
    return std::exchange(saved_, {}).size() > 0;
  }

  // Output o's value over kept tensors; null where it would be too long or is gone (an input it
  // needs that the gradient does not read, freed since, and made by no live element-wise node).
  std::shared_ptr<const Recipe> recipe(std::size_t o) {
    if (released || saved_.empty()) return nullptr;
    if (recipes_.size() <= o) recipes_.resize(o + 1);
    if (!recipes_[o]) {
      // Resolving an unread input asks its writer, and so on back along a chain: each step adds
      // a node, so past kMaxRecipeNodes steps the recipe would be refused anyway (and a long
      // chain must not exhaust the stack).
      thread_local std::size_t depth = 0;
      if (depth > kMaxRecipeNodes) return nullptr;
      ++depth;
      struct Leave {
        ~Leave() { --depth; }
      } leave;
      std::vector<Handle> in = saved_;
      std::vector<std::shared_ptr<const Recipe>> via = via_;
      const std::vector<bool> needs = inputs_read(program_, o);
      for (std::size_t i = 0; i < unread_.size(); ++i)
        if (unread_[i] && needs[i] && !resolve(*unread_[i], in[i], via[i])) return nullptr;
      std::vector<double> scalars = scalars_;
      const ir::Program p = with_recipes(program_, in, scalars, via);
      auto r = std::make_shared<Recipe>(extract(p, o, in, scalars));
      if (r->program.nodes.size() > kMaxRecipeNodes) return nullptr;
      recipes_[o] = std::move(r);
    }
    return recipes_[o];
  }

 private:
  // An input the gradient does not read: its writer (when an element-wise node of this shape
  // wrote it), else its memory, both weakly.
  struct Unread {
    std::weak_ptr<Node> writer;
    std::size_t output = 0;
    TensorImpl view;  // without its buffer
    std::weak_ptr<detail::Buffer> buffer;
  };

  // t's writer and output, where t is an f32 output of one element-wise call, as it wrote it.
  static std::pair<std::shared_ptr<ElementwiseNode>, std::size_t> writer_of(const TensorImpl& t) {
    if (t.dtype != DType::f32 || !t.buffer || !t.buffer->autograd) return {};
    const Meta& m = *t.buffer->autograd;
    if (m.writers.size() != 1) return {};
    auto writer = std::dynamic_pointer_cast<ElementwiseNode>(m.writers[0]);
    if (!writer) return {};
    for (std::size_t o = 0; o < writer->outputs.size(); ++o) {
      if (writer->outputs[o].meta.lock().get() == &m &&
          same_view(writer->outputs[o].view, View::of(t)))
        return {writer, o};
    }
    return {};
  }
  static std::shared_ptr<const Recipe> writers_recipe(const TensorImpl& t) {
    auto [writer, o] = writer_of(t);
    return writer ? writer->recipe(o) : nullptr;
  }
  // The value of an unread input for a recipe: its writer's recipe, else its memory.
  static bool resolve(const Unread& u, Handle& in, std::shared_ptr<const Recipe>& via) {
    if (auto w = u.writer.lock()) {
      if (auto r = static_cast<ElementwiseNode&>(*w).recipe(u.output)) {
        via = std::move(r);
        return true;
      }
    }
    if (auto b = u.buffer.lock()) {
      TensorImpl t = u.view;
      t.buffer = std::move(b);
      in = keep(t);
      via = nullptr;
      return true;
    }
    return false;
  }

  // `p` (over this call's inputs first) with every input that has a recipe in `via` computed in
  // it: the recipe's inputs and scalars appended to `in` and `scalars`, the input dropped from
  // `in`.
  static ir::Program with_recipes(ir::Program p, std::vector<Handle>& in,
                                  std::vector<double>& scalars,
                                  const std::vector<std::shared_ptr<const Recipe>>& via) {
    for (std::size_t i = via.size(); i-- > 0;) {
      if (!via[i]) continue;
      p = substitute(p, i, via[i]->program);
      in.erase(in.begin() + static_cast<std::ptrdiff_t>(i));
      in.insert(in.end(), via[i]->inputs.begin(), via[i]->inputs.end());
      scalars.insert(scalars.end(), via[i]->scalars.begin(), via[i]->scalars.end());
    }
    return p;
  }

  ir::Program program_;
  std::vector<double> scalars_;
  std::vector<char> wanted_;
  // Per input: its recipe (a writer's, or a placeholder for an unread input), or null (saved_).
  std::vector<std::shared_ptr<const Recipe>> via_;
  std::vector<std::optional<Unread>> unread_;
  std::vector<std::shared_ptr<const Recipe>> recipes_;
  Dims shape_;
};

class ReduceNode final : public Node {
 public:
  ReduceNode(detail::ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out)
      : op_(op), dim_(dim), x_shape_(x.shape), dtype_(x.dtype) {
    edges.push_back(edge_to(x));
    if (reads_outputs()) {
      saved_.push_back(keep(x));
      out_ = WeakOutput(out);
    }
  }
  const char* name() const override { return detail::reduce_name(op_); }
  bool reads_outputs() const override {
    return op_ == detail::ReduceOp::max || op_ == detail::ReduceOp::min;
  }

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
    const TensorImpl y = broadcast(*out_.get(), x_shape_);
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
  WeakOutput out_;
};

class MatmulNode final : public Node {
 public:
  MatmulNode(const TensorImpl& a, const TensorImpl& c, bool want_a, bool want_c)
      : want_a_(want_a), want_c_(want_c) {
    saved_ = {keep(a), keep(c)};
    if (want_a) edges.push_back(edge_to(a));
    if (want_c) edges.push_back(edge_to(c));
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
    if (want_c_) out.push_back(matmul_c_gradient(be, a, c, g));
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
    if (want_x) edges.push_back(edge_to(x));
    if (want_src) edges.push_back(edge_to(*src));
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

// Into how many products of equal row ranges a weight gradient of `out_elements` from `rows` rows
// is split (1: none): only a small weight (under 2^20 elements: fewer 128 x 128 output tiles than
// an H100 has SMs) from at least 8192 rows, in pieces of at least 1024 rows, at most 16.
std::int64_t row_parts(std::int64_t rows, std::int64_t out_elements) {
  if (out_elements > (std::int64_t{1} << 20) || rows < 8192) return 1;
  std::int64_t parts = 16;
  while (parts > 1 && (rows % parts != 0 || rows / parts < 1024)) parts /= 2;
  return parts;
}

}  // namespace

// c's gradient a^T g, [B, k, m] @ [B, m, n]. A c broadcast over the batch (a weight in x @ W^T)
// whose a and g stack their batches as rows gets one product over all B m rows, [1, k, n],
// not B products summed afterwards; and a c that is a transposed matrix gets it as g^T a,
// in that matrix's own layout, which the gradient slot then takes as it is.
Handle matmul_c_gradient(Backend& be, const TensorImpl& a, const TensorImpl& c,
                         const TensorImpl& g) {
  const std::int64_t batch = c.shape[0], m = a.shape[1];
  auto stacked = [&](const TensorImpl& t) {
    return t.shape[0] == 1 || t.strides[0] == m * t.strides[1];
  };
  if ((batch != 1 && c.strides[0] != 0) || !stacked(a) || !stacked(g)) {
    Handle dc = be.empty(c.shape, c.dtype);
    if (dc->numel() > 0) be.matmul(swapped(a, 1, 2), g, detail::Out(*dc));
    return dc;
  }
  auto rows = [&](const TensorImpl& t) {
    TensorImpl v = t;
    v.shape = {1, batch * m, t.shape[2]};
    v.strides = {batch * m * t.strides[1], t.strides[1], t.strides[2]};
    return v;
  };
  const TensorImpl a2 = rows(a), g2 = rows(g);
  const std::int64_t k = c.shape[1], n = c.shape[2];
  if (c.strides[1] == 1 && c.strides[2] == k) {  // c is W^T, W [n, k] row-major
    const std::int64_t rows_total = batch * m, parts = row_parts(rows_total, n * k);
    if (parts > 1) {
      // A small W from many rows: `parts` products of rows_total / parts rows each, one batched
      // call, then their sum: the products fill the device where one product of n x k tiles
      // would leave most of it idle (GPT-2's [768, 768] from 16384 rows: 428 us as one cuBLASLt
      // product, H100, 2026-12-06).
      auto split = [&](const TensorImpl& t) {
        TensorImpl v = t;
        v.shape = {parts, rows_total / parts, t.shape[2]};
        v.strides = {rows_total / parts * t.strides[1], t.strides[1], t.strides[2]};
        return v;
      };
      Handle pieces = be.empty({parts, n, k}, c.dtype);
      be.matmul(swapped(split(g2), 1, 2), split(a2), detail::Out(*pieces));
      const Handle dw = sum_dim(be, *pieces, 0);
      return std::make_shared<TensorImpl>(swapped(*dw, 1, 2));
    }
    Handle dw = be.empty({1, n, k}, c.dtype);
    if (dw->numel() > 0) be.matmul(swapped(g2, 1, 2), a2, detail::Out(*dw));
    return std::make_shared<TensorImpl>(swapped(*dw, 1, 2));
  }
  Handle dc = be.empty({1, k, n}, c.dtype);
  if (dc->numel() > 0) be.matmul(swapped(a2, 1, 2), g2, detail::Out(*dc));
  return dc;
}

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
