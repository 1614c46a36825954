#include "cuda/gemm_source.hpp"

#include <fmt/format.h>

namespace kiln::cuda {
namespace {

// The device side. Both variants stage the operands the same way: each k step, every thread
// loads its share of a's BM x BK tile and c's BK x BN tile from global memory into registers
// (Stage::load), and, once the block has finished computing on the current shared buffer, stores
// them into the other one (Stage::store, two buffers, one barrier per step): the loads of step
// t + 1 are in flight while step t computes. A tile is kept k-major in shared memory, s[kk][o]
// with a pitch of BO + 4 (fp32) or BO + 8 (tf32x3): the padding spreads a k_unit tile's column
// stores over the banks, and keeps every row 16-byte aligned for float4 reads. Out-of-range
// elements (edges in m, n and k) are loaded as 0, so every step computes a full tile and only
// the final stores are masked; a padded k contributes fmaf(0, 0, acc) == acc.
const char* const kLibrary = R"(// kiln gemm
namespace kg {
struct Args {
  const float* a;
  const float* c;
  float* out;
  long long batch, m, n, k;
  long long sab, sam, sak;  // a: batch, row (m), column (k)
  long long scb, sck, scn;  // c: batch, row (k), column (n)
};

enum { kOuterUnit = 0, kKUnit = 1, kStrided = 2 };
constexpr int kThreads = 256;

// One operand's BO x BK tile in flight: the outer dim o is m for a and n for c. Threads run
// along o (outer_unit) or along k (k_unit, strided); V: float4 loads along the unit dim.
template <int BO, int BK, int P, int L, bool V> struct Stage {
  static constexpr bool kFastO = L == kOuterUnit;
  static constexpr int W = V ? 4 : 1;
  static constexpr int F = kFastO ? BO : BK;
  static constexpr int FU = F / W;
  static constexpr int N = BO * BK / (kThreads * W);
  static_assert(N >= 1 && N * kThreads * W == BO * BK, "the tile does not divide among threads");
  static_assert(FU * W == F && (!V || L != kStrided), "bad vector layout");
  float r[N * W];

  static __device__ __forceinline__ void place(int t, int& o, int& kk) {
    const int e = (int)threadIdx.x + t * kThreads;
    const int f = (e % FU) * W, s = e / FU;
    o = kFastO ? f : s;
    kk = kFastO ? s : f;
  }
  // p: the tile's element (0, 0); left_o, left_k: the extents that remain from there. Unit
  // strides are the literal 1, so the compiler sees contiguous addresses.
  __device__ __forceinline__ void load(const float* __restrict__ p, long long so, long long sk,
                                       long long left_o, long long left_k, bool full) {
#pragma unroll
    for (int t = 0; t < N; ++t) {
      int o, kk;
      place(t, o, kk);
      const bool in = full || (o < left_o && kk < left_k);
      const long long off = L == kOuterUnit ? o + kk * sk
                          : L == kKUnit     ? o * so + kk
                                            : o * so + kk * sk;
      if (V) {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (in) v = __ldg(reinterpret_cast<const float4*>(p + off));
        r[t * 4 + 0] = v.x;
        r[t * 4 + 1] = v.y;
        r[t * 4 + 2] = v.z;
        r[t * 4 + 3] = v.w;
      } else {
        float v = 0.0f;
        if (in) v = __ldg(p + off);
        r[t] = v;
      }
    }
  }
  __device__ __forceinline__ void store(float* s) const {
#pragma unroll
    for (int t = 0; t < N; ++t) {
      int o, kk;
      place(t, o, kk);
      if (V && kFastO) {
        *reinterpret_cast<float4*>(s + kk * P + o) =
            make_float4(r[t * 4], r[t * 4 + 1], r[t * 4 + 2], r[t * 4 + 3]);
      } else {
#pragma unroll
        for (int q = 0; q < W; ++q) s[(kk + q) * P + o] = r[t * W + q];
      }
    }
  }
};

// The staging loop shared by both variants: Compute(sa, sc) consumes one k step from shared
// memory (sa: BK x BM with pitch PA, sc: BK x BN with pitch PC).
template <int BM, int BN, int BK, int PA, int PC, int LA, bool VA, int LC, bool VC, class Compute>
__device__ __forceinline__ void run_k(const Args& g, const float* pa, const float* pc,
                                      long long left_m, long long left_n, float (*sa)[BK * PA],
                                      float (*sc)[BK * PC], Compute& compute) {
  Stage<BM, BK, PA, LA, VA> ta;
  Stage<BN, BK, PC, LC, VC> tc;
  const long long steps = (g.k + BK - 1) / BK;
  const long long sak = LA == kKUnit ? 1 : g.sak, sck = LC == kKUnit ? 1 : g.sck;
  if (steps > 0) {
    ta.load(pa, g.sam, g.sak, left_m, g.k, left_m >= BM && g.k >= BK);
    tc.load(pc, g.scn, g.sck, left_n, g.k, left_n >= BN && g.k >= BK);
    ta.store(sa[0]);
    tc.store(sc[0]);
  }
  __syncthreads();
  for (long long t = 0; t < steps; ++t) {
    const int cur = (int)(t & 1);
    const bool more = t + 1 < steps;
    if (more) {
      const long long k0 = (t + 1) * BK, left_k = g.k - k0;
      ta.load(pa + k0 * sak, g.sam, g.sak, left_m, left_k, left_m >= BM && left_k >= BK);
      tc.load(pc + k0 * sck, g.scn, g.sck, left_n, left_k, left_n >= BN && left_k >= BK);
    }
    compute(sa[cur], sc[cur]);
    if (more) {
      ta.store(sa[cur ^ 1]);
      tc.store(sc[cur ^ 1]);
    }
    __syncthreads();
  }
}

// ---- fp32: a TM x TN register block per thread, 16 x 16 threads ----
template <int BM, int BN, int BK, int TM, int TN> struct Fp32Block {
  static constexpr int PA = BM + 4, PC = BN + 4;
  float acc[TM][TN];
  int tx, ty;
  // A thread's rows are TM / 4 runs of 4, BM / (TM / 4) apart (and its columns likewise), so
  // that a quarter warp's float4 reads of one k row are 128 contiguous bytes.
  static __device__ __forceinline__ int row(int ty, int i) { return (i / 4) * (BM * 4 / TM) + ty * 4 + (i % 4); }
  static __device__ __forceinline__ int col(int tx, int j) { return (j / 4) * (BN * 4 / TN) + tx * 4 + (j % 4); }
  __device__ __forceinline__ void operator()(const float* sa, const float* sc) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float ra[TM], rc[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sa + kk * PA + row(ty, i));
        ra[i] = v.x, ra[i + 1] = v.y, ra[i + 2] = v.z, ra[i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sc + kk * PC + col(tx, j));
        rc[j] = v.x, rc[j + 1] = v.y, rc[j + 2] = v.z, rc[j + 3] = v.w;
      }
      // One fmaf per product, k in order: out[i][j] is the sequential fused chain over k.
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rc[j], acc[i][j]);
    }
  }
};

