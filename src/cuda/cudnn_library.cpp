#include "cuda/cudnn_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "core/runtime_config.hpp"

#if KILN_WITH_CUDNN
// The cuDNN frontend built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING finds every cuDNN function
// through this handle (cudnn_frontend_shim.h declares it; the program defines it).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace kiln::cuda {
namespace {

struct Loaded {
  CudnnLibrary library;
  std::string error;  // empty when loaded
};

Loaded load() {
  Loaded out;
  const char* env = std::getenv("KILN_CUDNN_LIBRARY");
  CudnnLibrary& c = out.library;
  c.path = env && *env ? env : "libcudnn.so.9";
  // RTLD_LOCAL: cuDNN's symbols stay out of the way of another copy a program may have loaded.
  void* lib = ::dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = fmt::format(
        "cannot load cuDNN ({}): {}. bf16/f16 attention runs kiln's own kernels; for cuDNN's, "
        "put libcudnn.so.9 (cuDNN 9: the CUDA toolkit's, or PyTorch's nvidia-cudnn wheel's) "
        "where the loader finds it, or set KILN_CUDNN_LIBRARY to its path",
        c.path, ::dlerror());
    return out;
  }
  using GetVersion = std::size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(::dlsym(lib, "cudnnGetVersion"));
  if (!get_version) {
    out.error = fmt::format("cuDNN at {} has no cudnnGetVersion", c.path);
    return out;
  }
  c.code = static_cast<long long>(get_version());
  c.version = fmt::format("{}.{}.{}", c.code / 10000, c.code / 100 % 100, c.code % 100);
  if (c.code < 90000) {  // the frontend's SDPA graphs need cuDNN 9
    out.error = fmt::format("cuDNN at {} is {}; kiln needs cuDNN 9", c.path, c.version);
    return out;
  }
#if KILN_WITH_CUDNN
  cudnn_frontend::cudnn_dlhandle = lib;
#endif
  return out;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded l;
  std::call_once(once, [] { l = load(); });
  return l;
}

}  // namespace

const CudnnLibrary* cudnn_library() {
  const Loaded& l = loaded();
  return l.error.empty() ? &l.library : nullptr;
}

std::string cudnn_status() {
  if (!KILN_WITH_CUDNN) return "off: built with -DKILN_CUDNN=OFF";
  if (!detail::cudnn_live()) return "off: switched off (KILN_CUDNN=0 or kiln::set_config)";
  const Loaded& l = loaded();
  if (!l.error.empty()) return "absent: " + l.error;
  return l.library.version + " (" + l.library.path + ")";
}

}  // namespace kiln::cuda
