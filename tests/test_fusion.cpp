// The fusion decorator (src/fusion/): what closes a group, that dropped intermediates are never
// written, the plan cache, loops, threads and errors. Results are compared with the same
// program run eagerly (fusion off), which must agree bit for bit, and with float64 references.
#include <atomic>
#include <cstring>
#include <thread>

#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::Tensor;

class FusionTest : public kt::DeviceTest {
 protected:
  kt::ConfigGuard guard_;
  void SetUp() override {
    kt::DeviceTest::SetUp();
    for (const auto& f : kiln::features())
      if (f.name == "fusion" && !f.live) GTEST_SKIP() << "fusion: " << f.why;
  }
  static void set_fusion(bool on) {
    kiln::Config c = kiln::config();
    c.fusion = on;
    kiln::set_config(c);
  }
  Tensor<2> input(std::int64_t rows, std::int64_t cols) {
    return Tensor<2>::from_data(kt::uniform(rows * cols, -4, 4, rng()), {rows, cols}, dev());
  }
};
KILN_INSTANTIATE_DEVICES(FusionTest);

Tensor<2> chain8(const Tensor<2>& x) {
  auto y = (x * 0.5f + 0.25f).sin().abs();
  return (y * 0.5f + 0.25f).sin().abs();
}

// Bitwise equality, NaN equal to NaN.
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

struct Delta {
  kiln::FusionStats before = kiln::fusion_stats();
  kiln::FusionStats now() const {
    auto s = kiln::fusion_stats();
    return {s.ops_recorded - before.ops_recorded,
            s.groups_run - before.groups_run,
            s.plan_hits - before.plan_hits,
            s.plan_misses - before.plan_misses,
            s.outputs_written - before.outputs_written,
            s.bytes_written - before.bytes_written};
  }
};

TEST_P(FusionTest, Chain8IsOneGroupThatWritesOnlyItsResult) {
  const auto x = input(256, 192);
  dev().sync();
  const long long live_before = kiln::memory_stats().live_buffers;
  kiln::reset_peak_buffers();
  Delta d;
  auto z = chain8(x);
  EXPECT_EQ(d.now().ops_recorded, 8);
  EXPECT_EQ(d.now().groups_run, 0) << "nothing runs before the result is needed";
  EXPECT_EQ(kiln::memory_stats().live_buffers, live_before) << "recording allocates nothing";
  dev().sync();
  EXPECT_EQ(d.now().groups_run, 1);
  EXPECT_EQ(d.now().outputs_written, 1);
  EXPECT_EQ(d.now().bytes_written, 256 * 192 * 4);
  EXPECT_EQ(kiln::memory_stats().peak_buffers - live_before, 1) << "one buffer: the result";
  const auto fused = z.to_vector();

  set_fusion(false);
  EXPECT_TRUE(same_bits(fused, chain8(x).to_vector()));
  const auto xs = x.to_vector();
  for (std::size_t i = 0; i < xs.size(); i += 97) {
    double y = std::abs(std::sin(xs[i] * 0.5 + 0.25));
    EXPECT_NEAR(fused[i], std::abs(std::sin(y * 0.5 + 0.25)), 1e-5) << i;
  }
}

TEST_P(FusionTest, KeptIntermediatesAreWrittenOnce) {
  const auto x = input(64, 64);
  Delta d;
  auto y = (x * 0.5f + 0.25f).sin();  // kept
  auto z = (y * y + 1.0f).sqrt();
  auto zs = z.to_vector();
  auto ys = y.to_vector();
  EXPECT_EQ(d.now().groups_run, 1);
  EXPECT_EQ(d.now().outputs_written, 2);
  set_fusion(false);
  auto y0 = (x * 0.5f + 0.25f).sin();
  EXPECT_TRUE(same_bits(ys, y0.to_vector()));
  EXPECT_TRUE(same_bits(zs, (y0 * y0 + 1.0f).sqrt().to_vector()));
}

TEST_P(FusionTest, ReadSyncMatmulAndReductionCloseTheGroup) {
  const auto x = input(32, 32);
  Delta d;
  auto a = x * 2.0f;
  (void)a.to_vector();
  EXPECT_EQ(d.now().groups_run, 1) << "a read closes the group";
  auto b = a + 1.0f;
  dev().sync();
  EXPECT_EQ(d.now().groups_run, 2) << "sync closes the group";
  auto c = b.abs();
  auto m = kiln::matmul(c, x);
  EXPECT_EQ(d.now().groups_run, 3) << "matmul closes the group";
  auto e = m.exp();
  auto s = e.sum(1);
  EXPECT_EQ(d.now().groups_run, 4) << "a reduction closes the group";
  set_fusion(false);
  auto s0 = kiln::matmul((x * 2.0f + 1.0f).abs(), x).exp().sum(1);
  EXPECT_TRUE(same_bits(s.to_vector(), s0.to_vector()));
}

TEST_P(FusionTest, GroupsCloseAtTheirSizeLimitAndAtAShapeChange) {
  auto x = input(8, 8);
  Delta d;
  auto y = x;
  for (int i = 0; i < 40; ++i) y = y * 1.01f;
  EXPECT_EQ(d.now().groups_run, 1) << "the 33rd op opened a second group";
  auto row = y.sum(0, kiln::keepdim);  // closes, then a [1, 8] group
  auto r = (row * 2.0f).expand<2>({8, 8}) + y;
  EXPECT_NEAR(r.to_vector()[0], 2 * row.to_vector()[0] + y.to_vector()[0], 1e-3);
}

