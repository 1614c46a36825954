// Tensor queries, rank checks and dim normalisation.
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

const Dims& shape(const Handle& t) { return t->shape; }
const Dims& strides(const Handle& t) { return t->strides; }
DType dtype(const Handle& t) { return t->dtype; }
Device device(const Handle& t) { return t->device; }
std::int64_t numel(const Handle& t) { return t->numel(); }
bool is_contiguous(const Handle& t) { return t->is_contiguous(); }

Handle check_rank(Handle h, std::size_t rank) {
  if (!h) throw ValueError("tensor: null handle");
  if (h->shape.size() != rank) {
    throw ShapeError(fmt::format("tensor: a rank-{} result {} does not fit Tensor<{}>",
                                 h->shape.size(), format_dims(h->shape), rank));
  }
  return h;
}

int normalize_dim(const char* op, std::int64_t dim, int rank) {
  if (dim < -rank || dim >= rank || (rank == 0 && dim != 0 && dim != -1)) {
    throw IndexError(fmt::format("{}: dim {} is out of range for rank {}", op, dim, rank));
  }
  if (rank == 0) {
    throw IndexError(fmt::format("{}: a rank-0 tensor has no dim {}", op, dim));
  }
  return static_cast<int>(dim < 0 ? dim + rank : dim);
}

}  // namespace kiln::detail
