// kiln CUDA prelude: the meaning of every element-wise op that is not a single C operator, for
// one element. Each function matches its namesake in src/cpu/kernel_math.hpp: signed zeros, NaN,
// saturation and wrap-around included. Accuracy of the float functions (sinf, expf, ...):
// docs/accuracy.md.
//
// CUDA C compiled by NVRTC at run time, never by the host compiler: cmake/KilnEmbed.cmake embeds
// this file's bytes in kiln, and the IR's CUDA C generator (src/ir/cuda_codegen.cpp,
// ir::cuda_prelude()) puts it, after src/ir/cuda_math.cuh, at the top of every element-wise kernel;
// the reduction sources (src/cuda/reduce_source.cpp) begin with it too.
namespace kiln {
__device__ __forceinline__ bool isnan_f(float x) { return x != x; }
__device__ __forceinline__ int wrap(unsigned x) { return (int)x; }
__device__ __forceinline__ int neg(int x) { return wrap(0u - (unsigned)x); }
__device__ __forceinline__ float neg(float x) { return -x; }
__device__ __forceinline__ int abs(int x) { return x < 0 ? neg(x) : x; }
__device__ __forceinline__ float abs(float x) { return fabsf(x); }
__device__ __forceinline__ int relu(int x) { return x < 0 ? 0 : x; }
__device__ __forceinline__ float relu(float x) { return x <= 0.0f ? 0.0f : x; }
__device__ __forceinline__ int add(int a, int b) { return wrap((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int sub(int a, int b) { return wrap((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int mul(int a, int b) { return wrap((unsigned)a * (unsigned)b); }
__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ float sub(float a, float b) { return a - b; }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ float div(float a, float b) { return a / b; }
__device__ __forceinline__ float pow(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  return powf(x, y);
}
// rsqrt as 1 / sqrt(x), both IEEE (NVRTC's defaults): within 1 ULP, the CPU SIMD table's bits.
__device__ __forceinline__ float rsqrt(float x) { return 1.0f / sqrtf(x); }
// sigmoid, gelu and silu in float: src/ir/cuda_math.cuh, which comes before this file.
__device__ __forceinline__ float sigmoid(float x) { return dev::sigmoid_f(x); }
__device__ __forceinline__ float gelu(float x) { return dev::gelu_f(x); }
__device__ __forceinline__ float silu(float x) { return dev::silu_f(x); }
// CUDA's erff: 2 ULP (NVIDIA's bound; docs/accuracy.md).
__device__ __forceinline__ float erf(float x) { return erff(x); }
// sin and cos take a short path where |x| <= pi/4 (the common case of activations and
// normalised data): no argument reduction, one polynomial fitted for kiln on [0, pi/4]
// (max error 0.69 ULP for sin, 0.55 for cos, over every float there; docs/accuracy.md;
// src/ir/cuda_math.cuh). Elsewhere, CUDA's sinf/cosf with their full reduction; a warp whose
// lanes all take the short path skips it.
__device__ __forceinline__ float sin(float x) {
  const float ax = fabsf(x);
  if (ax < 0x1p-12f) return x;  // sin(x) rounds to x, and sin(-0) = -0
  if (ax > 0.785398185f) return sinf(x);
  return dev::sin_poly(x);
}
__device__ __forceinline__ float cos(float x) {
  if (!(fabsf(x) <= 0.785398185f)) return cosf(x);
  return dev::cos_poly(x);
}
__device__ __forceinline__ int minimum(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int maximum(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ float minimum(float a, float b) {
  if (isnan_f(a)) return a;
  if (isnan_f(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
__device__ __forceinline__ float maximum(float a, float b) {
  if (isnan_f(a)) return a;
  if (isnan_f(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
__device__ __forceinline__ int f32_to_i32(float x) {
  if (isnan_f(x)) return 0;
  if (x >= 2147483648.0f) return 2147483647;
  if (x < -2147483648.0f) return -2147483647 - 1;
  return (int)x;
}
// The half types in memory: their 16 bits, in a struct of their own so that overloads tell
// them apart (and apart from integers). Values are computed in float; storing rounds to nearest
// even, overflow gives Inf, NaN stays NaN: as kiln::bfloat16 / kiln::float16 on the host
// (include/kiln/half.hpp). With the conversion instructions: f16's every architecture has, bf16's
// from sm_80 (one instruction where the integer rounding takes six; before sm_80, the integer
// rounding).
struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};
struct __align__(8) bf16x4 {
  bf16 x, y, z, w;
};
struct __align__(8) f16x4 {
  f16 x, y, z, w;
};
__device__ __forceinline__ float to_f32(bf16 h) { return __uint_as_float((unsigned)h.bits << 16); }
__device__ __forceinline__ bf16 to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
  bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
#else
  const unsigned u = __float_as_uint(f);
  const bf16 nan = {(unsigned short)((u >> 16) | 0x40u)};
  const bf16 r = {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
  return (u & 0x7fffffffu) > 0x7f800000u ? nan : r;
#endif
}
__device__ __forceinline__ float to_f32(f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ f16 to_f16(float f) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
// A read through the read-only data cache (__ldg), which knows no structs: the half types read
// their bits.
template <class T>
__device__ __forceinline__ T ldg(const T* p) {
  return __ldg(p);
}
__device__ __forceinline__ bf16 ldg(const bf16* p) {
  const bf16 h = {__ldg(&p->bits)};
  return h;
}
__device__ __forceinline__ f16 ldg(const f16* p) {
  const f16 h = {__ldg(&p->bits)};
  return h;
}
// The value an explicit cast to a half type leaves in a float register.
__device__ __forceinline__ float round_bf16(float f) { return to_f32(to_bf16(f)); }
__device__ __forceinline__ float round_f16(float f) { return to_f32(to_f16(f)); }
}  // namespace kiln
