// kiln row ops: the device side of softmax, log_softmax, logsumexp, layer_norm and rms_norm over
// the last dim.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/rows_source.cpp makes one source per dtype of the
// element-wise prelude (kiln::bf16, kiln::f16 and their conversions), this file and the extern "C"
// entry points it generates (kr:: templates instantiated per dtype T, load width V, registers K).
//
// One block per row (a grid-stride loop over rows). Row r of x starts at x + r * stride; y is
// contiguous. V is the elements of one load: 16 bytes (4 f32, 8 bf16/f16) where the row, its
// stride and every pointer allow, else 1. Two shapes of kernel:
//   fit     the row is held in registers, K loads of V elements a thread: x is read once and y
//           written once (memory speed). softmax: max, then sum of exp(x - max) over the held
//           values; the norms: the mean of x - x[0] (the row's first element as a pivot), then
//           the sum of (x - mean)^2 over the held values (two passes over registers), with the
//           mean kept as hi + lo: a row of 1e4 + noise keeps its variance and its centring.
//   stream  rows longer than the registers hold: one read pass keeps per thread the online
//           (max, sum of exp(x - max)) pair (softmax) or Welford's (count, mean, M2) of x - x[0]
//           (layer_norm)
//           or the sum of squares (rms_norm), combined across the block; a second pass reads x
//           again and writes y. Two reads of x instead of one.
// Every value is f32 (half types load to f32 and round once on store). exp and log are CUDA's
// expf and logf (2 and 1 ULP, CUDA C++ Programming Guide); y = e * (1 / s) for softmax. NaN
// follows PyTorch: a NaN, a +inf or a row of -inf makes the softmax row NaN.
namespace kr {

__device__ __forceinline__ float kInf() { return __int_as_float(0x7f800000); }

__device__ __forceinline__ float f32(float v) { return v; }
__device__ __forceinline__ float f32(kiln::bf16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ float f32(kiln::f16 v) { return kiln::to_f32(v); }
__device__ __forceinline__ void put(float& o, float v) { o = v; }
__device__ __forceinline__ void put(kiln::bf16& o, float v) { o = kiln::to_bf16(v); }
__device__ __forceinline__ void put(kiln::f16& o, float v) { o = kiln::to_f16(v); }

// V elements at p into v: one element, or a vector of 16 bytes (8: a half type at an f32 row's
// width), aligned to its size.
template <int V, class T>
__device__ __forceinline__ void load(const T* p, float* v) {
  if constexpr (V == 1) {
    v[0] = f32(kiln::ldg(p));
  } else if constexpr (V * sizeof(T) == 16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = f32(e[i]);
  } else {
    static_assert(V * sizeof(T) == 8, "a vector load is 16 or 8 bytes");
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = f32(e[i]);
  }
}

template <int V, class T>
__device__ __forceinline__ void store(T* p, const float* v) {
  if constexpr (V == 1) {
    put(*p, v[0]);
  } else if constexpr (V * sizeof(T) == 16) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < V; ++i) put(e[i], v[i]);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    static_assert(V * sizeof(T) == 8, "a vector store is 16 or 8 bytes");
    uint2 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < V; ++i) put(e[i], v[i]);
    *reinterpret_cast<uint2*>(p) = u;
  }
}

// ---- block reductions: every thread gets the result; blockDim.x is a multiple of 32 ----

struct Sum {
  __device__ static float id() { return 0.0f; }
  __device__ static float op(float a, float b) { return a + b; }
};
struct Max {  // fmaxf: a NaN is skipped (the sum of exp carries it)
  __device__ static float id() { return -kInf(); }
  __device__ static float op(float a, float b) { return fmaxf(a, b); }
};

template <class R>
__device__ __forceinline__ float block_all(float v, float* sh) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v = R::op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();  // sh may still be read by the previous reduction
  if (l == 0) sh[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x >> 5) ? sh[l] : R::id();
#pragma unroll
  for (int o = 16; o; o >>= 1) v = R::op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The online softmax pair: m the largest value seen, s the sum of exp(x - m), taken V values at a
