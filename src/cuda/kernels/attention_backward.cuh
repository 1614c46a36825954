// kiln attention backward: the device side of Backend::attention_backward, after
// kernels/attention.cuh (whose fragment helpers it uses). Two kernels, no atomics; each
// recomputes the probabilities from the forward's log-sum-exp, P = exp2(s * scale2 - lse2) (0
// where masked), never writing a T x T tensor. With delta_i = sum_d dO[i, d] o[i, d]:
//   dq kernel   one block per 64 queries of one (b, h), as the forward: over key tiles,
//               S = q k^T and dP = dO v^T (mma_abt), dS = P (dP - delta), dq += dS k (mma_cx);
//               dq = scale dq. It writes delta first (each warp for its 16 rows), for the other.
//   dkv kernel  one block per 64 keys of one (b, h): over query tiles (causal: from the key
//               block's first query on), S^T = k q^T and dP^T = v dO^T, P^T and
//               dS^T = P^T (dP^T - delta), dv += P^T dO and dk += dS^T q; dk = scale dk.
// The dkv kernel reads delta, so it is queued after the dq kernel on the same stream. Every
// product runs on tensor cores as the forward's (bf16/f16 m16n8k16, f32 as TF32), f32
// accumulation; the P and dS operands are rounded to the operand type as the forward's P is.
namespace ka {

__device__ __forceinline__ float value(const float* p) { return __ldg(p); }
__device__ __forceinline__ float value(const kiln::bf16* p) { return kiln::to_f32(kiln::ldg(p)); }
__device__ __forceinline__ float value(const kiln::f16* p) { return kiln::to_f32(kiln::ldg(p)); }

constexpr float kLog2e = 1.4426950408889634f;

// delta of rows r0 .. r0 + 15 (this warp's): written to delta[r] and returned for this thread's
// rows g and g + 8 of the mma layout.
template <class T, int D>
__device__ __forceinline__ void row_deltas(const T* dout, long long sdo, const T* o, long long so,
                                           long long r0, long long t, float* delta,
                                           float (&mine)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4;
  for (int r = 0; r < 16; ++r) {
    const long long row = r0 + r;
    float x = 0.f;
    if (row < t)
      for (int d = lane; d < D; d += 32) x += value(dout + row * sdo + d) * value(o + row * so + d);
#pragma unroll
    for (int w = 16; w > 0; w /= 2) x += __shfl_xor_sync(0xffffffffu, x, w);
    if (r == g) mine[0] = x;
    if (r == g + 8) mine[1] = x;
    if (lane == 0 && row < t) delta[row] = x;
  }
}

template <class T, int D, int BN>
__device__ void backward_dq(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ o,
                            const T* __restrict__ dout, const float* __restrict__ lse,
                            T* __restrict__ dq, float* __restrict__ delta, int heads, long long tq,
                            long long tk, Strides sq, Strides sk, Strides sv, Strides so,
                            Strides sdo, Strides sdq, float scale, int causal) {
  using S = typename Traits<T>::Smem;
  constexpr int P = padded<T, D>();
  constexpr int NT = BN / 8, ND = D / 8;
  constexpr int kTile = BN * P;  // elements of one staged tile
  constexpr int ST = stages<2 * kTile*(int)sizeof(S)>();
  __shared__ __align__(16) S ks[ST * kTile];
  __shared__ __align__(16) S vs[ST * kTile];

  const Block blk = block_of(tq, heads, true);
  const long long bh = blk.bh, q0 = blk.row0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long r0 = q0 + warp * 16;
  const T *kh = slab(k, sk, blk), *vh = slab(v, sv, blk), *doh = slab(dout, sdo, blk);
  const float scale2 = scale * kLog2e;

  unsigned qa[D / Traits<T>::K][4], da[D / Traits<T>::K][4];
  load_a<T, D>(qa, slab(q, sq, blk), sq.t, r0, tq);
  load_a<T, D>(da, doh, sdo.t, r0, tq);
  float dl[2] = {0.f, 0.f}, lse2[2];
  row_deltas<T, D>(doh, sdo.t, slab(o, so, blk), so.t, r0, tq, delta + bh * tq, dl);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + g + r * 8;
    lse2[r] = row < tq ? lse[bh * tq + row] * kLog2e : 0.f;
  }
  float acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  const long long kend = causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
  const auto load = [&](long long j0, int buf) {
    stage<T, D, P, BN>(ks + buf * kTile, kh, sk.t, j0, tk);
    stage<T, D, P, BN>(vs + buf * kTile, vh, sv.t, j0, tk);
  };
  const auto use = [&](long long j0, int buf) {
    float s[NT][4], dp[NT][4];
    mma_abt<T, D, BN>(s, qa, ks + buf * kTile);
    mma_abt<T, D, BN>(dp, da, vs + buf * kTile);
    each_score<NT>(
        j0 + BN > tk || (causal && j0 + BN - 1 > r0),
        [&](int n, int e) {
          const long long key = j0 + n * 8 + 2 * t + (e & 1), row = r0 + g + (e >> 1) * 8;
          return key >= tk || (causal && key > row);
        },
        [&](int n, int e, bool masked) {
          const float p = masked ? 0.f : exp2_fast(fmaf(s[n][e], scale2, -lse2[e >> 1]));
          s[n][e] = p * (dp[n][e] - dl[e >> 1]);  // dS
        });
    mma_cx<T, D, BN>(acc, s, ks + buf * kTile);  // dq += dS k
  };
  tile_loop<ST, BN>(0, kend, load, use);
  const float f[2] = {scale, scale};
  store_rows<T, D>(slab(dq, sdq, blk), sdq.t, acc, r0, tq, f);
}

