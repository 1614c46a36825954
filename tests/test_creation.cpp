// Creation and read-back: zeros, ones, full, arange, from_data, random; to_vector, item,
// clone, to(device), to(dtype).
#include <cmath>
#include <cstring>

#include "test_support.hpp"

namespace {

using kiln::Distribution;
using kiln::DType;
using kiln::Tensor;
using kt::Ref;

class CreationTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(CreationTest);

TEST_P(CreationTest, ZerosOnesFull) {
  auto z = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  EXPECT_EQ(z.shape(), (kiln::Shape<2>{3, 4}));
  EXPECT_EQ(z.numel(), 12);
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.device(), dev());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.to_vector(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(Tensor<3>::ones({2, 1, 3}, DType::f32, dev()).to_vector(), std::vector<float>(6, 1));
  EXPECT_EQ(Tensor<1>::full({5}, 2.5, DType::f32, dev()).to_vector(), std::vector<float>(5, 2.5f));
  auto i = Tensor<2>::full({2, 2}, -7, DType::i32, dev());
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), std::vector<std::int32_t>(4, -7));
  auto b = Tensor<1>::ones({3}, DType::boolean, dev());
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<bool>(), std::vector<bool>(3, true));
  EXPECT_EQ(Tensor<0>::full({}, 3.25f, DType::f32, dev()).item(), 3.25f);
  auto e = Tensor<2>::zeros({0, 3}, DType::f32, dev());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector().empty());
  auto n = Tensor<1>::full({2}, std::nanf(""), DType::f32, dev()).to_vector();
  EXPECT_TRUE(std::isnan(n[0]) && std::isnan(n[1]));
}

// NumPy: length ceil((stop - start) / step), values start + i * step, empty when the range
// runs the wrong way.
TEST_P(CreationTest, Arange) {
  struct Case {
    double start, stop, step;
  };
  for (Case c : {Case{0, 5, 1}, Case{5, 0, -1}, Case{0, 0, 1}, Case{3, 1, 1}, Case{0, 5, -1},
                 Case{0, 1, 0.1}, Case{0, 1, 0.3}, Case{-3.5, 2, 1.5}, Case{2, -2, -0.75},
                 Case{0.25, 0.26, 1}, Case{-10, 10, 0.5}, Case{1, 2, 0.25}}) {
    SCOPED_TRACE(testing::Message()
                 << "arange(" << c.start << ", " << c.stop << ", " << c.step << ")");
    auto len = static_cast<std::int64_t>(std::max(0.0, std::ceil((c.stop - c.start) / c.step)));
    std::vector<double> want(static_cast<std::size_t>(len));
    for (std::int64_t i = 0; i < len; ++i)
      want[static_cast<std::size_t>(i)] =
          static_cast<float>(c.start + static_cast<double>(i) * c.step);
    auto t = kiln::arange(c.start, c.stop, c.step, DType::f32, dev());
    EXPECT_EQ(t.dtype(), DType::f32);
    // start + i * step rounded once to f32; one ULP of slack for a kernel that steps in f32.
    EXPECT_TRUE(kt::matches(t, Ref({len}, want), kt::Tol{1}));
  }
  auto i = kiln::arange(0, 10, 3, DType::i32, dev());
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 3, 6, 9}));
  EXPECT_EQ(kiln::arange(4, -4, -3, DType::i32, dev()).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{4, 1, -2}));
  EXPECT_EQ(kiln::arange(5, 5, 1, DType::i32, dev()).numel(), 0);
  EXPECT_EQ(kiln::arange(0, 3).to_vector(), (std::vector<float>{0, 1, 2}));
  EXPECT_THROW(kiln::arange(0, 1, 0, DType::f32, dev()), kiln::ValueError);
}

