// Which CBLAS the CPU backend's matmul calls, and with how many threads: for `kiln doctor`
// and `kiln info`. Whatever CBLAS is loaded works (blas_library.hpp); these ask it through the
// symbols it exports (OpenBLAS, MKL, BLIS).
#pragma once

#include <string>

namespace kiln::cpu {

// The library and its build, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
// MAX_THREADS=64"; "unknown CBLAS" when it exports none of the known query functions; "none:
// cannot load ..." when no CBLAS could be loaded.
std::string blas_library();

// The kernel set the BLAS picked for this CPU where it says (OpenBLAS's openblas_get_corename:
// "Haswell", "SkylakeX", "Prescott"...); empty when it does not.
std::string blas_core();

// Who chose that kernel set: "chosen by kiln from the CPU's features, as OPENBLAS_CORETYPE=
// SkylakeX" (blas_library.hpp), "OPENBLAS_CORETYPE=... in the environment", or "the BLAS's own
// choice".
std::string blas_core_origin();

// The threads the BLAS uses now, as it reports them (kiln sets 1 for small products and
// cpu::thread_count() for large ones); the last count kiln set, or 1, when it cannot say.
int blas_threads();

}  // namespace kiln::cpu
