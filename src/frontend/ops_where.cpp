// where(cond, a, b), each branch a tensor or a scalar: scalars are parameters of one element-wise
// program (as in x * 0.5), so where(c, x, 0) and where(c, x, 1) are the same kernel.
//
// Dtypes as PyTorch's torch.where with Python scalars: a floating scalar makes the result f32,
// an integral one keeps the tensor's dtype (i32 beside bool), two scalars give i32 unless one
// is floating.
#include <fmt/format.h>

#include <vector>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

DType scalar_kind(Scalar s) { return s.integral ? DType::i32 : DType::f32; }

// A branch of where: a tensor (an input of the program) or a scalar (a parameter).
struct Branch {
  const Handle* tensor;
  Scalar scalar;

  DType dtype() const { return tensor ? (*tensor)->dtype : scalar_kind(scalar); }
};

Handle where_branches(const Handle& cond, Branch a, Branch b) {
  // A scalar branch stands in for cond in the device and shape checks (cond against itself).
  const Handle& ta = a.tensor ? *a.tensor : cond;
  const Handle& tb = b.tensor ? *b.tensor : cond;
  Device d = common_device("where", {&cond, &ta, &tb});
  if (cond->dtype != DType::boolean) {
    throw DTypeError(fmt::format("where: condition must be bool, got {}", dtype_name(cond->dtype)));
  }
  Dims shape =
      broadcast_shapes("where", broadcast_shapes("where", cond->shape, ta->shape), tb->shape);
  const DType t = promote(a.dtype(), b.dtype());
  ir::Program p;
  std::vector<Handle> inputs{cond};
  std::vector<double> scalars;
  auto operand = [&](const Branch& x) {
    if (x.tensor) {
      inputs.push_back(*x.tensor);
      return p.cast(p.input((*x.tensor)->dtype), t);
    }
    scalars.push_back(checked_scalar("where", x.scalar, t));
    return p.scalar(t);
  };
  const std::int32_t c = p.input(DType::boolean);
  const std::int32_t x = operand(a);
  const std::int32_t y = operand(b);
  p.output(p.where(c, x, y));
  return run_elementwise1("where", p, inputs, scalars, shape, d);
}

}  // namespace

Handle where(const Handle& cond, const Handle& a, const Handle& b) {
  return where_branches(cond, {&a, {}}, {&b, {}});
}

Handle where(const Handle& cond, const Handle& a, Scalar b) {
  return where_branches(cond, {&a, {}}, {nullptr, b});
}

Handle where(const Handle& cond, Scalar a, const Handle& b) {
  return where_branches(cond, {nullptr, a}, {&b, {}});
}

Handle where(const Handle& cond, Scalar a, Scalar b) {
  return where_branches(cond, {nullptr, a}, {nullptr, b});
}

}  // namespace kiln::detail
