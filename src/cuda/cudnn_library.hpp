// cuDNN, loaded at run time: libcudnn.so.9 (or the file KILN_CUDNN_LIBRARY names), opened the first
// time a bf16/f16 attention runs on a GPU, for the cuDNN frontend's calls (cudnn_attention.cpp).
//
// Why not linked: cuDNN 9 is about 600 MB over eight libraries, found in more than one place (a
// CUDA toolkit's lib, PyTorch's nvidia-cudnn wheel, a distribution's package), and needed only by
// attention. Loaded on demand, a missing cuDNN costs a program nothing but the speed of that op:
// attention falls back to kiln's own kernels, and kiln info / kiln doctor say why.
#pragma once

#include <string>

namespace kiln::cuda {

struct CudnnLibrary {
  std::string path;     // what dlopen opened
  std::string version;  // "9.19.0"
  long long code = 0;   // cudnnGetVersion(): major * 10000 + minor * 100 + patch
};

// The library, loaded once per process (a failure is kept too: one dlopen per process), or null
// with the reason in cudnn_status().
const CudnnLibrary* cudnn_library();

// "9.19.0 (libcudnn.so.9)", "absent: <why>", or "off: <why>" when the switch or the build has
// cuDNN off: for kiln info and kiln doctor (loads the library).
std::string cudnn_status();

}  // namespace kiln::cuda
