// Which CBLAS the CPU backend's matmul calls, and with how many threads: for `kiln doctor`
// and `kiln info`. Whatever CBLAS is linked works; these ask it through the symbols it exports
// (OpenBLAS, MKL, BLIS), found at run time.
#pragma once

#include <string>

namespace kiln::cpu {

// The library and its build, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
// MAX_THREADS=64"; "unknown CBLAS" when it exports none of the known query functions.
std::string blas_library();

// The kernel set the BLAS picked for this CPU where it says (OpenBLAS's openblas_get_corename:
// "Haswell", "SkylakeX", "Prescott"...); empty when it does not.
std::string blas_core();

// The threads the BLAS uses now, as it reports them (kiln sets 1 for small products and
// cpu::thread_count() for large ones); the last count kiln set, or 1, when it cannot say.
int blas_threads();

}  // namespace kiln::cpu
