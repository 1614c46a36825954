// The small things a new user writes first: compound assignment (which rebinds), where with
// scalar branches, and ranks deduced from braced lists (reshape, expand, cat, from_data).
#include <type_traits>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;

// ---- what compiles (and what must not) ----

// Compound assignment: the right side may have the same or a lower rank, never a higher one.
// (A requires-expression is only SFINAE-friendly inside a template, hence the concepts.)
template <class A, class B>
concept PlusAssignable = requires(A& a, const B& b) {
  a += b;
};
template <class A, class B>
concept DivAssignable = requires(A& a, const B& b) {
  a /= b;
};
static_assert(PlusAssignable<Tensor<2>, Tensor<2>>);
static_assert(PlusAssignable<Tensor<2>, Tensor<1>>);
static_assert(DivAssignable<Tensor<2>, Tensor<0>>);
static_assert(DivAssignable<Tensor<2>, float>);
static_assert(PlusAssignable<Tensor<2>, int>);
static_assert(!PlusAssignable<Tensor<1>, Tensor<2>>);
static_assert(!DivAssignable<Tensor<0>, Tensor<1>>);
static_assert(!PlusAssignable<Tensor<1>, std::vector<float>>);
static_assert(std::is_same_v<decltype(std::declval<Tensor<2>&>() += 1.0f), Tensor<2>&>);

// where with scalar branches; the result's rank is that of the tensors given.
static_assert(std::is_same_v<decltype(kiln::where(std::declval<Tensor<2>>(),
                                                  std::declval<Tensor<2>>(), 0.0f)),
                             Tensor<2>>);
static_assert(std::is_same_v<decltype(kiln::where(std::declval<Tensor<1>>(), 0.0f,
                                                  std::declval<Tensor<3>>())),
                             Tensor<3>>);
static_assert(std::is_same_v<decltype(kiln::where(std::declval<Tensor<2>>(), 1, 0)), Tensor<2>>);

// Ranks deduced from braced lists.
static_assert(std::is_same_v<decltype(std::declval<Tensor<2>>().reshape({12})), Tensor<1>>);
static_assert(std::is_same_v<decltype(std::declval<Tensor<2>>().reshape({2, -1, 3})), Tensor<3>>);
static_assert(std::is_same_v<decltype(std::declval<Tensor<1>>().expand({4, 3})), Tensor<2>>);
template <class T>
concept ExpandsToRank1 = requires(const T& x) {
  x.expand({3});
};
static_assert(ExpandsToRank1<Tensor<1>>);
static_assert(!ExpandsToRank1<Tensor<2>>);  // expand never lowers the rank
static_assert(
    std::is_same_v<decltype(kiln::cat({std::declval<Tensor<2>>(), std::declval<Tensor<2>>()}, 0)),
                   Tensor<2>>);
static_assert(std::is_same_v<decltype(kiln::from_data({1.f, 2.f}, {2})), Tensor<1>>);
static_assert(std::is_same_v<decltype(kiln::from_data({1.f, 2.f}, {1, 2})), Tensor<2>>);
static_assert(requires { Tensor<1>::from_data({1.f, 2.f}, {2}); });

class ErgonomicsTest : public kt::DeviceTest {
 protected:
  template <std::size_t D>
  std::pair<Tensor<D>, Ref> input(const Shape<D>& s, double lo = -9, double hi = 9) {
    kiln::Dims dims(s.begin(), s.end());
    auto v = kt::uniform(static_cast<std::size_t>(kt::numel_of(dims)), lo, hi, rng());
    return {Tensor<D>::from_data(v, s, dev()), Ref::of(v, dims)};
  }
};
KILN_INSTANTIATE_DEVICES(ErgonomicsTest);

// ---- compound assignment ----

