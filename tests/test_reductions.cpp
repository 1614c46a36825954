// Reductions (sum mean max min argmax argmin) over one dim, with and without keepdim, and over
// all; softmax and log_softmax; f32 accuracy over millions of elements; NaN and empty inputs; the
// sum of squares over many tensors.
#include <cmath>
#include <limits>
#include <string_view>

#include "backend/backend.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;
using kt::Tol;
using Lane = std::vector<double>;

class ReductionTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(ReductionTest);

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double lane_sum(const Lane& l) {
  double s = 0;
  for (double x : l) s += x;
  return s;
}
double lane_mean(const Lane& l) { return lane_sum(l) / static_cast<double>(l.size()); }
// NumPy: NaN wins; the index is the first NaN, else the first extreme element.
template <class Better>
double lane_arg(const Lane& l, Better better) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (std::isnan(l[best])) break;
    if (std::isnan(l[i]) || better(l[i], l[best])) best = i;
  }
  return static_cast<double>(best);
}
double lane_argmax(const Lane& l) { return lane_arg(l, std::greater<double>()); }
double lane_argmin(const Lane& l) { return lane_arg(l, std::less<double>()); }
double lane_max(const Lane& l) { return l[static_cast<std::size_t>(lane_argmax(l))]; }
double lane_min(const Lane& l) { return l[static_cast<std::size_t>(lane_argmin(l))]; }

// Calls v(name, reduce over all, reduce over dim, keepdim form, lane reference, dtype of the
// result for f32 input, whether the lane may be empty).
template <class V>
void for_each_reduction(V&& v) {
#define RED(fn)                                                                       \
  [](const auto& x) { return x.fn(); }, [](const auto& x, int d) { return x.fn(d); }, \
      [](const auto& x, int d) { return x.fn(d, kiln::keepdim); }
  v("sum", RED(sum), lane_sum, DType::f32, true);
  v("mean", RED(mean), lane_mean, DType::f32, true);
  v("max", RED(max), lane_max, DType::f32, false);
  v("min", RED(min), lane_min, DType::f32, false);
  v("argmax", RED(argmax), lane_argmax, DType::i32, false);
  v("argmin", RED(argmin), lane_argmin, DType::i32, false);
#undef RED
}

// The bound for reduction `op` over lanes of n floats of magnitude <= m: a blocked or pairwise
// sum is well within n * 1e-6 * m (the mean within 1e-6 * m); max, min and the indices are exact.
Tol tol_for(std::string_view op, std::int64_t n, double m) {
  if (op == "sum") return {4, 1e-6, 1e-6 * static_cast<double>(n) * m};
  if (op == "mean") return {4, 1e-6, 1e-6 * m};
  return kt::kExact;
}

TEST_P(ReductionTest, OverEachDimAndAllOverLayouts) {
  for (const auto& l : kt::layouts()) {
    SCOPED_TRACE(l.name);
    auto in = kt::make_input(l, dev(), [&](std::size_t n) {
      auto v = kt::uniform(n, -4, 4, rng());
      for (std::size_t i = 3; i < n; i += 7) v[i] = v[i - 3];  // ties: the first index wins
      return v;
    });
    const auto& x = in.t;
    for_each_reduction(
        [&](const char* name, auto all, auto red, auto keep, auto ref, DType dt, bool empty_ok) {
          SCOPED_TRACE(name);
          for (int d : {0, 1, -1, -2}) {
            SCOPED_TRACE(testing::Message() << "dim " << d);
            int nd = d < 0 ? d + 2 : d;
            auto n = in.r.shape()[nd];
            if (n == 0 && !empty_ok) continue;  // EmptyInputs covers it
            auto tol = tol_for(name, n, 4);
            auto y = red(x, d);
            EXPECT_EQ(y.dtype(), dt);
            EXPECT_TRUE(kt::matches(y, in.r.reduce(nd, false, ref), tol));
            EXPECT_TRUE(kt::matches(keep(x, d), in.r.reduce(nd, true, ref), tol));
          }
          if (in.r.numel() == 0 && !empty_ok) return;
          auto flat = in.r.reshape({in.r.numel()});
          auto y = all(x);
          EXPECT_EQ(y.dtype(), dt);
          EXPECT_TRUE(kt::matches(y, flat.reduce(0, false, ref), tol_for(name, in.r.numel(), 4)));
        });
  }
}

