// Backward of Backend::rows (softmax, log_softmax, layer_norm, rms_norm over the last dim), with
// element-wise programs and sums over the last dim (and over the rows, for weight and bias); the
// norms' through the backend's kernel (Backend::norm_backward) where it has one.
//   softmax:     dx = y (g - sum(g y))
//   log_softmax: dx = g - exp(y) sum(g)
//   layer_norm:  xhat = (x - mean) rstd, dxhat = g w: dx = rstd (dxhat - mean(dxhat) -
//                xhat mean(dxhat xhat)); dw = sum over rows of g xhat, db = sum over rows of g
//   rms_norm:    xhat = x rstd: dx = rstd (dxhat - xhat mean(dxhat xhat)); dw as layer_norm's
//   logsumexp:   dx = g exp(x - y), g and y one value per row
// A norm of s = x + residual (RowParams::residual) reads s, its own output, which it holds weakly
// (held strongly, s's gradient record would hold the node, and a graph dropped without backward
// would never be freed); it keeps x and the residual instead, and adds them again where s is gone
// by backward (no op read it: a model's last norm). Both addends get the norm's dx plus the
// gradient of s (the residual stream's), the residual's rounded to its dtype: the backend's
// kernel adds and rounds in its pass (NormGrads::dsum, dx_half).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"
#include "kiln/error.hpp"

namespace kiln::autodiff {

namespace {

using detail::RowOp;
constexpr DType kF32 = DType::f32;

// A per-row tensor (one value per row of `shape`, contiguous) seen at every element of `shape`.
TensorImpl per_row(const TensorImpl& stat, const Dims& shape) {
  TensorImpl v = stat;
  v.strides = detail::contiguous_strides(Dims(shape.begin(), shape.end() - 1));
  v.strides.push_back(0);
  v.shape = shape;
  return v;
}

// A per-column tensor ([n]) seen at every element of x.
TensorImpl per_column(const TensorImpl& p, const Dims& shape) {
  TensorImpl v = p;
  v.strides.assign(shape.size(), 0);
  v.strides.back() = p.strides[0];
  v.shape = shape;
  return v;
}

// t (contiguous) summed over every row: [n].
Handle sum_rows(Backend& be, const Handle& t, DType dtype) {
  const std::int64_t n = t->shape.back();
  Handle s = sum_dim(be, reshaped(*t, {t->numel() / std::max<std::int64_t>(n, 1), n}), 0);
  const TensorImpl col = reshaped(*s, {n});
  if (col.dtype == dtype) return std::make_shared<TensorImpl>(col);
  Handle out = be.empty({n}, dtype);
  copy_into(be, col, *out);
  return out;
}

class RowsNode final : public Node {
 public:
  RowsNode(RowOp op, const TensorImpl& x, const detail::RowParams& p, const TensorImpl& y,
           const detail::RowStats& stats, bool want_x, bool want_w, bool want_b, bool want_r)
      : op_(op),
        y_(y),
        x_shape_(x.shape),
        x_dtype_(x.dtype),
        residual_dtype_(p.residual ? std::optional<DType>(p.residual->dtype) : std::nullopt),
        want_x_(want_x),
        want_w_(want_w),
        want_b_(want_b),
        want_r_(want_r) {
    // x, (y: y_), weight, mean, rstd, residual. softmax's and log_softmax's gradients read y
    // alone: x (the logits of a cross-entropy, attention's scores) is not kept for them.
    saved_ = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    if (op == RowOp::logsumexp || detail::row_op_normalises(op)) saved_[0] = keep(x);
    if (p.residual) {
      saved_[5] = keep(*p.residual);
      sum_ = WeakOutput(**stats.sum);
    }
    if (detail::row_op_normalises(op)) {
      if (!stats.rstd || (op == RowOp::layer_norm && !stats.mean))
        throw InternalError(fmt::format("autodiff: {} recorded without its row statistics",
                                        detail::row_op_name(op)));
      if (p.weight) saved_[2] = keep(*p.weight);
      if (stats.mean) saved_[3] = keep(**stats.mean);
      saved_[4] = keep(**stats.rstd);
    }
    if (want_x) edges.push_back(edge_to(x));
    if (want_r) edges.push_back(edge_to(*p.residual));
    if (want_w) edges.push_back(edge_to(*p.weight));
    if (want_b) edges.push_back(edge_to(*p.bias));
  }
  const char* name() const override { return detail::row_op_name(op_); }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }
  bool reads_outputs() const override {
    return !detail::row_op_normalises(op_) || residual_dtype_.has_value();
  }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    if (residual_dtype_) return add_norm_backward(be, grads);
    return own_backward(be, saved_[0], *grads[0], want_x_);
  }

