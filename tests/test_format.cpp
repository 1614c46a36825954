// kiln::format and operator<<: PyTorch's layout (aligned columns, nested brackets, `...` for the
// middle of large tensors), then shape, dtype and device. The expected texts are PyTorch's
// output for the same values (torch.set_printoptions defaults), with kiln's tail.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;

class FormatTest : public kt::DeviceTest {
 protected:
  // ", shape=[2, 2], dtype=f32, device=cpu)" for this device.
  std::string tail(const std::string& shape, const char* dtype) const {
    return ", shape=" + shape + ", dtype=" + dtype + ", device=" + dev().str() + ")";
  }
  // 0, 1, 2, ... as i32, in the given shape.
  template <std::size_t D>
  Tensor<D> counting(const Shape<D>& shape) const {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return kiln::arange(0, static_cast<double>(n), 1, DType::i32, dev()).reshape(shape);
  }
};
KILN_INSTANTIATE_DEVICES(FormatTest);

TEST_P(FormatTest, SmallFloatMatrix) {
  const auto t = kiln::from_data({1.f, -2.5f, 3.f, 4.f}, {2, 2}, dev());
  const std::string want =
      "tensor([[ 1.0000, -2.5000],\n"
      "        [ 3.0000,  4.0000]]" +
      tail("[2, 2]", "f32");
  EXPECT_EQ(kiln::format(t), want);
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), want);
}

TEST_P(FormatTest, PendingResultsAreComputedFirst) {
  const auto x = kiln::from_data({0.5f, 1.f, 2.f}, {3}, dev());
  EXPECT_EQ(kiln::format(x * 2.0f + 1.0f), "tensor([2.0000, 3.0000, 5.0000]" + tail("[3]", "f32"));
  EXPECT_EQ(kiln::format(x.slice(0, 0, 3, 2)), "tensor([0.5000, 2.0000]" + tail("[2]", "f32"));
}

TEST_P(FormatTest, ScientificWhenTheMagnitudesCallForIt) {
  EXPECT_EQ(kiln::format(kiln::from_data({1e-5f, 1.f, -200.f}, {3}, dev())),
            "tensor([ 1.0000e-05,  1.0000e+00, -2.0000e+02]" + tail("[3]", "f32"));
  EXPECT_EQ(kiln::format(kiln::from_data({1e9f, 1.f}, {2}, dev())),
            "tensor([1.0000e+09, 1.0000e+00]" + tail("[2]", "f32"));
  EXPECT_EQ(kiln::format(kiln::from_data({1.f, 1001.f}, {2}, dev())),
            "tensor([1.0000e+00, 1.0010e+03]" + tail("[2]", "f32"));
  // A ratio of exactly 1000 stays fixed; zeros and non-finite values do not count.
  EXPECT_EQ(kiln::format(kiln::from_data({1.f, 1000.f, 0.f}, {3}, dev())),
            "tensor([   1.0000, 1000.0000,    0.0000]" + tail("[3]", "f32"));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kiln::format(kiln::from_data({std::nanf(""), inf, -inf, 1.5f}, {4}, dev())),
            "tensor([   nan,    inf,   -inf, 1.5000]" + tail("[4]", "f32"));
  EXPECT_EQ(kiln::format(kiln::from_data({-0.f, 0.f}, {2}, dev())),
            "tensor([-0.0000,  0.0000]" + tail("[2]", "f32"));
}

TEST_P(FormatTest, LongRowsWrapAtEightyColumns) {
  const std::string want =
      "tensor([ 0.0000,  1.0000,  2.0000,  3.0000,  4.0000,  5.0000,  6.0000,  7.0000,\n"
      "         8.0000,  9.0000, 10.0000, 11.0000, 12.0000, 13.0000, 14.0000, 15.0000,\n"
      "        16.0000, 17.0000, 18.0000, 19.0000, 20.0000, 21.0000, 22.0000, 23.0000,\n"
      "        24.0000, 25.0000, 26.0000, 27.0000, 28.0000, 29.0000]" +
      tail("[30]", "f32");
  EXPECT_EQ(kiln::format(kiln::arange(0, 30, 1, DType::f32, dev())), want);
}

TEST_P(FormatTest, IntegersAndBools) {
  EXPECT_EQ(kiln::format(kiln::from_data({-5, 10, 200}, {3}, dev())),
            "tensor([ -5,  10, 200]" + tail("[3]", "i32"));
  EXPECT_EQ(kiln::format(kiln::from_data({true, false, true}, {3}, dev())),
            "tensor([ true, false,  true]" + tail("[3]", "bool"));
  EXPECT_EQ(kiln::format(kiln::from_data({false, false}, {1, 2}, dev())),
            "tensor([[false, false]]" + tail("[1, 2]", "bool"));
}