TEST_P(FusionTest, ViewsOfPendingResultsAreRight) {
  const auto x = input(16, 16);
  auto y = x * 3.0f;
  auto t = y.transpose(0, 1) + x;  // reads y other than element for element
  auto s = y.slice(1, 0, 16, 2) - 1.0f;
  auto c = kiln::cat(std::vector<Tensor<2>>{y, x + 1.0f}, 0);
  const auto tv = t.to_vector(), sv = s.to_vector(), cv = c.to_vector();
  const auto xs = x.to_vector();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(tv[i * 16 + j], xs[j * 16 + i] * 3.0f + xs[i * 16 + j]);
      EXPECT_EQ(cv[i * 16 + j], xs[i * 16 + j] * 3.0f);
      EXPECT_EQ(cv[256 + i * 16 + j], xs[i * 16 + j] + 1.0f);
      if (j % 2 == 0) {
        EXPECT_EQ(sv[i * 8 + j / 2], xs[i * 16 + j] * 3.0f - 1.0f);
      }
    }
  }
}

TEST_P(FusionTest, OtherScalarsAndShapesReuseThePlan) {
  // A structure no other test records: tanh then where over a comparison.
  auto run = [&](std::int64_t rows, std::int64_t cols, float k) {
    auto x = input(rows, cols);
    auto y = (x * k).tanh();
    return kiln::where(y > k, y, x - k).to_vector();
  };
  (void)run(4, 6, 0.25f);
  Delta d;
  const auto compiled = kiln::compile_stats().kernels;
  (void)run(40, 7, -0.5f);
  (void)run(3, 300, 0.75f);
  EXPECT_EQ(d.now().plan_misses, 0);
  EXPECT_EQ(d.now().plan_hits, 2);
  EXPECT_EQ(kiln::compile_stats().kernels, compiled) << "no new kernel for new values";
}

TEST_P(FusionTest, ALongLoopCompilesOnceAndHoldsFewBuffers) {
  auto b = Tensor<2>::zeros({64, 64}, kiln::DType::f32, dev());
  dev().sync();
  const long long live_before = kiln::memory_stats().live_buffers;
  kiln::reset_peak_buffers();
  Delta d;
  const auto compiled = kiln::compile_stats().kernels;
  for (int i = 0; i < 1000; ++i) b = b + 0.02f;
  const auto got = b.to_vector();
  EXPECT_LE(d.now().plan_misses, 2) << "a full group of kMaxOps adds and the remainder";
  EXPECT_LE(kiln::compile_stats().kernels - compiled, 2);
  EXPECT_EQ(d.now().groups_run, (1000 + 31) / 32);
  EXPECT_LE(kiln::memory_stats().peak_buffers - live_before, 2);
  float want = 0;
  for (int i = 0; i < 1000; ++i) want = want + 0.02f;
  for (float v : got) ASSERT_EQ(v, want);
}

TEST_P(FusionTest, TwoThreadsRecordOnOneDevice) {
  const auto x = input(32, 48);
  set_fusion(false);
  const auto want = chain8(x).to_vector();
  set_fusion(true);
  std::atomic<int> wrong{0};
  auto work = [&] {
    for (int i = 0; i < 100; ++i)
      if (!same_bits(chain8(x).to_vector(), want)) ++wrong;
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(FusionTest, ErrorsComeFromTheOpThatCausedThem) {
  const auto x = input(4, 5);
  auto y = x * 2.0f;  // an open group
  EXPECT_THROW((void)(y + input(3, 5)), kiln::ShapeError);
  EXPECT_THROW((void)kiln::where(y, y, y), kiln::DTypeError);
  EXPECT_THROW((void)(y.to(kiln::DType::i32) + 3000000000LL), kiln::ValueError);
  auto z = y + 1.0f;  // the group is still usable
  const auto xs = x.to_vector(), zs = z.to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(zs[i], xs[i] * 2.0f + 1.0f);
}

// Memory is taken when a group runs, so running out of it is reported there; what the failed
// group would have made is then an error to use, never garbage, and the device goes on.
TEST_P(FusionTest, AGroupThatRunsOutOfMemoryFailsCleanly) {
  if (dev().kind() != Device::Kind::cpu) GTEST_SKIP() << "CudaMemory covers the device side";
  // 2^62 floats: a byte count no allocator is asked for (it overflows), sanitizers included.
  auto huge = Tensor<1>::zeros({std::int64_t{1} << 62}, kiln::DType::f32, dev());
  EXPECT_THROW((void)huge.sum(), kiln::OutOfMemoryError);
  EXPECT_THROW((void)(huge + 1.0f).to_vector(), kiln::Error);
  EXPECT_THROW((void)huge.sum(), kiln::Error);
  auto ok = Tensor<1>::full({3}, 2.0f, kiln::DType::f32, dev()) * 4.0f;
  EXPECT_EQ(ok.to_vector(), (std::vector<float>{8, 8, 8}));
}

TEST_P(FusionTest, SwitchingFusionOffRunsWhatWasRecorded) {
  const auto x = input(8, 8);
  auto y = x.exp() - 1.0f;
  set_fusion(false);
  EXPECT_EQ(dev().backend_name().find("fusion"), std::string::npos);
  const auto ys = y.to_vector();
  const auto xs = x.to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(ys[i], std::exp(static_cast<double>(xs[i])) - 1, 1e-4 * (1 + std::abs(ys[i])));
  set_fusion(true);
  EXPECT_NE(dev().backend_name().find("fusion<"), std::string::npos);
}

}  // namespace
