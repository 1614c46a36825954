// kiln's own matrix products on CUDA: out[b] = a[b] @ c[b] with a kernel of
// src/cuda/kernels/gemm*.cuh (instantiated by src/cuda/matmul/gemm_source.cpp) compiled by NVRTC
// for the device's exact sm_XY.
//
// Tiling. A block of 256 threads computes one BM x BN tile of one output matrix (grid.x: the
// tiles, n fastest; grid.y: batches, each block looping over batch indices in steps of
// gridDim.y, all offsets 64-bit). Each step of BK along k, the threads load a's BM x BK tile and
// c's BK x BN tile into registers, then into one of two shared buffers (k-major, padded), so
// the global loads of step t + 1 overlap the arithmetic of step t with one barrier per step.
// How the loads walk memory is chosen per operand from its strides (GemmLoad): along the
// unit-stride dim, in float4 where the extents, strides and alignment allow, or with any
// strides at all (transposed views and slices are read in place, never copied). Edges in m, n
// and k load zeros and mask the final stores, so any m, n, k (k = 0 included: zeros) runs.
//   fp32:   BM x BN x BK = 128x128x8 (8x8 outputs per thread), 128x64x16 (8x4), 64x64x16 (4x4),
//           each a 16 x 16 grid of threads over the tile; operands come from shared memory as
//           float4 (a quarter warp reads 128 contiguous bytes) and every product is one fmaf.
//   tf32x3: the same tiles with BK = 16 and 8 warps (warp tiles 64x32, 32x32, 32x16) of
//           mma.sync.m16n8k8 TF32 tensor-core instructions.
// default_gemm_tile picks the largest tile that still puts a block on every SM.
//
// Accuracy.
//   fp32 (for Precision::highest): strict fp32, no TF32. Output (i, j) is accumulated by one
//   thread as acc = fmaf(a[i][p], c[p][j], acc) for p = 0, 1, ..., k - 1 in order from +0:
//   one rounding per product-and-add, a fused chain like cuBLASLt's FFMA kernels. Its error is
//   at most gamma_k * sum_p |a[i][p] c[p][j]| with gamma_k = k u / (1 - k u), u = 2^-24, and the
//   value is the same whatever the tile, the layout or the batch (up to the sign of an exact
//   zero: a padded k step adds fmaf(0, 0, -0) = +0), and from run to run. kiln compiles every
//   kernel with --fmad=false (nvrtc_compiler.cpp), so the explicit fmaf calls are the only
//   fused operations.
//   tf32x3: each operand x is split into TF32 parts hi = rn_tf32(x) and lo = rn_tf32(x - hi)
//   (x - hi is exact in fp32), so x = hi + lo + r with |r| <= 2^-22 |x|. Each step accumulates
//   lo_a hi_c, hi_a lo_c, then hi_a hi_c on the tensor cores (products of TF32 values are exact;
//   sums are fp32). The dropped terms (lo_a lo_c and the remainders) are below about 3 * 2^-22
//   |a c| per product, so the error is (k + O(1)) u sum |a c|: strict-fp32 level for all but the
//   shortest k. Limits: |x| within 2^-12 of FLT_MAX rounds hi to infinity (fp32 would stay
//   finite), and parts below FLT_MIN may be flushed by the tensor cores (an absolute error near
//   2^-126 |other operand|). The order of sums inside one mma is the hardware's, so values are
//   deterministic but not those of fp32.
#include "cuda/matmul/gemm_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/check.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

// kg::Args of src/cuda/kernels/gemm.cuh, field for field (all 8 bytes, so the layouts agree).
struct Args {
  const float* a;
  const float* c;
  float* out;
  std::int64_t batch, m, n, k;
  std::int64_t sab, sam, sak;
  std::int64_t scb, sck, scn;
};
static_assert(sizeof(Args) == 13 * 8);

constexpr std::int64_t kMaxGridX = 2147483647;  // grid.x limit
constexpr std::int64_t kMaxGridY = 65535;       // grid.y limit: larger batches loop in the kernel

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// One operand as a [outer, k] matrix (outer = m for a, n for c): how the kernel loads it and
// the strides it is given. A dim of extent 1 has a free stride, taken as 1 so that [1, k] and
// [outer, 1] slices of any stride count as unit-stride.
struct Side {
  GemmOperand load;
  std::int64_t batch_stride, s_outer, s_k;
};

