// kiln gemm: what both variants of kiln's own matrix-product kernels share. The host side that
// picks and launches them, and the tiling and accuracy of each: src/cuda/matmul/gemm_kernel.cpp.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/matmul/gemm_source.cpp makes a source of this file, the
// variant files its kernels use (gemm_fp32.cuh, gemm_tf32x3.cuh), and the extern "C" entry
// points it generates for each kernel spec (kg::gemm_<variant> instantiated for one tile and
// the loads of both operands).
//
// Both variants stage the operands the same way: each k step, every thread loads its share of
// a's BM x BK tile and c's BK x BN tile from global memory into registers (Stage::load), and,
// once the block has finished computing on the current shared buffer, stores them into the other
// one (Stage::store, two buffers, one barrier per step): the loads of step t + 1 are in flight
// while step t computes. A tile is kept k-major in shared memory, s[kk][o] with a pitch of
// BO + 4 (fp32) or BO + 8 (tf32x3): the padding spreads a k_unit tile's column stores over the
// banks, and keeps every row 16-byte aligned for float4 reads. Out-of-range elements (edges in
// m, n and k) are loaded as 0, so every step computes a full tile and only the final stores are
// masked; a padded k contributes fmaf(0, 0, acc) == acc.
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
template <int BO, int BK, int P, int L, bool V>
struct Stage {
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
                            : L == kKUnit   ? o * so + kk
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
}  // namespace kg