 private:
  // A norm of s = x + residual: g (y's gradient) and dsum (s's), either null where none reached
  // it. x and the residual both get dx = the norm's dx + dsum (the residual's in its dtype); the
  // weight and bias get the norm's (none without g).
  std::vector<Handle> add_norm_backward(Backend& be, std::span<const Handle> grads) {
    const Handle g = grads[0];
    const Handle dsum = grads.size() > 1 && grads[1] ? contiguous(be, grads[1]) : nullptr;
    const bool want_dx = want_x_ || want_r_;
    std::vector<Handle> norm;  // [dx (want_dx), dw, db], each where wanted; dx includes dsum
    Handle dx_half;
    if (g) {
      const Handle s = sum(be);
      const bool half = want_r_ && *residual_dtype_ != x_dtype_;
      std::optional<std::vector<Handle>> k;
      if (g->is_contiguous())
        k = kernel_backward(be, *s, *g, want_dx, dsum.get(), half ? &dx_half : nullptr);
      norm = k ? std::move(*k) : own_backward(be, s, *g, want_dx);
      if (!k && dsum && want_dx) norm[0] = add(be, *norm[0], *dsum);
    } else {  // the norm's output unused: only dsum flows, to x and the residual
      if (want_dx) norm.push_back(dsum);
      if (want_w_) norm.push_back(nullptr);
      if (want_b_) norm.push_back(nullptr);
    }
    std::vector<Handle> out;
    const Handle dx = want_dx ? norm[0] : nullptr;
    if (want_x_) out.push_back(dx);
    if (want_r_) {
      if (!dx_half && dx && dx->dtype != *residual_dtype_) {
        dx_half = be.empty(dx->shape, *residual_dtype_);
        copy_into(be, *dx, *dx_half);
      }
      out.push_back(dx_half ? dx_half : dx);
    }
    out.insert(out.end(), norm.begin() + (want_dx ? 1 : 0), norm.end());
    return out;
  }

  // The sum x + residual the norm read (contiguous): the one it wrote, or the same values again.
  Handle sum(Backend& be) const {
    if (Handle s = sum_.get_if_alive()) return s;
    const TensorImpl &x = *saved_[0], &r = *saved_[5];
    ir::Program p;
    // (Inputs declared one statement each: in one call's arguments their order would be the
    // compiler's to choose, and input 0 must be x.)
    const auto xv = p.cast(p.input(x.dtype), kF32);
    const auto rv = p.cast(p.input(r.dtype), kF32);
    p.output(p.cast(p.binary(ir::Op::add, xv, rv), x.dtype));
    const TensorImpl* in[] = {&x, &r};
    return run(be, p, in, {}, x.shape)[0];
  }

