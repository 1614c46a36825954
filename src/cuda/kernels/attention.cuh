// kiln attention: the device side of Backend::attention, flash-style (online softmax over tiles of
// keys; the T x T scores live in registers only).
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/attention.cpp makes one source per dtype and head dim of
// the element-wise prelude (kiln::bf16, kiln::f16), this file and one extern "C" entry point.
//
// One block of 4 warps per 64 queries of one (b, h); warp w owns queries q0 + 16w .. + 15. The
// products run on tensor cores with mma.sync: bf16 and f16 as m16n8k16 (f32 accumulation), f32 as
// TF32 m16n8k8. A thread holds its rows' q fragments in registers for the whole kernel; K and V
// tiles of BN keys are staged in shared memory (rows padded so that fragment reads hit 32 banks).
// Per tile: S = q k^T (fragments in the mma C layout), masked to -inf beyond Tk and, causal, for
// key > query; s2 = S * scale * log2(e); the running row max m of s2 and sum l (l kept per thread
// over its own columns, summed across the quad at the end), the accumulator rescaled by
// exp2(m_old - m_new) when m moves, and P = exp2(s2 - m) multiplied into V straight from the
// registers that hold it (the C layout of two n8 tiles is the A layout of a k16 step; for TF32 the
// keys of a k8 step are taken in the order the C layout holds them, 2t and 2t + 1 for columns t and
// t + 4, and V's rows in the same order). o = acc / l, rounded once; lse = (m + log2 l) ln 2. A row
// with no key (Tk == 0) gets o = 0 and lse = -inf.
namespace ka {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x by the special-function unit alone (exp2f adds a few instructions per call to keep
// subnormal results, which a probability never needs): -inf gives 0. On the H100 the bf16 D = 64
// forward ran 5 % faster with it, the backward's key kernel 4 % (2026-12-06).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class T>
struct Traits;  // kHalf: 16-bit storage; K: the k extent of one mma

template <>
struct Traits<float> {
  static constexpr bool kHalf = false;
  static constexpr int K = 8;
  using Smem = float;
};
template <>
struct Traits<kiln::bf16> {
  static constexpr bool kHalf = true;
  static constexpr int K = 16;
  using Smem = unsigned short;
};
template <>
struct Traits<kiln::f16> {
  static constexpr bool kHalf = true;
  static constexpr int K = 16;
  using Smem = unsigned short;
};

__device__ __forceinline__ unsigned tf32(float f) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(f));
  return u;
}

// Two values rounded to T and packed, the first in the low half (the lower k index).
__device__ __forceinline__ unsigned pack(kiln::bf16, float lo, float hi) {
  return (unsigned)kiln::to_bf16(lo).bits | ((unsigned)kiln::to_bf16(hi).bits << 16);
}
__device__ __forceinline__ unsigned pack(kiln::f16, float lo, float hi) {
  return (unsigned)kiln::to_f16(lo).bits | ((unsigned)kiln::to_f16(hi).bits << 16);
}

