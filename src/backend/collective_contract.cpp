// The contract of Backend::collective, and the defaults of a backend with no transport.
//
// Checked by every backend before it queues anything, as the front end has checked already: a
// direct backend call gets the same errors, never a read past a buffer. What is checked:
//   x, out    one dtype (DTypeError) that avg and max accept (avg: floating; max: floating or
//             i32); both contiguous, out not x's buffer (ValueError)
//   out       collective_out_shape (ShapeError)
//   root      in [0, W) for broadcast (ValueError)
#include <fmt/format.h>

#include "backend/backend.hpp"
#include "kiln/error.hpp"
#include "kiln/shape.hpp"

namespace kiln::detail {

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
  }
  return "?";
}

Dims collective_out_shape(const CollectiveParams& p, const TensorImpl& x, int world_size) {
  const char* name = collective_op_name(p.op);
  Dims out = x.shape;
  switch (p.op) {
    case CollectiveOp::all_reduce:
      return out;
    case CollectiveOp::broadcast:
      if (p.root < 0 || p.root >= world_size)
        throw ValueError(fmt::format("broadcast: root {} is not a rank of this group of {}", p.root,
                                     world_size));
      return out;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
      if (out.empty())
        throw ShapeError(fmt::format("{}: a tensor of rank 0 has no dim 0 to {} along", name,
                                     p.op == CollectiveOp::all_gather ? "gather" : "scatter"));
      if (p.op == CollectiveOp::all_gather) {
        out[0] *= world_size;
      } else {
        if (out[0] % world_size != 0)
          throw ShapeError(fmt::format("reduce_scatter: dim 0 of {} does not split into {} ranks",
                                       format_dims(x.shape), world_size));
        out[0] /= world_size;
      }
      return out;
  }
  return out;
}

void check_collective_call(const CollectiveParams& p, const Communicator& comm, const TensorImpl& x,
                           const TensorImpl& out) {
  const char* name = collective_op_name(p.op);
  if (out.dtype != x.dtype)
    throw DTypeError(fmt::format("{}: the output is {} but the input {}", name,
                                 dtype_name(out.dtype), dtype_name(x.dtype)));
  const bool reduces = p.op == CollectiveOp::all_reduce || p.op == CollectiveOp::reduce_scatter;
  if (!is_floating(x.dtype) && x.dtype != DType::i32)
    throw DTypeError(fmt::format("{}: {} tensors are not exchanged (f32, bf16, f16, i32 are)", name,
                                 dtype_name(x.dtype)));
  if (reduces && p.reduce == CollectiveReduce::avg && !is_floating(x.dtype))
    throw DTypeError(fmt::format("{}: avg of {} (an integer mean would round); use sum", name,
                                 dtype_name(x.dtype)));
  const Dims want = collective_out_shape(p, x, comm.world_size());
  if (out.shape != want)
    throw ShapeError(fmt::format("{}: the output has shape {}, expected {} for an input {}", name,
                                 format_dims(out.shape), format_dims(want), format_dims(x.shape)));
  if (!x.is_contiguous() || !out.is_contiguous())
    throw ValueError(fmt::format("{}: the input and the output must be contiguous", name));
  if (x.buffer && x.buffer == out.buffer && x.numel() > 0)
    throw ValueError(fmt::format("{}: the output shares the input's memory", name));
}

std::vector<std::byte> Backend::communicator_id() {
  throw DistError(fmt::format("{}: this device has no transport for collectives", name()));
}

std::unique_ptr<Communicator> Backend::communicator(std::span<const std::byte>, int, int, double) {
  throw DistError(fmt::format("{}: this device has no transport for collectives", name()));
}

void Backend::collective(const CollectiveParams& p, Communicator&, const TensorImpl&, Out) {
  throw DistError(fmt::format("{}: {} on a device with no transport for collectives", name(),
                              collective_op_name(p.op)));
}

}  // namespace kiln::detail