TEST_P(ErgonomicsTest, CompoundAssignmentComputesAndBroadcastsTheRightSide) {
  auto [x, rx] = input<2>({3, 5});
  auto [y, ry] = input<2>({3, 5});
  auto [row, rrow] = input<1>({5}, 1, 2);
  auto [col, rcol] = input<2>({3, 1});
  // The reference rounds to float after every step, as each op does.
  auto f32 = [](auto op) {
    return [op](double a, double b) { return double(op(float(a), float(b))); };
  };
  auto with = [](double s) { return [s](double) { return s; }; };
  Ref want = rx;
  x += y;
  want = Ref::zip(want, ry, f32(std::plus<float>()));
  EXPECT_TRUE(kt::matches(x, want));
  x -= row;
  want = Ref::zip(want, rrow, f32(std::minus<float>()));
  EXPECT_TRUE(kt::matches(x, want));
  x *= col;
  want = Ref::zip(want, rcol, f32(std::multiplies<float>()));
  EXPECT_TRUE(kt::matches(x, want));
  x /= row;
  want = Ref::zip(want, rrow, f32(std::divides<float>()));
  EXPECT_TRUE(kt::matches(x, want));
  x += 1.5f;
  want = Ref::zip(want, want.map(with(1.5)), f32(std::plus<float>()));
  x -= 2;
  want = Ref::zip(want, want.map(with(2)), f32(std::minus<float>()));
  x *= 0.5;
  want = Ref::zip(want, want.map(with(0.5)), f32(std::multiplies<float>()));
  x /= 4.0f;
  want = Ref::zip(want, want.map(with(4)), f32(std::divides<float>()));
  EXPECT_TRUE(kt::matches(x, want));
  Tensor<2> z = x;
  z += Tensor<0>::full({}, 3.0f, DType::f32, dev());  // a rank-0 right side broadcasts
  EXPECT_TRUE(kt::matches(z, Ref::zip(want, want.map(with(3)), f32(std::plus<float>()))));
  x += x;  // the right side is read before the handle is rebound
  EXPECT_TRUE(kt::matches(x, want.map([](double a) { return 2 * a; })));
}

TEST_P(ErgonomicsTest, CompoundAssignmentLeavesOtherCopiesAndViewsAlone) {
  auto [x, rx] = input<2>({4, 6});
  const Tensor<2> copy = x;
  const Tensor<1> row = x.slice(0, 1, 2).squeeze(0);
  x += 10.0f;
  EXPECT_FALSE(kt::shares_buffer(x, copy)) << "x += 10 rebinds x to a new tensor";
  EXPECT_TRUE(kt::matches(copy, rx)) << "a copy of the old x keeps the old values";
  EXPECT_TRUE(kt::matches(row, rx.slice(0, 1, 2).squeeze(0))) << "so does a view of it";
  EXPECT_TRUE(kt::matches(x, rx.map([](double a) { return double(float(a) + 10.0f); })));
  // Integer tensors stay integer under integral operands.
  auto n = Tensor<1>::from_data({1, 2, 3}, {3}, dev());
  n *= 3;
  n -= Tensor<1>::from_data({1, 1, 1}, {3}, dev());
  EXPECT_EQ(n.dtype(), DType::i32);
  EXPECT_EQ(n.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 5, 8}));
}

