// kiln indexing: the device side of gather, index_select, scatter_add and index_add.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/index_source.cpp makes one source of the element-wise
// prelude (kiln::bf16, kiln::f16 and their conversions), this file and the extern "C" entry points
// it generates (ki:: templates instantiated per element size or dtype).
//
// Geometry: x is [O, N, I] around the indexed dim, the index side [O, K, I] (gather, scatter_add:
// one index per element) or [K] (index_select, index_add: one index per row of I elements).
// A bad index (outside [0, N)) is never followed: the thread skips it and the first one is
// recorded in the error word, host memory mapped into the device, which the backend reads at the
// next sync or download (no host sync per op).
namespace ki {

struct ErrorWord {
  int flag;  // 0: none; 1: op, value and bound hold a bad index (of the first kernel that met one)
  int op;    // detail::IndexOp
  long long value, bound;
};

__device__ __forceinline__ bool valid(int v, long long n, int op, ErrorWord* err) {
  if (v >= 0 && v < n) return true;
  // Plain stores, not atomics (atomics on host memory need the bus to support them): threads of
  // one kernel that race here carry the same op and bound, and each 8-byte store is whole, so the
  // word always holds one real bad index. The flag goes last, after a fence, and an earlier
  // kernel's record is kept.
  volatile ErrorWord* w = err;
  if (w->flag == 0) {
    w->op = op;
    w->value = v;
    w->bound = n;
    __threadfence_system();
    w->flag = 1;
  }
  return false;
}

__device__ __forceinline__ long long first_thread() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long thread_stride() { return (long long)gridDim.x * blockDim.x; }

// gather and index_select, one element per thread (any element type U of the right size).
template <class U>
__device__ void gather(const U* __restrict__ x, const int* __restrict__ idx, U* __restrict__ out,
                       long long O, long long N, long long K, long long I, int per_row, int op,
                       ErrorWord* err) {
  const long long total = O * K * I;
  for (long long e = first_thread(); e < total; e += thread_stride()) {
    const long long i = e % I, r = e / I, k = r % K, o = r / K;
    const int v = per_row ? idx[k] : idx[e];
    if (valid(v, N, op, err)) out[e] = x[(o * N + v) * I + i];
  }
}

// index_select (the embedding) by rows: one warp per output row of W vectors V (uint4 when the
// row is a multiple of 16 bytes and both tensors are 16-byte aligned: a row of 768 bf16 is 96
// loads of 16 bytes, three per lane), so every load and store is a full coalesced transaction.
template <class V>
__device__ void select_rows(const V* __restrict__ x, const int* __restrict__ idx,
                            V* __restrict__ out, long long O, long long N, long long K, long long W,
                            int op, ErrorWord* err) {
  const long long lane = threadIdx.x & 31, warps = thread_stride() >> 5;
  for (long long r = first_thread() >> 5; r < O * K; r += warps) {
    const long long o = r / K, k = r % K;
    const int v = idx[k];
    if (!valid(v, N, op, err)) continue;
    const V* from = x + (o * N + v) * W;
    V* to = out + r * W;
    for (long long j = lane; j < W; j += 32) to[j] = from[j];
  }
}

// Accumulation: A is float for f32, bf16 and f16 (half types sum in f32 and round once), int for
// i32 (two's complement: sums wrap as on the CPU).
__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ int load(int v) { return v; }
__device__ __forceinline__ float load(kiln::bf16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ float load(kiln::f16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ void store(float& o, float a) { o = a; }
__device__ __forceinline__ void store(int& o, int a) { o = a; }
__device__ __forceinline__ void store(kiln::bf16& o, float a) { o = kiln::to_bf16(a); }
__device__ __forceinline__ void store(kiln::f16& o, float a) { o = kiln::to_f16(a); }
__device__ __forceinline__ int add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }

// acc = x (the destination starts as a copy of x).
template <class T, class A>
__device__ void init(const T* __restrict__ x, A* __restrict__ acc, long long n) {
  for (long long e = first_thread(); e < n; e += thread_stride()) acc[e] = load(x[e]);
}
// out = acc, rounded to T.
template <class T, class A>
__device__ void finish(const A* __restrict__ acc, T* __restrict__ out, long long n) {
  for (long long e = first_thread(); e < n; e += thread_stride()) store(out[e], acc[e]);
}

// The fast path: one thread per src element adds it to its destination with an atomic. Threads
// of a warp take consecutive i of one row, so the adds of an embedding row coalesce. The order
// of the adds to one destination varies from run to run.
template <class T, class A>
__device__ void atomic_add(const int* __restrict__ idx, const T* __restrict__ src, A* acc,
                           long long O, long long N, long long K, long long I, int per_row, int op,
                           ErrorWord* err) {
  const long long total = O * K * I;
  for (long long e = first_thread(); e < total; e += thread_stride()) {
    const long long i = e % I, r = e / I, k = r % K, o = r / K;
    const int v = per_row ? idx[k] : idx[e];
    if (valid(v, N, op, err)) atomicAdd(&acc[(o * N + v) * I + i], load(src[e]));
  }
}

// Checks every index (the deterministic path reads them by comparison only).
__device__ void check(const int* __restrict__ idx, long long count, long long N, int op,
                      ErrorWord* err) {
  for (long long e = first_thread(); e < count; e += thread_stride()) valid(idx[e], N, op, err);
}

// The deterministic path: one thread owns each destination (o, n, i) and adds the contributions
// whose index is n in increasing k, starting from x's value: the CPU's order exactly. It reads
// the K indices of its column per destination, O(N * K) reads per (o, i): correct and fixed
// before fast (docs/ops.md gives the cost).
template <class T, class A>
__device__ void owner_sum(const int* __restrict__ idx, const T* __restrict__ src, A* acc,
                          long long O, long long N, long long K, long long I, int per_row) {
  const long long total = O * N * I;
  for (long long d = first_thread(); d < total; d += thread_stride()) {
    const long long i = d % I, r = d / I, n = r % N, o = r / N;
    A a = acc[d];
    for (long long k = 0; k < K; ++k) {
      const long long s = (o * K + k) * I + i;
      const int v = per_row ? idx[k] : idx[s];
      if (v == n) a = add(a, load(src[s]));
    }
    acc[d] = a;
  }
}

// V elements of T moved as one 16-byte word (V = 16 / sizeof(T)), or one element (V = 1).
template <class T, int V>
struct __align__(16) Pack {
  T v[V];
};
template <class T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  Pack<T, V> r;
  if constexpr (V == 1) {
    r.v[0] = *p;
  } else {
    *reinterpret_cast<uint4*>(r.v) = *reinterpret_cast<const uint4*>(p);
  }
  return r;
}
template <class T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& r) {
  if constexpr (V == 1) {
    *p = r.v[0];
  } else {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(r.v);
  }
}