// time: their largest M rescales s once, so a load costs V + 1 exponentials and no branch per
// value. A NaN makes s NaN; -inf adds nothing.
template <int V>
__device__ __forceinline__ void online(float& m, float& s, const float* v) {
  float vm = v[0];
#pragma unroll
  for (int i = 1; i < V; ++i) vm = fmaxf(vm, v[i]);  // fmaxf skips a NaN: the sum carries it
  const float M = fmaxf(m, vm);
  float t = 0.0f;
  if (M == -kInf()) {  // every value -inf or NaN: only a NaN counts
#pragma unroll
    for (int i = 0; i < V; ++i) t += v[i] == -kInf() ? 0.0f : v[i];
    s += t;
    return;
  }
#pragma unroll
  for (int i = 0; i < V; ++i) t += expf(v[i] - M);
  s = s * expf(m - M) + t;
  m = M;
}
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float M = fmaxf(m, m2);
  if (M == -kInf()) {
    s += s2;
  } else {
    s = s * expf(m - M) + s2 * expf(m2 - M);
  }
  m = M;
}
__device__ __forceinline__ void block_pair(float& m, float& s, float* shm, float* shs) {
#pragma unroll
  for (int o = 16; o; o >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) {
    shm[w] = m;
    shs[w] = s;
  }
  __syncthreads();
  const bool in = l < (int)(blockDim.x >> 5);
  m = in ? shm[l] : -kInf();
  s = in ? shs[l] : 0.0f;
#pragma unroll
  for (int o = 16; o; o >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

// Welford's (count, mean, M2), merged as Chan et al. do.
struct Moments {
  float n, mean, m2;
};
__device__ __forceinline__ void merge(Moments& a, const Moments& b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return;
  const float d = b.mean - a.mean, f = b.n / n;
  a.mean += d * f;
  a.m2 += b.m2 + d * d * a.n * f;
  a.n = n;
}
__device__ __forceinline__ Moments shfl(const Moments& a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.n, o), __shfl_xor_sync(0xffffffffu, a.mean, o),
          __shfl_xor_sync(0xffffffffu, a.m2, o)};
}
__device__ __forceinline__ Moments block_moments(Moments a, Moments* sh) {
#pragma unroll
  for (int o = 16; o; o >>= 1) merge(a, shfl(a, o));
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) sh[w] = a;
  __syncthreads();
  a = l < (int)(blockDim.x >> 5) ? sh[l] : Moments{0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int o = 16; o; o >>= 1) merge(a, shfl(a, o));
  return a;
}

__device__ __forceinline__ float inv_std(float var, float eps) { return 1.0f / sqrtf(var + eps); }

// The mean p + q (q the mean of x - p) as hi + lo (Fast2Sum: exact when |q| <= |p|), so that
// (x - hi) - lo centres a row far from zero without the error of rounding its mean to f32.
__device__ __forceinline__ void split_mean(float p, float q, float& hi, float& lo) {
  hi = p + q;
  lo = q - (hi - p);
}

// ---- softmax, log_softmax and logsumexp ----
// mode: 0 softmax, 1 log_softmax (y a row of x's dtype), 2 logsumexp (y[r] one f32 per row,
// written by thread 0; the exponentials are only summed).

// Writes row r's logsumexp m + log(s); a row of -inf (s = 0) or holding +inf is NaN, as the
// softmax row is.
template <class T>
__device__ __forceinline__ void put_logsumexp(T* y, long long r, float m, float s) {
  if (threadIdx.x == 0)
    reinterpret_cast<float*>(y)[r] = m == -kInf() ? __int_as_float(0x7fc00000) : m + logf(s);
}

