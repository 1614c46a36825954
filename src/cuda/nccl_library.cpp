#include "cuda/nccl_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <optional>

#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

template <class F>
void resolve(void* lib, const std::string& path, const char* name, F& f) {
  void* sym = ::dlsym(lib, name);
  if (!sym)
    throw DistError(
        fmt::format("NCCL at {} has no {} (kiln needs NCCL 2.14 or newer)", path, name));
  f = reinterpret_cast<F>(sym);
}

NcclLibrary load() {
  const char* env = std::getenv("KILN_NCCL_LIBRARY");
  NcclLibrary n;
  n.path = env && *env ? env : "libnccl.so.2";
  // RTLD_LOCAL: NCCL's own symbols stay out of the way of another copy a program may have loaded
  // (PyTorch's, through a Python extension).
  void* lib = ::dlopen(n.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw DistError(fmt::format(
        "cannot load NCCL ({}): {}. Collectives on CUDA tensors need libnccl.so.2: install it (the "
        "CUDA toolkit's lib64, Debian's libnccl2, or PyTorch's nvidia-nccl wheel) where the loader "
        "finds it (LD_LIBRARY_PATH), or set KILN_NCCL_LIBRARY to its path",
        n.path, ::dlerror()));
  resolve(lib, n.path, "ncclGetVersion", n.GetVersion);
  resolve(lib, n.path, "ncclGetUniqueId", n.GetUniqueId);
  resolve(lib, n.path, "ncclCommInitRankConfig", n.CommInitRankConfig);
  resolve(lib, n.path, "ncclCommGetAsyncError", n.CommGetAsyncError);
  resolve(lib, n.path, "ncclCommFinalize", n.CommFinalize);
  resolve(lib, n.path, "ncclCommDestroy", n.CommDestroy);
  resolve(lib, n.path, "ncclCommAbort", n.CommAbort);
  resolve(lib, n.path, "ncclGetErrorString", n.GetErrorString);
  resolve(lib, n.path, "ncclGetLastError", n.GetLastError);
  resolve(lib, n.path, "ncclAllReduce", n.AllReduce);
  resolve(lib, n.path, "ncclBroadcast", n.Broadcast);
  resolve(lib, n.path, "ncclAllGather", n.AllGather);
  resolve(lib, n.path, "ncclReduceScatter", n.ReduceScatter);
  int code = 0;
  if (n.GetVersion(&code) != ncclSuccess)  // (not nccl_check: it asks for this library)
    throw DistError(fmt::format("NCCL at {}: ncclGetVersion failed", n.path));
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  n.version = fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
  return n;
}

}  // namespace

const NcclLibrary& nccl() {
  // Loaded once; a failure is not kept, so a program that sets KILN_NCCL_LIBRARY after a first
  // failed try may try again.
  static std::mutex mutex;
  static std::optional<NcclLibrary> library;
  std::lock_guard lock(mutex);
  if (!library) library = load();
  return *library;
}

std::string nccl_status() {
  try {
    const NcclLibrary& n = nccl();
    return n.version + " (" + n.path + ")";
  } catch (const DistError& e) {
    return std::string("absent: ") + e.what();
  }
}

void nccl_check(ncclResult_t r, const char* call, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const NcclLibrary& n = nccl();
  const char* last = n.GetLastError(comm);
  throw DistError(fmt::format("{} failed: {}{}{}", call, n.GetErrorString(r),
                              last && *last ? ": " : "", last ? last : ""));
}

}  // namespace kiln::cuda
