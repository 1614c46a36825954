// Run-time compilation: CUDA C source -> cubin with NVRTC, for the device's exact architecture,
// loaded with cudaLibraryLoadData and cached in memory by (source hash, arch, options).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::cuda {

// The NVRTC options every kiln kernel is built with. --fmad=false: a * b + c rounds twice, as on
// the CPU (built with -ffp-contract=off), so results do not depend on the device.
std::vector<std::string> compile_options(const std::string& arch);

// Compiles `source` for `arch` ("sm_90") and returns the cubin. Needs NVRTC, not a GPU. A
// failed compile throws DeviceError naming `source_name` and carrying NVRTC's log.
std::vector<char> compile_cubin(const std::string& source, const std::string& source_name,
                                const std::string& arch);

// The kernel `kernel_name` of `source` compiled for `arch`: on the first request, its cubin is
// read from the store (src/store/, when persistence is live) or compiled and written there, and
// loaded; later requests take it from memory. Thread-safe.
cudaKernel_t cached_kernel(const std::string& source, const std::string& source_name,
                           const std::string& kernel_name, const std::string& arch);

// The kernel `kernel_name` of `source` for `arch` if it can be had without compiling: in memory,
// compiled by compile_in_background, or in the store (then loaded); nullptr otherwise.
cudaKernel_t ready_kernel(const std::string& source, const std::string& kernel_name,
                          const std::string& arch);

// Queues `source`'s compile for `arch` on kiln's one background compile thread (nothing when it is
// in memory or queued already; the thread reads it from the store instead of compiling it when
// it is there); a compiled cubin is written to the store, and either is kept for
// cached_kernel and ready_kernel, and cached_kernel waits for a compile under way rather than
// start its own. One compile at a time. At exit the queue is dropped and a compile under way is
// waited for (NVRTC cannot be interrupted, and its library must not be torn down under it).
// Never throws: a compile that fails, or no thread to be had, leaves the source to the next
// cached_kernel, which compiles it and reports what fails.
void compile_in_background(const std::string& source, const std::string& source_name,
                           const std::string& arch);

// Runs f once, on the thread of this process's first compile that a caller waits for (a kernel
// neither in memory, nor compiled in the background, nor in the store), just before it: the sign
// of a store that lacks this build's kernels. precompile.hpp queues kiln's fixed kernels then, so
// a process whose kernels are all stored (or that compiles none) never touches the store for them.
// f must not throw.
void before_first_compile(std::function<void()> f);

// Compilations done in this process and the seconds they took (for the bench's first-call
// report and the tests that count compilations), and the cubins read from the store instead.
struct CompileStats {
  std::int64_t compiles = 0;  // on the caller's thread (a call waited for them)
  double seconds = 0;
  std::int64_t loaded = 0;
  double load_seconds = 0;
  std::int64_t background = 0;  // by compile_in_background (no call waited for them)
  double background_seconds = 0;
};
CompileStats compile_stats();

// detail::hash_bytes of s (FNV-1a on 8-byte words): the source part of the cache key.
std::uint64_t source_hash(const std::string& s);

}  // namespace kiln::cuda
