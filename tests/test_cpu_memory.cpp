// Host buffers and the parallel loop of the CPU backend.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/host_buffer.hpp"
#include "cpu/host_cache.hpp"
#include "cpu/parallel.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"

namespace {

TEST(HostBuffer, AlignedZeroSizedAndReused) {
  auto empty = kiln::cpu::host_empty({0, 3}, kiln::DType::f32);
  EXPECT_NE(empty->buffer->data(), nullptr);
  kiln::cpu::host_trim();
  void* first = nullptr;
  {
    auto big = kiln::cpu::host_empty({1 << 20}, kiln::DType::f32);
    first = big->buffer->data();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  }
  EXPECT_GE(kiln::cpu::host_cached_bytes(), std::size_t{4} << 20);
  auto again = kiln::cpu::host_empty({1 << 20}, kiln::DType::f32);
  EXPECT_EQ(again->buffer->data(), first) << "a freed large block is reused";
  kiln::cpu::host_trim();
  EXPECT_EQ(kiln::cpu::host_cached_bytes(), 0u);
}

TEST(HostBuffer, ImpossibleSizesThrowOutOfMemory) {
  EXPECT_THROW(
      kiln::cpu::host_empty({std::int64_t{1} << 40, std::int64_t{1} << 30}, kiln::DType::f32),
      kiln::OutOfMemoryError);
  EXPECT_THROW(kiln::cpu::host_empty({std::int64_t{1} << 61}, kiln::DType::f32),
               kiln::OutOfMemoryError);
}

// Reading back more elements than host memory can hold is a clear error, not std::bad_alloc. A
// broadcast view holds 2^62 elements in one float; std::vector refuses the count before any
// allocator is asked (so AddressSanitizer's allocator, which aborts on huge sizes, is not).
TEST(HostBuffer, ToVectorPastHostMemoryThrowsOutOfMemory) {
  const auto one = kiln::Tensor<1>::full({1}, 2.0f);
  const auto huge = one.expand(kiln::Shape<2>{std::int64_t{1} << 31, std::int64_t{1} << 31});
  try {
    (void)huge.to_vector();
    ADD_FAILURE() << "no OutOfMemoryError";
  } catch (const kiln::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("to_vector: cannot allocate 4611686018427387904 x 4"),
              std::string::npos)
        << e.what();
  }
}

class Parallel : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = kiln::config();
    kiln::set_config({.simd = saved_.simd, .threads = GetParam()});
  }
  void TearDown() override { kiln::set_config(saved_); }
  kiln::Config saved_;
};

TEST_P(Parallel, CoversEveryIndexOnce) {
  for (std::int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    kiln::cpu::parallel_for(n, 64, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
    });
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[static_cast<std::size_t>(i)], 1) << "n " << n << " i " << i;
  }
}

TEST_P(Parallel, ExceptionsReachTheCaller) {
  EXPECT_THROW(kiln::cpu::parallel_for(100000, 16,
                                       [](std::int64_t b, std::int64_t e) {
                                         if (b <= 5000 && 5000 < e) throw kiln::ValueError("boom");
                                       }),
               kiln::ValueError);
}

INSTANTIATE_TEST_SUITE_P(Threads, Parallel, ::testing::Values(0, 1, 2, -1));

}  // namespace