template <int BM, int BN, int BK, int TM, int TN, int LA, bool VA, int LC, bool VC>
__device__ __forceinline__ void gemm_fp32(const Args& g) {
  typedef Fp32Block<BM, BN, BK, TM, TN> B;
  static_assert((BM / TM) * (BN / TN) == kThreads && TM % 4 == 0 && TN % 4 == 0, "bad fp32 tile");
  __shared__ __align__(16) float sa[2][BK * B::PA];
  __shared__ __align__(16) float sc[2][BK * B::PC];
  const long long tiles_n = (g.n + BN - 1) / BN;
  const long long m0 = (long long)blockIdx.x / tiles_n * BM, n0 = (long long)blockIdx.x % tiles_n * BN;
  const long long left_m = g.m - m0, left_n = g.n - n0;
  const bool vec_out = (g.n & 3) == 0 && ((unsigned long long)g.out & 15) == 0;
  B blk;
  blk.tx = (int)threadIdx.x % (BN / TN);
  blk.ty = (int)threadIdx.x / (BN / TN);
  for (long long b = blockIdx.y; b < g.batch; b += gridDim.y) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) blk.acc[i][j] = 0.0f;
    const float* pa = g.a + b * g.sab + m0 * (LA == kOuterUnit ? 1 : g.sam);
    const float* pc = g.c + b * g.scb + n0 * (LC == kOuterUnit ? 1 : g.scn);
    run_k<BM, BN, BK, B::PA, B::PC, LA, VA, LC, VC>(g, pa, pc, left_m, left_n, sa, sc, blk);
    float* po = g.out + b * g.m * g.n + m0 * g.n + n0;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = B::row(blk.ty, i);
      if (r >= left_m) continue;
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const int c = B::col(blk.tx, j);
        float* p = po + r * g.n + c;
        if (vec_out && c + 3 < left_n) {
          *reinterpret_cast<float4*>(p) =
              make_float4(blk.acc[i][j], blk.acc[i][j + 1], blk.acc[i][j + 2], blk.acc[i][j + 3]);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (c + q < left_n) p[q] = blk.acc[i][j + q];
        }
      }
    }
  }
}

