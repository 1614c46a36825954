// Shape arithmetic at the int64 limits: every op that makes a shape checks its element count,
// strides and byte count, and fails at that op (ShapeError or OutOfMemoryError naming it), on
// every device, with fusion on and off. Huge tensors here are expanded views of one element,
// which cost no memory; nothing below allocates more than a few bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::Tensor;
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t k2p32 = std::int64_t{1} << 32;

// Device x fusion on/off.
class ShapeOverflowTest : public ::testing::TestWithParam<std::tuple<Device, bool>> {
 protected:
  void SetUp() override {
    saved_ = kiln::config();
    kiln::Config c = saved_;
    c.fusion = std::get<1>(GetParam());
    kiln::set_config(c);
  }
  void TearDown() override { kiln::set_config(saved_); }
  Device dev() const { return std::get<0>(GetParam()); }
  // A tensor of `shape` that holds one element's memory: ones({1, ...}) expanded.
  template <std::size_t D>
  Tensor<D> huge(const kiln::Shape<D>& shape) const {
    kiln::Shape<D> one;
    one.fill(1);
    return Tensor<D>::ones(one, kiln::DType::f32, dev()).expand(shape);
  }

 private:
  kiln::Config saved_;
};

// Runs `f`, expects an exception of type E whose message contains every one of `parts`.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << e.what() << "' does not name '" << p << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception: " << e.what();
  }
}

