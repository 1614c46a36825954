#include "cpu/blas_library.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "cpu/blas_info.hpp"

#ifndef KILN_DEFAULT_BLAS
#error "KILN_DEFAULT_BLAS (the build's CBLAS, from CMake) is not defined"
#endif

namespace kiln::cpu {
namespace {

using SetInt = void (*)(int);
using SetDim = void (*)(std::int64_t);  // BLIS's dim_t is 64-bit
using GetInt = int (*)();
using GetDim = std::int64_t (*)();

// OpenBLAS's kernel set for this CPU, from its features as OpenBLAS itself falls back for a
// model it knows by features only; nullptr where OpenBLAS's own choice is as good as any.
const char* core_for_this_cpu() {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

struct Controls {
  SetInt set_int = nullptr;
  SetDim set_dim = nullptr;
  GetInt get_int = nullptr;
  GetDim get_dim = nullptr;
};

template <class Fn>
Fn symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// The description and thread controls of the loaded library, asked through the symbols each
// known CBLAS exports (OpenBLAS, MKL, BLIS).
void describe(BlasLibrary& b, Controls& c) {
  void* h = b.handle;
  if (auto config = symbol<char* (*)()>(h, "openblas_get_config")) {
    c.set_int = symbol<SetInt>(h, "openblas_set_num_threads");
    c.get_int = symbol<GetInt>(h, "openblas_get_num_threads");
    const char* text = config();
    b.library = text != nullptr ? text : "OpenBLAS";
    if (b.library.rfind("OpenBLAS", 0) != 0) b.library = "OpenBLAS " + b.library;
    if (auto corename = symbol<char* (*)()>(h, "openblas_get_corename")) {
      const char* name = corename();
      b.core = name != nullptr ? name : "";
    }
  } else if (auto mkl_version = symbol<void (*)(char*, int)>(h, "mkl_get_version_string")) {
    c.set_int = symbol<SetInt>(h, "MKL_Set_Num_Threads");
    c.get_int = symbol<GetInt>(h, "MKL_Get_Max_Threads");
    char text[256] = {};
    mkl_version(text, static_cast<int>(sizeof text));
    b.library = text;
  } else if (auto bli_version = symbol<const char* (*)()>(h, "bli_info_get_version_str")) {
    c.set_dim = symbol<SetDim>(h, "bli_thread_set_num_threads");
    c.get_dim = symbol<GetDim>(h, "bli_thread_get_num_threads");
    b.library = std::string("BLIS ") + bli_version();
  } else {
    // A BLAS without a version query may still export a thread setter.
    c.set_int = symbol<SetInt>(h, "openblas_set_num_threads");
    if (!c.set_int) c.set_int = symbol<SetInt>(h, "MKL_Set_Num_Threads");
    if (!c.set_int) c.set_dim = symbol<SetDim>(h, "bli_thread_set_num_threads");
  }
}

struct Loaded {
  BlasLibrary lib;
  Controls controls;
};

Loaded load() {
  Loaded out;
  BlasLibrary& b = out.lib;
  const char* asked = std::getenv("KILN_BLAS");
  b.name = asked != nullptr && *asked != '\0' ? asked : KILN_DEFAULT_BLAS;
  // Already in the process (the program or another library linked it): it has chosen its
  // kernels; only a library loaded here reads the variable.
  b.handle = dlopen(b.name.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  const char* chosen = nullptr;
  if (b.handle == nullptr && std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    chosen = core_for_this_cpu();
    if (chosen != nullptr && setenv("OPENBLAS_CORETYPE", chosen, 0) != 0) chosen = nullptr;
  }
  const bool preloaded = b.handle != nullptr;
  if (!preloaded) b.handle = dlopen(b.name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  const char* why = b.handle == nullptr ? dlerror() : nullptr;
  // The variable has done its work; the programs this one starts get the user's environment.
  if (chosen != nullptr) unsetenv("OPENBLAS_CORETYPE");
  if (b.handle == nullptr) {
    b.error = why != nullptr ? why : "dlopen failed";
    return out;
  }
  b.sgemm = symbol<decltype(&cblas_sgemm)>(b.handle, "cblas_sgemm");
  if (b.sgemm == nullptr) b.error = b.name + " has no cblas_sgemm (it is not a CBLAS)";
  describe(b, out.controls);
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"))
    b.core_origin = std::string("OPENBLAS_CORETYPE=") + user + " in the environment";
  else if (chosen != nullptr)
    b.core_origin =
        std::string("chosen by kiln from the CPU's features, as OPENBLAS_CORETYPE=") + chosen;
  else if (preloaded)
    b.core_origin = "the BLAS's own choice (it was loaded before kiln)";
  else
    b.core_origin = "the BLAS's own choice";
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

// Loads the BLAS while the process has one thread (see blas()).
[[gnu::constructor]] void load_at_start() { (void)loaded(); }

// The last count given to the BLAS (0: none yet), so that a run of small products makes one
// call, not one per product. Concurrent matmuls with different needs may race on the BLAS's
// global setting; either count is correct for both, only speed differs.
std::atomic<int> g_blas_threads{0};

}  // namespace

const BlasLibrary& blas() { return loaded().lib; }

void set_blas_threads(int n) {
  if (g_blas_threads.exchange(n, std::memory_order_relaxed) == n) return;
  const Controls& c = loaded().controls;
  if (c.set_int)
    c.set_int(n);
  else if (c.set_dim)
    c.set_dim(n);
}

std::string blas_library() {
  const BlasLibrary& b = blas();
  return b.sgemm != nullptr ? b.library : "none: cannot load " + b.name + " (" + b.error + ")";
}

std::string blas_core() { return blas().core; }

std::string blas_core_origin() { return blas().core_origin; }

int blas_threads() {
  const Controls& c = loaded().controls;
  if (c.get_int) return c.get_int();
  if (c.get_dim) return static_cast<int>(c.get_dim());
  const int set = g_blas_threads.load(std::memory_order_relaxed);
  return set > 0 ? set : 1;
}

}  // namespace kiln::cpu