TEST_P(FormatTest, RankZeroAndEmpty) {
  EXPECT_EQ(kiln::format(Tensor<0>::full({}, 3.5f, DType::f32, dev())),
            "tensor(3.5000" + tail("[]", "f32"));
  EXPECT_EQ(kiln::format(Tensor<0>::full({}, -7, DType::i32, dev())),
            "tensor(-7" + tail("[]", "i32"));
  EXPECT_EQ(kiln::format(Tensor<2>::zeros({0, 3}, DType::f32, dev())),
            "tensor([]" + tail("[0, 3]", "f32"));
  EXPECT_EQ(kiln::format(Tensor<3>::zeros({2, 0, 4}, DType::boolean, dev())),
            "tensor([]" + tail("[2, 0, 4]", "bool"));
}

TEST_P(FormatTest, HigherRanksSeparateBlocksWithBlankLines) {
  const std::string want =
      "tensor([[[0, 1],\n"
      "         [2, 3]],\n"
      "\n"
      "        [[4, 5],\n"
      "         [6, 7]]]" +
      tail("[2, 2, 2]", "i32");
  EXPECT_EQ(kiln::format(counting<3>({2, 2, 2})), want);
}

TEST_P(FormatTest, LargeTensorsElideTheMiddle) {
  // torch.arange(10000, dtype=torch.int32).reshape(100, 100)
  const std::string want =
      "tensor([[   0,    1,    2,  ...,   97,   98,   99],\n"
      "        [ 100,  101,  102,  ...,  197,  198,  199],\n"
      "        [ 200,  201,  202,  ...,  297,  298,  299],\n"
      "        ...,\n"
      "        [9700, 9701, 9702,  ..., 9797, 9798, 9799],\n"
      "        [9800, 9801, 9802,  ..., 9897, 9898, 9899],\n"
      "        [9900, 9901, 9902,  ..., 9997, 9998, 9999]]" +
      tail("[100, 100]", "i32");
  EXPECT_EQ(kiln::format(counting<2>({100, 100})), want);
  // Only dims longer than 6 are cut; a tensor of up to 1000 elements prints whole.
  const std::string three_d =
      "tensor([[[   0,    1,    2,  ...,  197,  198,  199],\n"
      "         [ 200,  201,  202,  ...,  397,  398,  399],\n"
      "         [ 400,  401,  402,  ...,  597,  598,  599],\n"
      "         ...,\n"
      "         [1400, 1401, 1402,  ..., 1597, 1598, 1599],\n"
      "         [1600, 1601, 1602,  ..., 1797, 1798, 1799],\n"
      "         [1800, 1801, 1802,  ..., 1997, 1998, 1999]],\n"
      "\n"
      "        [[2000, 2001, 2002,  ..., 2197, 2198, 2199],\n"
      "         [2200, 2201, 2202,  ..., 2397, 2398, 2399],\n"
      "         [2400, 2401, 2402,  ..., 2597, 2598, 2599],\n"
      "         ...,\n"
      "         [3400, 3401, 3402,  ..., 3597, 3598, 3599],\n"
      "         [3600, 3601, 3602,  ..., 3797, 3798, 3799],\n"
      "         [3800, 3801, 3802,  ..., 3997, 3998, 3999]]]" +
      tail("[2, 10, 200]", "i32");
  EXPECT_EQ(kiln::format(counting<3>({2, 10, 200})), three_d);
  const std::string whole = kiln::format(counting<1>({1000}));
  EXPECT_EQ(whole.find("..."), std::string::npos);
  EXPECT_NE(whole.find(" 999]"), std::string::npos);
  EXPECT_NE(kiln::format(counting<1>({1001})).find("   2,  ...,  998"), std::string::npos);
}

TEST_P(FormatTest, OnlyThePrintedEdgesAreReadAndCounted) {
  // 10^10 elements of one broadcast value: reading them all would need 40 GB.
  const auto huge = Tensor<1>::full({1}, 2.0f, DType::f32, dev()).expand({100000, 100000});
  const std::string text = kiln::format(huge);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "tensor([[2.0000, 2.0000, 2.0000,  ..., 2.0000, 2.0000, 2.0000],");
  EXPECT_NE(text.find(tail("[100000, 100000]", "f32")), std::string::npos) << text;
  // A huge value in the elided middle does not switch the printed edges to scientific.
  std::vector<float> v(2000, 1.0f);
  v[1000] = 1e20f;
  EXPECT_EQ(
      kiln::format(kiln::from_data(v, {2000}, dev())),
      "tensor([1.0000, 1.0000, 1.0000,  ..., 1.0000, 1.0000, 1.0000]" + tail("[2000]", "f32"));
}

}  // namespace
