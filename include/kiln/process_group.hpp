// Process groups and collectives (docs/distributed.md): one process per GPU, exchanging tensors.
//
// One process group per process, over the devices of one kind: CUDA tensors travel through NCCL
// (loaded by init_process_group from libnccl.so.2, or from the file KILN_NCCL_LIBRARY names); CPU
// tensors are accepted at a world size of 1 only (kiln writes no transport of its own).
// Collectives are functional, like every kiln op: they return new tensors, queued on the device's
// stream after the fusion decorator has run what it recorded, without waiting for the GPU. They
// record no gradient (the result needs none).
#pragma once

#include <cstddef>

#include "kiln/device.hpp"
#include "kiln/dist.hpp"
#include "kiln/tensor.hpp"

namespace kiln::dist {
enum class ReduceOp : unsigned char { sum, avg, max };

struct ProcessGroupOptions {
  // How long a rendezvous step, and a collective that has not finished, may take before the
  // process is stopped with a DistError message naming the operation (a peer has died).
  double timeout_seconds = 300;
};

// Joins the job launch_env() describes, on `device` (CUDA: the process's GPU, usually
// Device::cuda(launch_env().local_rank)): rank 0 hosts the store at MASTER_ADDR:MASTER_PORT and
// creates NCCL's unique id, every rank gets it from there and makes its communicator. Throws
// DistError when the group exists already, the rendezvous fails or times out, NCCL cannot be
// loaded, or CPU tensors are asked for at a world size above 1.
void init_process_group(Device device, const ProcessGroupOptions& options = {});
bool is_initialized();
// Ends the group (a barrier first, so that rank 0's store outlives every rank's last use).
void destroy_process_group();
// This process's rank and the job's size (DistError without a group).
int rank();
int world_size();
Device group_device();

namespace detail {
enum class Collective : unsigned char { all_reduce, broadcast, all_gather, reduce_scatter };
kiln::detail::Handle collective(Collective c, const kiln::detail::Handle& x, ReduceOp op, int root);
}  // namespace detail

// Every rank's x combined by op, on every rank (x of the same shape and dtype everywhere; avg of
// an integer dtype is refused).
template <std::size_t D>
Tensor<D> all_reduce(const Tensor<D>& x, ReduceOp op = ReduceOp::sum) {
  return Tensor<D>(
      detail::collective(detail::Collective::all_reduce, x.handle("all_reduce"), op, 0));
}
// Rank root's x, on every rank.
template <std::size_t D>
Tensor<D> broadcast(const Tensor<D>& x, int root = 0) {
  return Tensor<D>(detail::collective(detail::Collective::broadcast, x.handle("broadcast"),
                                      ReduceOp::sum, root));
}
// Every rank's x concatenated along dim 0 in rank order: [world_size * n, ...] from [n, ...].
template <std::size_t D>
requires(D >= 1) Tensor<D> all_gather(const Tensor<D>& x) {
  return Tensor<D>(
      detail::collective(detail::Collective::all_gather, x.handle("all_gather"), ReduceOp::sum, 0));
}
// all_reduce(x, op)'s rows [rank * n / world_size, (rank + 1) * n / world_size) along dim 0
// (n divisible by world_size).
template <std::size_t D>
requires(D >= 1) Tensor<D> reduce_scatter(const Tensor<D>& x, ReduceOp op = ReduceOp::sum) {
  return Tensor<D>(
      detail::collective(detail::Collective::reduce_scatter, x.handle("reduce_scatter"), op, 0));
}
// Returns when every rank has called it (through the store; queued GPU work is not waited for).
void barrier();

}  // namespace kiln::dist
