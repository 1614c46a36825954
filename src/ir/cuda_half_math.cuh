// kiln's cheaper float functions for a value that is rounded to bf16 or f16 before anything reads
// it (the generator's rule: src/ir/cuda_codegen.cpp, rounded_to_half). A half type keeps 8 or 11
// significant bits, so an f32 result within about 2^-18 relative of the exact value rounds as the
// exact value would, except within 1% of an ULP of a rounding boundary, where either neighbour is
// within 0.51 ULP: the bound tests/test_half_functions.cpp holds every bf16 and f16 input to.
// In a half type twice as many elements pass per byte as in f32, so the cost of the accurate
// functions of src/ir/cuda_prelude.cuh shows there, and these forms bring the ops back to memory
// speed. Each avoids cancellation and keeps kiln's results at the edges (signed zeros, the tails,
// inf, NaN), falling back to the accurate function outside the range where its bound is shown.
// Accuracy and the measured errors: docs/accuracy.md.
//
// CUDA C compiled by NVRTC at run time, after src/ir/cuda_prelude.cuh (ir::cuda_prelude()).
namespace kiln {
// CUDA's rsqrtf: 2 ULP (NVIDIA), rsqrt(+-0) = +-inf, rsqrt(x < 0) = NaN, rsqrt(inf) = 0.
__device__ __forceinline__ float rsqrt_to_half(float x) { return rsqrtf(x); }

// e / (1 + e) or 1 / (1 + e) with e = __expf(-|x|) (2 + 1.17 |x| ULP, so at most 2^-17 relative
// for |x| <= 80) and __fdividef (2 ULP, the divisor in [1, 2]). Beyond 80 (results that are
// subnormal or 1) and for NaN the accurate function.
__device__ __forceinline__ float sigmoid_to_half(float x) {
  if (!(fabsf(x) <= 80.0f)) return sigmoid(x);
  const float e = __expf(-fabsf(x));
  return __fdividef(x < 0.0f ? e : 1.0f, 1.0f + e);
}

// x sigmoid(x): relative accuracy for all x of [-80, 80]; beyond, the accurate function
// (silu(-inf) = NaN, -0 below -120).
__device__ __forceinline__ float silu_to_half(float x) {
  if (!(fabsf(x) <= 80.0f)) return silu(x);
  return x * sigmoid_to_half(x);
}

// The hardware's approximate 2^y (2 ULP) and 1/d (1 ULP), flushing subnormals: the callers keep
// their arguments and results normal.
__device__ __forceinline__ float exp2_approx(float y) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(y));
  return e;
}
__device__ __forceinline__ float rcp_approx(float d) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return r;
}

// x Phi(x) as gelu_f computes it, Phi(x) = Q(a) for x < 0 and 1 - Q(a) for x >= 0 (a = |x|), but
// with Q(a) = exp(-a^2 / 2) t P(t - 5/8), t = 4 / (4 + a) in [2/9, 1] and P of degree 8 fitted for
// kiln (2^-24 relative, 2^-22 evaluated in float) for a <= 14, from the hardware's 2^y and 1/d:
// no division, no branch, two MUFU operations. a^2 = h + l exactly, and y = -(h + l) log2(e) / 2
// is y + yl (the product's rounding error and log2(e)'s tail by FMA), so 2^y (1 + yl ln 2) is
// within about 2^-21 of exp(-a^2 / 2) for every a; above 11, 2^(y + 32) 2^-32, so that 2^y stays
// normal and a subnormal result rounds once. Worst relative error about 2^-20, modelled with the
// hardware's bounds over every half input and 2e7 floats of [-14.5, 14.5] (docs/accuracy.md).
// x < -14 gives -0 (gelu(-14) is below half of bf16's smallest subnormal); gelu(-inf) = -0,
// gelu(inf) = inf, NaN gives NaN.
__device__ __forceinline__ float gelu_to_half(float x) {
  const float a = fabsf(x);
  const float ac = a > 14.0f ? 14.0f : a;  // NaN stays NaN
  const float h = ac * ac;
  const float l = __fmaf_rn(ac, ac, -h);
  const float y = h * -0.721347511f;  // -log2(e) / 2
  float yl = __fmaf_rn(h, -0.721347511f, -y);
  yl = __fmaf_rn(h, -9.62981517e-9f, yl);
  yl = __fmaf_rn(l, -0.721347511f, yl);
  const bool tail = ac > 11.0f;
  const float e = exp2_approx(tail ? y + 32.0f : y);
  const float ex = __fmaf_rn(e, yl * 0.693147182f, e);
  const float t = 4.0f * rcp_approx(4.0f + ac);
  const float u = t - 0.625f;
  float p = __fmaf_rn(0.0257234722f, u, -0.0241919123f);
  p = __fmaf_rn(p, u, -0.0910682976f);
  p = __fmaf_rn(p, u, 0.00284795626f);
  p = __fmaf_rn(p, u, 0.262787312f);
  p = __fmaf_rn(p, u, 0.500678658f);
  p = __fmaf_rn(p, u, 0.550623119f);
  p = __fmaf_rn(p, u, 0.420168459f);
  p = __fmaf_rn(p, u, 0.233653024f);
  const float xq = (x > 14.0f ? 14.0f : x) * t * p * ex * (tail ? 0x1p-32f : 1.0f);
  if (x < -14.0f) return -0.0f;
  return x > 0.0f ? x - xq : xq;  // +-0 and NaN give xq: +-0 and NaN
}