__device__ __forceinline__ void mma(kiln::bf16, float* c, const unsigned* a, unsigned b0,
                                    unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(kiln::f16, float* c, const unsigned* a, unsigned b0,
                                    unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float, float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes from global to shared memory with cp.async (sm_80 on: no register round trip, so the
// next tile loads while this one is used); zeros when !in (a source size of 0 reads nothing).
__device__ __forceinline__ void copy16(void* dst, const void* src, bool in) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(in ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The threads of every attention block (src/cuda/attention.cpp launches 4 warps): a compile-time
// constant, so that the staging loops below unroll.
constexpr int kThreads = 128;

// Rows [t0, t0 + Rows) of one (b, h) of a [.., T, D] operand into shared memory (row stride P
// elements), 16 bytes a copy; rows at or beyond T are zeros. Asynchronous: copy_commit and
// copy_wait, then __syncthreads, before the tile is read. A thread copies the same 16-byte column
// j of every kPass-th row, so its addresses are one start and a fixed step: computed per tile as
// general index arithmetic (64-bit, a division per copy) they were a third of the forward's
// instructions.
template <class T, int D, int P, int Rows>
__device__ __forceinline__ void stage(typename Traits<T>::Smem* dst, const T* base,
                                      long long stride_t, long long t0, long long t) {
  constexpr int kChunks = D * (int)sizeof(T) / 16;  // 16-byte copies per row
  constexpr int kWide = 16 / (int)sizeof(T);        // elements per copy
  if constexpr (kThreads % kChunks == 0) {
    constexpr int kPass = kThreads / kChunks;  // rows one pass of the block copies
    const int j = threadIdx.x % kChunks, r1 = threadIdx.x / kChunks;
    const long long left = t - t0 - r1;  // this thread's row i kPass below r1 is in when < left
    const T* src = base + (t0 + r1) * stride_t + j * kWide;
    typename Traits<T>::Smem* to = dst + r1 * P + j * kWide;
#pragma unroll
    for (int i = 0; i < (Rows + kPass - 1) / kPass; ++i) {
      if (Rows % kPass == 0 || r1 + i * kPass < Rows) {
        const bool in = i * kPass < left;
        copy16(to + i * kPass * P, in ? src : base, in);
      }
      src += kPass * stride_t;
    }
  } else {  // D = 48, 80, 112: rows of copies that do not divide the block
    for (int c = threadIdx.x; c < Rows * kChunks; c += kThreads) {
      const int r = c / kChunks, j = c % kChunks;
      const bool in = t0 + r < t;
      copy16(dst + r * P + j * kWide, base + (in ? (t0 + r) * stride_t : 0) + j * kWide, in);
    }
  }
}

// Shared-memory buffers for a kernel's staged tiles (Bytes a set): two when they fit the 48 KiB
// of static shared memory, so that the next set loads while this one is used, else one.
template <int Bytes>
__host__ __device__ constexpr int stages() {
  return 2 * Bytes <= 48 * 1024 ? 2 : 1;
}

// Four 8 x 8 matrices of 16-bit elements from shared memory, lanes 8i .. 8i + 7 giving the row
// addresses of matrix i; register i holds this thread's part of matrix i in the mma fragment
// layout (row lane / 4, columns 2 (lane % 4) and + 1), transposed with ldmatrix_x4_trans.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// The padded row of a staged tile, in elements: 16 bytes more than D, so that the fragment reads
// of 8 rows at one column fall in 32 different banks.
template <class T, int D>
__host__ __device__ constexpr int padded() {
  return D + 16 / (int)sizeof(T);
}

// The A fragments (mma row layout) of rows r0 .. r0 + 15 of a [T, D] operand (row stride st,
// unit column stride) over all of D, D / K steps of 4 registers; rows at or beyond t are zeros.
template <class T, int D>
__device__ __forceinline__ void load_a(unsigned (&a)[D / Traits<T>::K][4], const T* base,
                                       long long st, long long r0, long long t) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const long long ra = r0 + g, rb = r0 + g + 8;
#pragma unroll
  for (int kk = 0; kk < D / Traits<T>::K; ++kk) {
    if constexpr (Traits<T>::kHalf) {
      const unsigned* pa = reinterpret_cast<const unsigned*>(base + ra * st + kk * 16 + 2 * c);
      const unsigned* pb = reinterpret_cast<const unsigned*>(base + rb * st + kk * 16 + 2 * c);
      a[kk][0] = ra < t ? __ldg(pa) : 0u;
      a[kk][1] = rb < t ? __ldg(pb) : 0u;
      a[kk][2] = ra < t ? __ldg(pa + 4) : 0u;
      a[kk][3] = rb < t ? __ldg(pb + 4) : 0u;
    } else {
      const float* pa = base + ra * st + kk * 8 + c;
      const float* pb = base + rb * st + kk * 8 + c;
      a[kk][0] = ra < t ? tf32(__ldg(pa)) : 0u;
      a[kk][1] = rb < t ? tf32(__ldg(pb)) : 0u;
      a[kk][2] = ra < t ? tf32(__ldg(pa + 4)) : 0u;
      a[kk][3] = rb < t ? tf32(__ldg(pb + 4)) : 0u;
    }
  }
}

// c = A X^T: A the 16 rows of `a` (load_a), X the N rows of a staged tile (its D columns are the
// k index). c[n] is the n-th n8 tile of the 16 x N product, in the mma C layout. 16-bit X by
// ldmatrix, two n8 tiles of one k step at once (matrices: tile n and n + 1, k low and high half).
template <class T, int D, int N>
__device__ __forceinline__ void mma_abt(float (&c)[N / 8][4],
                                        const unsigned (&a)[D / Traits<T>::K][4],
                                        const typename Traits<T>::Smem* x) {
  constexpr int P = padded<T, D>();
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < N / 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
  if constexpr (Traits<T>::kHalf) {
    const int i = lane / 8;
    const typename Traits<T>::Smem* row = x + (i / 2 * 8 + lane % 8) * P + i % 2 * 8;
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned b[4];
        ldmatrix_x4(b, row + n * 8 * P + kk * 16);
        mma(T{}, c[n], a[kk], b[0], b[1]);
        mma(T{}, c[n + 1], a[kk], b[2], b[3]);
      }
    }
  } else {
#pragma unroll
    for (int n = 0; n < N / 8; ++n) {
      const int row = n * 8 + g;
#pragma unroll
      for (int kk = 0; kk < D / 8; ++kk)
        mma(T{}, c[n], a[kk], tf32(x[row * P + kk * 8 + t]), tf32(x[row * P + kk * 8 + t + 4]));
    }
  }
}

// acc += C X: C the 16 x N values held in the mma C layout (c, from mma_abt), used as the A
// operand straight from the registers, X the N x D staged tile. For 16-bit types two n8 tiles of C
// are one k16 step's A layout, and X's fragments come transposed by ldmatrix (matrices: keys low
// and high half of output columns n, then of n + 1); for TF32 the k index t of a k8 step is
// taken as column 2t of the C tile and t + 4 as 2t + 1 (the order the C layout holds them), and
// X's rows in the same order.
template <class T, int D, int N>
__device__ __forceinline__ void mma_cx(float (&acc)[D / 8][4], const float (&c)[N / 8][4],
                                       const typename Traits<T>::Smem* x) {
  constexpr int P = padded<T, D>();
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if constexpr (Traits<T>::kHalf) {
    const int i = lane / 8;
    const typename Traits<T>::Smem* row = x + (i % 2 * 8 + lane % 8) * P + i / 2 * 8;
#pragma unroll
    for (int kt = 0; kt < N / 16; ++kt) {
      const unsigned a[4] = {pack(T{}, c[2 * kt][0], c[2 * kt][1]),
                             pack(T{}, c[2 * kt][2], c[2 * kt][3]),
                             pack(T{}, c[2 * kt + 1][0], c[2 * kt + 1][1]),
                             pack(T{}, c[2 * kt + 1][2], c[2 * kt + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, row + kt * 16 * P + n * 8);
        mma(T{}, acc[n], a, b[0], b[1]);
        mma(T{}, acc[n + 1], a, b[2], b[3]);
      }
    }
  } else {
#pragma unroll
    for (int kt = 0; kt < N / 8; ++kt) {
      const unsigned a[4] = {tf32(c[kt][0]), tf32(c[kt][2]), tf32(c[kt][1]), tf32(c[kt][3])};
      const int k0 = kt * 8 + 2 * t;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const int col = n * 8 + g;
        mma(T{}, acc[n], a, tf32(x[k0 * P + col]), tf32(x[(k0 + 1) * P + col]));
      }
    }
  }
}

// Rows r0 .. r0 + 15 of a [.., D] output (row stride st, unit column stride) from acc (the mma C
// layout), each row's values times its factor (f[0] for row g, f[1] for row g + 8), rounded once;
// rows at or beyond t skipped.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* out, long long st, const float (&acc)[D / 8][4],
                                           long long r0, long long t, const float (&f)[2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const long long row = r0 + g + r * 8;
    if (row >= t) continue;
    T* o = out + row * st;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float x0 = acc[n][2 * r] * f[r], x1 = acc[n][2 * r + 1] * f[r];
      if constexpr (Traits<T>::kHalf) {
        *reinterpret_cast<unsigned*>(o + n * 8 + 2 * c) = pack(T{}, x0, x1);
      } else {
        *reinterpret_cast<float2*>(o + n * 8 + 2 * c) = make_float2(x0, x1);
      }
    }
  }
}

