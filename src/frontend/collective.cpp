// The collectives of include/kiln/process_group.hpp: checks, a contiguous input, a new output,
// and one Backend::collective call on the group's communicator.
#include <fmt/format.h>

#include "frontend/ops_common.hpp"
#include "frontend/process_group.hpp"
#include "kiln/error.hpp"
#include "kiln/process_group.hpp"

namespace kiln::dist::detail {
namespace {

kiln::detail::CollectiveOp backend_op(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return kiln::detail::CollectiveOp::all_reduce;
    case Collective::broadcast:
      return kiln::detail::CollectiveOp::broadcast;
    case Collective::all_gather:
      return kiln::detail::CollectiveOp::all_gather;
    case Collective::reduce_scatter:
      return kiln::detail::CollectiveOp::reduce_scatter;
  }
  return kiln::detail::CollectiveOp::all_reduce;
}

kiln::detail::CollectiveReduce backend_reduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return kiln::detail::CollectiveReduce::sum;
    case ReduceOp::avg:
      return kiln::detail::CollectiveReduce::avg;
    case ReduceOp::max:
      return kiln::detail::CollectiveReduce::max;
  }
  return kiln::detail::CollectiveReduce::sum;
}

}  // namespace

kiln::detail::Handle collective(Collective c, const kiln::detail::Handle& x, ReduceOp op,
                                int root) {
  using kiln::detail::Handle;
  const kiln::detail::CollectiveParams p{backend_op(c), backend_reduce(op), root};
  const char* name = kiln::detail::collective_op_name(p.op);
  ProcessGroupState& g = group(name);
  if (x->device != g.device)
    throw DeviceError(fmt::format("{}: the tensor is on {} but the process group on {}", name,
                                  x->device.str(), g.device.str()));
  kiln::detail::Backend& be = kiln::detail::backend_of(g.device);
  const DType dtypes[] = {x->dtype};
  if (!be.supports(kiln::detail::BackendOp::collective, dtypes))
    throw DTypeError(
        fmt::format("{}: {} does not exchange {} tensors", name, be.name(), dtype_name(x->dtype)));
  const Handle in = kiln::detail::contiguous(x);
  const Dims shape = kiln::detail::collective_out_shape(p, *in, g.comm->world_size());
  Handle out = kiln::detail::allocate(name, be, shape, in->dtype);
  kiln::detail::check_collective_call(p, *g.comm, *in, *out);
  be.collective(p, *g.comm, *in, kiln::detail::Out(*out));
  return out;
}

}  // namespace kiln::dist::detail