// sin and cos by one reduction and one polynomial for |x| <= 39000 (kiln::dev::sin_cos_reduced,
// a few float ULP, branch-free); sin(x) = x below 2^-12 (keeps -0); beyond 39000, inf and NaN
// the accurate functions. The reduced form is computed before the range is tested, so that the
// four elements of a vectorized step run it side by side and only a rare outlier branches.
__device__ __forceinline__ float sin_to_half(float x) {
  const float ax = fabsf(x);
  const float v = dev::sin_cos_reduced(x, 0);
  if (!(ax <= 39000.0f)) return sin(x);
  return ax < 0x1p-12f ? x : v;
}
__device__ __forceinline__ float cos_to_half(float x) {
  const float v = dev::sin_cos_reduced(x, 1);
  if (!(fabsf(x) <= 39000.0f)) return cos(x);
  return v;
}

// log(1 + f) for |f| <= 1/4: its Taylor series to degree 11 (truncation below 2^-25 relative).
__device__ __forceinline__ float log1p_quarter(float f) {
  float p = 1.0f / 11.0f;
  p = __fmaf_rn(p, f, -1.0f / 10.0f);
  p = __fmaf_rn(p, f, 1.0f / 9.0f);
  p = __fmaf_rn(p, f, -1.0f / 8.0f);
  p = __fmaf_rn(p, f, 1.0f / 7.0f);
  p = __fmaf_rn(p, f, -1.0f / 6.0f);
  p = __fmaf_rn(p, f, 1.0f / 5.0f);
  p = __fmaf_rn(p, f, -1.0f / 4.0f);
  p = __fmaf_rn(p, f, 1.0f / 3.0f);
  p = __fmaf_rn(p, f, -0.5f);
  return __fmaf_rn(f * p, f, f);
}

// __logf is within 3 ULP outside [0.5, 2] and 2^-21.41 absolute inside, which is a large relative
// error near 1: for x in [0.75, 1.25] log1p of x - 1 (exact, Sterbenz) instead, so that the
// absolute bound applies only where |log x| >= 0.22 (2^-19.2 relative). log(0) = -inf,
// log(x < 0) = NaN, log(inf) = inf.
__device__ __forceinline__ float log_to_half(float x) {
  const float f = x - 1.0f;
  if (fabsf(f) <= 0.25f) return log1p_quarter(f);
  return __logf(x);
}

// pow(x, y) = exp2(y log2 x) for a normal finite x > 0, a finite y and |y log2 x| <= 4 (results
// in [1/16, 16]): log2 x from __log2f (2^-22 absolute; >= 0.32 in magnitude outside [0.75, 1.25])
// or from log1p_quarter, exp2f within 2 ULP; the error of t = y log2 x is below 2^-20 of |t|, so
// the result's is below 2^-18.4. Everything else, special cases included, the accurate pow.
__device__ __forceinline__ float pow_to_half(float x, float y) {
  if (x >= 1.17549435e-38f && x <= 3.40282347e38f && fabsf(y) <= 3.40282347e38f) {
    const float f = x - 1.0f;
    const float l2 = fabsf(f) <= 0.25f ? log1p_quarter(f) * 1.44269502f : __log2f(x);
    const float t = y * l2;
    if (fabsf(t) <= 4.0f) return exp2f(t);
  }
  return pow(x, y);
}
}  // namespace kiln