template <class T, int V, int K>
__device__ void softmax_fit(const T* __restrict__ x, T* __restrict__ y, long long rows, long long n,
                            long long stride, int mode) {
  const int log = mode == 1;
  __shared__ float sh[32];
  const long long W = n / V + (n % V != 0);
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * stride;
    float v[K][V];
    float m = -kInf();
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
        load<V>(xr + j * V, v[k]);
#pragma unroll
        for (int i = 0; i < V; ++i) m = fmaxf(m, v[k][i]);
      }
    }
    m = block_all<Max>(m, sh);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float d = v[k][i] - m, e = expf(d);
          s += e;
          v[k][i] = log ? d : e;
        }
      }
    }
    s = block_all<Sum>(s, sh);
    if (mode == 2) {
      put_logsumexp(y, r, m, s);
      continue;
    }
    const float inv = 1.0f / s, ls = logf(s);
    T* yr = y + r * n;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] = log ? v[k][i] - ls : v[k][i] * inv;
        store<V>(yr + j * V, v[k]);
      }
    }
  }
}

template <class T, int V>
__device__ void softmax_stream(const T* __restrict__ x, T* __restrict__ y, long long rows,
                               long long n, long long stride, int mode) {
  const int log = mode == 1;
  __shared__ float shm[32], shs[32];
  const long long W = n / V + (n % V != 0);
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * stride;
    float m = -kInf(), s = 0.0f, v[V];
    long long j = threadIdx.x;
    // Four loads in flight before their values are taken: one at a time, the 16384 rows of
    // GPT-2's bf16 logits streamed at half the memory's speed.
    for (; j + 3 * (long long)blockDim.x < W; j += 4 * (long long)blockDim.x) {
      float u[4][V];
#pragma unroll
      for (int q = 0; q < 4; ++q) load<V>(xr + (j + q * (long long)blockDim.x) * V, u[q]);
#pragma unroll
      for (int q = 0; q < 4; ++q) online<V>(m, s, u[q]);
    }
    for (; j < W; j += blockDim.x) {
      load<V>(xr + j * V, v);
      online<V>(m, s, v);
    }
    block_pair(m, s, shm, shs);
    if (mode == 2) {
      put_logsumexp(y, r, m, m == kInf() ? __int_as_float(0x7fc00000) : s);
      continue;
    }
    if (m == kInf())
      s = __int_as_float(0x7fc00000);  // exp(inf - inf): the row is NaN, as the fit kernel's
    const float inv = 1.0f / s, ls = logf(s);
    T* yr = y + r * n;
    for (long long j = threadIdx.x; j < W; j += blockDim.x) {
      load<V>(xr + j * V, v);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = log ? (v[i] - m) - ls : expf(v[i] - m) * inv;
      store<V>(yr + j * V, v);
    }
  }
}

// ---- layer_norm and rms_norm (w, b may be null; mean, rstd may be null) ----

template <class T, int V>
__device__ __forceinline__ void affine(float* v, const T* w, const T* b, long long at) {
  float p[V];
  if (w) {
    load<V>(w + at, p);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] *= p[i];
  }
  if (b) {
    load<V>(b + at, p);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] += p[i];
  }
}

// v as T holds it: a half T's sum is normalised as it was stored, as an add and a norm would.
// (For an f32 T it is the identity, and compiles to nothing.)
template <int V, class T>
__device__ __forceinline__ void round_as(float* v) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    T h;
    put(h, v[i]);
    v[i] = f32(h);
  }
}

// The norm's input at row element j * V: x's V elements, plus the residual's where there is one
// (res and sum point at the row; x is then contiguous), that sum written to `sum` as well.
template <int V, class T, class R>
__device__ __forceinline__ void load_input(const T* xr, const R* rr, T* sr, long long j, float* v) {
  load<V>(xr + j * V, v);
  if (rr) {
    float a[V];
    load<V>(rr + j * V, a);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] += a[i];
    store<V>(sr + j * V, v);
    round_as<V, T>(v);
  }
}

// The pivot a norm centres its row on before summing: the row's first input element.
template <class T, class R>
__device__ __forceinline__ float pivot(const T* xr, const R* rr, int rms) {
  if (rms) return 0.0f;
  return rr ? f32(kiln::ldg(xr)) + f32(kiln::ldg(rr)) : f32(kiln::ldg(xr));
}

