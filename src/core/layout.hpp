// Layouts of strided tensors: merging dims into fewer, longer runs (coalescing), and walking the
// element offsets of row-major positions run by run. The CPU evaluator, the CPU and CUDA
// reductions and the CUDA element-wise launches all use these, so that every backend agrees on
// which dims merge (the CUDA kernels are specialised on the coalesced rank, so a disagreement
// would be a different kernel, not only a slower loop).
//
// Coalescing keeps the row-major sequence of elements: position p of the coalesced layout is
// position p of the original one, at the same element offset. Dims of extent 1 are dropped (they
// never move), and a dim merges into the one before it when that one's stride is this one's
// stride times its extent (the outer dim steps exactly over the inner one's run). With several
// operands a dim merges only where it merges in every one of them, so one multi-index walks them
// all. Reductions coalesce the kept dims and the reduced dims apart (reduction_layout), so that
// an output never spans a reduced dim.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/shape.hpp"

namespace kiln::detail {

// One operand's coalesced dims. numel counts every original dim (0 if one is empty); a single
// element has rank 0.
struct Layout {
  Dims shape, strides;
  std::int64_t numel = 1;
};

// Several operands over one coalesced iteration space.
struct JointLayout {
  Dims shape;
  std::vector<Dims> strides;  // per operand, in the order given
  std::int64_t numel = 1;

  Layout operand(std::size_t k) const { return {shape, strides[k], numel}; }
};

// Coalesces every dim of shape over the operands' strides (each of shape's rank) into out,
// reusing its vectors: a launch that runs for every op then allocates nothing once they have
// grown.
void coalesce(const Dims& shape, std::span<const Dims* const> strides, JointLayout& out);
JointLayout coalesce(const Dims& shape, std::span<const Dims* const> strides);

// Coalesces only `dims` of shape, in the order given (for a reduction: the kept dims, or the
// reduced ones); numel counts those dims alone.
JointLayout coalesce_dims(const Dims& shape, std::span<const Dims* const> strides,
                          std::span<const int> dims);

// One operand.
Layout coalesce(const Dims& shape, const Dims& strides);

// The same elements in the order that walks memory forward (dims sorted by decreasing |stride|,
// broadcast dims outermost), coalesced: for reductions whose result does not depend on the
// order, a transposed input then reads as fast as a contiguous one.
Layout memory_order(const Dims& shape, const Dims& strides);

// The dims a reduction over `dim` keeps and those it reduces, in order (every dim is reduced
// when dim < 0).
struct ReductionDims {
  std::vector<int> kept, reduced;
};
ReductionDims reduction_dims(int rank, int dim);

// The outputs' layout (kept: the kept dims, in the outputs' row-major order) and one output's
// reduced sequence (red) of a reduction over `dim` of a (shape, strides) tensor, each coalesced
// on its own. Over every dim (dim < 0) the reduced elements are in row-major order when
// row_major (argmax and argmin count indices in it), else in memory order.
struct ReductionLayout {
  Layout kept, red;
};
ReductionLayout reduction_layout(const Dims& shape, const Dims& strides, int dim, bool row_major);

// The sum of (extent - 1) * stride over the dims: with no negative stride, the largest element
// offset (from element 0) that the layout reaches, which decides a kernel's index width.
inline std::int64_t reach(std::span<const std::int64_t> shape,
                          std::span<const std::int64_t> strides) {
  std::int64_t r = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) r += (shape[d] - 1) * strides[d];
  return r;
}

// The element offsets of consecutive row-major positions of (shape, strides), starting at
// `position`: an odometer over the multi-index, so that each step costs an add (and a carry
// now and then) instead of a division per dim.
class Odometer {
 public:
  Odometer(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
           std::int64_t position)
      : shape_(shape), strides_(strides) {
    if (shape.size() > kInlineRank) heap_.resize(shape.size());
    std::int64_t* idx = index();
    for (std::size_t d = shape.size(); d-- > 0;) {
      idx[d] = position % shape[d];
      position /= shape[d];
      offset_ += idx[d] * strides[d];
    }
  }

  std::int64_t offset() const { return offset_; }

  // Steps to the next position. Past the last one it wraps to position 0.
  void next() {
    std::int64_t* idx = index();
    for (std::size_t d = shape_.size(); d-- > 0;) {
      offset_ += strides_[d];
      if (++idx[d] < shape_[d]) return;
      offset_ -= idx[d] * strides_[d];
      idx[d] = 0;
    }
  }

 private:
  // Coalesced ranks are small; the multi-index lives in the object up to this rank, so that a
  // walker made per block or per output allocates nothing.
  static constexpr std::size_t kInlineRank = 16;
  std::int64_t* index() { return heap_.empty() ? inline_.data() : heap_.data(); }

  std::span<const std::int64_t> shape_, strides_;
  std::array<std::int64_t, kInlineRank> inline_{};
  Dims heap_;
  std::int64_t offset_ = 0;
};

// Calls fn(offset, count, stride, position) for the runs along the innermost dim that cover the
// row-major positions [start, end) of (shape, strides): elements offset, offset + stride, ...,
// offset + (count - 1) * stride are positions position ... position + count - 1. A rank-0
// layout (one element, repeated) is one run of stride 0. Positions must be within the layout
// unless it has rank 0.
template <class Fn>
void for_each_run(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                  std::int64_t start, std::int64_t end, Fn&& fn) {
  if (start >= end) return;
  if (shape.empty()) {
    fn(std::int64_t{0}, end - start, std::int64_t{0}, start);
    return;
  }
  const std::size_t outer_rank = shape.size() - 1;
  const std::int64_t inner = shape[outer_rank], stride = strides[outer_rank];
  Odometer outer(shape.first(outer_rank), strides.first(outer_rank), start / inner);
  std::int64_t pos = start, col = start % inner;
  while (pos < end) {
    const std::int64_t count = std::min(inner - col, end - pos);
    fn(outer.offset() + col * stride, count, stride, pos);
    pos += count;
    col = 0;
    outer.next();
  }
}

}  // namespace kiln::detail