TEST_P(ReductionTest, Rank3OverEachDimOfPermutedView) {
  auto v = kt::uniform(3 * 4 * 5, -2, 2, rng());
  auto x = Tensor<3>::from_data(v, {3, 4, 5}, dev()).permute({1, 2, 0});  // [4, 5, 3]
  Ref r = Ref::of(v, {3, 4, 5}).permute({1, 2, 0});
  for_each_reduction([&](const char* name, auto, auto red, auto keep, auto ref, DType dt, bool) {
    SCOPED_TRACE(name);
    for (int d : {0, 1, 2, -1}) {
      SCOPED_TRACE(d);
      int nd = d < 0 ? d + 3 : d;
      auto tol = tol_for(name, 5, 2);
      Tensor<2> y = red(x, d);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(kt::matches(y, r.reduce(nd, false, ref), tol));
      EXPECT_TRUE(kt::matches(keep(x, d), r.reduce(nd, true, ref), tol));
    }
  });
  EXPECT_THROW(x.sum(3), kiln::IndexError);
  EXPECT_THROW(x.max(-4, kiln::keepdim), kiln::IndexError);
}

// Strided lanes big enough for several blocks and threads, both ways round.
TEST_P(ReductionTest, LargeTransposedView) {
  auto v = kt::uniform(613 * 1031, -1, 1, rng());
  auto x = Tensor<2>::from_data(v, {613, 1031}, dev()).transpose(0, 1);
  Ref r = Ref::of(v, {613, 1031}).transpose(0, 1);
  for_each_reduction([&](const char* name, auto all, auto red, auto, auto ref, DType dt, bool) {
    SCOPED_TRACE(name);
    for (int d : {0, 1}) {
      SCOPED_TRACE(d);
      auto tol = tol_for(name, r.shape()[d], 1);
      EXPECT_TRUE(kt::matches(red(x, d), r.reduce(d, false, ref), tol));
    }
    auto y = all(x);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(
        kt::matches(y, r.reshape({r.numel()}).reduce(0, false, ref), tol_for(name, r.numel(), 1)));
  });
}

// f32 sums over millions of elements stay accurate: pairwise or blocked, not one running float.
TEST_P(ReductionTest, LargeF32SumsStayAccurate) {
  const std::int64_t n = (std::int64_t{1} << 22) + 126;
  for (auto [lo, hi] : {std::pair{0.0, 1.0}, std::pair{100.0, 101.0}}) {
    SCOPED_TRACE(testing::Message() << "uniform(" << lo << ", " << hi << ")");
    auto x = Tensor<1>::random({n}, kiln::Distribution::uniform(lo, hi), dev(), seed());
    auto v = x.to_vector();
    double exact = 0, col0 = 0, col1 = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      exact += v[i];
      (i % 2 ? col1 : col0) += v[i];
    }
    EXPECT_LT(std::fabs(x.sum().item() - exact) / exact, 1e-5);
    EXPECT_LT(std::fabs(x.mean().item() - exact / double(n)) / (exact / double(n)), 1e-5);
    auto rows = x.reshape(Shape<2>{2, -1}).sum(1).to_vector();  // two contiguous lanes
    double half = 0;
    for (std::size_t i = 0; i < v.size() / 2; ++i) half += v[i];
    EXPECT_LT(std::fabs(rows[0] - half) / half, 1e-5);
    EXPECT_LT(std::fabs(rows[1] - (exact - half)) / (exact - half), 1e-5);
    auto cols = x.reshape(Shape<2>{-1, 2}).sum(0).to_vector();  // two strided lanes
    EXPECT_LT(std::fabs(cols[0] - col0) / col0, 1e-5);
    EXPECT_LT(std::fabs(cols[1] - col1) / col1, 1e-5);
  }
}