  // The op's own gradients from g, y's, for the input x it read (null for the softmaxes, which
  // read y): dx (where want_dx), dw, db.
  std::vector<Handle> own_backward(Backend& be, const Handle& x_read, const TensorImpl& g,
                                   bool want_dx) {
    const Dims& shape = x_shape_;
    const int last = static_cast<int>(shape.size()) - 1;
    std::vector<Handle> out;
    if (op_ == RowOp::logsumexp) {
      const Handle y_kept = y_.get();
      TensorImpl g_rows = g;  // [rows] seen at every element of its row
      g_rows.strides.push_back(0);
      g_rows.shape = shape;
      const TensorImpl y_rows = per_row(*y_kept, shape);
      const TensorImpl& x = *x_read;
      ir::Program p;
      const auto xv = p.cast(p.input(x.dtype), kF32), gv = p.cast(p.input(g.dtype), kF32),
                 yv = p.input(kF32);
      p.output(
          p.cast(p.binary(ir::Op::mul, gv, p.unary(ir::Op::exp, p.binary(ir::Op::sub, xv, yv))),
                 x_dtype_));
      const TensorImpl* in[] = {&x, &g_rows, &y_rows};
      out.push_back(run(be, p, in, {}, shape)[0]);
      return out;
    }
    if (op_ == RowOp::softmax || op_ == RowOp::log_softmax) {
      const Handle y_kept = y_.get();
      const TensorImpl& y = *y_kept;
      const bool log = op_ == RowOp::log_softmax;
      ir::Program p1;  // g y (softmax) or g (log_softmax), summed per row
      const auto g1 = p1.cast(p1.input(g.dtype), kF32);
      p1.output(log ? g1 : p1.binary(ir::Op::mul, g1, p1.cast(p1.input(y.dtype), kF32)));
      const TensorImpl* in1[] = {&g, &y};
      Handle s = sum_dim(be, *run(be, p1, std::span(in1, log ? 1 : 2), {}, shape)[0], last);
      const TensorImpl sb = broadcast(*s, shape);
      ir::Program p2;
      const auto gv = p2.cast(p2.input(g.dtype), kF32), yv = p2.cast(p2.input(y.dtype), kF32),
                 sv = p2.input(kF32);
      const auto dx =
          log ? p2.binary(ir::Op::sub, gv, p2.binary(ir::Op::mul, p2.unary(ir::Op::exp, yv), sv))
              : p2.binary(ir::Op::mul, yv, p2.binary(ir::Op::sub, gv, sv));
      p2.output(p2.cast(dx, x_dtype_));
      const TensorImpl* in2[] = {&g, &y, &sb};
      out.push_back(run(be, p2, in2, {}, shape)[0]);
      return out;
    }
    // The norms. xhat = (x - mean) rstd and dxhat = g w (f32) are recomputed in each program that
    // reads them, not kept: under fusion each row sum below reduces its program's value inside
    // the reduction kernel, and nothing of x's size is written but dx (the six f32 intermediates
    // a kept xhat, dxhat and their product cost were a GPT-2 step's largest element-wise pass).
    // Contiguous x and g are seen as [rows, n], so that the weight's and bias's sums over the
    // rows read their programs inside the reduction too (a sum of a reshaped result could not).
    const TensorImpl& x = *x_read;
    const bool flat = x.is_contiguous() && g.is_contiguous();
    if (flat) {
      if (std::optional<std::vector<Handle>> r = kernel_backward(be, x, g, want_dx)) return *r;
    }
    const std::int64_t n = shape.back();
    const Dims work = flat ? Dims{detail::numel(shape) / std::max<std::int64_t>(n, 1), n} : shape;
    return norm_backward(be, flat ? reshaped(x, work) : x, flat ? reshaped(g, work) : g, work,
                         want_dx);
  }

  // The backend's own kernel (Backend::norm_backward), where it has one for contiguous x and g of
  // one dtype: one pass over x and g, where the programs below read them three times. dsum (or
  // null) is added to dx; where dx_half is given, it receives a half copy of dx (the residual's
  // dtype) from the same pass.
  std::optional<std::vector<Handle>> kernel_backward(Backend& be, const TensorImpl& x,
                                                     const TensorImpl& g, bool want_dx,
                                                     const TensorImpl* dsum = nullptr,
                                                     Handle* dx_half = nullptr) const {
    // (A half g of an f32 x: a norm whose y was rounded to a half type, or autocast's gradient.)
    if (g.dtype != x_dtype_ && !(x_dtype_ == kF32 && is_half(g.dtype))) return std::nullopt;
    const TensorImpl* w = saved_[2].get();
    const TensorImpl* mean = saved_[3].get();
    if (!be.norm_backward(op_, x, g, w, mean, *saved_[4], {})) return std::nullopt;  // no kernel
    const Dims param{x.shape.back()};
    const Handle dx = want_dx ? be.empty(x.shape, x.dtype) : nullptr;
    const Handle dw = want_w_ ? be.empty(param, x.dtype) : nullptr;
    const Handle db = want_b_ ? be.empty(param, x.dtype) : nullptr;
    const Handle half = dx && dx_half ? be.empty(x.shape, *residual_dtype_) : nullptr;
    detail::NormGrads grads;
    if (dx) grads.dx = detail::Out(*dx);
    if (dw) grads.dw = detail::Out(*dw);
    if (db) grads.db = detail::Out(*db);
    if (dx) grads.dsum = dsum;
    if (half) grads.dx_half = detail::Out(*half);
    if (!be.norm_backward(op_, x, g, w, mean, *saved_[4], grads)) return std::nullopt;
    if (half) *dx_half = half;
    std::vector<Handle> out;
    for (const Handle& h : {dx, dw, db})
      if (h) out.push_back(h);
    return out;
  }