TEST_P(CreationTest, FromData) {
  auto v = kt::uniform(12, -1, 1, rng());
  auto t = Tensor<2>::from_data(v, {3, 4}, dev());
  EXPECT_EQ(t.to_vector(), v);
  EXPECT_EQ(Tensor<2>::from_data(std::span<const float>(v), {4, 3}, dev()).to_vector(), v);
  auto iv = kt::ints(6, -100, 100, rng());
  auto i = Tensor<1>::from_data(iv, {6}, dev());
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), iv);
  std::vector<bool> bv = {true, false, false, true};
  auto b = Tensor<2>::from_data(bv, {2, 2}, dev());
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<bool>(), bv);
  EXPECT_EQ(Tensor<0>::from_data(std::vector<float>{4.5f}, {}, dev()).item(), 4.5f);
  EXPECT_EQ(Tensor<2>::from_data(std::vector<float>{}, {0, 5}, dev()).numel(), 0);
  EXPECT_THROW(Tensor<2>::from_data(v, {3, 5}, dev()), kiln::ShapeError);
  EXPECT_THROW(Tensor<2>::from_data(v, {2, 2}, dev()), kiln::ShapeError);
  EXPECT_THROW(Tensor<1>::from_data(v, {-12}, dev()), kiln::Error);
}

TEST_P(CreationTest, RandomUniform) {
  const std::int64_t n = 1 << 17;
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{-3.0, 5.0}, std::pair{10.0, 10.5}}) {
    SCOPED_TRACE(testing::Message() << "uniform(" << lo << ", " << hi << ")");
    auto t = Tensor<2>::random({256, n / 256}, Distribution::uniform(lo, hi), dev(), seed());
    EXPECT_EQ(t.shape(), (kiln::Shape<2>{256, n / 256}));
    EXPECT_EQ(t.dtype(), DType::f32);
    auto v = t.to_vector();
    double sum = 0, sq = 0;
    std::int64_t outside = 0;
    for (float x : v) {
      outside += !(x >= lo && x < hi);
      sum += x, sq += double(x) * x;
    }
    EXPECT_EQ(outside, 0) << "values outside [lo, hi)";
    double mean = sum / n, var = sq / n - mean * mean, w = hi - lo;
    // Five standard errors.
    EXPECT_NEAR(mean, (lo + hi) / 2, 5 * w / std::sqrt(12.0 * n));
    EXPECT_NEAR(var, w * w / 12, 5 * w * w * std::sqrt(1.0 / 180 / n));
  }
}

TEST_P(CreationTest, RandomNormal) {
  const std::int64_t n = 1 << 17;
  auto v = Tensor<1>::random({n}, Distribution::normal(2, 3), dev(), seed()).to_vector();
  double sum = 0, sq = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x, sq += double(x) * x;
  }
  double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 2, 5 * 3 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 9, 5 * 9 * std::sqrt(2.0 / n));
  std::int64_t within1 =
      std::count_if(v.begin(), v.end(), [](float x) { return std::fabs(x - 2) < 3; });
  EXPECT_NEAR(double(within1) / n, 0.682689, 0.01);
}

TEST_P(CreationTest, RandomSeeds) {
  auto u = Distribution::uniform(-1, 1);
  auto a = Tensor<2>::random({33, 65}, u, dev(), seed()).to_vector();
  auto b = Tensor<2>::random({33, 65}, u, dev(), seed()).to_vector();
  auto c = Tensor<2>::random({33, 65}, u, dev(), seed() + 1).to_vector();
  EXPECT_EQ(a, b) << "the same seed gives the same values";
  EXPECT_NE(a, c) << "another seed gives other values";
  std::size_t same = 0;
  for (std::size_t k = 0; k < a.size(); ++k) same += a[k] == c[k];
  EXPECT_LT(same, 5u);
  // The element at a flat position depends on the seed and the position, not the shape's split.
  EXPECT_EQ(Tensor<1>::random({33 * 65}, u, dev(), seed()).to_vector(), a);
  auto n1 = Tensor<1>::random({1001}, kiln::Distribution::normal(), dev(), seed()).to_vector();
  EXPECT_EQ(Tensor<1>::random({1001}, kiln::Distribution::normal(), dev(), seed()).to_vector(), n1);
}

// A half-type random tensor is drawn directly in its dtype (one kernel) and holds exactly the
// values of the f32 tensor of the same seed, cast: bit for bit, odd sizes and both
// distributions.
TEST_P(CreationTest, RandomHalfIsTheF32DrawRounded) {
  for (auto dist : {Distribution::uniform(-2, 3), Distribution::normal(0.5, 2)}) {
    for (DType t : {DType::bf16, DType::f16}) {
      for (std::int64_t n : {1, 7, 4099}) {
        const auto h = Tensor<1>::random({n}, dist, dev(), seed(), t);
        ASSERT_EQ(h.dtype(), t);
        const auto want = Tensor<1>::random({n}, dist, dev(), seed()).to(t);
        const auto a = h.to_vector<float>(), b = want.to_vector<float>();
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << kiln::dtype_name(t) << " n=" << n;
      }
    }
  }
}