Side side_of(std::int64_t outer, std::int64_t k, std::int64_t s_outer, std::int64_t s_k,
             std::int64_t batch_stride, const void* data) {
  Side s{{}, batch_stride, outer == 1 ? 1 : s_outer, k == 1 ? 1 : s_k};
  if (outer == 1) {  // a single row or column: only k varies
    s.load.load = s.s_k == 1 ? GemmLoad::k_unit : GemmLoad::strided;
  } else if (s.s_outer == 1) {
    s.load.load = GemmLoad::outer_unit;
  } else if (s.s_k == 1) {
    s.load.load = GemmLoad::k_unit;
  } else {
    s.load.load = GemmLoad::strided;
  }
  // float4 along the unit dim: every vector starts on a multiple of 4 elements from a 16-byte
  // aligned base and lies wholly inside or wholly outside the extent.
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && batch_stride % 4 == 0;
  if (s.load.load == GemmLoad::outer_unit) {
    s.load.vec4 = aligned && outer % 4 == 0 && (k == 1 || s.s_k % 4 == 0);
  } else if (s.load.load == GemmLoad::k_unit) {
    s.load.vec4 = aligned && k % 4 == 0 && (outer == 1 || s.s_outer % 4 == 0);
  }
  return s;
}

// The compiled kernels of specs, by (arch, spec): a repeated problem neither generates nor
// hashes the source.
struct Kernels {
  std::mutex mu;
  std::map<std::pair<std::string, GemmKernelSpec>, cudaKernel_t> map;
};
Kernels& kernels() {
  static auto* k = new Kernels;
  return *k;
}

void remember(const Context& ctx, const GemmKernelSpec& spec, cudaKernel_t k) {
  Kernels& ks = kernels();
  std::lock_guard lock(ks.mu);
  ks.map.emplace(std::make_pair(ctx.arch(), spec), k);
}

// The spec's kernel, compiling it when neither memory nor the store has it.
cudaKernel_t kernel_for(const Context& ctx, const GemmKernelSpec& spec) {
  {
    Kernels& ks = kernels();
    std::lock_guard lock(ks.mu);
    auto it = ks.map.find(std::make_pair(ctx.arch(), spec));
    if (it != ks.map.end()) return it->second;
  }
  const std::string name = gemm_kernel_name(spec);
  cudaKernel_t k = cached_kernel(gemm_source({&spec, 1}), name + ".cu", name, ctx.arch());
  remember(ctx, spec, k);
  return k;
}

// Whether the spec's kernel can be had without compiling (then it is loaded).
bool known_kernel(const Context& ctx, const GemmKernelSpec& spec) {
  {
    Kernels& ks = kernels();
    std::lock_guard lock(ks.mu);
    if (ks.map.count(std::make_pair(ctx.arch(), spec))) return true;
  }
  cudaKernel_t k = ready_kernel(gemm_source({&spec, 1}), gemm_kernel_name(spec), ctx.arch());
  if (k) remember(ctx, spec, k);
  return k != nullptr;
}

void check_operands(const Context& ctx, const TensorImpl& a, const TensorImpl& c,
                    const TensorImpl& out) {
  for (const TensorImpl* x : {&a, &c, &out}) {
    if (x->rank() != 3) {
      throw ShapeError(
          fmt::format("own_gemm: operands must be rank 3, got {}", format_dims(x->shape)));
    }
    if (x->dtype != DType::f32) {
      throw DTypeError(
          fmt::format("own_gemm: only f32 is supported, got {}", dtype_name(x->dtype)));
    }
    if (x->device != ctx.device) {
      throw DeviceError(fmt::format("own_gemm: an operand is on {}, the context is {}",
                                    x->device.str(), ctx.device.str()));
    }
  }
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2];
  const bool batch_ok =
      (a.shape[0] == batch || a.shape[0] == 1) && (c.shape[0] == batch || c.shape[0] == 1);
  if (!batch_ok || a.shape[1] != m || c.shape[2] != n || a.shape[2] != c.shape[1]) {
    throw ShapeError(fmt::format("own_gemm: {} @ {} does not give {}", format_dims(a.shape),
                                 format_dims(c.shape), format_dims(out.shape)));
  }
  if (!out.is_contiguous()) {
    throw ShapeError(fmt::format("own_gemm: out {} with strides {} is not contiguous",
                                 format_dims(out.shape), format_dims(out.strides)));
  }
}

}  // namespace

