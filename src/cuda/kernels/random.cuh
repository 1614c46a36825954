// kiln random: Philox 4x32-10 and the value mapping of src/core/philox.hpp, statement for
// statement, so that a seed gives the same tensor on the CPU and on CUDA.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and src/cuda/random_source.cpp hands them to NVRTC as one complete
// source with two kernels, kiln_uniform and kiln_normal, after the IR's prelude (whose
// kiln::dev::box_muller the CPU runs too). Each thread fills one block of four elements:
// (float* out, unsigned long long n, unsigned long long seed, float a, float b), where a, b are
// lo, hi (uniform) or mean, std (normal). The float arithmetic of uniform uses
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

extern "C" __global__ void kiln_uniform(float* __restrict__ out, unsigned long long n,
                                        unsigned long long seed, float lo, float hi) {
  const unsigned long long b = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long first = 4 * b;
  if (first >= n) return;
  const KilnWords w = kiln_philox(b, seed);
  if (first + 4 <= n && ((unsigned long long)out & 15) == 0) {
    float4 v = make_float4(kiln_uniform_value(w.w[0], lo, hi), kiln_uniform_value(w.w[1], lo, hi),
                           kiln_uniform_value(w.w[2], lo, hi), kiln_uniform_value(w.w[3], lo, hi));
    reinterpret_cast<float4*>(out)[b] = v;
    return;
  }
  for (int lane = 0; lane < 4 && first + lane < n; ++lane)
    out[first + lane] = kiln_uniform_value(w.w[lane], lo, hi);
}

extern "C" __global__ void kiln_normal(float* __restrict__ out, unsigned long long n,
                                       unsigned long long seed, float mean, float std) {
  const unsigned long long b = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long first = 4 * b;
  if (first >= n) return;
  const KilnWords w = kiln_philox(b, seed);
  float z[4];
  kiln::dev::box_muller(w.w[0], w.w[1], z[0], z[1]);
  kiln::dev::box_muller(w.w[2], w.w[3], z[2], z[3]);
  if (first + 4 <= n && ((unsigned long long)out & 15) == 0) {
    reinterpret_cast<float4*>(out)[b] = make_float4(
        kiln::dev::normal_value(z[0], mean, std), kiln::dev::normal_value(z[1], mean, std),
        kiln::dev::normal_value(z[2], mean, std), kiln::dev::normal_value(z[3], mean, std));
    return;
  }
  for (int lane = 0; lane < 4 && first + lane < n; ++lane)
    out[first + lane] = kiln::dev::normal_value(z[lane], mean, std);
}
