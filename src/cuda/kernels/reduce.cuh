// kiln reductions: the device side of sum, mean, max, min, argmax and argmin.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/reduce_source.cpp makes a source of the element-wise
// prelude (src/ir/cuda_prelude.cuh: kiln::maximum, kiln::minimum), this file, and the extern "C"
// entry points it generates for each kernel spec (kr::by_block, kr::by_thread, kr::combine
// instantiated for one op, dtype, rank and index width).
//
// A policy P says what one op accumulates:
//   Acc identity(); Acc lift(V v, long long j); Acc combine(Acc a, Acc b); Out finish(Acc, n)
// combine is commutative and associative (arg*: first NaN, then the better value, then the
// lower index; max/min: kiln::maximum/minimum, NaN-propagating, +0 above -0), so a result
// depends only on which elements meet, never on the order: with the fixed partitioning of
// the host (by sizes only) and fixed trees here, results never depend on timing.
// Accuracy as the CPU (src/cpu/reduce.cpp): f32 sums in double, integer sums in 64 bits
// wrapping to i32, integer means exact until the final division.
namespace kr {
__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ int load(int v) { return v; }
__device__ __forceinline__ int load(unsigned char v) { return v != 0; }
__device__ __forceinline__ float load(kiln::bf16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ float load(kiln::f16 v) { return kiln::to_f32(v); }
// Writes a policy's result into an output element: a half type rounds (the result is computed
// in float), the others convert as C does.
template <class O, class V>
__device__ __forceinline__ void put(O& o, V v) {
  o = v;
}
__device__ __forceinline__ void put(kiln::bf16& o, float v) { o = kiln::to_bf16(v); }
__device__ __forceinline__ void put(kiln::f16& o, float v) { o = kiln::to_f16(v); }

__device__ __forceinline__ bool nan_of(float v) { return v != v; }
__device__ __forceinline__ bool nan_of(int) { return false; }
__device__ __forceinline__ float lowest(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ float highest(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ int lowest(int) { return -2147483647 - 1; }
__device__ __forceinline__ int highest(int) { return 2147483647; }

__device__ __forceinline__ double sum_acc(float v) { return (double)v; }
__device__ __forceinline__ unsigned long long sum_acc(int v) {
  return (unsigned long long)(long long)v;  // two's complement: overflow wraps
}
// -0.0 is the additive identity (-0 + x == x for every x, +0 included), so a sum of -0s stays
// -0 as on the CPU; an empty sum is +0 as there.
__device__ __forceinline__ double sum_zero(float) { return -0.0; }
__device__ __forceinline__ unsigned long long sum_zero(int) { return 0; }
__device__ __forceinline__ float sum_out(double a, long long n) { return n ? (float)a : 0.0f; }
__device__ __forceinline__ int sum_out(unsigned long long a, long long) { return (int)(unsigned)a; }
__device__ __forceinline__ float mean_out(double a, long long n) { return (float)(a / (double)n); }
__device__ __forceinline__ float mean_out(unsigned long long a, long long n) {
  return (float)((double)(long long)a / (double)n);
}

template <class V>
struct Sum {
  typedef decltype(sum_acc(V())) Acc;
  static __device__ __forceinline__ Acc identity() { return sum_zero(V()); }
  static __device__ __forceinline__ Acc lift(V v, long long) { return sum_acc(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ decltype(sum_out(Acc(), 0)) finish(Acc a, long long n) {
    return sum_out(a, n);
  }
};
template <class V>
struct Mean : Sum<V> {
  typedef typename Sum<V>::Acc Acc;
  static __device__ __forceinline__ float finish(Acc a, long long n) { return mean_out(a, n); }
};
template <class V, bool kMax>
struct Extreme {
  typedef V Acc;
  static __device__ __forceinline__ Acc identity() { return kMax ? lowest(V()) : highest(V()); }
  static __device__ __forceinline__ Acc lift(V v, long long) { return v; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    return kMax ? kiln::maximum(a, b) : kiln::minimum(a, b);
  }
  static __device__ __forceinline__ V finish(Acc a, long long) { return a; }
};
template <class V>
struct ArgAcc {
  V v;
  long long i;
};
template <class V, bool kMax>
struct Arg {
  typedef ArgAcc<V> Acc;
  static __device__ __forceinline__ Acc identity() {
    Acc a = {kMax ? lowest(V()) : highest(V()), 0x7fffffffffffffffLL};
    return a;
  }
  static __device__ __forceinline__ Acc lift(V v, long long j) {
    Acc a = {v, j};
    return a;
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    const bool an = nan_of(a.v), bn = nan_of(b.v);
    bool take_b;
    if (an || bn)
      take_b = an && bn ? b.i < a.i : bn;
    else if (a.v == b.v)
      take_b = b.i < a.i;
    else
      take_b = kMax ? b.v > a.v : b.v < a.v;
    return take_b ? b : a;
  }
  static __device__ __forceinline__ int finish(Acc a, long long) { return (int)a.i; }
};

template <class T>
__device__ __forceinline__ T shfl_down(T a, int d) {
  return __shfl_down_sync(0xffffffffu, a, d);  // double, unsigned long long, float, int
}
template <class V>
__device__ __forceinline__ ArgAcc<V> shfl_down(ArgAcc<V> a, int d) {
  ArgAcc<V> r = {shfl_down(a.v, d), shfl_down(a.i, d)};
  return r;
}

// The block's accumulators combined in a fixed tree (shuffles in each warp, then warp 0 over
// the warps); the result is valid in thread 0. blockDim.x is a multiple of 32, at most 256.
template <class P>
__device__ __forceinline__ typename P::Acc block_combine(typename P::Acc a) {
  __shared__ typename P::Acc warp_acc[8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int d = 16; d > 0; d >>= 1) a = P::combine(a, shfl_down(a, d));
  if (lane == 0) warp_acc[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < (int)(blockDim.x >> 5) ? warp_acc[lane] : P::identity();
    for (int d = 4; d > 0; d >>= 1) a = P::combine(a, shfl_down(a, d));
  }
  __syncthreads();  // warp_acc is free again for the block's next output
  return a;
}

// The geometry: outputs, reduced length, chunks per output, chunk length; the kept extents,
// the kept strides of stride set 0, the reduced extents, the reduced strides of set 0; then the
// kept and reduced strides of each further set (a prologue's inputs of other layouts). With
// one set (a reduction of memory) it is extents then strides of the kept dims, then of the
// reduced dims.
template <int RO, int RR, int N = 1>
struct Geom {
  long long v[4 + 2 * RO + 2 * RR + (N - 1) * (RO + RR)];
};

// The index in Geom::v of the first kept (kKept) or reduced stride of set n.
template <int RO, int RR, bool kKept>
__device__ __forceinline__ int strides_at(int n) {
  if (n == 0) return kKept ? 4 + RO : 4 + 2 * RO + RR;
  return 4 + 2 * RO + 2 * RR + (n - 1) * (RO + RR) + (kKept ? 0 : RO);
}

// Adds to off[n] the offset, in stride set n, of row-major position i of the kept (kKept) or
// the reduced dims: the coordinates are found once for every set.
template <bool kKept, int RO, int RR, int N, class I>
__device__ __forceinline__ void add_offsets(I i, const Geom<RO, RR, N>& g, I (&off)[N]) {
  constexpr int R = kKept ? RO : RR, E = kKept ? 4 : 4 + 2 * RO;
#pragma unroll
  for (int d = R - 1; d > 0; --d) {
    const I e = (I)g.v[E + d];
    const I c = i % e;
#pragma unroll
    for (int n = 0; n < N; ++n) off[n] += c * (I)g.v[strides_at<RO, RR, kKept>(n) + d];
    i /= e;
  }
  if constexpr (R > 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) off[n] += i * (I)g.v[strides_at<RO, RR, kKept>(n)];
  }
}

// The offsets, one per stride set, of reduced position j of the output at offsets base.
template <int N, class I>
struct Offsets {
  I v[N];
};
template <int RO, int RR, int N, class I>
__device__ __forceinline__ Offsets<N, I> offsets(const I (&base)[N], I j,
                                                 const Geom<RO, RR, N>& g) {
  Offsets<N, I> o;
#pragma unroll
  for (int n = 0; n < N; ++n) o.v[n] = base[n];
  add_offsets<false>(j, g, o.v);
  return o;
}

// Where the values come from: x.get(off) is the value at offsets off.v (one per stride set),
// as the policy's V. Memory reads one tensor (one set); a prologue source is generated
// (reduce_prologue_source) and evaluates the element-wise program there.
template <class S>
struct Memory {
  const S* p;
  template <class I>
  __device__ __forceinline__ auto get(const Offsets<1, I>& off) const {
    return load(p[off.v[0]]);
  }
};
template <class S>
__device__ __forceinline__ Memory<S> source(const S* p) {
  Memory<S> m = {p};
  return m;
}
template <class X>
__device__ __forceinline__ X source(const X& x) {
  return x;
}

// The accumulator of positions [begin, end) of the reduced sequence at offsets base, taken by
// a thread from `first` in steps of `step`; eight values in flight before they are combined
// (in the same order as one at a time). (Four left the column sums of a GPT-2 step's bias
// gradients, a thread a column of 2-byte values, at about half the memory's speed.)
template <class P, int RO, int RR, int N, class I, class X>
__device__ __forceinline__ typename P::Acc run(const X& x, const I (&base)[N], I first, I end,
                                               I step, const Geom<RO, RR, N>& g) {
  constexpr int kAhead = 8;
  typename P::Acc a = P::identity();
  I j = first;
  for (; j + (kAhead - 1) * step < end; j += kAhead * step) {
    decltype(x.get(offsets(base, j, g))) s[kAhead];
#pragma unroll
    for (int q = 0; q < kAhead; ++q) s[q] = x.get(offsets(base, j + q * step, g));
#pragma unroll
    for (int q = 0; q < kAhead; ++q) a = P::combine(a, P::lift(s[q], (long long)(j + q * step)));
  }
  for (; j < end; j += step) {
    a = P::combine(a, P::lift(x.get(offsets(base, j, g)), (long long)j));
  }
  return a;
}

// The offsets of output o's first reduced element, one per stride set.
template <int RO, int RR, int N, class I, class A>
__device__ __forceinline__ void output_offsets(I o, const Geom<RO, RR, N>& g, A& off) {
#pragma unroll
  for (int n = 0; n < N; ++n) off[n] = 0;
  add_offsets<true>(o, g, off);
}

// Variants block and block_split: block w reduces output w / chunks, chunk w % chunks. xs is
// a pointer to memory or a source.
template <class P, int RO, int RR, class I, bool kSplit, class XS, class O, int N>
__device__ __forceinline__ void by_block(const XS& xs, O* out, typename P::Acc* part,
                                         const Geom<RO, RR, N>& g) {
  const auto x = source(xs);
  const I outputs = (I)g.v[0], len = (I)g.v[1], chunks = kSplit ? (I)g.v[2] : (I)1;
  const I chunk = kSplit ? (I)g.v[3] : len;
  for (I w = blockIdx.x; w < outputs * chunks; w += gridDim.x) {
    const I o = kSplit ? w / chunks : w, begin = kSplit ? (w % chunks) * chunk : (I)0;
    const I end = kSplit && len - begin > chunk ? begin + chunk : len;
    I base[N];
    output_offsets(o, g, base);
    typename P::Acc a = run<P>(x, base, begin + threadIdx.x, end, (I)blockDim.x, g);
    a = block_combine<P>(a);
    if (threadIdx.x == 0) {
      if (kSplit)
        part[w] = a;
      else
        put(out[o], P::finish(a, (long long)len));
    }
  }
}

// Variants thread and thread_split: thread w reduces output w % outputs, chunk w / outputs.
template <class P, int RO, int RR, class I, bool kSplit, class XS, class O, int N>
__device__ __forceinline__ void by_thread(const XS& xs, O* out, typename P::Acc* part,
                                          const Geom<RO, RR, N>& g) {
  const auto x = source(xs);
  const I outputs = (I)g.v[0], len = (I)g.v[1], chunks = kSplit ? (I)g.v[2] : (I)1;
  const I chunk = kSplit ? (I)g.v[3] : len;
  const I step = (I)gridDim.x * blockDim.x;
  for (I w = (I)blockIdx.x * blockDim.x + threadIdx.x; w < outputs * chunks; w += step) {
    const I o = kSplit ? w % outputs : w, c = kSplit ? w / outputs : (I)0;
    const I begin = c * chunk, end = kSplit && len - begin > chunk ? begin + chunk : len;
    I base[N];
    output_offsets(o, g, base);
    const typename P::Acc a = run<P>(x, base, begin, end, (I)1, g);
    if (kSplit)
      part[(long long)o * chunks + c] = a;
    else
      put(out[o], P::finish(a, (long long)len));
  }
}

// The split variants' second pass: block o combines the chunks of output o.
template <class P, class O>
__device__ __forceinline__ void combine(const typename P::Acc* part, O* out, long long outputs,
                                        long long chunks, long long len) {
  for (long long o = blockIdx.x; o < outputs; o += gridDim.x) {
    typename P::Acc a = P::identity();
    for (long long c = threadIdx.x; c < chunks; c += blockDim.x) {
      a = P::combine(a, part[o * chunks + c]);
    }
    a = block_combine<P>(a);
    if (threadIdx.x == 0) put(out[o], P::finish(a, len));
  }
}
}  // namespace kr
