// Helpers shared by the front-end op files (src/frontend/ops_*.cpp).
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "core/tensor_impl.hpp"
#include "kiln/autocast.hpp"
#include "kiln/detail/ops.hpp"

namespace kiln::detail {

inline const TensorImpl& impl(const Handle& h) { return *h; }

// The device all of `ts` live on; DeviceError naming `op` when they differ.
Device common_device(const char* op, std::initializer_list<const Handle*> ts);

Backend& backend_of(Device device);

// A view of t's buffer with another shape, strides and offset.
Handle view(const TensorImpl& t, Dims shape, Dims strides, std::int64_t offset);

// NumPy broadcasting of two shapes; ShapeError naming `op` when they cannot broadcast.
Dims broadcast_shapes(const char* op, const Dims& a, const Dims& b);
// t seen with `shape` (which t broadcasts to): prepended and size-1 dims get stride 0.
TensorImpl broadcast_to(const TensorImpl& t, const Dims& shape);

// The value of scalar `s` in dtype t; ValueError naming `op` when t is i32 and it does not fit.
double checked_scalar(const char* op, Scalar s, DType t);

// The value scalar v takes when stored in a tensor of dtype t, as `full` stores it: truncated
// toward zero for i32 (ValueError naming `op` if it is NaN or does not fit), v != 0 for bool,
// as it is for the floating dtypes (a half type rounds it when stored).
double scalar_for(const char* op, double v, DType t);

// A new contiguous tensor for `op`: the one way the front end asks a backend for memory.
// ShapeError naming `op` when the shape's element or byte count overflows (core/checked.hpp);
// OutOfMemoryError naming `op` when the bytes exceed the device's memory (checked here, so a
// recording decorator that allocates later fails at this op too) or the backend has none left.
Handle allocate(const char* op, Backend& be, const Dims& shape, DType dtype);

// Runs `program` over `shape` on the inputs' device for `op`: inputs are broadcast to `shape`,
// one new contiguous output per program output (dtypes from the program).
std::vector<Handle> run_elementwise(const char* op, const ir::Program& program,
                                    std::span<const Handle> inputs, std::span<const double> scalars,
                                    const Dims& shape, Device device);
Handle run_elementwise1(const char* op, const ir::Program& program, std::span<const Handle> inputs,
                        std::span<const double> scalars, const Dims& shape, Device device);

// Whether an element-wise op is on autocast's f32 list (src/frontend/autocast.cpp): under an
// autocast guard its half operands are cast to f32 first.
bool autocast_to_f32(Unary op);
bool autocast_to_f32(Binary op);

// One Backend::rows call over x's last dim (src/frontend/ops_norm.cpp): x is f32, bf16 or f16 and
// has been checked; weight and bias may be null. A contiguous copy of x is made first where x is
// not a sequence of rows (row_view). y has x's shape and dtype (logsumexp: f32, one value per
// row; a norm: y_dtype where given, a half type for an f32 x); the norms also write the f32
// per-row mean (layer_norm) and rstd, of shape x.shape[:-1]. A norm with a residual (checked: x's
// shape, x's dtype or a half type for an f32 x) normalises x + residual and returns that sum.
NormResult run_rows(RowOp op, const Handle& x, const Handle& weight, const Handle& bias, double eps,
                    std::optional<DType> y_dtype = std::nullopt, const Handle& residual = {});

}  // namespace kiln::detail