// ---- tf32x3: mma.sync m16n8k8 on TF32 high and low parts, 8 warps of WM x WN ----
__device__ __forceinline__ unsigned tf32_rna(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// x = hi + lo + (a remainder below 2^-22 |x|): x - hi is exact in fp32 (at most 13 bits).
__device__ __forceinline__ void split(float x, unsigned& hi, unsigned& lo) {
  hi = tf32_rna(x);
  lo = tf32_rna(x - __uint_as_float(hi));
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int BK, int WM, int WN> struct Tf32x3Block {
  static constexpr int PA = BM + 8, PC = BN + 8;  // pitch = 8 mod 32: fragment reads hit 32 banks
  static constexpr int MT = BM / WM / 16, NT = BN / WN / 8;
  float acc[MT][NT][4];
  int mb, nb, gid, tig;  // the warp's first row and column; the lane's group and index in it
  __device__ __forceinline__ void operator()(const float* sa, const float* sc) {
#pragma unroll
    for (int k8 = 0; k8 < BK; k8 += 8) {
      unsigned ah[MT][4], al[MT][4], ch[NT][2], cl[NT][2];
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        // A fragment (row = m, col = k): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
        const float* s = sa + (k8 + tig) * PA + mb + t * 16 + gid;
        split(s[0], ah[t][0], al[t][0]);
        split(s[8], ah[t][1], al[t][1]);
        split(s[4 * PA], ah[t][2], al[t][2]);
        split(s[4 * PA + 8], ah[t][3], al[t][3]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        // B fragment (row = k, col = n): b0 (t, g), b1 (t + 4, g)
        const float* s = sc + (k8 + tig) * PC + nb + t * 8 + gid;
        split(s[0], ch[t][0], cl[t][0]);
        split(s[4 * PC], ch[t][1], cl[t][1]);
      }
      // The small products first, then the large one (lo x lo, below 2^-22, is dropped).
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_tf32(acc[i][j], al[i], ch[j]);
          mma_tf32(acc[i][j], ah[i], cl[j]);
          mma_tf32(acc[i][j], ah[i], ch[j]);
        }
    }
  }
};

template <int BM, int BN, int BK, int WM, int WN, int LA, bool VA, int LC, bool VC>
__device__ __forceinline__ void gemm_tf32x3(const Args& g) {
  typedef Tf32x3Block<BM, BN, BK, WM, WN> B;
  static_assert(WM * WN * 32 == kThreads && B::MT >= 1 && B::NT >= 1 && BK % 8 == 0, "bad tf32x3 tile");
  __shared__ __align__(16) float sa[2][BK * B::PA];
  __shared__ __align__(16) float sc[2][BK * B::PC];
  const long long tiles_n = (g.n + BN - 1) / BN;
  const long long m0 = (long long)blockIdx.x / tiles_n * BM, n0 = (long long)blockIdx.x % tiles_n * BN;
  const long long left_m = g.m - m0, left_n = g.n - n0;
  const bool vec_out = (g.n & 1) == 0 && ((unsigned long long)g.out & 7) == 0;
  const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
  B blk;
  blk.mb = warp / WN * (BM / WM);
  blk.nb = warp % WN * (BN / WN);
  blk.gid = lane >> 2;
  blk.tig = lane & 3;
  for (long long b = blockIdx.y; b < g.batch; b += gridDim.y) {
#pragma unroll
    for (int i = 0; i < B::MT; ++i)
#pragma unroll
      for (int j = 0; j < B::NT; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) blk.acc[i][j][q] = 0.0f;
    const float* pa = g.a + b * g.sab + m0 * (LA == kOuterUnit ? 1 : g.sam);
    const float* pc = g.c + b * g.scb + n0 * (LC == kOuterUnit ? 1 : g.scn);
    run_k<BM, BN, BK, B::PA, B::PC, LA, VA, LC, VC>(g, pa, pc, left_m, left_n, sa, sc, blk);
    float* po = g.out + b * g.m * g.n + m0 * g.n + n0;
#pragma unroll
    for (int i = 0; i < B::MT; ++i)
#pragma unroll
      for (int j = 0; j < B::NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // D fragment: d0, d1 (g, 2t + 0/1), d2, d3 (g + 8, ...)
          const int r = blk.mb + i * 16 + blk.gid + h * 8, c = blk.nb + j * 8 + blk.tig * 2;
          if (r >= left_m) continue;
          float* p = po + r * g.n + c;
          const float x = blk.acc[i][j][h * 2], y = blk.acc[i][j][h * 2 + 1];
          if (vec_out && c + 1 < left_n) {
            *reinterpret_cast<float2*>(p) = make_float2(x, y);
          } else {
            if (c < left_n) p[0] = x;
            if (c + 1 < left_n) p[1] = y;
          }
        }
  }
}
}  // namespace kg
)";

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
  std::string src = kLibrary;
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