TEST_P(ReductionTest, NaNPropagates) {
  const std::vector<float> v = {1, kNaN, 5, kNaN, -kInf, 3, 2, kInf, 0, 7, -1, 4};
  auto x = Tensor<2>::from_data(v, {3, 4}, dev());
  Ref r = Ref::of(v, {3, 4});
  EXPECT_TRUE(std::isnan(x.max().item()));
  EXPECT_TRUE(std::isnan(x.min().item()));
  EXPECT_TRUE(std::isnan(x.sum().item()));
  EXPECT_EQ(x.argmax().item<std::int32_t>(), 1);
  EXPECT_EQ(x.argmin().item<std::int32_t>(), 1);
  for_each_reduction([&](const char* name, auto, auto red, auto, auto ref, DType, bool) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(kt::matches(red(x, 0), r.reduce(0, false, ref), tol_for(name, 3, 7)));
    EXPECT_TRUE(kt::matches(red(x, 1), r.reduce(1, false, ref), tol_for(name, 4, 7)));
    EXPECT_TRUE(kt::matches(red(x.transpose(0, 1), 0), r.transpose(0, 1).reduce(0, false, ref),
                            tol_for(name, 3, 7)));
  });
  auto inf = Tensor<1>::from_data(std::vector<float>{kInf, -kInf}, {2}, dev());
  EXPECT_TRUE(std::isnan(inf.sum().item()));
  EXPECT_EQ(inf.max().item(), kInf);
  EXPECT_EQ(inf.argmin().item<std::int32_t>(), 1);
}

