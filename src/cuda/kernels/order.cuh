// kiln order ops: the device side of max/min with index, sort, topk and cumsum over the last dim.
//
// CUDA C compiled by NVRTC at run time (embedded by cmake/KilnEmbed.cmake);
// src/cuda/order_source.cpp adds the element-wise prelude before it and one set of extern "C" entry
// points per dtype after.
//
// Every element becomes an unsigned 32-bit key whose unsigned order is the order wanted: a float
// (bf16 and f16 through f32) maps its bits so that -inf < ... < -0 = +0 < ... < +inf < NaN (every
// NaN one key, -0 taken as +0 so they tie, as they compare equal); an i32 flips its sign bit; a
// bool is 0 or 1. Descending order is the key's complement (NaN then comes first, as PyTorch).
// The key and the index within the row make one 64-bit word (key << 32 | index): words are all
// distinct, and ascending words are exactly a stable sort, so a bitonic network (not stable by
// itself) sorts stably, and a min over words is the first occurrence of the extreme.
//
// sort and topk: each row is padded to P, a power of two, with all-ones words (after every real
// one) in a scratch of R x P words; a block sorts each tile of T = min(P, 4096) words in shared
// memory, then for every merge size k > T the network's strides j >= T run one global step each
// and the strides below T run in shared memory, tile by tile; a last kernel gathers the first K
// of each row (values read from x by index, so bit for bit). max and min: one block per row, a
// min over words (min: NaN's key 0, so NaN wins). cumsum: one block per row scans chunks of
// blockDim x 4 elements with a running carry, in f32 (i32 for i32 and bool, wrapping); a few long
// rows scan in two levels (the sums of chunks, their scan, each chunk again from its offset).
namespace ko {

typedef unsigned long long u64;

__device__ __forceinline__ unsigned float_key(float v) {
  if (v != v) return 0xffffffffu;
  if (v == 0.0f) v = 0.0f;
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ bool is_nan(float v) { return v != v; }
__device__ __forceinline__ bool is_nan(int) { return false; }
__device__ __forceinline__ bool is_nan(unsigned char) { return false; }
__device__ __forceinline__ bool is_nan(kiln::bf16 v) { return is_nan(kiln::to_f32(v)); }
__device__ __forceinline__ bool is_nan(kiln::f16 v) { return is_nan(kiln::to_f32(v)); }

__device__ __forceinline__ unsigned key_of(float v) { return float_key(v); }
__device__ __forceinline__ unsigned key_of(kiln::bf16 v) { return float_key(kiln::to_f32(v)); }
__device__ __forceinline__ unsigned key_of(kiln::f16 v) { return float_key(kiln::to_f32(v)); }
__device__ __forceinline__ unsigned key_of(int v) { return (unsigned)v ^ 0x80000000u; }
__device__ __forceinline__ unsigned key_of(unsigned char v) { return v ? 1u : 0u; }

// The word of element i of value v: ascending or descending key, then the index.
template <class T>
__device__ __forceinline__ u64 word(T v, long long i, int descending) {
  const unsigned k = key_of(v);
  return ((u64)(descending ? ~k : k) << 32) | (unsigned)i;
}

// Fills the scratch: row r's words at s + r * P, padded with all-ones.
template <class T>
__device__ void fill(const T* x, u64* s, long long rows, long long n, long long P, int descending) {
  const long long total = rows * P;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / P, i = e - r * P;
    s[e] = i < n ? word(kiln::ldg(x + r * n + i), i, descending) : ~0ull;
  }
}

// One compare-exchange of the bitonic network at index i of a row (i < i ^ j): ascending where
// (i & k) == 0.
__device__ __forceinline__ void exchange(u64* a, u64* b, long long i, long long k) {
  const u64 p = *a, q = *b;
  const bool up = (i & k) == 0;
  if ((p > q) == up) {
    *a = q;
    *b = p;
  }
}

// Tile t (T words) of the scratch in shared memory: every merge size k from k_first to k_last
// (powers of two <= T), strides from min(k / 2, T / 2) down to 1. k_first = 2, k_last = T sorts
// the tile; k_first = k_last = k > T finishes merge k's strides below T.
__device__ void tile_network(u64* s, long long P, int T, long long k_first, long long k_last) {
  __shared__ u64 tile[4096];                         // kOrderTile words
  const long long base = (long long)blockIdx.x * T;  // tiles never straddle rows (T divides P)
  for (int e = threadIdx.x; e < T; e += blockDim.x) tile[e] = s[base + e];
  __syncthreads();
  const long long row_base = base % P;
  for (long long k = k_first; k <= k_last; k <<= 1) {
    for (long long j = (k / 2 < T / 2 ? k / 2 : T / 2); j >= 1; j >>= 1) {
      for (int t = threadIdx.x; t < T / 2; t += blockDim.x) {
        const int i = (int)((t / j) * 2 * j + (t % j));
        exchange(&tile[i], &tile[i + j], row_base + i, k);
      }
      __syncthreads();
    }
  }
  for (int e = threadIdx.x; e < T; e += blockDim.x) s[base + e] = tile[e];
}

// One global step of merge k at stride j (j >= T): every pair (i, i + j) of every row.
__device__ void global_step(u64* s, long long rows, long long P, long long k, long long j) {
  const long long pairs = rows * (P / 2);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < pairs;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / (P / 2), t = e - r * (P / 2);
    const long long i = (t / j) * 2 * j + (t % j);
    exchange(&s[r * P + i], &s[r * P + i + j], i, k);
  }
}