template <class T, int D, int BN>
__device__ void backward_dkv(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const T* __restrict__ dout,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             T* __restrict__ dk, T* __restrict__ dv, int heads, long long tq,
                             long long tk, Strides sq, Strides sk, Strides sv, Strides sdo,
                             Strides sdk, Strides sdv, float scale, int causal) {
  using S = typename Traits<T>::Smem;
  constexpr int P = padded<T, D>();
  constexpr int NT = BN / 8, ND = D / 8;
  constexpr int kTile = BN * P;  // elements of one staged tile
  constexpr int ST = stages<2 * kTile*(int)sizeof(S) + 2 * BN*(int)sizeof(float)>();
  __shared__ __align__(16) S qs[ST * kTile];
  __shared__ __align__(16) S dos[ST * kTile];
  __shared__ float lse2s[ST][BN], dls[ST][BN];

  const Block blk = block_of(tk, heads, false);
  const long long bh = blk.bh, k0 = blk.row0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long r0 = k0 + warp * 16;
  const T *qh = slab(q, sq, blk), *doh = slab(dout, sdo, blk);
  const float scale2 = scale * kLog2e;

  unsigned ka_[D / Traits<T>::K][4], va[D / Traits<T>::K][4];
  load_a<T, D>(ka_, slab(k, sk, blk), sk.t, r0, tk);
  load_a<T, D>(va, slab(v, sv, blk), sv.t, r0, tk);
  float dka[ND][4], dva[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) {
    dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.f;
    dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.f;
  }

  const auto load = [&](long long i0, int buf) {
    stage<T, D, P, BN>(qs + buf * kTile, qh, sq.t, i0, tq);
    stage<T, D, P, BN>(dos + buf * kTile, doh, sdo.t, i0, tq);
    for (int c = threadIdx.x; c < BN; c += kThreads) {
      const bool in = i0 + c < tq;
      lse2s[buf][c] = in ? lse[bh * tq + i0 + c] * kLog2e : 0.f;
      dls[buf][c] = in ? delta[bh * tq + i0 + c] : 0.f;
    }
  };
  const auto use = [&](long long i0, int buf) {
    const S *qt = qs + buf * kTile, *dot = dos + buf * kTile;
    float pt[NT][4], dpt[NT][4];
    mma_abt<T, D, BN>(pt, ka_, qt);   // S^T = k q^T
    mma_abt<T, D, BN>(dpt, va, dot);  // dP^T = v dO^T
    each_score<NT>(
        i0 + BN > tq || r0 + 16 > tk || (causal && r0 + 15 > i0),
        [&](int n, int e) {
          const long long query = i0 + n * 8 + 2 * t + (e & 1), key = r0 + g + (e >> 1) * 8;
          return query >= tq || key >= tk || (causal && key > query);
        },
        [&](int n, int e, bool masked) {
          const int c = n * 8 + 2 * t + (e & 1);
          const float p = masked ? 0.f : exp2_fast(fmaf(pt[n][e], scale2, -lse2s[buf][c]));
          pt[n][e] = p;
          dpt[n][e] = p * (dpt[n][e] - dls[buf][c]);  // dS^T
        });
    mma_cx<T, D, BN>(dva, pt, dot);  // dv += P^T dO
    mma_cx<T, D, BN>(dka, dpt, qt);  // dk += dS^T q
  };
  tile_loop<ST, BN>(causal ? k0 / BN * BN : 0, tq, load, use);
  const float fk[2] = {scale, scale}, fv[2] = {1.f, 1.f};
  store_rows<T, D>(slab(dk, sdk, blk), sdk.t, dka, r0, tk, fk);
  store_rows<T, D>(slab(dv, sdv, blk), sdv.t, dva, r0, tk, fv);
}

}  // namespace ka
