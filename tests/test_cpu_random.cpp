// Philox 4x32-10 and kiln::cpu::random: the generator against Random123's known answers, the
// (seed, index) -> value mapping of src/core/philox.hpp written out again here (normal values
// through kiln's float Box-Muller, src/ir/box_muller.cuh, held to a float64 Box-Muller of the same
// words), independence from the thread count, ranges, and the moments of ~1e6 samples.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/philox.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/host_buffer.hpp"
#include "ir/box_muller.cuh"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::detail::RandomSpec;
using kiln::philox::Counter;
using kiln::philox::Key;

// Random123's kat_vectors for philox4x32_10, checked at compile time as well as run time.
static_assert(kiln::philox::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
              Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});

TEST(Philox, KnownAnswers) {
  EXPECT_EQ(kiln::philox::philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Counter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(kiln::philox::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                        {0xffffffff, 0xffffffff}),
            (Counter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(kiln::philox::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                        {0xa4093822, 0x299f31d0}),
            (Counter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// ---- the mapping, written out from the header's comment ----

Counter words_of(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t b = i / 4;
  return kiln::philox::philox4x32_10(
      {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32), 0, 0},
      Key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

float expected_uniform(std::uint64_t seed, std::uint64_t i, float lo, float hi) {
  const std::uint32_t w = words_of(seed, i)[i % 4];
  const float u = static_cast<float>(w >> 8) / 16777216.0f;
  const float d = hi - lo;
  const float p = d * u;
  float v = lo + p;
  if (v >= hi && hi > lo) v = std::nextafter(hi, lo);
  return v;
}

// Through the float Box-Muller, whose own accuracy the BoxMuller tests below check.
float expected_normal(std::uint64_t seed, std::uint64_t i, double mean, double std) {
  const Counter w = words_of(seed, i);
  const int lane = static_cast<int>(i % 4), pair = lane / 2;
  float z[2];
  kiln::dev::box_muller(w[2 * pair], w[2 * pair + 1], z[0], z[1]);
  return std::fma(static_cast<float>(std), z[lane % 2], static_cast<float>(mean));
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class CpuRandom : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = kt::fresh_seed();
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (KILN_TEST_SEED reruns it)");
  }
  // A fresh f32 tensor of n elements, poisoned, filled by cpu::random.
  std::vector<float> generate(const RandomSpec& spec, std::int64_t n, std::uint64_t seed) {
    auto t = kiln::cpu::host_empty({n}, DType::f32);
    std::memset(t->data(), 0x7f, static_cast<std::size_t>(n) * 4);
    kiln::cpu::random(spec, seed, *t);
    const float* p = static_cast<const float*>(t->data());
    return std::vector<float>(p, p + n);
  }
  std::uint64_t seed_ = 0;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

RandomSpec uniform(double lo, double hi) { return {RandomSpec::Kind::uniform, lo, hi}; }
RandomSpec normal(double mean, double std) { return {RandomSpec::Kind::normal, mean, std}; }

TEST_F(CpuRandom, UniformFollowsTheMapping) {
  // 1003: a partial last block; the bounds round in f32 before use.
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-3.0, 5.5}, std::pair{0.1, 0.7}}) {
    SCOPED_TRACE(testing::Message() << "uniform(" << lo << ", " << hi << ")");
    auto v = generate(uniform(lo, hi), 1003, seed_);
    const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(bits(v[i]), bits(expected_uniform(seed_, i, flo, fhi))) << "element " << i;
    }
  }
}

TEST_F(CpuRandom, NormalFollowsTheMapping) {
  for (auto [mean, std] : {std::pair{0.0, 1.0}, std::pair{-2.5, 0.3}, std::pair{1.0, 0.0}}) {
    SCOPED_TRACE(testing::Message() << "normal(" << mean << ", " << std << ")");
    auto v = generate(normal(mean, std), 1001, seed_);
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(bits(v[i]), bits(expected_normal(seed_, i, mean, std))) << "element " << i;
    }
  }
}

// Past 2^34 elements the block index needs the counter's second word.
TEST_F(CpuRandom, ElementFunctionsUseTheWholeIndex) {
  for (std::uint64_t i :
       {std::uint64_t{0}, std::uint64_t{7}, (std::uint64_t{1} << 34) + 5, ~std::uint64_t{0}}) {
    EXPECT_EQ(bits(kiln::philox::uniform_at(seed_, i, -1, 1)),
              bits(expected_uniform(seed_, i, -1, 1)));
    EXPECT_EQ(bits(kiln::dev::normal_at(seed_, i, 0, 1)), bits(expected_normal(seed_, i, 0, 1)));
  }
  EXPECT_NE(kiln::philox::uniform_at(seed_, 4, 0, 1),
            kiln::philox::uniform_at(seed_, (std::uint64_t{1} << 34) + 4, 0, 1));
}

TEST_F(CpuRandom, SameForEveryThreadCount) {
  kt::ConfigGuard guard;
  const std::int64_t n = (1 << 20) + 3;
  for (const RandomSpec& spec : {uniform(-1, 2), normal(0.5, 2)}) {
    kiln::set_config({.threads = 1});
    auto one = generate(spec, n, seed_);
    for (int threads : {2, 3, 8}) {
      kiln::set_config({.threads = threads});
      auto many = generate(spec, n, seed_);
      ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * 4), 0) << threads << " threads";
    }
  }
}

