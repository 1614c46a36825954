// Backward of Backend::attention, from what the forward call kept: q, k, v, o and the per-row
// logsumexp lse (never a T x T tensor). With scale s, the probabilities are recomputed as
// P = exp(s q k^T - lse) (0 where the causal mask hides a key) and, D_i = rowsum(dO * o),
//   dV = P^T dO,  dP = dO V^T,  dS = P (dP - D_i),  dQ = s dS K,  dK = s dS^T Q,
// by the backend's kernel (Backend::attention_backward) where it has one, else as ordinary calls
// on the chain: batched matmuls over [B H, T, ...] views, the element-wise steps
// as programs (so that the fusion decorator fuses them), a row sum. Everything computes in f32 (a
// half type's operands are converted first) and the gradients come back in the input dtype.
#include <algorithm>
#include <array>
#include <utility>

#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"

namespace kiln::autodiff {

namespace {

constexpr DType kF32 = DType::f32;

// [B, H, T, D] as [B H, T, D] f32: a view where t is f32 and its B and H dims collapse into one,
// else a contiguous f32 copy.
Handle folded_f32(Backend& be, const TensorImpl& t) {
  const Dims& s = t.shape;
  const bool collapses = s[0] <= 1 || s[1] <= 1 || t.strides[0] == t.strides[1] * s[1];
  TensorImpl v = t;
  if (t.dtype != kF32 || !collapses) {
    const Handle c = be.empty(s, kF32);
    copy_into(be, t, *c);
    v = *c;
  }
  // The stride between consecutive (b, h) pairs: h's, unless H is 1 (then b's).
  const std::int64_t batch_stride = s[1] <= 1 ? v.strides[0] : v.strides[1];
  v.shape = {s[0] * s[1], s[2], s[3]};
  v.strides = {batch_stride, v.strides[2], v.strides[3]};
  return std::make_shared<TensorImpl>(std::move(v));
}

// a @ c, batched, into a new f32 tensor.
Handle mm(Backend& be, const TensorImpl& a, const TensorImpl& c) {
  Handle out = be.empty({a.shape[0], a.shape[1], c.shape[2]}, kF32);
  if (out->numel() > 0) be.matmul(a, c, detail::Out(*out));
  return out;
}

// A [B H, T, D] f32 gradient as the [B, H, T, D] input's dtype.
Handle unfolded(Backend& be, const Handle& g, const Dims& shape, DType dtype) {
  TensorImpl v = *g;
  v.shape = shape;
  v.strides = detail::contiguous_strides(shape);
  if (dtype == kF32) return std::make_shared<TensorImpl>(std::move(v));
  const Handle out = be.empty(shape, dtype);
  copy_into(be, v, *out);
  return out;
}

// Whether q, k and v are the three slices of one buffer that together cover all of it, once:
// the heads of a fused qkv projection, [B, T, 3, H, D] seen as three [B, H, T, D] views. Their
// gradients are then that buffer's whole gradient, written by one backward call into one buffer
// of the same layout, with no zero fill, copy or add per slice.
bool slices_of_one_buffer(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v) {
  if (k.buffer != q.buffer || v.buffer != q.buffer || k.shape != q.shape || v.shape != q.shape ||
      k.strides != q.strides || v.strides != q.strides || q.numel() == 0)
    return false;
  std::array<std::int64_t, 3> at = {q.offset, k.offset, v.offset};
  std::sort(at.begin(), at.end());
  const std::int64_t step = at[1] - at[0];
  if (at[0] != 0 || step <= 0 || at[2] - at[1] != step) return false;
  if (q.buffer->bytes() != static_cast<std::size_t>(3 * q.numel()) * dtype_size(q.dtype))
    return false;
  Dims shape = {3}, strides = {step};
  shape.insert(shape.end(), q.shape.begin(), q.shape.end());
  strides.insert(strides.end(), q.strides.begin(), q.strides.end());
  return detail::dense_strides(shape, strides);
}

// The backend's kernel into dq, dk and dv, where it has one: false where it declines (it takes
// dout with a unit-stride last dim, of q's dtype; another dout is not offered).
bool kernel_backward(Backend& be, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                     const TensorImpl& o, const TensorImpl& dout, const TensorImpl& lse,
                     const detail::AttentionParams& params, const TensorImpl& dq,
                     const TensorImpl& dk, const TensorImpl& dv) {
  return dout.dtype == q.dtype && (dout.shape[3] <= 1 || dout.strides[3] == 1) &&
         be.attention_backward(q, k, v, o, dout, lse, params, detail::Out(dq), detail::Out(dk),
                               detail::Out(dv));
}

// The whole buffer of t, flat.
TensorImpl whole_buffer(const TensorImpl& t) {
  TensorImpl w = t;
  w.shape = {static_cast<std::int64_t>(t.buffer->bytes() / dtype_size(t.dtype))};
  w.strides = {1};
  w.offset = 0;
  return w;
}

class AttentionNode final : public Node {
 public:
  AttentionNode(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v, const TensorImpl& o,
                const TensorImpl& lse, const detail::AttentionParams& params,
                std::array<bool, 3> want)
      : o_(o), params_(params), want_(want) {
    saved_ = {keep(q), keep(k), keep(v), keep(lse)};
    one_buffer_ = want[0] && want[1] && want[2] && slices_of_one_buffer(q, k, v);
    if (one_buffer_) {
      edges.push_back(edge_to(whole_buffer(q)));
      return;
    }
    if (want[0]) edges.push_back(edge_to(q));
    if (want[1]) edges.push_back(edge_to(k));
    if (want[2]) edges.push_back(edge_to(v));
  }
  const char* name() const override { return "attention"; }
  bool reads_outputs() const override { return true; }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    const Handle o = o_.get();
    const TensorImpl &q = *saved_[0], &k = *saved_[1], &v = *saved_[2];
    if (one_buffer_) return {backward_into_one_buffer(be, q, k, v, *o, *grads[0])};
    const AttentionGrads g =
        attention_backward(be, q, k, v, *o, *grads[0], *saved_[3], params_, want_);
    std::vector<Handle> out;
    for (const Handle& h : {g.dq, g.dk, g.dv})
      if (h) out.push_back(h);
    return out;
  }

