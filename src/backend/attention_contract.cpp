// The contract of Backend::attention, checked by every backend before it launches anything: the
// front end has checked already, but a direct backend call must get the same errors, not a read
// out of bounds. What is checked:
//   q, k, v   one dtype, f32, bf16 or f16 (DTypeError); rank 4, q [B, H, Tq, D], k and v
//             [B, H, Tk, D] (ShapeError); a unit-stride last dim (any stride when D <= 1) and
//             non-negative strides (ValueError)
//   o         q's shape (ShapeError) and dtype (DTypeError); a unit-stride last dim and positive
//             strides where the extent is above 1 (ValueError): any layout that writes each
//             element once, e.g. a transposed view of [B, Tq, H, D] memory (version 11)
//   lse       when given: f32 (DTypeError), [B, H, Tq] (ShapeError), contiguous (ValueError)
//   scale     finite (ValueError)
#include <fmt/format.h>

#include <cmath>

#include "backend/backend.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

namespace {

constexpr const char* kOp = "attention";

void check_operand(const char* what, const TensorImpl& t) {
  if (t.rank() != 4) {
    throw ShapeError(
        fmt::format("{}: {} must be [B, H, T, D], got shape {}", kOp, what, format_dims(t.shape)));
  }
  bool ok = t.shape[3] <= 1 || t.strides[3] == 1;
  for (int d = 0; d < 4; ++d) ok = ok && t.strides[d] >= 0;
  if (!ok) {
    throw ValueError(fmt::format(
        "{}: {} (strides {}) needs a unit-stride last dim and non-negative strides; copy it first",
        kOp, what, format_dims(t.strides)));
  }
}

// An output: an operand's layout, with no broadcast dim (each element written once).
void check_output(const char* what, const TensorImpl& t) {
  check_operand(what, t);
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] > 1 && t.strides[d] == 0) {
      throw ValueError(fmt::format("{}: {} (strides {}) is written, so it cannot be broadcast", kOp,
                                   what, format_dims(t.strides)));
    }
  }
}

}  // namespace

void check_attention_call(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                          const AttentionParams& params, const TensorImpl& o,
                          const TensorImpl* lse) {
  if (!is_floating(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype || o.dtype != q.dtype) {
    throw DTypeError(fmt::format(
        "{}: q, k, v and o must share one of f32, bf16, f16; got {}, {}, "
        "{}, {}",
        kOp, dtype_name(q.dtype), dtype_name(k.dtype), dtype_name(v.dtype), dtype_name(o.dtype)));
  }
  check_operand("q", q);
  check_operand("k", k);
  check_operand("v", v);
  const Dims& qs = q.shape;
  if (k.shape != v.shape || k.shape[0] != qs[0] || k.shape[1] != qs[1] || k.shape[3] != qs[3]) {
    throw ShapeError(
        fmt::format("{}: q [B, H, Tq, D] needs k and v [B, H, Tk, D], got q {}, k {}, "
                    "v {}",
                    kOp, format_dims(qs), format_dims(k.shape), format_dims(v.shape)));
  }
  if (o.shape != qs) {
    throw ShapeError(
        fmt::format("{}: o {} must have q's shape {}", kOp, format_dims(o.shape), format_dims(qs)));
  }
  check_output("o", o);
  if (lse) {
    if (lse->dtype != DType::f32) {
      throw DTypeError(fmt::format("{}: lse must be f32, got {}", kOp, dtype_name(lse->dtype)));
    }
    const Dims want = {qs[0], qs[1], qs[2]};
    if (lse->shape != want) {
      throw ShapeError(
          fmt::format("{}: lse {} must be {}", kOp, format_dims(lse->shape), format_dims(want)));
    }
    if (!lse->is_contiguous()) throw ValueError(fmt::format("{}: lse must be contiguous", kOp));
  }
  if (!std::isfinite(params.scale)) {
    throw ValueError(fmt::format("{}: scale must be finite, got {}", kOp, params.scale));
  }
}

void check_attention_backward_call(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                                   const TensorImpl& o, const TensorImpl& dout,
                                   const TensorImpl& lse, const AttentionParams& params,
                                   const TensorImpl& dq, const TensorImpl& dk,
                                   const TensorImpl& dv) {
  check_attention_call(q, k, v, params, o, &lse);
  check_operand("dout", dout);
  if (dout.dtype != q.dtype || dq.dtype != q.dtype || dk.dtype != q.dtype || dv.dtype != q.dtype) {
    throw DTypeError(
        fmt::format("{}_backward: dout, dq, dk and dv must be {}", kOp, dtype_name(q.dtype)));
  }
  if (dout.shape != q.shape || dq.shape != q.shape || dk.shape != k.shape || dv.shape != v.shape) {
    throw ShapeError(fmt::format("{}_backward: dout and dq need q's shape {}, dk and dv k's {}",
                                 kOp, format_dims(q.shape), format_dims(k.shape)));
  }
  check_output("dq", dq);
  check_output("dk", dk);
  check_output("dv", dv);
}

}  // namespace kiln::detail
