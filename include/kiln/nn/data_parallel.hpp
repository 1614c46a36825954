// kiln::nn::DataParallel: data-parallel training over a process group (kiln/process_group.hpp),
// as torch.nn.parallel.DistributedDataParallel. Every rank holds the whole model and runs it on its
// own share of the batch; after backward every parameter's gradient is the average of the ranks'
// gradients, so one optimizer step keeps the replicas equal.
//
//   kiln::dist::init_process_group(kiln::Device::cuda(kiln::dist::launch_env().local_rank));
//   Mlp model;
//   model.to(kiln::dist::group_device());
//   kiln::nn::DataParallel ddp(model);        // broadcasts rank 0's parameters
//   kiln::optim::AdamW opt(model.parameters());
//   for (...) {
//     auto loss = kiln::cross_entropy(ddp(x), y);  // ddp(x) is model.forward(x)
//     loss.backward();                             // buckets all-reduced while backward runs
//     opt.step();
//     opt.zero_grad();
//   }
//
// How it works, and why:
//
// - Buckets. One all-reduce per parameter would pay a collective's fixed cost hundreds of times
//   per step, one for the whole model could start only when backward is over. So gradients travel
//   in buckets of about bucket_cap_mib (25 MiB, PyTorch's default), each one all-reduce of the
//   bucket's gradients flattened into one tensor (a cat of their reshapes), launched as soon as
//   every gradient of the bucket is final, while backward goes on with earlier layers. Parameters
//   are taken in reverse order of parameters(), which approximates the order backward finishes
//   their gradients (the last layer's first); a bucket holds one dtype and one device (a cat
//   needs one); a bucket is closed once it holds cap bytes or more (the parameter that crosses
//   the cap stays in it), and the first bucket of each dtype and device is closed at
//   first_bucket_mib (1 MiB), so that the first all-reduce starts early. This is PyTorch's rule
//   (compute_bucket_assignment_by_size), except that PyTorch builds its buckets again after the
//   first iteration in the order gradients were actually ready; kiln keeps the static order.
//   Parameters of no elements take no part (no gradient ever reaches them).
// - Order. Buckets are launched in their index order, a complete bucket waiting for the ones
//   before it, as PyTorch's reducer does: every rank must issue the same collectives in the same
//   order (NCCL matches them by order), whatever order their hooks happen to fire in.
// - Hooks. Each parameter's tensor gets an on_grad_final hook (kiln/tensor.hpp): it runs once the
//   backward pass has added all it will to that gradient. The hook marks the parameter ready and
//   launches what is complete; the launch, the all-reduce (ReduceOp::avg) and set_grad of each
//   parameter to its slice of the result (reshaped: views of one buffer, nothing copied) all run
//   inside the hook, and the all-reduce is queued on the device's stream without waiting for it,
//   so communication overlaps the rest of backward. Once every bucket has been launched the
//   counts start again, so a later backward (after no_sync, or a second loss) is reduced too.
// - Rebinding. kiln's tensors are immutable: an optimizer step rebinds each parameter's slot to a
//   new tensor, and a hook hangs on the autograd data of the tensor it was registered on, so the
//   new tensor has none. Hence the call operator (and prepare_forward(), which it calls first):
//   before each forward it registers hooks on every parameter whose current tensor is not the one
//   it registered on. A forward that bypasses the wrapper after an optimizer step leaves the new
//   tensors without hooks, and their gradients are then not reduced: run every training forward
//   through ddp(...), or call prepare_forward() before it. A hook knows the registration it came
//   from, so one left on an old tensor that is still alive does nothing.
// - The previous iteration. prepare_forward() also checks that the last backward completed every
//   bucket it started. A parameter that received no gradient (unused in forward, or cut off by a
//   detach) leaves its bucket incomplete and the ranks' gradients unreduced: DistError naming the
//   parameters, as PyTorch's "Expected to have finished reduction in the prior iteration" (kiln
//   has no find_unused_parameters). The state is reset before throwing.
// - no_sync(). While the guard lives hooks do nothing, so gradients accumulate locally (gradient
//   accumulation without a collective per micro-batch); the first backward after it fires every
//   hook again and all-reduces the accumulated gradients. This is exact: the average over ranks
//   of (already averaged + local) is the average plus the average of the locals.
// - Construction broadcasts every parameter from rank 0 (once per slot: tied parameters share
//   one), as PyTorch does, so replicas start equal whatever each rank initialised.
//   check_in_sync() verifies that they still are (a debugging aid: it reads back to the host).
// - Hooks hold the wrapper's state weakly and no tensor: a DataParallel destroyed before its
//   model leaves hooks that do nothing, and no reference cycle keeps a tensor alive. Hooks run on
//   the thread that runs backward; a DataParallel is not meant to be shared between threads.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.hpp"

