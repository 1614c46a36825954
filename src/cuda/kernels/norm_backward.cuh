// kiln norms' backward: the device side of Backend::norm_backward (layer_norm, rms_norm), one read
// of x and g and one write of dx, with the weight's and bias's gradients summed on the way.
//
// CUDA C compiled by NVRTC at run time after the prelude and kernels/rows.cuh (whose load, store
// and put it uses); src/cuda/norm_backward.cpp generates the extern "C" entry points (kn::
// templates instantiated per dtype T of x, w and dx, dtype G of g, load width V and loads a
// thread holds K). G is T, or a half type for an f32 T: autocast's gradient of an f32 norm's
// output arrives as a bf16 product's, and the fusion decorator hands over that rather than
// writing its f32 cast.
//
// norm_backward: one block per row at a time (a grid-stride loop over rows); thread t holds the
// row's loads j = t + k * blockDim.x (k < K) of V elements in registers, so x and g are read once:
//   xhat = (x - mean) rstd (rms_norm: x rstd), dxhat = g w
//   dx = rstd (dxhat - a / n - xhat c / n), a = sum(dxhat) (layer_norm only), c = sum(dxhat xhat)
// Each thread also sums g xhat and g over the rows its block visits for its own columns, and writes
// those sums as the block's row of the [gridDim.x, n] f32 partials, which norm_backward_finish
// then sums per column in a fixed order: dw and db come out the same on every run (no atomics).
namespace kn {

// a and c summed over the block, both in one pass (every thread gets the sums).
__device__ __forceinline__ void block_sum2(float& a, float& c, float2* sh) {
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    c += __shfl_xor_sync(0xffffffffu, c, o);
  }
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();  // sh may still be read by the previous row's reduction
  if (l == 0) sh[w] = make_float2(a, c);
  __syncthreads();
  const float2 v = l < (int)(blockDim.x >> 5) ? sh[l] : make_float2(0.0f, 0.0f);
  a = v.x;
  c = v.y;
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    c += __shfl_xor_sync(0xffffffffu, c, o);
  }
}

// A norm of x + residual (version 13): dsum, where not null, is added to dx, and dx_half (H, a half
// type for an f32 T), where not null, receives that dx rounded once.
template <class T, class G, int V, int K, class H = T>
__device__ void norm_backward(const T* __restrict__ x, const G* __restrict__ g,
                              const T* __restrict__ w, const float* __restrict__ mean,
                              const float* __restrict__ rstd, T* __restrict__ dx,
                              float* __restrict__ part_w, float* __restrict__ part_b,
                              long long rows, long long n, const T* __restrict__ dsum,
                              H* __restrict__ dx_half) {
  __shared__ float2 sh[32];
  const long long W = n / V;  // V > 1 only where it divides n
  const float inv_n = 1.0f / (float)n;
  float wv[K][V], sum_w[K][V], sum_b[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long j = threadIdx.x + (long long)k * blockDim.x;
#pragma unroll
    for (int i = 0; i < V; ++i) wv[k][i] = 1.0f, sum_w[k][i] = 0.0f, sum_b[k][i] = 0.0f;
    if (w && j < W) kr::load<V>(w + j * V, wv[k]);
  }
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float m = mean ? mean[r] : 0.0f, s = rstd[r];
    float xh[K][V], gv[K][V];
    float a = 0.0f, c = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
        kr::load<V>(x + r * n + j * V, xh[k]);
        kr::load<V>(g + r * n + j * V, gv[k]);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          xh[k][i] = (xh[k][i] - m) * s;
          const float d = gv[k][i] * wv[k][i];
          a += d;
          c += d * xh[k][i];
          sum_w[k][i] += gv[k][i] * xh[k][i];
          sum_b[k][i] += gv[k][i];
        }
      }
    }
    if (!dx) continue;
    block_sum2(a, c, sh);
    a = mean ? a * inv_n : 0.0f;  // rms_norm has no mean to subtract
    c *= inv_n;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const long long j = threadIdx.x + (long long)k * blockDim.x;
      if (j < W) {
        float o[V];
#pragma unroll
        for (int i = 0; i < V; ++i) o[i] = s * (gv[k][i] * wv[k][i] - a - xh[k][i] * c);
        if (dsum) {
          float d[V];
          kr::load<V>(dsum + r * n + j * V, d);
#pragma unroll
          for (int i = 0; i < V; ++i) o[i] += d[i];
        }
        kr::store<V>(dx + r * n + j * V, o);
        if (dx_half) kr::store<V>(dx_half + r * n + j * V, o);
      }
    }
  }
  if (!part_w && !part_b) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const long long j = threadIdx.x + (long long)k * blockDim.x;
    if (j < W) {
      const long long at = blockIdx.x * n + j * V;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (part_w) part_w[at + i] = sum_w[k][i];
        if (part_b) part_b[at + i] = sum_b[k][i];
      }
    }
  }
}

// dw[j] = sum over p < parts of part_w[p, j] (db likewise): a block of 32 * kFinishLanes threads
// sums 32 columns, warp y adding parts y, y + kFinishLanes, ... (coalesced rows of 32 floats),
// then warp 0 adds the warps' sums in warp order. The same order on every run.
constexpr int kFinishLanes = 16;
template <class T>
__device__ void norm_backward_finish(const float* __restrict__ part_w,
                                     const float* __restrict__ part_b, T* __restrict__ dw,
                                     T* __restrict__ db, long long parts, long long n) {
  __shared__ float sw[kFinishLanes][32], sb[kFinishLanes][32];
  const int x = threadIdx.x & 31, y = threadIdx.x >> 5;
  const long long j = blockIdx.x * 32LL + x;
  float w = 0.0f, b = 0.0f;
  if (j < n) {
#pragma unroll 4
    for (long long p = y; p < parts; p += kFinishLanes) {
      if (part_w) w += part_w[p * n + j];
      if (part_b) b += part_b[p * n + j];
    }
  }
  sw[y][x] = w;
  sb[y][x] = b;
  __syncthreads();
  if (y != 0 || j >= n) return;
  for (int k = 1; k < kFinishLanes; ++k) {
    w += sw[k][x];
    b += sb[k][x];
  }
  if (dw) kr::put(dw[j], w);
  if (db) kr::put(db[j], b);
}

}  // namespace kn
