// The interface every backend implements, and decorators (fusion) wrap.
//
// The front end (src/frontend/ops_*.cpp) checks shapes, dtypes and devices, broadcasts by giving
// inputs stride-0 dimensions, allocates outputs with `empty`, and then calls one of these.
// A backend may run the call asynchronously; `download` and `sync` wait.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/tensor_impl.hpp"
#include "ir/program.hpp"
#include "kiln/detail/ops.hpp"

namespace kiln::detail {

// The front end's reduction names the backend op too.
using ReduceOp = Reduction;
const char* reduce_name(ReduceOp op);
// The dtype `op` over an `in` tensor writes: sum keeps f32 and sums i32/bool to i32, mean is
// f32, max/min keep the dtype, argmax/argmin give i32 indices.
DType reduce_result_dtype(ReduceOp op, DType in);
// Throws (IndexError, ShapeError, DTypeError, ValueError) unless reduce(op, x, dim, out) meets
// Backend::reduce's contract below.
void check_reduce_call(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out);

// A reduction's element-wise prologue: the value reduced is the single output of `program`,
// computed for every element of `shape` exactly as elementwise() would compute it from `inputs`
// (each of `shape`, broadcast dims with stride 0) and `scalars`. The fusion decorator passes the
// open group's program this way, so the reduced tensor is never written.
struct Prologue {
  const ir::Program& program;
  std::span<const TensorImpl* const> inputs;
  std::span<const double> scalars;
  const Dims& shape;
};

// A memoryless descriptor of the prologue's value: its dtype, shape and contiguous strides.
// Throws unless the program has one output and matches the inputs and scalars.
TensorImpl prologue_value(const Prologue& p);

struct RandomSpec {
  enum class Kind : std::uint8_t { uniform, normal } kind = Kind::uniform;
  double a = 0.0;  // uniform: lo; normal: mean
  double b = 1.0;  // uniform: hi; normal: std
};

class Backend {
 public:
  virtual ~Backend() = default;

  // This backend's part of the chain, e.g. "cpu<avx2>" or "fusion<cuda<sm_90>>".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;

  // The bytes of memory the device has (host: RAM and swap; CUDA: the GPU's total). No buffer
  // larger than this can ever be allocated, so the front end refuses one at the op that asks,
  // even where a decorator allocates later.
  virtual std::uint64_t memory_capacity() const = 0;
  // A new contiguous tensor whose contents are unspecified.
  virtual Handle empty(const Dims& shape, DType dtype) = 0;
  // Copies numel * dtype_size bytes from host memory into the contiguous tensor t.
  virtual void upload(const void* src, const TensorImpl& t) = 0;
  // Copies the contiguous tensor t into host memory; waits for pending work on t.
  virtual void download(const TensorImpl& t, void* dst) = 0;

  // Runs the program for every element of the outputs' common shape. Every input has that
  // shape (broadcast dims have stride 0); outputs may be strided views (cat writes slices).
  virtual void elementwise(const ir::Program& program, std::span<const TensorImpl* const> inputs,
                           std::span<const double> scalars,
                           std::span<const TensorImpl* const> outputs) = 0;
  // Reduces x over `dim` (or over all elements when dim < 0) into out, which has x's shape
  // with that dim set to 1 (all dims 1 when dim < 0), contiguous. arg* write i32 indices.
  virtual void reduce(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out) = 0;
  // reduce() of the prologue's value, which is evaluated inside the reduction and never stored.
  // Returns false, having done nothing, where this backend cannot do that for these layouts;
  // the caller then materialises the value and calls reduce(). Errors as reduce().
  virtual bool reduce_prologue(ReduceOp, const Prologue&, int, const TensorImpl&) { return false; }
  // out[b] = a[b] @ c[b] for a [B, m, k], c [B, k, n], out [B, m, n] contiguous; a and c may
  // have any strides (stride 0 on a broadcast batch).
  virtual void matmul(const TensorImpl& a, const TensorImpl& c, const TensorImpl& out) = 0;
  // Fills the contiguous tensor out from the Philox 4x32-10 stream of `seed` (src/core/philox.hpp).
  virtual void random(const RandomSpec& spec, std::uint64_t seed, const TensorImpl& out) = 0;

  // Waits for every op queued on this device.
  virtual void sync() = 0;
};

}  // namespace kiln::detail
