// kiln gemm, variant fp32: a TM x TN register block per thread, 16 x 16 threads, one fmaf per
// product on the CUDA cores (accuracy: src/cuda/matmul/gemm_kernel.cpp).
//
// CUDA C compiled by NVRTC at run time, never by the host compiler; src/cuda/matmul/gemm_source.cpp
// puts it after gemm.cuh (kg::Args, kg::run_k) in every source with an fp32 kernel.
namespace kg {
template <int BM, int BN, int BK, int TM, int TN>
struct Fp32Block {
  static constexpr int PA = BM + 4, PC = BN + 4;
  float acc[TM][TN];
  int tx, ty;
  // A thread's rows are TM / 4 runs of 4, BM / (TM / 4) apart (and its columns likewise), so
  // that a quarter warp's float4 reads of one k row are 128 contiguous bytes.
  static __device__ __forceinline__ int row(int ty, int i) {
    return (i / 4) * (BM * 4 / TM) + ty * 4 + (i % 4);
  }
  static __device__ __forceinline__ int col(int tx, int j) {
    return (j / 4) * (BN * 4 / TN) + tx * 4 + (j % 4);
  }
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
  const long long m0 = (long long)blockIdx.x / tiles_n * BM,
                  n0 = (long long)blockIdx.x % tiles_n * BN;
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
}  // namespace kg