// The loop over the tiles at first, first + BN, .. below end with ST shared-memory buffers:
// load(i0, buf) issues the copies of the tile at i0 into buffer buf (stage, and plain stores that
// the __syncthreads before use publishes), use(i0, buf) reads it. With two buffers the next
// tile's copies run while this one is used.
template <int ST, int BN, class Load, class Use>
__device__ __forceinline__ void tile_loop(long long first, long long end, Load load, Use use) {
  if (first < end) {
    load(first, 0);
    copy_commit();
  }
  int buf = 0;
  for (long long i0 = first; i0 < end; i0 += BN) {
    const bool more = i0 + BN < end;
    if (ST == 2 && more) {
      load(i0 + BN, buf ^ 1);
      copy_commit();
      copy_wait<1>();
    } else {
      copy_wait<0>();
    }
    __syncthreads();  // this tile is in shared memory for every warp
    use(i0, buf);
    __syncthreads();  // every warp is done with buf before it is loaded again
    if (ST == 1 && more) {
      load(i0 + BN, 0);
      copy_commit();
    }
    if (ST == 2) buf ^= 1;
  }
}

// f(n, e, masked) for each of this thread's scores of a tile (n8 tile n, element e of the mma C
// layout); is_masked(n, e) is asked only when edge (a tile that can hold a masked score: the
// last, and causal, the diagonal), so that the other tiles pay nothing for the mask.
template <int NT, class M, class F>
__device__ __forceinline__ void each_score(bool edge, M is_masked, F f) {
  if (edge) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(n, e, is_masked(n, e));
  } else {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(n, e, false);
  }
}