TEST_P(ShapeOverflowTest, ReshapeToAWrappingCountIsRefused) {
  auto x = Tensor<1>::from_data(std::vector<float>{1, 2, 3, 4}, {4}, dev());
  // (2^62 + 1) * 4 wraps to 4, which would match x's count.
  expect_error<kiln::ShapeError>(
      [&] {
        (void)x.reshape<2>({(kMax >> 1) + 2, 4});
      },
      {"reshape", "4611686018427387905, 4"});
  expect_error<kiln::ShapeError>([&] { (void)x.reshape<3>({k2p32, k2p32, -1}); }, {"reshape"});
  auto empty = Tensor<1>::zeros({0}, kiln::DType::f32, dev());
  expect_error<kiln::ShapeError>([&] { (void)empty.reshape<2>({k2p32, k2p32}); }, {"reshape"});
  // Zero elements with strides past int64 are refused too: those strides cannot exist.
  expect_error<kiln::ShapeError>([&] { (void)empty.reshape<3>({0, k2p32, k2p32}); }, {"reshape"});
  // Still works in range.
  EXPECT_EQ(x.reshape<2>({2, -1}).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST_P(ShapeOverflowTest, ExpandToAWrappingCountIsRefused) {
  auto one = Tensor<2>::ones({1, 1}, kiln::DType::f32, dev());
  expect_error<kiln::ShapeError>(
      [&] {
        (void)one.expand<2>({k2p32, k2p32});
      },
      {"expand", "[4294967296, 4294967296]"});
  expect_error<kiln::ShapeError>([&] { (void)one.expand<3>({(kMax >> 1) + 2, 4, 1}); }, {"expand"});
  // A huge view that fits is fine, and slicing it reads the right value.
  auto big = huge<2>({k2p32, k2p32 / 4});
  EXPECT_EQ(big.numel(), k2p32 * (k2p32 / 4));
  EXPECT_EQ(big.slice(0, -1, kMax).slice(1, -2, kMax).to_vector<float>(),
            (std::vector<float>{1, 1}));
}

TEST_P(ShapeOverflowTest, CreationWithAWrappingCountIsRefused) {
  expect_error<kiln::ShapeError>(
      [&] {
        (void)Tensor<2>::zeros({k2p32, k2p32}, kiln::DType::f32, dev());
      },
      {"full", "[4294967296, 4294967296]"});
  expect_error<kiln::ShapeError>(
      [&] {
        (void)Tensor<2>::random({k2p32, k2p32}, kiln::Distribution::uniform(), dev());
      },
      {"random"});
  expect_error<kiln::ShapeError>(
      [&] {
        (void)Tensor<2>::from_data(std::vector<float>{}, {k2p32, k2p32}, dev());
      },
      {"from_data"});
  // The count fits, the bytes do not.
  expect_error<kiln::ShapeError>(
      [&] {
        (void)Tensor<2>::zeros({k2p32, k2p32 / 4}, kiln::DType::f32, dev());
      },
      {"full", "byte count"});
}

TEST_P(ShapeOverflowTest, SizesNoDeviceHoldsFailAtTheOp) {
  // 2^50 f32 elements: 4 PiB, which fits int64 but no machine.
  for (auto make : {+[](Device d) {
                      (void)Tensor<2>::zeros({1 << 30, 1 << 20}, kiln::DType::f32, d);
                    },
                    +[](Device d) {
                      (void)Tensor<2>::random({1 << 30, 1 << 20}, kiln::Distribution::normal(), d);
                    }}) {
    expect_error<kiln::OutOfMemoryError>([&] { make(dev()); }, {"4503599627370496 bytes"});
  }
  // An op on a huge view asks for a huge output: refused at the op, not at a later read.
  auto big = huge<2>({1 << 30, 1 << 20});
  expect_error<kiln::OutOfMemoryError>([&] { (void)(big * 2.0f); },
                                       {"mul", "[1073741824, 1048576]"});
  expect_error<kiln::OutOfMemoryError>([&] { (void)big.exp(); }, {"exp"});
  expect_error<kiln::OutOfMemoryError>([&] { (void)big.contiguous(); }, {"contiguous"});
  // Nothing was recorded that a later read trips over.
  auto x = Tensor<1>::from_data(std::vector<float>{3}, {1}, dev());
  EXPECT_EQ((x + 1.0f).to_vector<float>(), std::vector<float>{4});
}

TEST_P(ShapeOverflowTest, BroadcastToAWrappingShapeIsRefused) {
  auto a = huge<2>({k2p32, 1}), b = huge<2>({1, k2p32});
  expect_error<kiln::ShapeError>([&] { (void)(a + b); },
                                 {"add", "overflows", "[4294967296, 1] and [1, 4294967296]"});
  auto c = Tensor<2>::ones({1, 1}, kiln::DType::boolean, dev()).expand<2>({k2p32, 1});
  expect_error<kiln::ShapeError>([&] { (void)kiln::where(c, a, b); }, {"where"});
}

TEST_P(ShapeOverflowTest, MatmulOfAWrappingShapeIsRefused) {
  auto a = huge<2>({std::int64_t{1} << 40, 1}), b = huge<2>({1, std::int64_t{1} << 40});
  expect_error<kiln::ShapeError>([&] { (void)kiln::matmul(a, b); }, {"matmul"});
}

TEST_P(ShapeOverflowTest, CatPastInt64IsRefused) {
  auto a = huge<1>({kMax / 2 + 1});
  expect_error<kiln::ShapeError>(
      [&] {
        (void)kiln::cat(std::vector<Tensor<1>>{a, a}, 0);
      },
      {"cat"});
}

TEST_P(ShapeOverflowTest, SliceWithExtremeBoundsAndSteps) {
  auto x = Tensor<1>::from_data(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10}, dev());
  auto s = x.slice(0, 0, 10, kMax);
  EXPECT_EQ(s.shape()[0], 1);
  EXPECT_EQ(s.to_vector<float>(), std::vector<float>{0});
  EXPECT_EQ(x.slice(0, 3, kMax, kMax).to_vector<float>(), std::vector<float>{3});
  EXPECT_EQ(x.slice(0, kMin, kMax, kMax).to_vector<float>(), std::vector<float>{0});
  EXPECT_EQ(x.slice(0, kMin, kMin, 1).numel(), 0);
  EXPECT_EQ(x.slice(0, 7, kMax, 2).to_vector<float>(), (std::vector<float>{7, 9}));
  EXPECT_EQ(x.slice(0, 9, 10, kMax - 1).to_vector<float>(), std::vector<float>{9});
  // The steps of a huge view stay in range too.
  auto big = huge<1>({kMax});
  auto t = big.slice(0, 0, kMax, kMax / 2);
  EXPECT_EQ(t.shape()[0], 3);  // 0, kMax/2, 2*(kMax/2) = kMax - 1
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(big.unsqueeze(0).unsqueeze(2).shape(), (kiln::Shape<3>{1, kMax, 1}));
}

std::string name(const ::testing::TestParamInfo<std::tuple<Device, bool>>& info) {
  const Device d = std::get<0>(info.param);
  return (d.kind() == Device::Kind::cpu ? std::string("cpu") : "cuda" + std::to_string(d.index())) +
         (std::get<1>(info.param) ? "_fused" : "_eager");
}

INSTANTIATE_TEST_SUITE_P(Devices, ShapeOverflowTest,
                         ::testing::Combine(::testing::ValuesIn(kt::test_devices()),
                                            ::testing::Bool()),
                         name);

}  // namespace