GemmTile default_gemm_tile(GemmVariant v, std::int64_t batch, std::int64_t m, std::int64_t n,
                           int sm_count) {
  for (GemmTile t : {GemmTile::t128x128, GemmTile::t128x64}) {
    const GemmTileShape s = gemm_tile_shape(v, t);
    if (ceil_div(m, s.rows) * ceil_div(n, s.cols) * batch >= sm_count) return t;
  }
  return GemmTile::t64x64;
}

namespace {

// How own_gemm runs a problem: the kernel's spec, its grid and its arguments; nothing when the
// variant cannot run it on this device (see own_gemm), or out is empty.
struct Launch {
  GemmKernelSpec spec;
  Args args;
  dim3 grid;
};

std::optional<Launch> plan_launch(const Context& ctx, GemmVariant v, const TensorImpl& a,
                                  const TensorImpl& c, const TensorImpl& out,
                                  std::optional<GemmTile> tile) {
  check_operands(ctx, a, c, out);
  // mma.sync on TF32 and cvt.rna.tf32 need sm_80 or later.
  if (v == GemmVariant::tf32x3 && ctx.cc_major < 8) return std::nullopt;
  const std::int64_t batch = out.shape[0], m = out.shape[1], n = out.shape[2], k = a.shape[2];
  if (out.numel() == 0) return std::nullopt;

  const GemmTile t = tile ? *tile : default_gemm_tile(v, batch, m, n, ctx.sm_count);
  const GemmTileShape shape = gemm_tile_shape(v, t);
  const std::int64_t tiles = ceil_div(m, shape.rows) * ceil_div(n, shape.cols);
  if (tiles > kMaxGridX) return std::nullopt;  // one matrix beyond grid.x's 2^31 - 1 tiles

  auto batch_stride = [batch](const TensorImpl& x) {
    return batch == 1 || x.shape[0] == 1 ? 0 : x.strides[0];
  };
  const Side sa = side_of(m, k, a.strides[1], a.strides[2], batch_stride(a), a.data());
  const Side sc = side_of(n, k, c.strides[2], c.strides[1], batch_stride(c), c.data());
  return Launch{
      GemmKernelSpec{v, t, sa.load, sc.load},
      Args{static_cast<const float*>(a.data()), static_cast<const float*>(c.data()),
           static_cast<float*>(out.data()), batch, m, n, k, sa.batch_stride, sa.s_outer, sa.s_k,
           sc.batch_stride, sc.s_k, sc.s_outer},
      dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min(batch, kMaxGridY)))};
}

}  // namespace

bool own_gemm(Context& ctx, GemmVariant v, const TensorImpl& a, const TensorImpl& c,
              const TensorImpl& out, std::optional<GemmTile> tile) {
  std::optional<Launch> launch = plan_launch(ctx, v, a, c, out, tile);
  if (!launch) {  // declined, or nothing to compute (k = 0 is computed: zeros)
    const bool declined = (v == GemmVariant::tf32x3 && ctx.cc_major < 8) || out.numel() != 0;
    return !declined;
  }
  ctx.make_current();
  cudaKernel_t kernel = kernel_for(ctx, launch->spec);
  void* args[] = {&launch->args};
  KILN_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), launch->grid,
                                   dim3(kGemmThreads), args, 0, ctx.stream));
  return true;
}

bool own_gemm_ready(Context& ctx, GemmVariant v, const TensorImpl& a, const TensorImpl& c,
                    const TensorImpl& out, bool wait) {
  const std::optional<Launch> launch = plan_launch(ctx, v, a, c, out, std::nullopt);
  if (!launch) return true;  // nothing to compile: own_gemm declines it (or has nothing to do)
  ctx.make_current();        // (the store's rows name the current device)
  if (known_kernel(ctx, launch->spec)) return true;
  if (wait) {
    kernel_for(ctx, launch->spec);
    return true;
  }
  const std::string name = gemm_kernel_name(launch->spec);
  compile_in_background(gemm_source({&launch->spec, 1}), name + ".cu", ctx.arch());
  return false;
}

}  // namespace kiln::cuda
