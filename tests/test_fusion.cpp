// The fusion decorator (src/fusion/): what closes a group, that dropped intermediates are never
// written, the plan cache, loops, threads and errors. Results are compared with the same
// program run eagerly (fusion off), which must agree bit for bit, and with float64 references.
#include <atomic>
#include <cstring>
#include <thread>

#include "backend/backend.hpp"  // reduce_name
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
  // Whether this device's backend evaluates a reduction's prologue in the reduction kernel
  // (Backend::reduce_prologue) for the layouts of the tests below: both do, so the fusion
  // counters are checked on every device (where a backend declines, the group closes first
  // with the same results, which the tests check everywhere).
  bool prologues() const {
    return dev().kind() == Device::Kind::cpu || dev().kind() == Device::Kind::cuda;
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
            s.bytes_written - before.bytes_written,
            s.reductions_fused - before.reductions_fused};
  }
};

TEST_P(FusionTest, Chain8IsOneGroupThatWritesOnlyItsResult) {
  const auto x = input(256, 192);
  dev().sync();
  const long long live_before = kiln::memory_stats().live_buffers;
  const long long bytes_before = kiln::memory_stats().live_bytes;
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
  EXPECT_EQ(kiln::memory_stats().peak_bytes - bytes_before, 256 * 192 * 4);
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
  auto s = m.sum(1);
  EXPECT_EQ(d.now().groups_run, 4) << "a reduction of a tensor in memory closes the group";
  set_fusion(false);
  auto m0 = kiln::matmul((x * 2.0f + 1.0f).abs(), x);
  EXPECT_TRUE(same_bits(s.to_vector(), m0.sum(1).to_vector()));
  EXPECT_TRUE(same_bits(e.to_vector(), m0.exp().to_vector()));
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
TEST_P(FusionTest, ASizeNoMemoryHoldsFailsAtTheOpNotAtTheGroup) {
  // Recording allocates nothing, yet the op that asks for more than the device has fails, as it
  // does unfused, rather than the group that would run it later (tests/test_shape_overflow.cpp
  // covers every op, fused and not).
  EXPECT_THROW((void)Tensor<1>::zeros({std::int64_t{1} << 62}, kiln::DType::f32, dev()),
               kiln::ShapeError);  // its byte count overflows
  EXPECT_THROW((void)Tensor<1>::zeros({std::int64_t{1} << 60}, kiln::DType::f32, dev()),
               kiln::OutOfMemoryError);
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

// ---- reductions with the open group as their prologue ----

// A reduction of any op over make()'s pending result, as a float vector (indices and integer
// sums are small enough to be exact in f32). The operand is dropped once the reduction is
// recorded, as in `make().sum(1)`.
template <class Make>
std::vector<float> reduced(const Make& make, kiln::detail::Reduction op, int dim, bool keep) {
  using R = kiln::detail::Reduction;
  auto f32 = [](const auto& t) { return t.to(kiln::DType::f32).to_vector(); };
  if (dim < 0) {
    const Tensor<0> r = [&]() -> Tensor<0> {
      switch (op) {
        case R::sum:
          return make().sum();
        case R::mean:
          return make().mean();
        case R::max:
          return make().max();
        case R::min:
          return make().min();
        case R::argmax:
          return make().argmax();
        case R::argmin:
          return make().argmin();
      }
      throw kiln::Error("no such reduction");
    }();
    return f32(r);
  }
  if (keep) {
    const Tensor<2> r = [&]() -> Tensor<2> {
      switch (op) {
        case R::sum:
          return make().sum(dim, kiln::keepdim);
        case R::mean:
          return make().mean(dim, kiln::keepdim);
        case R::max:
          return make().max(dim, kiln::keepdim);
        case R::min:
          return make().min(dim, kiln::keepdim);
        case R::argmax:
          return make().argmax(dim, kiln::keepdim);
        case R::argmin:
          return make().argmin(dim, kiln::keepdim);
      }
      throw kiln::Error("no such reduction");
    }();
    return f32(r);
  }
  const Tensor<1> r = [&]() -> Tensor<1> {
    switch (op) {
      case R::sum:
        return make().sum(dim);
      case R::mean:
        return make().mean(dim);
      case R::max:
        return make().max(dim);
      case R::min:
        return make().min(dim);
      case R::argmax:
        return make().argmax(dim);
      case R::argmin:
        return make().argmin(dim);
    }
    throw kiln::Error("no such reduction");
  }();
  return f32(r);
}

// The float64 reduction of v (rows x cols, row-major) over dim (or all when < 0).
std::vector<double> reference(const std::vector<double>& v, std::int64_t rows, std::int64_t cols,
                              kiln::detail::Reduction op, int dim) {
  using R = kiln::detail::Reduction;
  const std::int64_t outs = dim < 0 ? 1 : dim == 0 ? cols : rows;
  const std::int64_t len = dim < 0 ? rows * cols : dim == 0 ? rows : cols;
  std::vector<double> out;
  for (std::int64_t o = 0; o < outs; ++o) {
    auto at = [&](std::int64_t l) {
      return dim < 0 ? v[l] : dim == 0 ? v[l * cols + o] : v[o * cols + l];
    };
    double acc = at(0);
    std::int64_t best = 0;
    for (std::int64_t l = 1; l < len; ++l) {
      const double e = at(l);
      if (op == R::sum || op == R::mean) acc += e;
      const bool nan = std::isnan(acc);
      if ((op == R::max || op == R::argmax) && !nan && (e > acc || std::isnan(e)))
        acc = e, best = l;
      if ((op == R::min || op == R::argmin) && !nan && (e < acc || std::isnan(e)))
        acc = e, best = l;
    }
    if (op == R::mean) acc /= static_cast<double>(len);
    out.push_back(op == R::argmax || op == R::argmin ? static_cast<double>(best) : acc);
  }
  return out;
}

TEST_P(FusionTest, SumOfSquaresIsOneKernelThatWritesNoIntermediate) {
  const auto x = input(48, 1000);
  dev().sync();
  const long long live_before = kiln::memory_stats().live_buffers;
  kiln::reset_peak_buffers();
  Delta d;
  auto s = (x * x).sum(1);
  dev().sync();
  const bool fused = prologues();
  EXPECT_EQ(d.now().reductions_fused, fused ? 1 : 0);
  EXPECT_EQ(d.now().groups_run, 1) << "the product runs inside the reduction";
  EXPECT_EQ(d.now().outputs_written, fused ? 0 : 1) << "x * x is never written";
  EXPECT_EQ(d.now().bytes_written, fused ? 0 : 48 * 1000 * 4);
  EXPECT_EQ(kiln::memory_stats().peak_buffers - live_before, fused ? 1 : 2)
      << "one buffer: the sums";
  const auto got = s.to_vector();
  const auto xs = x.to_vector();
  for (std::int64_t r = 0; r < 48; ++r) {
    double want = 0;
    for (std::int64_t c = 0; c < 1000; ++c) want += double{xs[r * 1000 + c]} * xs[r * 1000 + c];
    EXPECT_NEAR(got[r], want, 1e-5 * want) << r;
  }
  set_fusion(false);
  EXPECT_TRUE(same_bits(got, (x * x).sum(1).to_vector())) << "same order: the same bits";
}

// Every op over every dim (and all), kept or not, on data with NaN, inf and -0: fused equals
// unfused bit for bit (the same accumulation order on both devices) and the float64 reference.
TEST_P(FusionTest, EveryReductionTakesThePrologueBitForBit) {
  using R = kiln::detail::Reduction;
  const std::int64_t rows = 37, cols = 300;
  auto data = kt::uniform(rows * cols, -3, 3, rng());
  data[5] = std::numeric_limits<float>::quiet_NaN();  // row 0, column 5
  data[cols + 7] = std::numeric_limits<float>::infinity();
  data[2 * cols + 1] = -0.0f;
  const auto x = Tensor<2>::from_data(data, {rows, cols}, dev());
  const auto b = Tensor<2>::from_data(kt::uniform(cols, -1, 1, rng()), {1, cols}, dev());
  auto prologue = [&] { return (x * 0.5f + b).sin() * x; };  // b broadcast over rows
  std::vector<double> v(data.size());
  const auto bs = b.to_vector();
  for (std::size_t i = 0; i < data.size(); ++i) {
    const float t = std::sin(data[i] * 0.5f + bs[i % cols]);
    v[i] = static_cast<double>(t) * data[i];
  }
  for (R op : {R::sum, R::mean, R::max, R::min, R::argmax, R::argmin}) {
    for (int dim : {-1, 0, 1}) {
      for (bool keep : {false, true}) {
        if (dim < 0 && keep) continue;
        SCOPED_TRACE(std::string(kiln::detail::reduce_name(op)) + " dim " + std::to_string(dim) +
                     (keep ? " keepdim" : ""));
        set_fusion(true);
        Delta d;
        const auto got = reduced(prologue, op, dim, keep);
        EXPECT_EQ(d.now().reductions_fused, prologues() ? 1 : 0);
        if (prologues()) {
          EXPECT_LE(d.now().bytes_written, static_cast<long long>(got.size() * 4))
              << "nothing but the result's cast to f32";
        }
        set_fusion(false);
        EXPECT_TRUE(same_bits(got, reduced(prologue, op, dim, keep)));
        const auto want = reference(v, rows, cols, op, dim);
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t o = 0; o < want.size(); ++o) {
          if (std::isnan(want[o])) {
            EXPECT_TRUE(std::isnan(got[o])) << o;
          } else if (op == R::argmax || op == R::argmin) {
            // Near-ties may fall either way against float64: the value found must be extreme.
            const double found = dim < 0    ? v[static_cast<std::size_t>(got[o])]
                                 : dim == 0 ? v[static_cast<std::size_t>(got[o]) * cols + o]
                                            : v[o * cols + static_cast<std::size_t>(got[o])];
            const double best = reference(v, rows, cols, op == R::argmax ? R::max : R::min, dim)[o];
            if (std::isnan(best)) {
              EXPECT_TRUE(std::isnan(found)) << o;
            } else {
              EXPECT_NEAR(found, best, 1e-6 * (1 + std::abs(best))) << o;
            }
          } else {
            EXPECT_NEAR(got[o], want[o], 1e-5 * (1 + std::abs(want[o]))) << o;
          }
        }
      }
    }
  }
}

TEST_P(FusionTest, AKeptIntermediateIsWrittenWhenItsGroupCloses) {
  const auto x = input(20, 64);
  Delta d;
  auto y = (x + 1.0f).exp();  // still held after the reduction
  auto s = y.max(1);
  if (prologues()) {
    EXPECT_EQ(d.now().reductions_fused, 1);
    EXPECT_EQ(d.now().outputs_written, 0) << "the group stays open";
  }
  auto z = y * 2.0f;  // joins it
  const auto zs = z.to_vector(), ys = y.to_vector(), ss = s.to_vector();
  EXPECT_EQ(d.now().outputs_written, 2) << "y, then z (by one flush when y's group stayed open)";
  set_fusion(false);
  const auto y0 = (x + 1.0f).exp();
  EXPECT_TRUE(same_bits(ys, y0.to_vector()));
  EXPECT_TRUE(same_bits(ss, y0.max(1).to_vector()));
  EXPECT_TRUE(same_bits(zs, (y0 * 2.0f).to_vector()));
}

// Prologue inputs of any layout (a transpose, a broadcast column), a reduced dim of length 1,
// an empty reduced dim, and i32 and bool values.
TEST_P(FusionTest, PrologueLayoutsAndDTypes) {
  const auto a = input(64, 48), t = input(48, 64);
  const auto col = Tensor<2>::from_data(kt::uniform(64, -1, 1, rng()), {64, 1}, dev());
  auto f = [&] { return (a + t.transpose(0, 1)) * col; };
  auto fi = [&] { return (a * 10.0f).to(kiln::DType::i32) * 3; };
  auto fb = [&] { return a > col; };
  auto run = [&](bool fused) {
    set_fusion(fused);
    std::vector<std::vector<float>> r;
    r.push_back(f().sum(0).to_vector());
    r.push_back(f().argmin(1).to(kiln::DType::f32).to_vector());
    r.push_back(f().slice(1, 0, 1).sum(1).to_vector());  // a reduced dim of 1 (a view: flush)
    r.push_back(f().mean().to_vector());
    r.push_back(fi().sum(1).to(kiln::DType::f32).to_vector());
    r.push_back(fi().max(0).to(kiln::DType::f32).to_vector());
    r.push_back(fb().sum(1).to(kiln::DType::f32).to_vector());
    r.push_back(fb().max(0).to(kiln::DType::f32).to_vector());
    r.push_back(fb().argmax().to(kiln::DType::f32).to_vector());
    auto e = Tensor<2>::zeros({3, 0}, kiln::DType::f32, dev());
    r.push_back((e + 1.0f).sum(1).to_vector());
    return r;
  };
  Delta d;
  const auto got = run(true);
  EXPECT_GE(d.now().reductions_fused, prologues() ? 8 : 0);
  const auto want = run(false);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(same_bits(got[k], want[k])) << k;
  // Against float64: the i32 sums and the bool counts.
  const auto as = a.to_vector(), cs = col.to_vector();
  for (std::int64_t r = 0; r < 64; ++r) {
    double isum = 0, count = 0;
    for (std::int64_t c = 0; c < 48; ++c) {
      isum += 3.0 * static_cast<std::int32_t>(as[r * 48 + c] * 10.0f);
      count += as[r * 48 + c] > cs[r];
    }
    EXPECT_EQ(got[4][r], isum) << r;
    EXPECT_EQ(got[6][r], count) << r;
  }
  EXPECT_EQ(got[9], (std::vector<float>{0, 0, 0}));
}

// Where the backend cannot take the prologue the group closes first, with the same results.
TEST_P(FusionTest, APrologueTheBackendDeclinesClosesTheGroup) {
  const auto x = input(300, 8);  // sum(0): rows 8 apart, too narrow for the CPU's column loop
  Delta d;
  auto y = x * x + 1.0f;  // (x * x itself is dropped here)
  const auto got = y.sum(0).to_vector();
  if (dev().kind() == Device::Kind::cpu) {
    EXPECT_EQ(d.now().reductions_fused, 0);
    EXPECT_EQ(d.now().outputs_written, 1) << "the intermediate, for the plain reduction";
  }
  set_fusion(false);
  EXPECT_TRUE(same_bits(got, (x * x + 1.0f).sum(0).to_vector()));
}

// softmax over the last dim is one row kernel (Backend::rows): a pending input is written first
// (the group closes, as before matmul), and the kernel writes only the result. Over another dim
// softmax is composed: max takes the input's group, sum takes exp(y - max), and the division joins
// that group, so only the result is written.
TEST_P(FusionTest, SoftmaxRunsAsARowKernelOverTheLastDimAndFusesOverOthers) {
  const auto x = input(64, 500);
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    set_fusion(true);
    Delta d;
    const auto r = log ? (x * 1.0f).log_softmax(1) : (x * 1.5f).softmax(1);
    const auto got = r.to_vector();
    if (prologues()) {
      EXPECT_EQ(d.now().reductions_fused, 0);
      EXPECT_EQ(d.now().outputs_written, 1) << "the pending input, for the row kernel";
    }
    set_fusion(false);
    EXPECT_TRUE(
        same_bits(got, (log ? (x * 1.0f).log_softmax(1) : (x * 1.5f).softmax(1)).to_vector()));
    const auto xs = x.to_vector();
    const double k = log ? 1.0 : 1.5;
    for (std::int64_t row = 0; row < 64; row += 9) {
      double m = -INFINITY, sum = 0;
      for (std::int64_t c = 0; c < 500; ++c) m = std::max(m, k * xs[row * 500 + c]);
      for (std::int64_t c = 0; c < 500; ++c) sum += std::exp(k * xs[row * 500 + c] - m);
      for (std::int64_t c = 0; c < 500; c += 37) {
        const double e = k * xs[row * 500 + c] - m;
        const double want = log ? e - std::log(sum) : std::exp(e) / sum;
        EXPECT_NEAR(got[row * 500 + c], want, 1e-5 * (1 + std::abs(want))) << row << ", " << c;
      }
    }
  }
  // softmax over dim 0 of a pending input: composed and fused, only the result is written.
  set_fusion(true);
  Delta d;
  const auto r = (x * 1.5f).softmax(0);
  const auto got = r.to_vector();
  if (prologues()) {
    EXPECT_EQ(d.now().reductions_fused, 2) << "max and sum";
    EXPECT_EQ(d.now().outputs_written, 1);
  }
  set_fusion(false);
  EXPECT_TRUE(same_bits(got, (x * 1.5f).softmax(0).to_vector()));
}

