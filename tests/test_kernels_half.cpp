// The CPU kernel tables' half conversions (KernelTable::half_to_f32, f32_to_half), every table
// and every Highway target, against the host types of include/kiln/half.hpp (themselves checked
// against a reference in tests/core/test_half_conversion.cpp): all 65,536 patterns of each half
// type to f32, and f32 to each half type over a sweep of all 2^32 patterns in steps of 251, the
// ties between neighbouring halves and the floats beside them, bit for bit (NaN: any NaN). And
// half_row_sum against the host's sum in f32 of the same rows in the same order, rounded once.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_tables.hpp"
#include "kiln/dtype.hpp"

namespace {

using kiln::DType;

class KernelHalf : public kt::TableTest {};
INSTANTIATE_TEST_SUITE_P(Tables, KernelHalf, ::testing::ValuesIn(kt::all_tables()), kt::table_name);

std::uint16_t host_bits(DType t, float f) {
  return t == DType::bf16 ? kiln::bfloat16(f).bits : kiln::float16(f).bits;
}
float host_value(DType t, std::uint16_t b) {
  return t == DType::bf16 ? static_cast<float>(kiln::bfloat16::from_bits(b))
                          : static_cast<float>(kiln::float16::from_bits(b));
}

TEST_P(KernelHalf, EveryPatternToF32) {
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<std::uint16_t> in(65536);
    for (std::uint32_t b = 0; b < 65536; ++b) in[b] = static_cast<std::uint16_t>(b);
    std::vector<float> out(in.size() + 1, -1.0f);
    // From an odd offset, so that the vector loop meets an unaligned start and a tail.
    table().half_to_f32(t, in.data() + 1, out.data() + 1, in.size() - 1);
    for (std::uint32_t b = 1; b < 65536; ++b) {
      const float want = host_value(t, static_cast<std::uint16_t>(b));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[b])) << dtype_name(t) << " pattern " << b;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out[b]), std::bit_cast<std::uint32_t>(want))
            << dtype_name(t) << " pattern " << b;
      }
    }
  }
}

TEST_P(KernelHalf, F32ToHalfRoundsToNearestEven) {
  std::vector<float> in;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 251)
    in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
  for (DType t : {DType::bf16, DType::f16}) {
    // The ties between neighbouring halves of both signs, and the floats on either side.
    for (std::uint32_t b = 0; b < 65535; ++b) {
      const float lo = host_value(t, static_cast<std::uint16_t>(b));
      const float hi = host_value(t, static_cast<std::uint16_t>(b + 1));
      if (!std::isfinite(lo) || !std::isfinite(hi) || (b & 0x7fff) == 0x7fff) continue;
      const float mid = static_cast<float>((double{lo} + hi) / 2);
      in.insert(in.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
    }
  }
  std::vector<std::uint16_t> out(in.size());
  for (DType t : {DType::bf16, DType::f16}) {
    table().f32_to_half(t, in.data(), out.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (std::isnan(in[i])) {
        ASSERT_TRUE(std::isnan(host_value(t, out[i]))) << dtype_name(t) << " NaN " << i;
      } else {
        ASSERT_EQ(out[i], host_bits(t, in[i]))
            << dtype_name(t) << " x = " << in[i] << " (bits 0x" << std::hex
            << std::bit_cast<std::uint32_t>(in[i]) << ")";
      }
    }
  }
}

TEST_P(KernelHalf, HalfRowSumEqualsTheHostSumRoundedOnce) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::random_device{}()));
  std::uniform_int_distribution<int> any_bits(0, 65535);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const std::size_t n = 203;  // from an odd offset: unaligned starts and a tail on every target
  for (DType t : {DType::bf16, DType::f16}) {
    for (std::size_t count : {0u, 1u, 2u, 7u}) {
      // Rows of normal values with every 9th element any bit pattern (infinities, NaNs,
      // subnormals, signed zeros, values that overflow when summed).
      std::vector<std::vector<std::uint16_t>> rows(count + 1, std::vector<std::uint16_t>(n + 1));
      for (auto& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i)
          row[i] =
              i % 9 == 4 ? static_cast<std::uint16_t>(any_bits(rng)) : host_bits(t, normal(rng));
      std::vector<const std::uint16_t*> terms;
      for (std::size_t q = 1; q <= count; ++q) terms.push_back(rows[q].data() + 1);
      std::vector<std::uint16_t> out(n + 1, 0x7c01);  // poison: an f16 NaN, a bf16 value
      table().half_row_sum(t, rows[0].data() + 1, terms.data(), count, out.data() + 1, n);
      EXPECT_EQ(out[0], 0x7c01) << "wrote before out";
      for (std::size_t i = 1; i <= n; ++i) {
        float want = host_value(t, rows[0][i]);
        for (std::size_t q = 1; q <= count; ++q) want += host_value(t, rows[q][i]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(host_value(t, out[i]))) << dtype_name(t) << " element " << i;
        } else {
          ASSERT_EQ(out[i], host_bits(t, want))
              << dtype_name(t) << " count " << count << " element " << i;
        }
      }
    }
  }
}

}  // namespace
