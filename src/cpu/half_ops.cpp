#include "cpu/half_ops.hpp"

#include "cpu/cpu_evaluator.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/host_buffer.hpp"

namespace kiln::cpu {
namespace {

using detail::Handle;
using detail::TensorImpl;

// Writes `from` into `to` (same shape, any layouts), converting its dtype.
void convert(const TensorImpl& from, const TensorImpl& to, const KernelTable& kernels) {
  ir::Program p;
  p.output(p.cast(p.input(from.dtype), to.dtype));
  const TensorImpl* in[] = {&from};
  const TensorImpl* out[] = {&to};
  ir::evaluate_cpu(p, in, {}, out, kernels);
}

// A contiguous f32 copy of x.
Handle f32_copy(const TensorImpl& x, const KernelTable& kernels) {
  Handle h = host_empty(x.shape, DType::f32);
  convert(x, *h, kernels);
  return h;
}

}  // namespace

void reduce_half(detail::ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out,
                 const KernelTable& kernels) {
  detail::check_reduce_call(op, x, dim, out);
  // f32 results (arg*: i32 indices) straight into out; a half-type result rounded once after.
  const Handle of = is_half(out.dtype) ? host_empty(out.shape, DType::f32) : nullptr;
  const TensorImpl& result = of ? *of : out;
  // x widened as the loops read it (no f32 copy of x is allocated and written), or, for a
  // layout that path declines, an f32 copy.
  if (!reduce_widened(op, x, dim, result, kernels))
    reduce(op, *f32_copy(x, kernels), dim, result, kernels);
  if (of) convert(*of, out, kernels);
}

void matmul_half(const TensorImpl& a, const TensorImpl& c, const TensorImpl& out,
                 const KernelTable& kernels) {
  detail::check_matmul_call(a, c, out);
  const Handle af = f32_copy(a, kernels), cf = f32_copy(c, kernels);
  const Handle of = host_empty(out.shape, DType::f32);
  matmul(*af, *cf, *of);
  convert(*of, out, kernels);
}

}  // namespace kiln::cpu
