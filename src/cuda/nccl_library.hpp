// NCCL, loaded at run time: the functions kiln's collectives call, from libnccl.so.2 (or the file
// KILN_NCCL_LIBRARY names), opened the first time a process group is made on a GPU.
//
// Why not linked: libnccl.so is 200 MB, needed only by programs that train on several GPUs, and
// ships in more than one place (the CUDA toolkit, PyTorch's nvidia-nccl wheel, a distribution's
// package). Loading it on demand keeps every other kiln program free of it, and a missing NCCL is
// a DistError at init_process_group that says where kiln looked, not a loader error at start.
// nccl.h (the toolkit's) gives the types; the ABI of these calls is stable across NCCL 2.x.
#pragma once

#include <nccl.h>

#include <string>

namespace kiln::cuda {

struct NcclLibrary {
  std::string path;     // what dlopen opened
  std::string version;  // "2.28.9"
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclCommFinalize) CommFinalize;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetLastError) GetLastError;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclBroadcast) Broadcast;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclReduceScatter) ReduceScatter;
};

// The library, loaded once per process; DistError naming the path tried and dlopen's reason (or
// the missing symbol) when it cannot be.
const NcclLibrary& nccl();

// "2.28.9 (libnccl.so.2)", or "absent: <why>": what kiln::dist's collectives would use, for
// kiln info and kiln doctor (loads the library).
std::string nccl_status();

// Throws DistError "<call> failed: <NCCL's message> (<its last error>)" unless r is ncclSuccess
// (or ncclInProgress, which a non-blocking communicator's calls answer until they are done).
void nccl_check(ncclResult_t r, const char* call, ncclComm_t comm = nullptr);

}  // namespace kiln::cuda
