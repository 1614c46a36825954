// The host types of kiln's two half-precision dtypes: kiln::bfloat16 (DType::bf16: 8 exponent
// bits, 7 mantissa bits, f32's range) and kiln::float16 (DType::f16: IEEE binary16).
//
// Each is its 16 bits. Conversion from float rounds to nearest, ties to even; overflow gives
// +-Inf as IEEE does; NaN stays NaN (quiet, sign kept); f16 keeps subnormals. Conversion to float
// is exact. Written with integer operations so that every compiler kiln supports (g++ 12,
// clang 14, neither with std::bfloat16_t) gives the same bits.
#pragma once

#include <bit>
#include <cstdint>

namespace kiln {

namespace detail {

constexpr std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry into the exponent is
  // the correct result, including the one that overflows to Inf.
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

constexpr float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

constexpr std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<std::uint16_t>((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to 65536 or more: Inf
  if (a < 0x38800000u) {
    // Below f16's smallest normal (2^-14): a subnormal, in units of 2^-24, rounded to even.
    if (a < 0x33000000u) return sign;                   // below half the smallest subnormal: 0
    const int shift = 126 - static_cast<int>(a >> 23);  // 14..24
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t r = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (r & 1u))) ++r;  // may carry into the smallest normal
    return sign | static_cast<std::uint16_t>(r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even; a carry into
  // the exponent is correct here too.
  const std::uint32_t rebased = a - (112u << 23);
  const std::uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<std::uint16_t>(rounded >> 13);
}

constexpr float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalise the mantissa.
  int e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(e) << 23) |
                              ((mant & 0x3ffu) << 13));
}

}  // namespace detail

// A 16-bit floating type: its bits, and the conversions to and from float.
template <std::uint16_t (*ToBits)(float), float (*ToFloat)(std::uint16_t)>
struct basic_half {
  std::uint16_t bits = 0;

  constexpr basic_half() = default;
  constexpr explicit basic_half(float f) : bits(ToBits(f)) {}
  static constexpr basic_half from_bits(std::uint16_t b) {
    basic_half h;
    h.bits = b;
    return h;
  }
  constexpr explicit operator float() const { return ToFloat(bits); }
};

using bfloat16 = basic_half<detail::float_to_bf16_bits, detail::bf16_bits_to_float>;
using float16 = basic_half<detail::float_to_f16_bits, detail::f16_bits_to_float>;

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

}  // namespace kiln
