// The CPU backend's collectives: a process group of one rank, where every collective is a copy
// (the sum, mean or max over one rank is the rank's own tensor, and so are its gather and its
// scatter).
//
// Why no more: NCCL carries kiln's collectives, between GPUs. A CPU transport (gloo's job in
// PyTorch) would be a second implementation of every collective for a use kiln's users do not
// have, data-parallel training on CPUs; a job of one is what lets the same training program run
// on a laptop without a GPU and without a launcher.
#include <fmt/format.h>

#include <cstring>

#include "cpu/cpu_backend.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

class LocalCommunicator final : public detail::Communicator {
 public:
  LocalCommunicator() : Communicator(0, 1) {}
  std::string transport() const override { return "none (a group of one)"; }
};

}  // namespace

std::unique_ptr<detail::Communicator> CpuBackend::communicator(std::span<const std::byte>, int rank,
                                                               int world_size, double) {
  if (world_size != 1)
    throw DistError(fmt::format(
        "process group on the CPU: rank {} of {}: CPU tensors are exchanged in a group of one "
        "only (NCCL carries CUDA tensors between processes; kiln has no CPU transport)",
        rank, world_size));
  return std::make_unique<LocalCommunicator>();
}

void CpuBackend::collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                            const detail::TensorImpl& x, detail::Out out) {
  detail::check_collective_call(p, comm, x, *out);
  if (comm.world_size() != 1 || !dynamic_cast<LocalCommunicator*>(&comm))
    throw DistError(fmt::format("{}: a communicator the CPU backend did not make",
                                detail::collective_op_name(p.op)));
  const std::size_t bytes = static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype);
  if (bytes) std::memcpy(out->data(), x.data(), bytes);
}

}  // namespace kiln::cpu
