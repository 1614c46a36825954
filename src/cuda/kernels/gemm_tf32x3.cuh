// kiln gemm, variant tf32x3: mma.sync m16n8k8 on TF32 high and low parts, 8 warps of WM x WN
// (accuracy: src/cuda/matmul/gemm_kernel.cpp).
//
// CUDA C compiled by NVRTC at run time, never by the host compiler; src/cuda/matmul/gemm_source.cpp
// puts it after gemm.cuh (kg::Args, kg::run_k) in every source with a tf32x3 kernel.
namespace kg {
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
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int BK, int WM, int WN>
struct Tf32x3Block {
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
  static_assert(WM * WN * 32 == kThreads && B::MT >= 1 && B::NT >= 1 && BK % 8 == 0,
                "bad tf32x3 tile");
  __shared__ __align__(16) float sa[2][BK * B::PA];
  __shared__ __align__(16) float sc[2][BK * B::PC];
  const long long tiles_n = (g.n + BN - 1) / BN;
  const long long m0 = (long long)blockIdx.x / tiles_n * BM,
                  n0 = (long long)blockIdx.x % tiles_n * BN;
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