// Y, y's dtype, is T, or a half type for an f32 T (y rounded once to what a half product reads).
// res, where not null, is added to x first (R: T, or a half type for an f32 T), and sum receives
// that sum (contiguous, as x then is).
template <class T, int V, int K, class Y = T, class R = T>
__device__ void norm_fit(const T* __restrict__ x, Y* __restrict__ y, const T* __restrict__ w,
                         const T* __restrict__ b, long long rows, long long n, long long stride,
                         float eps, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                         int rms, const R* __restrict__ res, T* __restrict__ sum) {
  __shared__ float sh[32];
  const long long W = n / V + (n % V != 0);
  const float inv_n = 1.0f / (float)n;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * stride;
    const R* rr = res ? res + r * n : nullptr;
    T* sr = sum ? sum + r * n : nullptr;
    Y* yr = y + r * n;
    float v[K][V];
    const float p = pivot(xr, rr, rms);
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
        load_input<V>(xr, rr, sr, j, v[k]);
#pragma unroll
        for (int i = 0; i < V; ++i) t += v[k][i] - p;
      }
    }
    float hi = 0.0f, lo = 0.0f;
    if (!rms) split_mean(p, block_all<Sum>(t, sh) * inv_n, hi, lo);
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          v[k][i] = (v[k][i] - hi) - lo;
          q += v[k][i] * v[k][i];
        }
      }
    }
    const float rstd = inv_std(block_all<Sum>(q, sh) * inv_n, eps);
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = hi;
      if (rstd_out) rstd_out[r] = rstd;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
#pragma unroll
        for (int i = 0; i < V; ++i) v[k][i] *= rstd;
        affine<T, V>(v[k], w, b, j * V);
        store<V>(yr + j * V, v[k]);
      }
    }
  }
}

// The second pass reads x and res again (not sum: a read of what this kernel wrote through the
// read-only cache is not coherent) and rounds their sum as the first pass stored it.
template <class T, int V, class Y = T, class R = T>
__device__ void norm_stream(const T* __restrict__ x, Y* __restrict__ y, const T* __restrict__ w,
                            const T* __restrict__ b, long long rows, long long n, long long stride,
                            float eps, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                            int rms, const R* __restrict__ res, T* __restrict__ sum) {
  __shared__ Moments sh[32];
  const long long W = n / V + (n % V != 0);
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * stride;
    const R* rr = res ? res + r * n : nullptr;
    T* sr = sum ? sum + r * n : nullptr;
    Y* yr = y + r * n;
    float v[V];
    const float p = pivot(xr, rr, rms);  // Welford's runs on x - p
    Moments a{0.0f, 0.0f, 0.0f};
    for (long long j = threadIdx.x; j < W; j += blockDim.x) {
      load_input<V>(xr, rr, sr, j, v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (rms) {  // mean stays 0: m2 is the sum of squares
          a.m2 += v[i] * v[i];
        } else {
          const float x1 = v[i] - p;
          a.n += 1.0f;
          const float d = x1 - a.mean;
          a.mean += d / a.n;
          a.m2 += d * (x1 - a.mean);
        }
      }
    }
    if (rms) a.n = 1.0f;  // the sums of squares add as Moments with equal (zero) means
    a = block_moments(a, reinterpret_cast<Moments*>(sh));
    float hi = 0.0f, lo = 0.0f;
    if (!rms) split_mean(p, a.mean, hi, lo);
    const float rstd = inv_std(a.m2 / (float)n, eps);
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = hi;
      if (rstd_out) rstd_out[r] = rstd;
    }
    for (long long j = threadIdx.x; j < W; j += blockDim.x) {
      load<V>(xr + j * V, v);
      if (rr) {
        float q[V];
        load<V>(rr + j * V, q);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] += q[i];
        round_as<V, T>(v);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = ((v[i] - hi) - lo) * rstd;
      affine<T, V>(v, w, b, j * V);
      store<V>(yr + j * V, v);
    }
  }
}

}  // namespace kr