 private:
  // dq, dk and dv as views of one flat buffer laid out as q, k and v's: by the backend's kernel
  // where it takes such views, else computed apart and copied in.
  Handle backward_into_one_buffer(Backend& be, const TensorImpl& q, const TensorImpl& k,
                                  const TensorImpl& v, const TensorImpl& o,
                                  const TensorImpl& dout) const {
    const Handle whole = be.empty(whole_buffer(q).shape, q.dtype);
    const TensorImpl dq = View::of(q).over(*whole), dk = View::of(k).over(*whole),
                     dv = View::of(v).over(*whole);
    if (kernel_backward(be, q, k, v, o, dout, *saved_[3], params_, dq, dk, dv)) return whole;
    const AttentionGrads g = attention_backward(be, q, k, v, o, dout, *saved_[3], params_, want_);
    copy_into(be, *g.dq, dq);
    copy_into(be, *g.dk, dk);
    copy_into(be, *g.dv, dv);
    return whole;
  }

  WeakOutput o_;
  detail::AttentionParams params_;
  std::array<bool, 3> want_;
  bool one_buffer_ = false;
};

}  // namespace

AttentionGrads attention_backward(Backend& be, const TensorImpl& q, const TensorImpl& k,
                                  const TensorImpl& v, const TensorImpl& o, const TensorImpl& dout,
                                  const TensorImpl& lse, const detail::AttentionParams& params,
                                  std::array<bool, 3> want) {
  // The backend's kernel where it has one: all three gradients at once.
  {
    const Handle dq = be.empty(q.shape, q.dtype), dk = be.empty(k.shape, q.dtype),
                 dv = be.empty(v.shape, q.dtype);
    if (kernel_backward(be, q, k, v, o, dout, lse, params, *dq, *dk, *dv)) {
      AttentionGrads out;
      if (want[0]) out.dq = dq;
      if (want[1]) out.dk = dk;
      if (want[2]) out.dv = dv;
      return out;
    }
  }
  // Else composed from the chain's calls.
  const std::int64_t bh = q.shape[0] * q.shape[1], tq = q.shape[2], tk = k.shape[2];
  const Handle qf = folded_f32(be, q), kf = folded_f32(be, k), vf = folded_f32(be, v),
               of = folded_f32(be, o), gf = folded_f32(be, dout);
  const Dims scores = {bh, tq, tk};
  const double scale = params.scale;

  // P = exp(s q k^T - lse), masked to 0 above the diagonal when causal.
  const Handle raw = mm(be, *qf, swapped(*kf, 1, 2));
  TensorImpl lse_rows = lse;  // [B, H, Tq] as [B H, Tq, Tk], constant along the keys
  lse_rows.shape = scores;
  lse_rows.strides = {tq, 1, 0};
  ir::Program pp;  // (operands named one by one: argument order is unspecified in C++)
  const auto sv = pp.input(kF32), lv = pp.input(kF32), scale_v = pp.scalar(kF32);
  const auto prob =
      pp.unary(ir::Op::exp, pp.binary(ir::Op::sub, pp.binary(ir::Op::mul, sv, scale_v), lv));
  std::vector<const TensorImpl*> pin{raw.get(), &lse_rows};
  TensorImpl rows, cols;
  if (params.causal) {
    rows = iota_along(be, tq, 1, scores);
    cols = iota_along(be, tk, 2, scores);
    const auto row = pp.input(DType::i32), col = pp.input(DType::i32), zero = pp.scalar(kF32);
    pp.output(pp.where(pp.binary(ir::Op::gt, col, row), zero, prob));
    pin.push_back(&rows);
    pin.push_back(&cols);
  } else {
    pp.output(prob);
  }
  const double pscalars[] = {scale, 0.0};
  const Handle p = run(be, pp, pin, std::span(pscalars, params.causal ? 2 : 1), scores)[0];

  AttentionGrads out;
  if (want[2]) out.dv = unfolded(be, mm(be, swapped(*p, 1, 2), *gf), v.shape, v.dtype);
  if (!want[0] && !want[1]) return out;

  // D_i = rowsum(dO o), then dS = s P (dP - D_i) (the scale of dQ and dK folded in here).
  ir::Program pd;
  const auto gv = pd.input(kF32), ov = pd.input(kF32);
  pd.output(pd.binary(ir::Op::mul, gv, ov));
  const TensorImpl* din[] = {gf.get(), of.get()};
  const Handle d = sum_dim(be, *run(be, pd, din, {}, gf->shape)[0], 2);
  const TensorImpl d_rows = broadcast(*d, scores);
  const Handle dp = mm(be, *gf, swapped(*vf, 1, 2));
  ir::Program ps;
  const auto pv = ps.input(kF32), dpv = ps.input(kF32), dv = ps.input(kF32);
  ps.output(ps.binary(ir::Op::mul, ps.binary(ir::Op::mul, pv, ps.binary(ir::Op::sub, dpv, dv)),
                      ps.scalar(kF32)));
  const TensorImpl* sin_[] = {p.get(), dp.get(), &d_rows};
  const Handle ds = run(be, ps, sin_, std::span(&scale, 1), scores)[0];
  if (want[0]) out.dq = unfolded(be, mm(be, *ds, *kf), q.shape, q.dtype);
  if (want[1]) out.dk = unfolded(be, mm(be, swapped(*ds, 1, 2), *qf), k.shape, k.dtype);
  return out;
}

std::shared_ptr<Node> attention_node(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                                     const TensorImpl& o, const TensorImpl& lse,
                                     const detail::AttentionParams& params,
                                     std::array<bool, 3> want) {
  return std::make_shared<AttentionNode>(q, k, v, o, lse, params, want);
}

}  // namespace kiln::autodiff
