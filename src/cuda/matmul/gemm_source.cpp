#include "cuda/matmul/gemm_source.hpp"

#include <fmt/format.h>

#include "embed/cuda/kernels/gemm.cuh.hpp"
#include "embed/cuda/kernels/gemm_fp32.cuh.hpp"
#include "embed/cuda/kernels/gemm_tf32x3.cuh.hpp"

namespace kiln::cuda {
namespace {

// The device side is CUDA C in src/cuda/kernels/: gemm.cuh (the operands' staging, shared by
// both variants), gemm_fp32.cuh and gemm_tf32x3.cuh (each variant's block and kernel template).
// What varies is generated here: the extern "C" entry point of each spec, which instantiates
// kg::gemm_<variant> for one tile and the loads of both operands.

// Per (variant, tile): the template arguments after BM, BN, BK. fp32: the thread's register
// block TM x TN (16 x 16 threads). tf32x3: the warps along m and n (8 warps), each warp tile
// made of 16 x 8 mma tiles.
struct Geometry {
  GemmTileShape shape;
  int p, q;
};
Geometry geometry(GemmVariant v, GemmTile t) {
  if (v == GemmVariant::fp32) {
    switch (t) {
      case GemmTile::t128x128:
        return {{128, 128, 8}, 8, 8};
      case GemmTile::t128x64:
        return {{128, 64, 16}, 8, 4};
      case GemmTile::t64x64:
        return {{64, 64, 16}, 4, 4};
    }
  }
  switch (t) {
    case GemmTile::t128x128:
      return {{128, 128, 16}, 2, 4};  // warp tile 64 x 32
    case GemmTile::t128x64:
      return {{128, 64, 16}, 4, 2};  // 32 x 32
    case GemmTile::t64x64:
      return {{64, 64, 16}, 2, 4};  // 32 x 16
  }
  return {{128, 128, 8}, 8, 8};
}

const char* load_tag(GemmOperand o) {
  switch (o.load) {
    case GemmLoad::outer_unit:
      return o.vec4 ? "o4" : "o";
    case GemmLoad::k_unit:
      return o.vec4 ? "k4" : "k";
    case GemmLoad::strided:
      return "s";
  }
  return "?";
}

const char* load_enum(GemmLoad l) {
  switch (l) {
    case GemmLoad::outer_unit:
      return "kg::kOuterUnit";
    case GemmLoad::k_unit:
      return "kg::kKUnit";
    case GemmLoad::strided:
      return "kg::kStrided";
  }
  return "?";
}

std::string entry(const GemmKernelSpec& s) {
  const Geometry g = geometry(s.variant, s.tile);
  return fmt::format(
      "extern \"C\" __global__ void __launch_bounds__(256) {}(kg::Args g) {{\n"
      "  kg::gemm_{}<{}, {}, {}, {}, {}, {}, {}, {}, {}>(g);\n}}\n",
      gemm_kernel_name(s), gemm_variant_name(s.variant), g.shape.rows, g.shape.cols, g.shape.depth,
      g.p, g.q, load_enum(s.a.load), s.a.vec4 ? "true" : "false", load_enum(s.c.load),
      s.c.vec4 ? "true" : "false");
}

}  // namespace

const char* gemm_variant_name(GemmVariant v) { return v == GemmVariant::fp32 ? "fp32" : "tf32x3"; }

const char* gemm_tile_name(GemmTile t) {
  switch (t) {
    case GemmTile::t128x128:
      return "128x128";
    case GemmTile::t128x64:
      return "128x64";
    case GemmTile::t64x64:
      return "64x64";
  }
  return "?";
}

GemmTileShape gemm_tile_shape(GemmVariant v, GemmTile t) { return geometry(v, t).shape; }

std::string gemm_kernel_name(const GemmKernelSpec& s) {
  return fmt::format("kiln_gemm_{}_{}_a{}_c{}", gemm_variant_name(s.variant),
                     gemm_tile_name(s.tile), load_tag(s.a), load_tag(s.c));
}

std::string gemm_source(std::span<const GemmKernelSpec> specs) {
  bool fp32 = false, tf32x3 = false;
  for (const auto& s : specs) (s.variant == GemmVariant::fp32 ? fp32 : tf32x3) = true;
  std::string src(embed::cuda_kernels_gemm_cuh);
  if (fp32) src += embed::cuda_kernels_gemm_fp32_cuh;  // only the variants the specs use
  if (tf32x3) src += embed::cuda_kernels_gemm_tf32x3_cuh;
  for (const auto& s : specs) src += entry(s);
  return src;
}

std::vector<GemmSource> all_gemm_sources_for_tests() {
  const GemmOperand operands[] = {{GemmLoad::outer_unit, false},
                                  {GemmLoad::outer_unit, true},
                                  {GemmLoad::k_unit, false},
                                  {GemmLoad::k_unit, true},
                                  {GemmLoad::strided, false}};
  std::vector<GemmSource> out;
  for (GemmVariant v : {GemmVariant::fp32, GemmVariant::tf32x3}) {
    for (GemmTile t : {GemmTile::t128x128, GemmTile::t128x64, GemmTile::t64x64}) {
      std::vector<GemmKernelSpec> specs;
      // The two operands' loads are independent code (Stage<..., L, V> each), so every load of
      // a beside one of c, then every other load of c beside one of a, covers every Stage.
      for (GemmOperand a : operands) specs.push_back({v, t, a, operands[1]});
      for (GemmOperand c : operands) {
        if (c != operands[1]) specs.push_back({v, t, operands[3], c});
      }
      GemmSource s;
      s.name = fmt::format("kiln_gemm_test_{}_{}.cu", gemm_variant_name(v), gemm_tile_name(t));
      s.source = gemm_source(specs);
      for (const auto& spec : specs) s.kernels.push_back(gemm_kernel_name(spec));
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace kiln::cuda