TEST_F(CpuRandom, SeedsGiveDifferentStreams) {
  auto a = generate(uniform(0, 1), 4096, seed_);
  auto b = generate(uniform(0, 1), 4096, seed_ + 1);
  auto a2 = generate(uniform(0, 1), 4096, seed_);
  EXPECT_EQ(a, a2);
  int same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_LT(same, 4);
}

TEST_F(CpuRandom, UniformStaysInRange) {
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{1.0, 2.0}, std::pair{-1e-30, 1e-30},
                        std::pair{-1e6, -999999.0}, std::pair{100.0, 100.0}}) {
    SCOPED_TRACE(testing::Message() << "uniform(" << lo << ", " << hi << ")");
    const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    for (float x : generate(uniform(lo, hi), 1 << 16, seed_)) {
      ASSERT_GE(x, flo);
      if (fhi > flo)
        ASSERT_LT(x, fhi);
      else
        ASSERT_EQ(x, flo);
    }
  }
  // The largest word: lo + (hi - lo) * (1 - 2^-24) rounds up to hi in [1, 2); kiln keeps it
  // below hi. The smallest word gives lo exactly.
  EXPECT_EQ(kiln::philox::uniform_from_word(0xffffffffu, 1, 2), std::nextafter(2.0f, 0.0f));
  EXPECT_EQ(kiln::philox::uniform_from_word(0xffffffffu, 0, 1), 1 - 0x1p-24f);
  EXPECT_EQ(kiln::philox::uniform_from_word(0u, -3, 5), -3.0f);
  EXPECT_EQ(kiln::philox::uniform_from_word(0xffffffffu, 4, 4), 4.0f);
}

struct Moments {
  double mean = 0, var = 0, skew = 0, kurt = 0;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  double m2 = 0, m3 = 0, m4 = 0;
  for (float x : v) {
    const double d = x - m.mean;
    m2 += d * d, m3 += d * d * d, m4 += d * d * d * d;
  }
  const double n = static_cast<double>(v.size());
  m.var = m2 / n;
  m.skew = m3 / n / std::pow(m.var, 1.5);
  m.kurt = m4 / n / (m.var * m.var);
  return m;
}

// Tolerances are 6 standard errors of each estimate: a correct generator fails about once in
// 10^8 runs.
TEST_F(CpuRandom, UniformMoments) {
  const std::int64_t n = 1 << 20;
  const double sn = std::sqrt(static_cast<double>(n));
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-4.0, 6.0}}) {
    SCOPED_TRACE(testing::Message() << "uniform(" << lo << ", " << hi << ")");
    auto v = generate(uniform(lo, hi), n, seed_);
    const Moments m = moments(v);
    const double w = hi - lo;
    EXPECT_NEAR(m.mean, (lo + hi) / 2, 6 * w / std::sqrt(12.0) / sn);
    // Var of the sample variance of a uniform: (mu4 - sigma^4) / n = w^4 (1/80 - 1/144) / n.
    EXPECT_NEAR(m.var, w * w / 12, 6 * w * w * std::sqrt(1.0 / 80 - 1.0 / 144) / sn);
    EXPECT_NEAR(m.skew, 0, 6 * std::sqrt(6.0) / sn);
    // Each of 16 equal bins holds 1/16 of the samples.
    std::vector<double> bins(16);
    for (float x : v)
      bins[std::min<std::size_t>(15, static_cast<std::size_t>((x - lo) / w * 16))]++;
    for (double b : bins) EXPECT_NEAR(b / n, 1.0 / 16, 6 * std::sqrt(15.0 / 256 / n));
  }
}

TEST_F(CpuRandom, NormalMoments) {
  const std::int64_t n = 1 << 20;
  const double sn = std::sqrt(static_cast<double>(n));
  for (auto [mean, std] : {std::pair{0.0, 1.0}, std::pair{3.0, 2.5}}) {
    SCOPED_TRACE(testing::Message() << "normal(" << mean << ", " << std << ")");
    auto v = generate(normal(mean, std), n, seed_);
    const Moments m = moments(v);
    EXPECT_NEAR(m.mean, mean, 6 * std / sn);
    EXPECT_NEAR(m.var, std * std, 6 * std * std * std::sqrt(2.0) / sn);
    EXPECT_NEAR(m.skew, 0, 6 * std::sqrt(6.0) / sn);
    EXPECT_NEAR(m.kurt, 3, 6 * std::sqrt(24.0) / sn);
    // P(|z| < 1) = 0.682689...; the cos and sin halves each on their own (a Box-Muller slip
    // usually shows in one of them).
    for (int half = 0; half < 2; ++half) {
      double inside = 0, count = 0;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (static_cast<int>(i % 2) != half) continue;
        inside += std::fabs((v[i] - mean) / std) < 1 ? 1 : 0;
        count += 1;
      }
      EXPECT_NEAR(inside / count, 0.6826894921, 6 * std::sqrt(0.6827 * 0.3173 / count));
    }
  }
}

TEST_F(CpuRandom, EmptyAndNonFloatOutputs) {
  auto empty = kiln::cpu::host_empty({0, 5}, DType::f32);
  EXPECT_NO_THROW(kiln::cpu::random(uniform(0, 1), seed_, *empty));
  for (DType t : {DType::i32, DType::boolean}) {
    auto out = kiln::cpu::host_empty({4}, t);
    EXPECT_THROW(kiln::cpu::random(uniform(0, 1), seed_, *out), kiln::DTypeError);
    EXPECT_THROW(kiln::cpu::random(normal(0, 1), seed_, *out), kiln::DTypeError);
  }
}

}  // namespace