  std::vector<Handle> norm_backward(Backend& be, const TensorImpl& x, const TensorImpl& g,
                                    const Dims& shape, bool want_dx) const {
    const int last = static_cast<int>(shape.size()) - 1;
    std::vector<Handle> out;
    const bool layer = op_ == RowOp::layer_norm;
    const TensorImpl rstd = per_row(*saved_[4], shape);
    const TensorImpl mean = layer ? per_row(*saved_[3], shape) : TensorImpl{};
    const TensorImpl w = saved_[2] ? per_column(*saved_[2], shape) : TensorImpl{};
    const double inv_n = 1.0 / static_cast<double>(shape.back());
    struct Terms {
      std::int32_t xhat, dxhat, rstd;
    };
    // Adds the terms asked for (xhat with rstd, dxhat) to p, over new inputs appended to `in`, so
    // that no program reads an input it does not use.
    const auto terms = [&](ir::Program& p, std::vector<const TensorImpl*>& in, bool with_xhat,
                           bool with_dxhat) {
      Terms r{};
      if (with_xhat) {
        const auto xv = p.cast(p.input(x.dtype), kF32);
        r.rstd = p.input(kF32);
        in.insert(in.end(), {&x, &rstd});
        const auto centred = layer ? p.binary(ir::Op::sub, xv, p.input(kF32)) : xv;
        if (layer) in.push_back(&mean);
        r.xhat = p.binary(ir::Op::mul, centred, r.rstd);
      }
      if (with_dxhat) {
        r.dxhat = p.cast(p.input(g.dtype), kF32);
        in.push_back(&g);
        if (saved_[2]) {
          r.dxhat = p.binary(ir::Op::mul, r.dxhat, p.cast(p.input(w.dtype), kF32));
          in.push_back(&w);
        }
      }
      return r;
    };
    // The row sum of one term of xhat and dxhat, kept with extent 1.
    const auto row_sum = [&](bool times_xhat) {
      ir::Program p;
      std::vector<const TensorImpl*> in;
      const Terms t = terms(p, in, times_xhat, true);
      p.output(times_xhat ? p.binary(ir::Op::mul, t.dxhat, t.xhat) : t.dxhat);
      return sum_dim(be, *run(be, p, in, {}, shape)[0], last);
    };
    if (want_dx) {
      const Handle c_sum = row_sum(true);
      const Handle a_sum = layer ? row_sum(false) : nullptr;
      const TensorImpl c = broadcast(*c_sum, shape);
      const TensorImpl a = layer ? broadcast(*a_sum, shape) : TensorImpl{};
      ir::Program p2;  // rstd (dxhat - a/n - xhat c/n)
      std::vector<const TensorImpl*> in2;
      const Terms t = terms(p2, in2, true, true);
      const auto cv = p2.input(kF32), k = p2.scalar(kF32);
      in2.push_back(&c);
      auto inner = p2.binary(ir::Op::sub, t.dxhat,
                             p2.binary(ir::Op::mul, t.xhat, p2.binary(ir::Op::mul, cv, k)));
      if (layer) {
        inner = p2.binary(ir::Op::sub, inner, p2.binary(ir::Op::mul, p2.input(kF32), k));
        in2.push_back(&a);
      }
      p2.output(p2.cast(p2.binary(ir::Op::mul, t.rstd, inner), x.dtype));
      out.push_back(std::make_shared<TensorImpl>(
          reshaped(*run(be, p2, in2, std::span(&inv_n, 1), shape)[0], x_shape_)));
    }
    if (want_w_) {  // sum over rows of g xhat
      ir::Program pw;
      std::vector<const TensorImpl*> inw;
      const Terms t = terms(pw, inw, true, false);
      pw.output(pw.binary(ir::Op::mul, pw.cast(pw.input(g.dtype), kF32), t.xhat));
      inw.push_back(&g);
      out.push_back(sum_rows(be, run(be, pw, inw, {}, shape)[0], saved_[2]->dtype));
    }
    if (want_b_) {
      ir::Program pb;
      pb.output(pb.cast(pb.input(g.dtype), kF32));
      const TensorImpl* inb[] = {&g};
      out.push_back(sum_rows(be, run(be, pb, inb, {}, shape)[0], x.dtype));
    }
    return out;
  }

  RowOp op_;
  WeakOutput y_;
  Dims x_shape_;
  DType x_dtype_;
  std::optional<DType> residual_dtype_;
  WeakOutput sum_;  // x + residual, for a norm that added one
  bool want_x_, want_w_, want_b_, want_r_;
};

}  // namespace

std::shared_ptr<Node> rows_node(RowOp op, const TensorImpl& x, const detail::RowParams& params,
                                const TensorImpl& y, const detail::RowStats& stats, bool want_x,
                                bool want_w, bool want_b, bool want_residual) {
  return std::make_shared<RowsNode>(op, x, params, y, stats, want_x, want_w, want_b, want_residual);
}

}  // namespace kiln::autodiff
