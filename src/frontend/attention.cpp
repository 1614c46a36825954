// kiln::scaled_dot_product_attention by composition: the [B, H] pairs fold into one batch dim so
// that the rank-3 batched matmul serves, the causal mask is a triu of a bool [Tq, Tk] broadcast
// over the batch, and softmax runs over the keys. Every step is a recorded op, so backward comes
// from autodiff; a fused kernel will replace this body behind the same signature. Under an
// autocast guard (kiln/autocast.hpp) it is on the lower-precision list: q, k and v are cast to the
// guard's dtype on entry, the products run in it, softmax (on the f32 list) in f32, and the
// result has the guard's dtype.
#include "kiln/attention.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "kiln/autocast.hpp"
#include "frontend/ops_common.hpp"
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
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(qs[3])));
  {
    // The device's fused kernel where it has one (Backend::attention).
    using namespace detail;
    auto lastdim = [](const Tensor<4>& t) {
      const Handle h = t.handle("scaled_dot_product_attention");
      return h->shape[3] <= 1 || h->strides[3] == 1 ? h : contiguous(h);
    };
    const Handle qh = lastdim(q), kh = lastdim(k), vh = lastdim(v);
    Backend& be = backend_of(q.device());
    const Handle o = allocate(op, be, qh->shape, q.dtype());
    if (be.attention(*qh, *kh, *vh, AttentionParams{causal, s}, Out(*o), std::nullopt))
      return Tensor<4>(o);
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
