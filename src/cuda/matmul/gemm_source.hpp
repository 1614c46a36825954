// The CUDA C source of kiln's own matrix-product kernels, as strings (the host side that picks
// and launches them, and explains the tiling and accuracy, is gemm_kernel.cpp).
//
// Like src/cuda/reduce_source.hpp this knows nothing of devices or NVRTC: the kernel is a CUDA C
// template (src/cuda/kernels/gemm*.cuh, embedded at build time), and a source instantiates it
// with extern "C" entry points named after everything they are specialised on, so one source can
// batch many kernels (the compile test does) and a run-time source holds just one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::cuda {

// How the products are computed (the accuracy of each is in src/cuda/matmul/gemm_kernel.cpp).
enum class GemmVariant : std::uint8_t {
  fp32,    // fmaf on the CUDA cores, one sequential chain per output
  tf32x3,  // tensor cores: each operand split into TF32 high and low parts, three products
};
const char* gemm_variant_name(GemmVariant v);  // "fp32", "tf32x3"

// The block tile (rows x columns of the output one block computes). Every tile runs 256
// threads; the variant decides how they share it (gemm_kernel.cpp).
enum class GemmTile : std::uint8_t { t128x128, t128x64, t64x64 };
const char* gemm_tile_name(GemmTile t);  // "128x128", ...
struct GemmTileShape {
  int rows, cols, depth;  // BM, BN, BK: depth is the k extent staged per step
};
GemmTileShape gemm_tile_shape(GemmVariant v, GemmTile t);
inline constexpr int kGemmThreads = 256;

// How one operand's tile is read from global memory. The operand is a [rows, k] matrix as the
// product sees it ("outer" = m for a, n for c) with element strides (s_outer, s_k):
//   outer_unit: s_outer == 1 (a transposed a, a row-major c): threads run along the outer dim;
//   k_unit:     s_k == 1 (a row-major a, a transposed c): threads run along k;
//   strided:    neither; any strides (k runs fastest across threads).
// vec4 (unit layouts only): float4 loads along the unit dim, allowed when that dim's extent,
// the other stride and the batch stride are multiples of 4 and the base is 16-byte aligned.
enum class GemmLoad : std::uint8_t { outer_unit, k_unit, strided };
struct GemmOperand {
  GemmLoad load = GemmLoad::strided;
  bool vec4 = false;
  auto operator<=>(const GemmOperand&) const = default;
};

struct GemmKernelSpec {
  GemmVariant variant = GemmVariant::fp32;
  GemmTile tile = GemmTile::t128x128;
  GemmOperand a, c;
  auto operator<=>(const GemmKernelSpec&) const = default;
};

// Kernel parameter, every spec: one struct of (in order)
//   const float* a, const float* c, float* out,
//   int64 batch, m, n, k,
//   int64 a's batch, row (m) and column (k) strides, c's batch, row (k) and column (n) strides
// (elements; 0 for a broadcast batch). out is contiguous [batch, m, n]. Launch: 256 threads,
// grid.x = ceil(m / BM) * ceil(n / BN) tiles (n fastest), grid.y <= batch (each block loops
// over batches in steps of gridDim.y), no dynamic shared memory.
std::string gemm_kernel_name(const GemmKernelSpec& spec);

// One complete source with the entry points of `specs` (and the templates of the variants they
// use, no others).
std::string gemm_source(std::span<const GemmKernelSpec> specs);

// For every (variant, tile), kernels that use every load of a and every load of c (9, not the
// 25 of the full product: the two operands' loads are independent code), one source each.
struct GemmSource {
  std::string name;  // "kiln_gemm_test_fp32_128x128.cu"
  std::string source;
  std::vector<std::string> kernels;
};
std::vector<GemmSource> all_gemm_sources_for_tests();

}  // namespace kiln::cuda
