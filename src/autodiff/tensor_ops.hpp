// The few tensor operations backward needs, as calls on a Backend (below the front end, so
// without its checks: every caller here passes tensors of matching shapes and dtypes).
#pragma once

#include <span>
#include <vector>

#include "autodiff/graph.hpp"
#include "ir/program.hpp"

namespace kiln::autodiff {

// Runs `program` over `shape` into new contiguous outputs of the program's output dtypes; an
// output that is one of the inputs unchanged (contiguous, of `shape`) is that input, not a copy.
std::vector<Handle> run(Backend& be, const ir::Program& program,
                        std::span<const TensorImpl* const> inputs, std::span<const double> scalars,
                        const Dims& shape);
// A new contiguous [n] tensor of zeros.
Handle zeros(Backend& be, std::int64_t n, DType dtype);
// a + b, same shape and dtype, contiguous.
Handle add(Backend& be, const TensorImpl& a, const TensorImpl& b);
// x summed over dim, which is kept with extent 1.
Handle sum_dim(Backend& be, const TensorImpl& x, int dim);
// dst += src in place (dst's dtype; src of dst's shape, any strides): dst may be read by nothing
// that expects its old values.
void add_into(Backend& be, const TensorImpl& src, const TensorImpl& dst);
// Writes src (any strides, its dtype converted) into the view dst.
void copy_into(Backend& be, const TensorImpl& src, const TensorImpl& dst);
// t's view with every dim of extent 1 broadcast (stride 0) to `shape`.
TensorImpl broadcast(const TensorImpl& t, const Dims& shape);
// An i32 [n] tensor 0, 1, ..., n - 1, seen along dim `dim` of `shape` (stride 0 elsewhere).
TensorImpl iota_along(Backend& be, std::int64_t n, int dim, const Dims& shape);
// t's elements in memory order (t contiguous, or dense in any order) seen with shape `shape` (as
// many elements), row-major.
TensorImpl reshaped(const TensorImpl& t, const Dims& shape);

// A handle of its own to t's view (what a node saves for backward).
Handle keep(const TensorImpl& t);
// t's view with dims d0 and d1 swapped.
TensorImpl swapped(const TensorImpl& t, int d0, int d1);
// t itself where contiguous, else a contiguous copy.
Handle contiguous(Backend& be, const Handle& t);

// Adds the gradient g of the view `view` of m's buffer to `slot`, a flat gradient of m's buffer
// (a leaf's grad, a non-leaf's pending gradient, or a capture): summed over the view's
// broadcast dims, placed through its strides.
void accumulate(Backend& be, Handle& slot, const Meta& m, const View& view, const Handle& g);

}  // namespace kiln::autodiff
