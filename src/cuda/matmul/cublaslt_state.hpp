// A device's cuBLASLt state (handle, workspace, the library's one-time set-up), made once, and
// made ahead of the first matmul in a process that is known to matmul.
//
// cuBLASLt's first use in a process is slow, and not in cublasLtCreate. Measured on the H200
// (2026-12-03, CUDA 13.0, cuBLASLt 13.1, lazy module loading): the handle takes 2-24 ms; the
// first cublasLtMatmulAlgoGetHeuristic or cublasLtMatmulAlgoCheck of the process 85-180 ms (the
// library setting itself up), and the first of the other compute type (TF32 after strict fp32)
// 13-25 ms more; after that each takes microseconds, and a matmul is queued in about 0.1 ms.
// A stored tuned choice skips the heuristic but not that set-up, so a warm store alone left the
// first matmul at 60-110 ms.
//
// The first launch of a cuBLASLt kernel then loads its module: another 13-18 ms for some of them.
//
// So when the CUDA backend of a device is created, a background thread makes the state and, when
// the store holds tuned matmul choices for it (this program has multiplied matrices on this
// device before, and will again), runs each stored cuBLASLt choice (the 8 newest) once on scratch
// memory of its bucket's shape (preload_matmul, matmul.cpp): its check sets cuBLASLt up, its
// launch loads the kernel. When the store holds none (a first process) it does nothing: running
// the heuristic there instead crashed processes that exited during it (cublaslt_state.cpp), and
// a first process's first matmul pays for tuning anyway. The first matmul then finds both done if
// the program did anything else for about 0.2 s after opening the device (uploading weights, say);
// if it comes sooner, it waits for the rest, most of which it would have paid anyway.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>

#include "core/tensor_impl.hpp"
#include "cuda/context.hpp"

namespace kiln::cuda {

// Enough for cuBLASLt's split-k and stream-k kernels on large problems (its own guidance for
// Hopper is 32 MiB).
inline constexpr std::uint64_t kWorkspaceBytes = std::uint64_t{32} << 20;

// A cuBLASLt descriptor, destroyed with its owner.
template <class T, cublasStatus_t (*Destroy)(T)>
struct Owned {
  T h = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (h) Destroy(h);  // a destructor must not throw; destroying a valid descriptor cannot fail
  }
};
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// One handle and one workspace per device, shared by every call because every call of a device
// is queued on its one stream. Never destroyed: destroying a handle after the CUDA runtime has
// shut down at exit is undefined.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<detail::Buffer> workspace;
};

// ctx's state, made at the first call (or by the background set-up, which this waits for).
// DeviceError when cuBLASLt cannot be set up; the next call tries again.
const LtState& lt_state(Context& ctx);

// Starts, once per device, the background set-up described above. Never throws: a failure is left
// for the first matmul to meet and report. A thread still running at exit is joined. Built with
// KILN_PERSISTENCE and KILN_AUTOTUNE; else a no-op.
void prepare_lt_in_background(Context& ctx);

}  // namespace kiln::cuda
