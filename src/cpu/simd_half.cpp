// The SIMD conversions between the half types (bf16, f16) and f32 lanes, and a sum of half rows
// computed through them (the vector conversions themselves are simd_half-inl.hpp's), compiled for
// every target Highway can attain and dispatched at run time (simd_kernels.cpp has the table).
//
// Foreach_target re-includes this file once per target, so everything outside HWY_ONCE is
// compiled several times into namespaces N_AVX2, N_SSE4, ...
#if KILN_WITH_SIMD

#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/simd_half.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "cpu/kernels.hpp"
#include "cpu/simd_dispatch.hpp"
#include "cpu/simd_half-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace kiln::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <bool kBf16>
void Widen(const std::uint16_t* in, float* out, std::size_t n) {
  const std::size_t N = hn::Lanes(DF());
  std::size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadHalf<kBf16>(in + i), DF(), out + i);
  for (; i < n; ++i) out[i] = HalfToF32<kBf16>(in[i]);
}

template <bool kBf16>
void Round(const float* in, std::uint16_t* out, std::size_t n) {
  const std::size_t N = hn::Lanes(DF());
  std::size_t i = 0;
  for (; i + N <= n; i += N) StoreHalf<kBf16>(hn::LoadU(DF(), in + i), out + i);
  for (; i < n; ++i) out[i] = F32ToHalf<kBf16>(in[i]);
}

// out = x + terms[0] + ... + terms[count - 1], each element summed in f32 in that order and
// rounded once: one pass over the rows, for index_add's destination rows.
template <bool kBf16>
void HalfRowSum(const std::uint16_t* x, const std::uint16_t* const* terms, std::size_t count,
                std::uint16_t* out, std::size_t n) {
  const std::size_t N = hn::Lanes(DF());
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    auto acc = LoadHalf<kBf16>(x + i);
    for (std::size_t q = 0; q < count; ++q) acc = hn::Add(acc, LoadHalf<kBf16>(terms[q] + i));
    StoreHalf<kBf16>(acc, out + i);
  }
  for (; i < n; ++i) {
    float acc = HalfToF32<kBf16>(x[i]);
    for (std::size_t q = 0; q < count; ++q) acc += HalfToF32<kBf16>(terms[q][i]);
    out[i] = F32ToHalf<kBf16>(acc);
  }
}

void HalfToF32Impl(DType t, const std::uint16_t* in, float* out, std::size_t n) {
  if (t == DType::bf16) return Widen<true>(in, out, n);
  Widen<false>(in, out, n);
}

void F32ToHalfImpl(DType t, const float* in, std::uint16_t* out, std::size_t n) {
  if (t == DType::bf16) return Round<true>(in, out, n);
  Round<false>(in, out, n);
}

void HalfRowSumImpl(DType t, const std::uint16_t* x, const std::uint16_t* const* terms,
                    std::size_t count, std::uint16_t* out, std::size_t n) {
  if (t == DType::bf16) return HalfRowSum<true>(x, terms, count, out, n);
  HalfRowSum<false>(x, terms, count, out, n);
}

}  // namespace kiln::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::cpu {

HWY_EXPORT(HalfToF32Impl);
HWY_EXPORT(F32ToHalfImpl);
HWY_EXPORT(HalfRowSumImpl);

void simd_half_to_f32(DType t, const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(HalfToF32Impl)(t, in, out, n);
}

void simd_f32_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToHalfImpl)(t, in, out, n);
}

void simd_half_row_sum(DType t, const std::uint16_t* x, const std::uint16_t* const* terms,
                       std::size_t count, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(HalfRowSumImpl)(t, x, terms, count, out, n);
}

}  // namespace kiln::cpu
#endif  // HWY_ONCE

#endif  // KILN_WITH_SIMD