// A named intermediate inside a reduction's prologue (issue 19's program, `d` alive when the
// group closes): the CPU closes the group and reduces what it wrote, since recomputing d's
// broadcast gathers inside the reduction cost more than unfused; CUDA recomputes (the inputs it
// reads are fewer bytes than writing d * d and reading it back). A dense named intermediate
// (y = x * k) is recomputed on both. Results bit for bit as unfused either way.
TEST_P(FusionTest, ANamedIntermediateThatGathersIsWrittenOnceAndReadOnTheCpu) {
  const auto x = input(4000, 2), c = input(8, 2);
  set_fusion(true);
  Delta gathered;
  Tensor<3> d = x.unsqueeze(1) - c.unsqueeze(0);
  const Tensor<2> rt = (d * d).sum(2);  // (d * d goes here: it must not be alive at the read)
  const auto r = rt.to_vector();
  const bool cpu = dev().kind() == Device::Kind::cpu;
  EXPECT_EQ(gathered.now().reductions_fused, cpu ? 0 : 1);
  EXPECT_EQ(gathered.now().outputs_written, cpu ? 2 : 1) << "d, and d * d on the CPU";
  const auto ds = d.to_vector();
  Delta dense;
  const auto y = x * 1.5f;
  const auto s = (y * y).sum(1).to_vector();
  EXPECT_EQ(dense.now().reductions_fused, 1) << "y is dense: recomputed";
  const auto ys = y.to_vector();
  set_fusion(false);
  Tensor<3> d0 = x.unsqueeze(1) - c.unsqueeze(0);
  EXPECT_TRUE(same_bits(r, (d0 * d0).sum(2).to_vector()));
  EXPECT_TRUE(same_bits(ds, d0.to_vector()));
  const auto y0 = x * 1.5f;
  EXPECT_TRUE(same_bits(s, (y0 * y0).sum(1).to_vector()));
  EXPECT_TRUE(same_bits(ys, y0.to_vector()));
}

TEST_P(FusionTest, PrologueReductionErrorsComeFromTheReduction) {
  const auto x = input(4, 5);
  auto y = x * 2.0f;
  EXPECT_THROW((void)(y > 0.0f).to(kiln::DType::i32).argmax(7), kiln::Error);
  auto e = Tensor<2>::zeros({3, 0}, kiln::DType::f32, dev()) + 1.0f;
  EXPECT_THROW((void)e.max(1), kiln::ValueError);
  const auto ys = y.to_vector(), xs = x.to_vector();  // the group is still usable
  for (std::size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], xs[i] * 2.0f);
}

}  // namespace