// Philox is counter based: the same seed gives bit-identical values at 1 and N threads and
// with SIMD on or off.
TEST_P(CreationTest, RandomIndependentOfThreadsAndSimd) {
  kt::ConfigGuard guard;
  const kiln::Shape<1> shape{(1 << 20) + 3};
  for (auto dist : {Distribution::uniform(-2, 3), Distribution::normal(0.5, 2)}) {
    kiln::set_config({.simd = true, .threads = -1});
    auto many = Tensor<1>::random(shape, dist, dev(), seed()).to_vector();
    kiln::set_config({.simd = false, .threads = 0});
    auto one = Tensor<1>::random(shape, dist, dev(), seed()).to_vector();
    kiln::set_config({.simd = true, .threads = 2});
    auto two = Tensor<1>::random(shape, dist, dev(), seed()).to_vector();
    EXPECT_TRUE(many == one) << "threads -1 vs 0";
    EXPECT_TRUE(many == two) << "threads -1 vs 2";
  }
}

TEST_P(CreationTest, ToVectorConverts) {
  auto f = Tensor<1>::from_data(std::vector<float>{1.7f, -1.7f, 0.0f, -2.5f, 3}, {5}, dev());
  EXPECT_EQ(f.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -1, 0, -2, 3}));
  EXPECT_EQ(f.to_vector<bool>(), (std::vector<bool>{true, true, false, true, true}));
  auto i = Tensor<1>::from_data(std::vector<std::int32_t>{-3, 0, 16777217}, {3}, dev());
  EXPECT_EQ(i.to_vector<float>(), (std::vector<float>{-3, 0, 16777216.0f}));
  EXPECT_EQ(i.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  auto b = Tensor<1>::from_data(std::vector<bool>{true, false}, {2}, dev());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_EQ(b.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 0}));
  // A strided view reads back in row-major order of its own shape.
  auto m = Tensor<2>::from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, dev());
  EXPECT_EQ(m.transpose(0, 1).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(m.transpose(0, 1).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, 4, 2, 5, 3, 6}));
}

TEST_P(CreationTest, Item) {
  EXPECT_EQ(Tensor<2>::full({1, 1}, 6.5, DType::f32, dev()).item(), 6.5f);
  EXPECT_EQ(Tensor<1>::full({1}, 6.5, DType::f32, dev()).item<std::int32_t>(), 6);
  EXPECT_EQ(Tensor<0>::full({}, 9, DType::i32, dev()).item<std::int32_t>(), 9);
  EXPECT_EQ(Tensor<0>::full({}, 1, DType::boolean, dev()).item<bool>(), true);
  EXPECT_THROW(Tensor<1>::zeros({2}, DType::f32, dev()).item(), kiln::ShapeError);
  EXPECT_THROW(Tensor<2>::zeros({0, 1}, DType::f32, dev()).item(), kiln::ShapeError);
}

TEST_P(CreationTest, CloneSharesAndToCopies) {
  auto v = kt::uniform(20, -5, 5, rng());
  auto x = Tensor<2>::from_data(v, {4, 5}, dev());
  auto c = x.clone();
  EXPECT_TRUE(kt::shares_buffer(x, c));
  EXPECT_EQ(c.to_vector(), v);
  auto y = x.to(kiln::Device::cpu());
  EXPECT_EQ(y.device(), kiln::Device::cpu());
  EXPECT_EQ(y.to_vector(), v);
  EXPECT_EQ(y.to(dev()).to_vector(), v);
  EXPECT_EQ(x.transpose(0, 1).to(kiln::Device::cpu()).to_vector(), x.transpose(0, 1).to_vector());
  auto i = x.to(DType::i32);
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.device(), dev());
  EXPECT_TRUE(kt::matches(i, Ref::of(v, {4, 5}).map([](double a) { return std::trunc(a); })));
  EXPECT_EQ(x.to(DType::f32).to_vector(), v);
  EXPECT_TRUE(x.contiguous().is_contiguous());
  EXPECT_TRUE(kt::shares_buffer(x, x.contiguous()));
  auto t = x.transpose(0, 1).contiguous();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(kt::matches(t, Ref::of(v, {4, 5}).transpose(0, 1)));
}

}  // namespace