namespace kiln::nn {

struct DataParallelOptions {
  // A bucket is closed once it holds this many MiB of gradients (PyTorch's bucket_cap_mb).
  double bucket_cap_mib = 25;
  // The first bucket of each dtype and device is closed at this size instead (PyTorch's 1 MiB).
  double first_bucket_mib = 1;
};

// Counters for tests and logs.
struct DataParallelStats {
  std::int64_t buckets_reduced = 0;    // all-reduces of buckets launched since construction
  std::int64_t hooks_registered = 0;   // on_grad_final hooks put on parameter tensors
  std::int64_t backwards_reduced = 0;  // backward passes that launched every bucket
};

// What DataParallel<M> is, without the module's type: everything but the call operator.
class DataParallelBase {
  struct State;

 public:
  // Requires a process group (DistError naming kiln::dist::init_process_group otherwise), and
  // every parameter on the group's device (DistError naming the first that is not). Broadcasts
  // rank 0's parameters and registers the hooks. ValueError for caps that are not positive.
  explicit DataParallelBase(Module& module, DataParallelOptions options = {});
  ~DataParallelBase();
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  // The wrapped module (DataParallel<M>::module() gives it as an M).
  Module& module() const { return *module_; }
  const DataParallelOptions& options() const;

  // Before a forward pass (the call operator does this): DistError if the previous backward left
  // a bucket incomplete (naming the parameters that got no gradient); hooks on every parameter
  // whose tensor changed since (an optimizer step, load_state_dict). DistError if a parameter's
  // shape, dtype or device changed: build the DataParallel after Module::to.
  void prepare_forward();

  // RAII: while one lives, backward all-reduces nothing (gradients accumulate locally); the next
  // backward after it reduces the accumulated gradients. Nests.
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class DataParallelBase;
    explicit NoSync(std::shared_ptr<State> state);
    std::shared_ptr<State> state_;
    bool was_;
  };
  [[nodiscard]] NoSync no_sync();

  // Whether every parameter holds the same values on every rank: DistError naming the first that
  // differs (by the order of parameters()) and by how much. Collectives on every parameter, and
  // one read-back: a check for tests and debugging, every rank must call it.
  void check_in_sync() const;

  // The buckets in launch order, each the names of its parameters in the order they were added.
  std::vector<std::vector<std::string>> bucket_names() const;
  DataParallelStats stats() const;

 private:
  Module* module_;
  std::shared_ptr<State> state_;
};

// The wrapper: ddp(args...) is module.forward(args...) (or module(args...) where the module has no
// forward of those arguments), after prepare_forward(). Built as DataParallel ddp(model), the
// module's type deduced; a DataParallel<> over a plain Module& has no call operator (call
// prepare_forward() before each forward instead).
template <class M = Module>
requires std::derived_from<M, Module>
class DataParallel : public DataParallelBase {
 public:
  explicit DataParallel(M& module, DataParallelOptions options = {})
      : DataParallelBase(module, options), typed_(&module) {}

  M& module() const { return *typed_; }

  template <class... Args>
  requires(
      requires(M& m, Args&&... a) { m.forward(std::forward<Args>(a)...); } ||
      requires(M & m, Args&&... a) { m(std::forward<Args>(a)...); }) decltype(auto)
  operator()(Args&&... args) {
    prepare_forward();
    if constexpr (requires { typed_->forward(std::forward<Args>(args)...); })
      return typed_->forward(std::forward<Args>(args)...);
    else
      return (*typed_)(std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) forward(Args&&... args) {
    return (*this)(std::forward<Args>(args)...);
  }

 private:
  M* typed_;
};

}  // namespace kiln::nn
