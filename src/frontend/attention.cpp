// kiln::scaled_dot_product_attention: one Backend::attention call on the device's chain, which
// reads the heads in place (any strides but a unit last one: the heads of a fused qkv projection
// cost no copy) and never writes the T x T scores; the autodiff decorator records it with what its
// backward needs (q, k, v, o and the per-row logsumexp it asks the call for). Where the backend
// declines (no kernel for this head dim), the attention is composed instead: the [B, H] pairs fold
// into one batch dim so that the rank-3 batched matmul serves, the causal mask is a triu of a bool
// [Tq, Tk] broadcast over the batch, and softmax runs over the keys, each step a recorded op.
// The kernel's o is a transposed view of [B, Tq, H, D] memory, the composition's is contiguous.
// Under an autocast guard (kiln/autocast.hpp) it is on the lower-precision list: q, k and v are
// cast to the guard's dtype on entry and the result has it (the kernel computes its softmax in
// f32, as the composition's f32-listed softmax does).
#include "kiln/attention.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "frontend/ops_common.hpp"
#include "kiln/autocast.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace {

std::string shape_text(const Tensor<4>& t) {
  const auto s = t.shape();
  return fmt::format("[{}, {}, {}, {}]", s[0], s[1], s[2], s[3]);
}

void check(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v) {
  constexpr const char* op = "scaled_dot_product_attention";
  if (!is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw DTypeError(fmt::format("{}: q, k and v must share one floating dtype, got {}, {}, {}", op,
                                 dtype_name(q.dtype()), dtype_name(k.dtype()),
                                 dtype_name(v.dtype())));
  const auto qs = q.shape(), ks = k.shape(), vs = v.shape();
  if (ks != vs || qs[0] != ks[0] || qs[1] != ks[1] || qs[3] != ks[3])
    throw ShapeError(fmt::format(
        "{}: q [B, H, Tq, D] needs k and v of shape [B, H, Tk, D], got q {}, k {}, v {}", op,
        shape_text(q), shape_text(k), shape_text(v)));
}

// [B, H, T, D] -> [B * H, T, D] (a copy when the view is not contiguous, e.g. after a transpose).
Tensor<3> fold(const Tensor<4>& t) {
  const auto s = t.shape();
  return t.contiguous().reshape({s[0] * s[1], s[2], s[3]});
}

// The backend's kernel: o, or nothing where the chain declines. Heads whose last dim is strided
// (a transposed head) are copied first, as the call wants rows of unit stride.
std::optional<Tensor<4>> run_kernel(const Tensor<4>& q_in, const Tensor<4>& k_in,
                                    const Tensor<4>& v_in, bool causal, double scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  const Device device =
      detail::common_device(op, {&q_in.handle(op), &k_in.handle(op), &v_in.handle(op)});
  detail::Backend& be = detail::backend_of(device);
  const DType dtype[] = {q_in.dtype()};
  if (!be.supports(detail::BackendOp::attention, dtype)) return std::nullopt;
  auto rows = [](const Tensor<4>& t) {
    const detail::Handle& h = t.handle("scaled_dot_product_attention");
    return h->shape[3] <= 1 || h->strides[3] == 1 ? h : detail::contiguous(h);
  };
  const detail::Handle q = rows(q_in), k = rows(k_in), v = rows(v_in);
  // o in [B, Tq, H, D] memory, seen as [B, H, Tq, D] (as PyTorch's flash attention leaves it):
  // the heads merge back into [B, Tq, H D] with no copy.
  const Dims& s = q->shape;
  const detail::Handle o =
      detail::transpose(detail::allocate(op, be, {s[0], s[2], s[1], s[3]}, q->dtype), 1, 2);
  if (!be.attention(*q, *k, *v, detail::AttentionParams{causal, scale}, detail::Out(*o),
                    std::nullopt))
    return std::nullopt;
  return Tensor<4>(o);
}

}  // namespace

Tensor<4> scaled_dot_product_attention(const Tensor<4>& q_in, const Tensor<4>& k_in,
                                       const Tensor<4>& v_in, bool causal,
                                       std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  const Tensor<4> q(detail::autocast_lower(q_in.handle(op)));
  const Tensor<4> k(detail::autocast_lower(k_in.handle(op))),
      v(detail::autocast_lower(v_in.handle(op)));
  check(q, k, v);
  const auto qs = q.shape();
  const std::int64_t tk = k.size(2);
  // (D == 0: the scores are empty sums, and o is empty whatever the scale.)
  const double s = scale.value_or(qs[3] > 0 ? 1.0 / std::sqrt(static_cast<double>(qs[3])) : 1.0);
  if (!std::isfinite(s)) throw ValueError(fmt::format("{}: scale must be finite, got {}", op, s));
  if (auto o = run_kernel(q, k, v, causal, s)) return *o;
  if (tk == 0) {
    // No key: o = 0, and q's gradient is 0. (Composed, the scores would be empty, and an empty
    // matmul records nothing for autodiff, so q would get no gradient at all.) A non-finite
    // query still gives 0, as the empty sum does.
    return where(q.abs() < std::numeric_limits<float>::infinity(), q * 0.0f, 0.0f);
  }
  auto scores = matmul(fold(q), fold(k).transpose(1, 2)) * static_cast<float>(s);
  if (causal) {
    const auto above = Tensor<2>::ones({qs[2], tk}, DType::boolean, q.device()).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  }
  const auto out = matmul(scores.softmax(2), fold(v));
  return out.reshape({qs[0], qs[1], qs[2], qs[3]});
}

}  // namespace kiln
