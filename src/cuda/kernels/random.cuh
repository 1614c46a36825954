// kiln random: Philox 4x32-10 and the value mapping of src/core/philox.hpp, statement for
// statement, so that a seed gives the same tensor on the CPU and on CUDA.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/random_source.cpp hands them to NVRTC as one complete
// source with the kernels kiln_uniform and kiln_normal (f32) and their _bf16 and _f16 variants,
// after the IR's prelude (whose kiln::dev::box_muller the CPU runs too). Each thread fills one
// block of four elements: (T* out, unsigned long long n, unsigned long long seed, float a,
// float b), where a, b are lo, hi (uniform) or mean, std (normal). The float arithmetic of uniform
// uses
// __fsub_rn/__fmul_rn/__fadd_rn: each rounds once and is never contracted into an FMA.
struct KilnWords {
  unsigned w[4];
};

__device__ __forceinline__ KilnWords kiln_philox(unsigned long long block,
                                                 unsigned long long seed) {
  unsigned c0 = (unsigned)block, c1 = (unsigned)(block >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  KilnWords r = {{c0, c1, c2, c3}};
  return r;
}

__device__ __forceinline__ float kiln_uniform_value(unsigned w, float lo, float hi) {
  const float u = __fmul_rn((float)(w >> 8), 5.9604644775390625e-8f);  // 2^-24, exact
  const float d = __fsub_rn(hi, lo);
  const float v = __fadd_rn(lo, __fmul_rn(d, u));
  if (v >= hi && hi > lo) return nextafterf(hi, -__int_as_float(0x7f800000));
  return v;
}

// An element of the output: f32 as drawn, bf16 and f16 rounded once from the f32 draw (so a half
// tensor holds the values of the f32 tensor of the same seed, cast).
__device__ __forceinline__ void kiln_put(float* out, unsigned long long i, float v) { out[i] = v; }
__device__ __forceinline__ void kiln_put(kiln::bf16* out, unsigned long long i, float v) {
  out[i] = kiln::to_bf16(v);
}
__device__ __forceinline__ void kiln_put(kiln::f16* out, unsigned long long i, float v) {
  out[i] = kiln::to_f16(v);
}
// Block b's four elements in one store (16 bytes of f32, 8 of a half type).
__device__ __forceinline__ void kiln_put4(float* out, unsigned long long b, const float* v) {
  reinterpret_cast<float4*>(out)[b] = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void kiln_put4(kiln::bf16* out, unsigned long long b, const float* v) {
  const kiln::bf16x4 h = {kiln::to_bf16(v[0]), kiln::to_bf16(v[1]), kiln::to_bf16(v[2]),
                          kiln::to_bf16(v[3])};
  reinterpret_cast<kiln::bf16x4*>(out)[b] = h;
}
__device__ __forceinline__ void kiln_put4(kiln::f16* out, unsigned long long b, const float* v) {
  const kiln::f16x4 h = {kiln::to_f16(v[0]), kiln::to_f16(v[1]), kiln::to_f16(v[2]),
                         kiln::to_f16(v[3])};
  reinterpret_cast<kiln::f16x4*>(out)[b] = h;
}

// Writes block b's values v[0..3] of out's n elements: whole and aligned in one store, else
// element by element.
template <class T>
__device__ __forceinline__ void kiln_put_block(T* out, unsigned long long n, unsigned long long b,
                                               const float* v) {
  const unsigned long long first = 4 * b;
  if (first + 4 <= n && ((unsigned long long)out & (4 * sizeof(T) - 1)) == 0) {
    kiln_put4(out, b, v);
    return;
  }
  for (int lane = 0; lane < 4 && first + lane < n; ++lane) kiln_put(out, first + lane, v[lane]);
}

template <class T>
__device__ __forceinline__ void kiln_uniform_fill(T* out, unsigned long long n,
                                                  unsigned long long seed, float lo, float hi) {
  const unsigned long long b = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (4 * b >= n) return;
  const KilnWords w = kiln_philox(b, seed);
  float v[4];
  for (int lane = 0; lane < 4; ++lane) v[lane] = kiln_uniform_value(w.w[lane], lo, hi);
  kiln_put_block(out, n, b, v);
}

template <class T>
__device__ __forceinline__ void kiln_normal_fill(T* out, unsigned long long n,
                                                 unsigned long long seed, float mean, float std) {
  const unsigned long long b = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (4 * b >= n) return;
  const KilnWords w = kiln_philox(b, seed);
  float z[4];
  kiln::dev::box_muller(w.w[0], w.w[1], z[0], z[1]);
  kiln::dev::box_muller(w.w[2], w.w[3], z[2], z[3]);
  for (int lane = 0; lane < 4; ++lane) z[lane] = kiln::dev::normal_value(z[lane], mean, std);
  kiln_put_block(out, n, b, z);
}

// One entry point per distribution and output dtype: kiln_uniform, kiln_normal (f32),
// kiln_uniform_bf16, ..., kiln_normal_f16.
#define KILN_RANDOM_KERNELS(suffix, T)                                                             \
  extern "C" __global__ void kiln_uniform##suffix(T* __restrict__ out, unsigned long long n,       \
                                                  unsigned long long seed, float lo, float hi) {   \
    kiln_uniform_fill(out, n, seed, lo, hi);                                                       \
  }                                                                                                \
  extern "C" __global__ void kiln_normal##suffix(T* __restrict__ out, unsigned long long n,        \
                                                 unsigned long long seed, float mean, float std) { \
    kiln_normal_fill(out, n, seed, mean, std);                                                     \
  }
KILN_RANDOM_KERNELS(, float)
KILN_RANDOM_KERNELS(_bf16, kiln::bf16)
KILN_RANDOM_KERNELS(_f16, kiln::f16)