// The strides (elements) of one [B, H, T, D] operand over B, H and T; D's is 1.
struct Strides {
  long long b, h, t;
};

// This block's 64 rows (of T = n) of one (b, h). The grid is (row blocks) x (b, h) pairs, row
// block major: the last row blocks first when last_first (causal queries: the last see the most
// keys), else the first (causal keys: the first are seen by the most queries), so that the short
// blocks fill the tail.
struct Block {
  long long bh, b, h, row0;
};
__device__ __forceinline__ Block block_of(long long n, int heads, bool last_first) {
  const long long nb = (n + 63) / 64, nbh = gridDim.x / nb, i = (long long)blockIdx.x / nbh;
  Block r;
  r.bh = (long long)blockIdx.x % nbh;
  r.b = r.bh / heads;
  r.h = r.bh % heads;
  r.row0 = (last_first ? nb - 1 - i : i) * 64;
  return r;
}

// The (b, h) slab of a [B, H, T, D] operand or output.
template <class T>
__device__ __forceinline__ T* slab(T* p, Strides s, const Block& blk) {
  return p + blk.b * s.b + blk.h * s.h;
}

// q, k, v, o: [B, H, T, D] (strides sq, sk, sv, so; o's [B, Tq, H, D] memory, say); lse f32 [B, H,
// Tq] or null. scale2 = scale * log2(e).
template <class T, int D, int BN>
__device__ void forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        T* __restrict__ o, float* __restrict__ lse, int heads, long long tq,
                        long long tk, Strides sq, Strides sk, Strides sv, Strides so, float scale2,
                        int causal) {
  using S = typename Traits<T>::Smem;
  constexpr int P = padded<T, D>();
  constexpr int NT = BN / 8;     // n8 tiles of scores per key tile
  constexpr int ND = D / 8;      // n8 tiles of the output
  constexpr int kTile = BN * P;  // elements of one staged tile
  constexpr int ST = stages<2 * kTile*(int)sizeof(S)>();
  __shared__ __align__(16) S ks[ST * kTile];
  __shared__ __align__(16) S vs[ST * kTile];

  const Block blk = block_of(tq, heads, true);
  const long long bh = blk.bh, q0 = blk.row0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long r0 = q0 + warp * 16;
  const T *kh = slab(k, sk, blk), *vh = slab(v, sv, blk);

  unsigned qa[D / Traits<T>::K][4];
  load_a<T, D>(qa, slab(q, sq, blk), sq.t, r0, tq);
  // The scale multiplies each score in the exponent's fma, after the row maxima are taken on the
  // unscaled scores: a negative scale is made positive by flipping q's signs (exact), so that
  // the maxima stay maxima. A zero scale becomes the smallest normal float, so that a masked
  // score still gives -inf (-inf * 0 would be NaN); every other score's exponent is then within
  // 2^-100 of 0, so its probability is 1, as for the scale of 0 itself.
  if (scale2 < 0.f) {
    scale2 = -scale2;
#pragma unroll
    for (int kk = 0; kk < D / Traits<T>::K; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[kk][i] ^= Traits<T>::kHalf ? 0x80008000u : 0x80000000u;
  }
  scale2 = fmaxf(scale2, 1.17549435e-38f);
  float acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};

  const long long kend = causal ? (q0 + 64 < tk ? q0 + 64 : tk) : tk;
  const auto load = [&](long long j0, int buf) {
    stage<T, D, P, BN>(ks + buf * kTile, kh, sk.t, j0, tk);
    stage<T, D, P, BN>(vs + buf * kTile, vh, sv.t, j0, tk);
  };
  const auto use = [&](long long j0, int buf) {
    float s[NT][4];
    mma_abt<T, D, BN>(s, qa, ks + buf * kTile);
    // Scale, mask, and the rows' new maxima.
    float tile_max[2] = {neg_inf(), neg_inf()};
    each_score<NT>(
        j0 + BN > tk || (causal && j0 + BN - 1 > r0),
        [&](int n, int e) {
          const long long key = j0 + n * 8 + 2 * t + (e & 1), row = r0 + g + (e >> 1) * 8;
          return key >= tk || (causal && key > row);
        },
        [&](int n, int e, bool masked) {
          if (masked) s[n][e] = neg_inf();
          tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
        });
    // The rows' maxima m (scaled, log2 units) move only when a tile's exceeds them by more than
    // 8, that is when a probability against the old maximum could pass 2^8; else P = exp2(s2 -
    // m) is taken against the old maximum (l and acc with it) and the rescaling of acc is
    // skipped, for the whole warp. Exact either way: o = acc / l whatever m is.
    bool grew = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      tile_max[r] *= scale2;
      grew |= tile_max[r] > m[r] + 8.f;
    }
    if (__any_sync(0xffffffffu, grew)) {
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mn = fmaxf(m[r], tile_max[r]);
        alpha[r] = exp2_fast(m[r] - (mn == neg_inf() ? 0.f : mn));
        m[r] = mn;
        l[r] *= alpha[r];
      }
#pragma unroll
      for (int n = 0; n < ND; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
    }
    float base[2];  // a row with no key yet: exp2(-inf - 0) = 0
#pragma unroll
    for (int r = 0; r < 2; ++r) base[r] = m[r] == neg_inf() ? 0.f : m[r];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2_fast(fmaf(s[n][e], scale2, -base[e >> 1]));
        l[e >> 1] += s[n][e];
      }
    }
    mma_cx<T, D, BN>(acc, s, vs + buf * kTile);  // acc += P V
  };
  tile_loop<ST, BN>(0, kend, load, use);

  // Finish the rows: the quad's partial sums, o = acc / l, lse.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
  }
  store_rows<T, D>(slab(o, so, blk), so.t, acc, r0, tq, inv);
  if (lse && t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const long long row = r0 + g + r * 8;
      if (row < tq)
        lse[bh * tq + row] = l[r] > 0.f ? (m[r] + log2f(l[r])) * 0.69314718055994531f : neg_inf();
    }
  }
}

}  // namespace ka
