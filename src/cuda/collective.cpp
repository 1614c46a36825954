// The CUDA backend's collectives (Backend::collective): NCCL communicators, and each collective
// queued on the device's stream like any kernel.
//
// A collective whose peer died never finishes: its kernel waits on the GPU, and so does every
// sync after it. NCCL leaves noticing that to the caller, so each communicator runs a watchdog
// thread (PyTorch's ProcessGroupNCCL does the same): it follows an event recorded after each
// collective, and when one has not completed within the group's timeout, or NCCL reports an
// asynchronous error, it prints which collective of which rank, aborts the communicator and ends
// the process with status 1. The main thread, blocked in the GPU's sync, cannot be given an
// exception, and a rank that went on after a lost collective would compute with wrong data; the
// launcher (`kiln launch`) then stops the other ranks.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0) so that its creation, which waits
// for every rank, is bounded by the same timeout instead of hanging on a rank that never came.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "cuda/check.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nccl_library.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    default:
      throw DTypeError(fmt::format("NCCL: no {} collectives", dtype_name(t)));
  }
}

ncclRedOp_t nccl_op(detail::CollectiveReduce r) {
  switch (r) {
    case detail::CollectiveReduce::sum:
      return ncclSum;
    case detail::CollectiveReduce::avg:
      return ncclAvg;
    case detail::CollectiveReduce::max:
      return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator final : public detail::Communicator {
 public:
  NcclCommunicator(Context& ctx, const ncclUniqueId& id, int rank, int world_size, double timeout_s)
      : Communicator(rank, world_size), ctx_(ctx), timeout_s_(timeout_s) {
    const NcclLibrary& n = nccl();
    ctx_.make_current();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_check(n.CommInitRankConfig(&comm_, world_size, id, rank, &config),
               "ncclCommInitRankConfig");
    try {
      wait_done(fmt::format("joining the NCCL communicator (rank {} of {})", rank, world_size));
    } catch (...) {
      n.CommAbort(comm_);
      throw;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    const NcclLibrary& n = nccl();
    ctx_.make_current();
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    // Finalize flushes what NCCL still holds; a destructor must not throw, and a peer gone by now
    // would make it wait: abort then.
    const ncclResult_t r = n.CommFinalize(comm_);
    bool clean = r == ncclSuccess || r == ncclInProgress;
    if (clean) {
      try {
        wait_done("finalizing the NCCL communicator");
      } catch (const DistError&) {
        clean = false;
      }
    }
    if (clean)
      n.CommDestroy(comm_);
    else
      n.CommAbort(comm_);
  }

  std::string transport() const override { return "nccl " + nccl().version; }

  // Queues call(comm, stream) on the device's stream and has the watchdog follow it.
  template <class Call>
  void enqueue(const char* what, std::size_t bytes, Call call) {
    ctx_.make_current();
    nccl_check(call(comm_, ctx_.stream), what, comm_);
    wait_done(what);
    cudaEvent_t done = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventRecord(done, ctx_.stream));
    {
      std::lock_guard lock(mutex_);
      pending_.push_back({done, what, bytes, Clock::now()});
    }
    wake_.notify_all();
  }

 private:
  struct Pending {
    cudaEvent_t done;
    const char* what;
    std::size_t bytes;
    Clock::time_point queued;
  };

  // A non-blocking communicator's call returns before it is done; this waits (for at most the
  // timeout) until NCCL says it is, and throws its error.
  void wait_done(const std::string& what) {
    const NcclLibrary& n = nccl();
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      nccl_check(n.CommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) nccl_check(state, what.c_str(), comm_);
      if (Clock::now() > deadline)
        throw DistError(
            fmt::format("{} did not finish within {} s; a rank may have failed", what, timeout_s_));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void watch() {
    ctx_.make_current();
    const NcclLibrary& n = nccl();
    std::unique_lock lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      while (!pending_.empty()) {
        const Pending p = pending_.front();
        const cudaError_t e = cudaEventQuery(p.done);
        if (e == cudaSuccess) {
          cudaEventDestroy(p.done);
          pending_.pop_front();
          continue;
        }
        ncclResult_t state = ncclSuccess;
        n.CommGetAsyncError(comm_, &state);
        const double waited = std::chrono::duration<double>(Clock::now() - p.queued).count();
        if (e != cudaErrorNotReady)
          fail(p, fmt::format("the GPU reported {}", cudaGetErrorString(e)));
        if (state != ncclSuccess && state != ncclInProgress)
          fail(p, fmt::format("NCCL reported {}", n.GetErrorString(state)));
        if (waited > timeout_s_)
          fail(p, fmt::format("it has not finished {:.0f} s after it was queued (the group's "
                              "timeout is {} s): a rank may have died or stopped",
                              waited, timeout_s_));
        break;
      }
    }
  }

  [[noreturn]] void fail(const Pending& p, const std::string& why) {
    std::fprintf(stderr,
                 "kiln: DistError: rank %d of %d: %s of %zu bytes failed: %s; aborting the NCCL "
                 "communicator and ending this process\n",
                 rank(), world_size(), p.what, p.bytes, why.c_str());
    std::fflush(stderr);
    nccl().CommAbort(comm_);
    std::_Exit(1);
  }

  Context& ctx_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::vector<std::byte> CudaBackend::communicator_id() {
  ncclUniqueId id;
  nccl_check(nccl().GetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::byte> bytes(sizeof id.internal);
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

std::unique_ptr<detail::Communicator> CudaBackend::communicator(std::span<const std::byte> id,
                                                                int rank, int world_size,
                                                                double timeout_s) {
  ncclUniqueId nid;
  if (id.size() != sizeof nid.internal)
    throw DistError(fmt::format("NCCL communicator: the id has {} bytes, expected {}", id.size(),
                                sizeof nid.internal));
  std::memcpy(nid.internal, id.data(), id.size());
  return std::make_unique<NcclCommunicator>(ctx_, nid, rank, world_size, timeout_s);
}

void CudaBackend::collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                             const detail::TensorImpl& x, detail::Out out) {
  detail::check_collective_call(p, comm, x, *out);
  auto* nc = dynamic_cast<NcclCommunicator*>(&comm);
  if (!nc)
    throw DistError(fmt::format("{}: a communicator the CUDA backend did not make",
                                detail::collective_op_name(p.op)));
  if (out->numel() == 0) return;
  const ncclDataType_t type = nccl_dtype(x.dtype);
  const auto count = static_cast<std::size_t>(x.numel());
  const std::size_t bytes = count * dtype_size(x.dtype);
  const void* send = x.data();
  void* recv = out->data();
  switch (p.op) {
    case detail::CollectiveOp::all_reduce:
      nc->enqueue("all_reduce", bytes, [&](ncclComm_t c, cudaStream_t s) {
        return nccl().AllReduce(send, recv, count, type, nccl_op(p.reduce), c, s);
      });
      break;
    case detail::CollectiveOp::broadcast:
      nc->enqueue("broadcast", bytes, [&](ncclComm_t c, cudaStream_t s) {
        return nccl().Broadcast(send, recv, count, type, p.root, c, s);
      });
      break;
    case detail::CollectiveOp::all_gather:
      nc->enqueue("all_gather", bytes, [&](ncclComm_t c, cudaStream_t s) {
        return nccl().AllGather(send, recv, count, type, c, s);
      });
      break;
    case detail::CollectiveOp::reduce_scatter:
      nc->enqueue("reduce_scatter", bytes, [&](ncclComm_t c, cudaStream_t s) {
        return nccl().ReduceScatter(send, recv, count / comm.world_size(), type, nccl_op(p.reduce),
                                    c, s);
      });
      break;
  }
}

}  // namespace kiln::cuda
