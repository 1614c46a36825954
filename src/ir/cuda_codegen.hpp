// ir::Program -> CUDA C: the element-wise kernels of the CUDA backend.
//
// The generator knows nothing of devices or NVRTC (it runs, and is tested, without a GPU). It
// emits one kernel per (program, layout): the program's nodes become one statement each in a
// body function, and the kernel walks the elements with a grid-stride loop. What each op
// computes is the CUDA prelude (src/ir/cuda_prelude.cuh, embedded at build time), which mirrors
// src/cpu/kernel_math.hpp case for case.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/program.hpp"

namespace kiln::ir {

// How a kernel reaches one operand's elements over the (coalesced) iteration space.
enum class Access : std::uint8_t {
  contiguous,  // element i at p[i]
  splat,       // every element is p[0] (all strides 0)
  strided,     // element i at p[dot(coords(i), strides)]
  // Strided operands of a vectorized kernel (whose innermost extent is a multiple of 4, so that
  // the 4 elements of a step share their outer coordinates): offsets computed once per step.
  row_strided,  // innermost stride 1, the outer strides multiples of 4: one 4-element load
  row_splat,    // innermost stride 0: one element for the 4 (an input only)
};

struct CudaLayout {
  int rank = 0;  // of the iteration space; strided operands index with it
  std::vector<Access> inputs, outputs;
  bool vectorized = false;  // 4 elements per step with 4-element loads and stores (no `strided`)
  bool wide_index = false;  // 64-bit element indices and offsets (past 2^31 - 1)

  bool operator==(const CudaLayout&) const = default;

  // A short tag for the kernel name and the cache key: "v32.cs.c" etc.
  std::string tag() const;
};

// The kernel's parameters, in order: one pointer per input, one per output, one value per
// scalar (float for f32, int for i32 and bool), then the geometry struct (only when some
// operand is strided: rank extents then rank strides per strided operand, operands in
// input-then-output order, then without wide_index one cuda_divider per extent, all int64), then
// the element count (unsigned or unsigned long long as wide_index says).
struct CudaKernel {
  std::string name;    // the extern "C" entry point
  std::string source;  // complete: the prelude, the body and the kernel
};

CudaKernel cuda_kernel(const Program& program, const CudaLayout& layout);

// Division by e (>= 1) of any 32-bit n below 2^31 as a multiplication: magic | shift << 32 with
// n / e = (umulhi(n, magic) + n) >> shift (Granlund and Montgomery's round-up method, as
// PyTorch's IntDivider; 2^shift >= e, magic < 2^32).
std::uint64_t cuda_divider(std::uint32_t e);

// The body function alone, the one cuda_kernel's kernels call for each element:
//   __device__ void <name>(I i, <value type> x0, ..., <float|int> s0, ..., <value type>& y0, ...)
// with the inputs' register values, the scalars, and references to the outputs; i is the
// element's linear index (unsigned, or unsigned long long with wide_index), read by
// Op::index. Needs cuda_prelude() before it. Other kernels (a reduction's prologue) call it so
// that every value rounds exactly as in the element-wise kernel (with the same NVRTC options).
std::string cuda_body(const Program& program, const std::string& name, bool wide_index);

// The device functions every kiln kernel may use (kiln::relu, kiln::minimum, kiln::isnan_f, the
// float math of kiln::dev, Box-Muller...).
const std::string& cuda_prelude();

// The CUDA C type of a register holding `t` ("float", "int", "bool"; a half type's is "float")
// and of its storage in memory ("float", "int", "unsigned char", "kiln::bf16", "kiln::f16").
const char* cuda_value_type(DType t);
const char* cuda_storage_type(DType t);
// The expression that turns stored element `e` of dtype t into its value type.
std::string cuda_load_value(DType t, const std::string& e);
// The C type of a scalar parameter of dtype t (a bool scalar is passed as an int).
const char* cuda_scalar_type(DType t);

}  // namespace kiln::ir