TEST_P(ErgonomicsTest, CompoundAssignmentKeepsTheLeftShapeAndDType) {
  auto [x, rx] = input<2>({1, 5});
  auto [y, ry] = input<2>({3, 5});
  const Tensor<2> before = x;
  try {
    x += y;  // [1, 5] + [3, 5] would be [3, 5]
    ADD_FAILURE() << "x += y with a larger y did not throw";
  } catch (const kiln::ShapeError& e) {
    EXPECT_NE(
        std::string(e.what()).find("+=: the result has shape [3, 5] but the left side [1, 5]"),
        std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(kt::shares_buffer(x, before)) << "a failed x += y leaves x as it was";
  EXPECT_THROW(x *= Tensor<1>::ones({4}, DType::f32, dev()), kiln::ShapeError);  // cannot broadcast
  auto n = Tensor<1>::from_data({4, 6}, {2}, dev());
  try {
    n /= 2;  // i32 / 2 is f32
    ADD_FAILURE() << "i32 /= 2 did not throw";
  } catch (const kiln::DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("/=: the result is f32 but the left side i32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(n += 0.5f, kiln::DTypeError);
  EXPECT_THROW(n -= Tensor<1>::ones({2}, DType::f32, dev()), kiln::DTypeError);
  auto mask = Tensor<1>::from_data({true, false}, {2}, dev());
  EXPECT_THROW(mask += mask, kiln::DTypeError);  // bool + bool computes in i32
  EXPECT_EQ(n.to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 6}));
}

// ---- where with scalar branches ----

TEST_P(ErgonomicsTest, WhereWithScalarBranches) {
  auto [x, rx] = input<2>({4, 5});
  auto [c0, rc0] = input<2>({4, 1});
  const auto cond = c0 > 0.0f;
  const Ref rc = rc0.map([](double v) { return v > 0 ? 1.0 : 0.0; });
  auto pick = [](double c, double a, double b) { return c != 0 ? a : b; };
  auto right = kiln::where(cond, x, 0.0f);
  EXPECT_EQ(right.dtype(), DType::f32);
  EXPECT_TRUE(kt::matches(right, Ref::zip3(rc, rx, rx.map([](double) { return 0.0; }), pick)));
  auto left = kiln::where(cond, -1.5f, x);
  EXPECT_TRUE(kt::matches(left, Ref::zip3(rc, rx.map([](double) { return -1.5; }), rx, pick)));
  auto both = kiln::where(cond, 2.5, 7);
  EXPECT_EQ(both.shape(), (Shape<2>{4, 1}));
  EXPECT_EQ(both.dtype(), DType::f32);
  EXPECT_TRUE(kt::matches(both, rc.map([](double c) { return c != 0 ? 2.5 : 7.0; })));
  // A lower-rank condition broadcasts against a higher-rank branch.
  auto wide =
      kiln::where(Tensor<1>::from_data({true, false, true, false, true}, {5}, dev()), x, 100.0f);
  auto rmask = Ref::of(std::vector<float>{1, 0, 1, 0, 1}, {5});
  EXPECT_TRUE(kt::matches(wide, Ref::zip3(rmask, rx, rx.map([](double) { return 100.0; }), pick)));
}

TEST_P(ErgonomicsTest, WhereScalarDTypesFollowPromotion) {
  const auto cond = Tensor<1>::from_data({true, false, true}, {3}, dev());
  const auto n = Tensor<1>::from_data({5, 6, 7}, {3}, dev());
  const auto b = Tensor<1>::from_data({true, true, false}, {3}, dev());
  const auto f = Tensor<1>::from_data({0.5f, 1.5f, 2.5f}, {3}, dev());
  struct Case {
    const char* what;
    Tensor<1> got;
    DType dtype;
    std::vector<double> want;
  };
  const Case cases[] = {
      {"i32 tensor, int scalar", kiln::where(cond, n, -1), DType::i32, {5, -1, 7}},
      {"i32 tensor, float scalar", kiln::where(cond, n, 0.25f), DType::f32, {5, 0.25, 7}},
      {"int scalar, i32 tensor", kiln::where(cond, -1, n), DType::i32, {-1, 6, -1}},
      {"f32 tensor, int scalar", kiln::where(cond, f, 3), DType::f32, {0.5, 3, 2.5}},
      {"bool tensor, int scalar", kiln::where(cond, b, 9), DType::i32, {1, 9, 0}},
      {"bool tensor, double scalar", kiln::where(cond, 0.5, b), DType::f32, {0.5, 1, 0.5}},
      {"int scalars", kiln::where(cond, 1, 0), DType::i32, {1, 0, 1}},
      {"int and float scalars", kiln::where(cond, 1, 0.5f), DType::f32, {1, 0.5, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.got.dtype(), c.dtype);
    EXPECT_EQ(kt::host_values(c.got), c.want);
  }
}

TEST_P(ErgonomicsTest, WhereScalarErrors) {
  const auto x = Tensor<1>::from_data({1.f, 2.f}, {2}, dev());
  const auto n = Tensor<1>::from_data({1, 2}, {2}, dev());
  try {
    kiln::where(x, x, 0.0f);
    ADD_FAILURE() << "a f32 condition did not throw";
  } catch (const kiln::DTypeError& e) {
    EXPECT_STREQ(e.what(), "where: condition must be bool, got f32");
  }
  EXPECT_THROW(kiln::where(n, 1, 0), kiln::DTypeError);
  const auto cond = x > 1.5f;
  try {
    kiln::where(cond, n, 3e9);  // f32: fine
    kiln::where(cond, n, 3000000000LL);
    ADD_FAILURE() << "an integral scalar beyond i32 did not throw";
  } catch (const kiln::ValueError& e) {
    EXPECT_STREQ(e.what(), "where: scalar 3000000000 does not fit i32");
  }
  EXPECT_THROW(kiln::where(cond, Tensor<1>::ones({3}, DType::f32, dev()), 0), kiln::ShapeError);
  if (dev().kind() != kiln::Device::Kind::cpu) {
    EXPECT_THROW(kiln::where(cond, x.to(kiln::Device::cpu()), 0), kiln::DeviceError);
    EXPECT_THROW(kiln::where(cond.to(kiln::Device::cpu()), x, 0), kiln::DeviceError);
  }
}

// ---- ranks from braced lists ----

TEST_P(ErgonomicsTest, BracedShapesDeduceTheRank) {
  auto [x, rx] = input<2>({3, 4});
  auto flat = x.reshape({12});
  EXPECT_EQ(flat.shape(), (Shape<1>{12}));
  EXPECT_TRUE(kt::matches(flat, rx.reshape({12})));
  EXPECT_TRUE(kt::matches(x.reshape({2, -1, 3}), rx.reshape({2, 2, 3})));
  EXPECT_THROW(x.reshape({5}), kiln::ShapeError);
  auto [row, rrow] = input<1>({4});
  EXPECT_TRUE(kt::matches(row.expand({3, 4}), rrow.expand({3, 4})));
  EXPECT_THROW(row.expand({3, 5}), kiln::ShapeError);
  auto [y, ry] = input<2>({2, 4});
  auto joined = kiln::cat({x, y, x}, 0);
  EXPECT_EQ(joined.shape(), (Shape<2>{8, 4}));
  const std::vector<double> xv = rx.values(), yv = ry.values();
  std::vector<double> want = xv;
  want.insert(want.end(), yv.begin(), yv.end());
  want.insert(want.end(), xv.begin(), xv.end());
  EXPECT_EQ(kt::host_values(joined), want);
  EXPECT_THROW(kiln::cat({x, y}, 1), kiln::ShapeError);
}

TEST_P(ErgonomicsTest, FromBracedData) {
  auto a = Tensor<1>::from_data({1.f, 2.f}, {2}, dev());
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2}));
  auto b = kiln::from_data({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}, dev());
  EXPECT_EQ(b.shape(), (Shape<2>{2, 3}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto d = kiln::from_data({0.1, 2.5}, {2}, dev());  // double literals: f32, as torch.tensor
  EXPECT_EQ(d.dtype(), DType::f32);
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{0.1f, 2.5f}));
  auto i = kiln::from_data({7, -8}, {1, 2}, dev());
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, -8}));
  auto m = kiln::from_data({true, false, true}, {3}, dev());
  EXPECT_EQ(m.dtype(), DType::boolean);
  EXPECT_EQ(m.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  const std::vector<std::int32_t> v{1, 2, 3, 4};
  auto w = kiln::from_data(v, {2, 2}, dev());
  EXPECT_EQ(w.shape(), (Shape<2>{2, 2}));
  EXPECT_EQ(w.to_vector<std::int32_t>(), v);
  EXPECT_EQ(Tensor<0>::from_data({4.5f}, {}, dev()).item(), 4.5f);
  EXPECT_THROW(kiln::from_data({1.f, 2.f, 3.f}, {2}, dev()), kiln::ShapeError);
  EXPECT_THROW(Tensor<2>::from_data({1, 2}, {2, 2}, dev()), kiln::ShapeError);
}

}  // namespace
