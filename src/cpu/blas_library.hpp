// The CBLAS that CPU matmul calls, loaded at run time (dlopen), and its controls.
//
// Loaded rather than linked, for two reasons. OpenBLAS (built with DYNAMIC_ARCH, as Debian's is)
// picks its kernels from the CPU model when it initialises, and a model newer than the build gets
// its oldest x86-64 kernels: Debian 12's 0.3.21 runs the SSE3 "Prescott" set on the H200 host's
// Xeon, several times slower at sgemm (docs/benchmarks.md). Its OPENBLAS_CORETYPE variable names
// the set instead, but a linked library has initialised before any code of the program runs; a
// loaded one reads the variable that kiln sets from the CPU's features just before loading it
// (unless the user set it: that stays the override). And the BLAS stays swappable at run time:
// KILN_BLAS names another CBLAS (a path or a library name: libblis.so.4, libmkl_rt.so), without
// rebuilding.
#pragma once

#include <cblas.h>

#include <string>

namespace kiln::cpu {

struct BlasLibrary {
  decltype(&cblas_sgemm) sgemm = nullptr;  // null when no CBLAS could be loaded
  std::string name;   // what was asked for: KILN_BLAS, or the build's BLAS (its soname)
  std::string error;  // why it could not be loaded, when sgemm is null
  std::string library = "unknown CBLAS";  // its own description, "OpenBLAS 0.3.21 ..."
  std::string core;                       // its kernel set where it says ("SkylakeX")
  std::string core_origin;                // who chose `core` (blas_core_origin() in blas_info)
  void* handle = nullptr;
};

// The process's BLAS, loaded at the first call (which a static initialiser of kiln makes, while
// the process has one thread: setting a variable of the environment is not thread-safe).
const BlasLibrary& blas();

// Sets the BLAS's thread count, where it has a setter (OpenBLAS, MKL, BLIS); a repeated count
// costs nothing.
void set_blas_threads(int n);

}  // namespace kiln::cpu