// The deterministic path of index_add (one index per row), over the indices sorted stably
// (sorted[q] = idx[perm[q]], ties in increasing k): each run of equal valid indices n is one
// destination row's contributions in increasing k. One warp takes the run that starts at position
// p (of each outer o), every lane V adjacent features at a time (16-byte words where the rows
// allow): x's value (out holds the copy), plus each src row in turn in f32 (i32 wrapping), rounded
// to T once: owner_sum's order and the CPU's, bit for bit. Rows with no index keep the copy; src
// and the touched rows are read once.
template <class T, int V>
__device__ void segment_rows(const int* __restrict__ sorted, const int* __restrict__ perm,
                             const T* __restrict__ src, T* __restrict__ out, long long O,
                             long long N, long long K, long long I) {
  const int lane = threadIdx.x & 31;
  const long long warps = thread_stride() >> 5;
  for (long long r = first_thread() >> 5; r < O * K; r += warps) {
    const long long o = r / K, p = r % K;
    const int n = sorted[p];
    if (n < 0 || n >= N || (p > 0 && sorted[p - 1] == n)) continue;  // no run starts here
    long long end = p + 1;
    while (end < K && sorted[end] == n) ++end;
    T* row = out + (o * N + n) * I;
    const T* from = src + o * K * I;
    for (long long i = (long long)lane * V; i < I; i += 32 * V) {
      Pack<T, V> d = load_pack<T, V>(row + i);
      decltype(load(T())) a[V];
#pragma unroll
      for (int v = 0; v < V; ++v) a[v] = load(d.v[v]);
      for (long long q = p; q < end; ++q) {
        const Pack<T, V> t = load_pack<T, V>(from + (long long)perm[q] * I + i);
#pragma unroll
        for (int v = 0; v < V; ++v) a[v] = add(a[v], load(t.v[v]));
      }
#pragma unroll
      for (int v = 0; v < V; ++v) store(d.v[v], a[v]);
      store_pack<T, V>(row + i, d);
    }
  }
}

}  // namespace ki