// NumPy: the sum of nothing is 0, the mean NaN; max/min/argmax/argmin of nothing are errors.
TEST_P(ReductionTest, EmptyInputs) {
  auto e = Tensor<2>::zeros({0, 3}, DType::f32, dev());
  EXPECT_EQ(e.sum().item(), 0.0f);
  EXPECT_TRUE(std::isnan(e.mean().item()));
  EXPECT_EQ(e.sum(0).to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(e.sum(0, kiln::keepdim).shape(), (Shape<2>{1, 3}));
  for (float m : e.mean(0).to_vector()) EXPECT_TRUE(std::isnan(m));
  EXPECT_EQ(e.sum(1).shape(), (Shape<1>{0}));
  EXPECT_EQ(e.max(1).shape(), (Shape<1>{0}));
  EXPECT_EQ(e.argmin(1, kiln::keepdim).shape(), (Shape<2>{0, 1}));
  EXPECT_THROW(e.max(), kiln::ValueError);
  EXPECT_THROW(e.min(), kiln::ValueError);
  EXPECT_THROW(e.argmax(), kiln::ValueError);
  EXPECT_THROW(e.argmin(), kiln::ValueError);
  EXPECT_THROW(e.max(0), kiln::ValueError);
  EXPECT_THROW(e.argmin(0, kiln::keepdim), kiln::ValueError);
  auto i = Tensor<1>::zeros({0}, DType::i32, dev());
  EXPECT_EQ(i.sum().item<std::int32_t>(), 0);
  auto s = Tensor<0>::full({}, 2.5, DType::f32, dev());  // rank 0 reduces over its one element
  EXPECT_EQ(s.sum().item(), 2.5f);
  EXPECT_EQ(s.max().item(), 2.5f);
  EXPECT_EQ(s.argmax().item<std::int32_t>(), 0);
}

TEST_P(ReductionTest, IntegerInputs) {
  auto v = kt::ints(6 * 9, -1000, 1000, rng());
  auto x = Tensor<2>::from_data(v, {6, 9}, dev()).transpose(0, 1);
  Ref r = Ref::of(v, {6, 9}).transpose(0, 1);
  for (int d : {0, 1}) {
    SCOPED_TRACE(d);
    EXPECT_EQ(x.sum(d).dtype(), DType::i32);
    EXPECT_TRUE(kt::matches(x.sum(d), r.reduce(d, false, lane_sum)));
    EXPECT_EQ(x.max(d).dtype(), DType::i32);
    EXPECT_TRUE(kt::matches(x.max(d), r.reduce(d, false, lane_max)));
    EXPECT_TRUE(kt::matches(x.min(d, kiln::keepdim), r.reduce(d, true, lane_min)));
    EXPECT_TRUE(kt::matches(x.argmax(d), r.reduce(d, false, lane_argmax)));
    EXPECT_EQ(x.mean(d).dtype(), DType::f32);
    EXPECT_TRUE(kt::matches(x.mean(d), r.reduce(d, false, lane_mean), Tol{4, 1e-6}));
  }
  EXPECT_EQ(x.sum().dtype(), DType::i32);
  EXPECT_EQ(x.sum().item<std::int32_t>(), static_cast<std::int32_t>(lane_sum(r.values())));
}

Lane lane_softmax(const Lane& l, bool log) {
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (double x : l) m = std::isnan(x) || std::isnan(m) ? kNaN : std::max(m, x);
  for (double x : l) s += std::exp(x - m);
  Lane out;
  for (double x : l) out.push_back(log ? x - m - std::log(s) : std::exp(x - m) / s);
  return out;
}

// The softmax reference along dim, as a Ref.
Ref ref_softmax(const Ref& r, int dim, bool log) {
  std::vector<double> v(static_cast<std::size_t>(r.numel()));
  kiln::Dims s = r.shape();
  for (std::int64_t k = 0; k < r.numel(); ++k) {
    auto idx = kt::unflatten(k, s);
    Lane lane;
    auto j = idx[dim];
    for (idx[dim] = 0; idx[dim] < s[dim]; ++idx[dim]) lane.push_back(r.at(idx));
    v[static_cast<std::size_t>(k)] = lane_softmax(lane, log)[static_cast<std::size_t>(j)];
  }
  return Ref(s, v);
}

constexpr Tol kSoftTol{8, 1e-5, 1e-7};
constexpr Tol kLogSoftTol{8, 1e-5, 1e-5};

TEST_P(ReductionTest, SoftmaxOverLayouts) {
  for (const auto& l : kt::layouts()) {
    SCOPED_TRACE(l.name);
    auto in = kt::make_input(l, dev(), [&](std::size_t n) { return kt::uniform(n, -8, 8, rng()); });
    for (int d : {0, 1, -1}) {
      SCOPED_TRACE(d);
      int nd = d < 0 ? d + 2 : d;
      auto p = in.t.softmax(d);
      EXPECT_EQ(p.shape(), in.t.shape());
      EXPECT_TRUE(kt::matches(p, ref_softmax(in.r, nd, false), kSoftTol));
      EXPECT_TRUE(kt::matches(in.t.log_softmax(d), ref_softmax(in.r, nd, true), kLogSoftTol));
      if (p.numel() > 0) {
        auto sums = p.sum(d).to_vector();
        for (float s : sums) EXPECT_NEAR(s, 1.0, 1e-5);
      }
    }
  }
}

// Large values do not overflow; -inf entries get probability 0; a NaN spoils only its row.
TEST_P(ReductionTest, SoftmaxExtremes) {
  const std::vector<float> v = {1000, 1001, 1002,  -1000, -kInf, 0,    -kInf, 5,
                                88,   89,   -kInf, -kInf, 3,     kNaN, 1,     2};
  auto x = Tensor<2>::from_data(v, {4, 4}, dev());
  Ref r = Ref::of(v, {4, 4});
  EXPECT_TRUE(kt::matches(x.softmax(1), ref_softmax(r, 1, false), kSoftTol));
  EXPECT_TRUE(kt::matches(x.log_softmax(1), ref_softmax(r, 1, true), kLogSoftTol));
  auto p = x.softmax(-1).to_vector();
  EXPECT_EQ(p[4], 0.0f);
  EXPECT_EQ(p[6], 0.0f);
  auto lp = x.log_softmax(1).to_vector();
  EXPECT_EQ(lp[4], -kInf);
  auto big = Tensor<1>::from_data(std::vector<float>{3e38f, 3e38f, -3e38f}, {3}, dev());
  EXPECT_TRUE(
      kt::matches(big.softmax(0), Ref::of(std::vector<double>{0.5, 0.5, 0}, {3}), kSoftTol));
  auto i = Tensor<1>::from_data(std::vector<std::int32_t>{1, 2, 3}, {3}, dev()).softmax(0);
  EXPECT_EQ(i.dtype(), DType::f32);
  EXPECT_TRUE(
      kt::matches(i, ref_softmax(Ref::of(std::vector<int>{1, 2, 3}, {3}), 0, false), kSoftTol));
  EXPECT_THROW(x.softmax(2), kiln::IndexError);
}

}  // namespace