// The first K words of each sorted row: values from x by index, and the indices.
template <class T>
__device__ void gather(const T* x, const u64* s, T* values, int* indices, long long rows,
                       long long n, long long P, long long K) {
  const long long total = rows * K;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / K, i = e - r * K;
    const int at = (int)(unsigned)s[r * P + i];
    values[e] = x[r * n + at];
    indices[e] = at;
  }
}

// max (largest first: descending words) or min (ascending, NaN's key 0) of each row with the
// index of its first occurrence; one block (a power of two <= 1024 threads) per row.
template <class T>
__device__ void extreme(const T* x, T* values, int* indices, long long rows, long long n,
                        int largest) {
  __shared__ u64 best[1024];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    u64 m = ~0ull;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
      const T v = kiln::ldg(x + r * n + i);
      u64 w = word(v, i, largest);
      if (!largest && is_nan(v)) w = (u64)(unsigned)i;  // key 0
      m = w < m ? w : m;
    }
    best[threadIdx.x] = m;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h && best[threadIdx.x + h] < best[threadIdx.x])
        best[threadIdx.x] = best[threadIdx.x + h];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const int at = (int)(unsigned)best[0];
      values[r] = x[r * n + at];
      indices[r] = at;
    }
    __syncthreads();
  }
}

__device__ __forceinline__ float acc_of(float v) { return v; }
__device__ __forceinline__ float acc_of(kiln::bf16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ float acc_of(kiln::f16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ unsigned acc_of(int v) { return (unsigned)v; }
__device__ __forceinline__ unsigned acc_of(unsigned char v) { return v ? 1u : 0u; }
__device__ __forceinline__ void put(float& o, float v) { o = v; }
__device__ __forceinline__ void put(kiln::bf16& o, float v) { o = kiln::to_bf16(v); }
__device__ __forceinline__ void put(kiln::f16& o, float v) { o = kiln::to_f16(v); }
__device__ __forceinline__ void put(int& o, unsigned v) { o = (int)v; }
__device__ __forceinline__ void put(unsigned& o, unsigned v) { o = v; }

// The inclusive prefix sums of positions [begin, end) of row xr (in scan order: reverse counts
// from the row's end), starting from `carry`, written to yr where `write`; returns the carry after
// them. One block, B threads, 4 consecutive elements a thread per chunk of 4B: each thread sums
// its 4, the block scans the thread sums (Hillis-Steele in shared memory), the carry passes on.
template <class T, class O, class A>
__device__ A scan_span(const T* xr, O* yr, long long n, long long begin, long long end, int reverse,
                       A carry, bool write, A* part) {
  for (long long c0 = begin; c0 < end; c0 += 4LL * blockDim.x) {
    A v[4];
    A s = 0;
    const long long first = c0 + 4LL * threadIdx.x;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const long long i = first + q;
      v[q] = i < end ? acc_of(kiln::ldg(xr + (reverse ? n - 1 - i : i))) : (A)0;
      s += v[q];
      v[q] = s;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = 1; h < (int)blockDim.x; h <<= 1) {
      const A add = threadIdx.x >= (unsigned)h ? part[threadIdx.x - h] : (A)0;
      __syncthreads();
      part[threadIdx.x] += add;
      __syncthreads();
    }
    const A before = carry + (threadIdx.x ? part[threadIdx.x - 1] : (A)0);
    if (write) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const long long i = first + q;
        if (i < end) put(yr[reverse ? n - 1 - i : i], before + v[q]);
      }
    }
    carry += part[blockDim.x - 1];
    __syncthreads();
  }
  return carry;
}

// One block per row scans it whole.
template <class T, class O, class A>
__device__ void cumsum(const T* x, O* y, long long rows, long long n, int reverse) {
  __shared__ A part[1024];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x)
    scan_span<T, O, A>(x + r * n, y + r * n, n, 0, n, reverse, (A)0, true, part);
}

// Few long rows, in two levels: block b sums chunk c = b % chunks (of `chunk` elements, in scan
// order) of row b / chunks into sums[b]; the rows of sums are scanned (the cumsum kernel of f32,
// or of i32 for the integer sums, whose bits are the same); then block b scans its chunk again
// from the inclusive sum of the chunks before it.
template <class T, class A>
__device__ void chunk_sums(const T* x, A* sums, long long rows, long long n, long long chunk,
                           int reverse) {
  __shared__ A part[1024];
  const long long chunks = (n + chunk - 1) / chunk;
  for (long long b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const long long r = b / chunks, c = b - r * chunks;
    const long long end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    const A total =
        scan_span<T, A, A>(x + r * n, (A*)0, n, c * chunk, end, reverse, (A)0, false, part);
    if (threadIdx.x == 0) sums[b] = total;
  }
}

template <class T, class O, class A>
__device__ void chunk_scan(const T* x, O* y, const A* scanned, long long rows, long long n,
                           long long chunk, int reverse) {
  __shared__ A part[1024];
  const long long chunks = (n + chunk - 1) / chunk;
  for (long long b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const long long r = b / chunks, c = b - r * chunks;
    const long long end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
    const A carry = c ? scanned[b - 1] : (A)0;
    scan_span<T, O, A>(x + r * n, y + r * n, n, c * chunk, end, reverse, carry, true, part);
  }
}

}  // namespace ko