// detail::sum_of_squares (a gradient norm's square, Backend::sum_of_squares where the backend has
// it): many tensors of every float dtype and awkward lengths (none, one element, a chunk and one,
// over 64 tensors, so more than one of CUDA's launches), a view it composes instead, against a
// float64 sum of the stored values; the errors.
TEST_P(ReductionTest, SumOfSquaresOverManyTensors) {
  std::vector<kiln::detail::Handle> xs;
  double want = 0;
  const std::int64_t lengths[] = {1, 0, 16385, 768, 3, 100000, 7};
  for (int i = 0; i < 70; ++i) {
    const std::int64_t n = lengths[i % 7] + i;
    const DType t = i % 3 == 0 ? DType::bf16 : i % 3 == 1 ? DType::f16 : DType::f32;
    const auto x =
        Tensor<1>::random({n}, kiln::Distribution::normal(0.0, 1.0), dev(), seed()).to(t);
    for (float v : x.to(DType::f32).to(kiln::Device::cpu()).to_vector<float>())
      want += double{v} * v;
    xs.push_back(x.handle());
  }
  const auto got =
      Tensor<0>(kiln::detail::sum_of_squares(xs)).to(kiln::Device::cpu()).item<float>();
  EXPECT_NEAR(got, want, 1e-5 * want);
  // A transposed view (composed from sums) gives the same.
  const auto m = Tensor<2>::random({37, 41}, kiln::Distribution::normal(0.0, 1.0), dev(), seed());
  const auto mt = m.transpose(0, 1);
  const kiln::detail::Handle both[] = {mt.handle(), m.handle()};
  const auto v = m.to(kiln::Device::cpu()).to_vector<float>();
  double w2 = 0;
  for (float e : v) w2 += 2.0 * e * e;
  EXPECT_NEAR(Tensor<0>(kiln::detail::sum_of_squares(both)).to(kiln::Device::cpu()).item<float>(),
              w2, 1e-5 * w2);
  EXPECT_THROW(kiln::detail::sum_of_squares({}), kiln::ValueError);
  const auto ints = Tensor<1>::zeros({4}, DType::i32, dev());
  const kiln::detail::Handle bad[] = {m.handle(), ints.handle()};
  EXPECT_THROW(kiln::detail::sum_of_squares(bad), kiln::DTypeError);
  // The backend's contract, which a backend with the kernel checks before launching it.
  using kiln::detail::check_sum_of_squares_call;
  const kiln::detail::TensorImpl* views[] = {m.handle().get()};
  const auto total_i32 = Tensor<0>::zeros({}, DType::i32, dev());
  EXPECT_THROW(check_sum_of_squares_call(views, *total_i32.handle()), kiln::ShapeError);
  const kiln::detail::TensorImpl* strided[] = {mt.handle().get()};
  const auto total = Tensor<0>::zeros({}, DType::f32, dev());
  EXPECT_THROW(check_sum_of_squares_call(strided, *total.handle()), kiln::ValueError);
  const kiln::detail::TensorImpl* itself[] = {total.handle().get()};
  EXPECT_THROW(check_sum_of_squares_call(itself, *total.handle()), kiln::ValueError);
}
