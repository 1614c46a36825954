// Order and scan ops through kiln::Tensor on every device: max/min with indices, sort, argsort,
// topk, cumsum, randperm and bincount. Exact references on the host (a stable sort of the stored
// values in double with PyTorch's NaN rule; first occurrence for max/min; a float64 prefix sum)
// on fresh random inputs with many ties and NaNs, for f32, bf16, f16, i32 and bool, over
// contiguous, transposed (dim 0) and column-slice views, rows shorter and longer than CUDA's
// shared-memory tile; error paths. Gradients live in test_order_autograd.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class OrderTest : public kt::DeviceTest {
 protected:
  // A [rows, n] tensor of dtype t with many ties (values on a coarse grid) and, for the floating
  // dtypes, a NaN now and then and both infinities.
  Tensor<2> ties(std::int64_t rows, std::int64_t n, DType t) {
    const auto count = static_cast<std::size_t>(rows * n);
    std::vector<float> v(count);
    auto q = kt::ints(count, -20, 20, rng());
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(q[i]) * 0.25f;
    if (is_floating(t)) {
      for (std::size_t i = 0; i < count; i += 37) v[i] = NAN;
      for (std::size_t i = 11; i < count; i += 53) v[i] = (i & 1) ? INFINITY : -INFINITY;
      for (std::size_t i = 5; i < count; i += 41) v[i] = -0.0f;
    } else if (t == DType::boolean) {
      for (auto& x : v) x = x > 0 ? 1.0f : 0.0f;
    }
    auto base = Tensor<2>::from_data(v, {rows, n}, dev());
    if (t == DType::i32) base = base * 4.0f;  // integers on the grid
    return base.to(t);
  }
};
KILN_INSTANTIATE_DEVICES(OrderTest);

// The stored values, as f32 (exact for every dtype used here), row by row along the last dim.
std::vector<float> host(const Tensor<2>& t) {
  return t.contiguous().to(DType::f32).to_vector<float>();
}
std::vector<std::int32_t> host_i(const Tensor<2>& t) {
  return t.contiguous().to_vector<std::int32_t>();
}

bool before(double a, double b, bool descending) {
  if (descending) return a > b || (std::isnan(a) && !std::isnan(b));
  return a < b || (!std::isnan(a) && std::isnan(b));
}

// The stable sort of each row of x ([rows, n] as stored): indices.
std::vector<std::int32_t> ref_argsort(const std::vector<float>& x, std::int64_t n, bool desc) {
  std::vector<std::int32_t> out;
  for (std::size_t r = 0; r * n < x.size(); ++r) {
    std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    const float* row = x.data() + r * n;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int a, int b) { return before(row[a], row[b], desc); });
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

// Equal as values: bit-equal floats, or both NaN.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
    } else {
      ASSERT_EQ(got[i], want[i]) << what << " at " << i;
      ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << " sign at " << i;
    }
  }
}

constexpr DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::boolean};

TEST_P(OrderTest, SortIsStableWithNaNLastAcrossDTypesAndViews) {
  for (DType t : kAll) {
    for (std::int64_t n : {1, 2, 7, 64, 1000, 4097, 9000}) {
      const std::int64_t rows = n > 1000 ? 3 : 9;
      const Tensor<2> base = ties(rows, n + 2, t);
      const std::vector<std::pair<const char*, Tensor<2>>> views = {
          {"contiguous", base.slice(1, 0, n).contiguous()},
          {"columns", base.slice(1, 1, n + 1)},
      };
      for (const auto& [name, x] : views) {
        for (bool desc : {false, true}) {
          SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " n=" + std::to_string(n) + " " + name +
                       (desc ? " descending" : ""));
          const auto xv = host(x);
          const auto want = ref_argsort(xv, n, desc);
          const auto s = x.sort(-1, desc);
          ASSERT_EQ(s.values.dtype(), t);
          ASSERT_EQ(s.indices.dtype(), DType::i32);
          ASSERT_EQ(s.values.shape(), x.shape());
          ASSERT_EQ(host_i(s.indices), want);
          std::vector<float> wv;
          for (std::size_t i = 0; i < want.size(); ++i) wv.push_back(xv[i / n * n + want[i]]);
          expect_same(host(s.values), wv, "values");
          ASSERT_EQ(host_i(x.argsort(1, desc)), want);
        }
      }
    }
  }
}

TEST_P(OrderTest, SortAlongDimZeroAndRanks) {
  const Tensor<2> x = ties(300, 5, DType::f32);  // sort each column of 300
  const auto s = x.sort(0);
  const auto xt = host(x.transpose(0, 1));
  const auto want = ref_argsort(xt, 300, false);
  ASSERT_EQ(host_i(s.indices.transpose(0, 1)), want);
  // rank 1 and rank 3 along the middle dim
  const auto v = Tensor<1>::from_data(std::vector<float>{3, 1, 2, 1}, {4}, dev()).sort();
  EXPECT_EQ(v.values.to_vector<float>(), (std::vector<float>{1, 1, 2, 3}));
  EXPECT_EQ(v.indices.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 3, 2, 0}));
  const auto x3 = Tensor<3>::from_data(kt::uniform(2 * 6 * 3, -1, 1, rng()), {2, 6, 3}, dev());
  const auto i3 = x3.argsort(1, true);
  const auto g = x3.gather(1, i3).to_vector<float>();  // sorted along dim 1
  for (int a = 0; a < 2; ++a)
    for (int j = 0; j + 1 < 6; ++j)
      for (int c = 0; c < 3; ++c) EXPECT_GE(g[(a * 6 + j) * 3 + c], g[(a * 6 + j + 1) * 3 + c]);
}

TEST_P(OrderTest, TopkIsTheStableSortsFirstK) {
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    for (std::int64_t n : {1, 50, 5000}) {
      const Tensor<2> x = ties(4, n, t);
      const auto xv = host(x);
      for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::min<std::int64_t>(n, 7), n}) {
        for (bool largest : {true, false}) {
          SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + (largest ? " largest" : " smallest"));
          const auto want = ref_argsort(xv, n, largest);
          const auto r = x.topk(k, -1, largest);
          ASSERT_EQ(r.values.shape(), (kiln::Shape<2>{4, k}));
          const auto got = host_i(r.indices);
          std::vector<float> wv;
          for (int row = 0; row < 4; ++row)
            for (std::int64_t j = 0; j < k; ++j) {
              ASSERT_EQ(got[row * k + j], want[row * n + j]);
              wv.push_back(xv[row * n + want[row * n + j]]);
            }
          expect_same(host(r.values), wv, "values");
        }
      }
    }
  }
}

TEST_P(OrderTest, MaxMinWithIndicesFirstOccurrenceNaNWins) {
  for (DType t : kAll) {
    for (std::int64_t n : {1, 3, 257, 4100}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " n=" + std::to_string(n));
      const Tensor<2> x = ties(6, n, t);
      const auto xv = host(x);
      for (bool largest : {true, false}) {
        const auto r = largest ? x.max_with_indices(1) : x.min_with_indices(1);
        ASSERT_EQ(r.values.dtype(), t);
        const auto iv = r.indices.to_vector<std::int32_t>();
        const auto vv = r.values.to(DType::f32).to_vector<float>();
        for (int row = 0; row < 6; ++row) {
          std::int64_t best = 0;
          for (std::int64_t j = 1; j < n && !std::isnan(xv[row * n + best]); ++j) {
            const float a = xv[row * n + j], b = xv[row * n + best];
            if (std::isnan(a) || (largest ? a > b : a < b)) best = j;
          }
          ASSERT_EQ(iv[row], best) << "row " << row;
          expect_same({vv[row]}, {xv[row * n + best]}, "value");
        }
        // The indices agree with argmax/argmin, the values with max/min.
        const auto arg = largest ? x.argmax(1) : x.argmin(1);
        EXPECT_EQ(arg.to_vector<std::int32_t>(), iv);
      }
    }
  }
  // keepdim and dim 0 of a transposed view
  const Tensor<2> x = ties(5, 8, DType::f32);
  const auto k = x.transpose(0, 1).max_with_indices(0, kiln::keepdim);
  EXPECT_EQ(k.values.shape(), (kiln::Shape<2>{1, 5}));
  EXPECT_EQ(k.indices.to_vector<std::int32_t>(), x.argmax(1).to_vector<std::int32_t>());
}

TEST_P(OrderTest, CumsumAgainstFloat64) {
  for (DType t : kAll) {
    for (std::int64_t n : {1, 5, 1000, 4096, 10001, 100003}) {  // (CUDA: two levels above 16384)
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " n=" + std::to_string(n));
      std::vector<float> v = kt::uniform(static_cast<std::size_t>(3 * (n + 1)), -2, 2, rng());
      Tensor<2> base = Tensor<2>::from_data(v, {3, n + 1}, dev());
      if (t == DType::i32) base = base * 1000.0f;
      if (t == DType::boolean) base = (base > 0.0f).to(DType::f32);
      base = base.to(t);
      for (const auto& x : {base.slice(1, 0, n).contiguous(), base.slice(1, 1, n + 1)}) {
        const auto xv = host(x);
        const Tensor<2> y = x.cumsum(1);
        ASSERT_EQ(y.dtype(), is_floating(t) ? t : DType::i32);
        const auto yv = host(y);
        for (int row = 0; row < 3; ++row) {
          double s = 0, a = 0;
          for (std::int64_t j = 0; j < n; ++j) {
            s += xv[row * n + j];
            a += std::fabs(xv[row * n + j]);
            const double got = yv[row * n + j];
            if (!is_floating(t)) {
              ASSERT_EQ(got, s) << "at " << row << ", " << j;
              continue;
            }
            // f32 accumulation (about log2(n) roundings on CUDA's scan, n on a serial one),
            // then one rounding to the half type.
            const double half =
                t == DType::f32 ? 0 : std::fabs(s) * (t == DType::bf16 ? 4e-3 : 5e-4);
            ASSERT_LE(std::fabs(got - s), 1e-6 * a + half + 1e-30) << "at " << row << ", " << j;
          }
        }
      }
    }
  }
  // dim 0, and rank 1
  const auto x = Tensor<2>::from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}, dev());
  EXPECT_EQ(x.cumsum(0).to_vector<float>(), (std::vector<float>{1, 2, 4, 6, 9, 12}));
  const auto b = Tensor<1>::from_data(std::vector<std::int32_t>{2147483647, 1}, {2}, dev());
  EXPECT_EQ(b.cumsum(0).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{2147483647, -2147483647 - 1}));  // wraps
}

TEST_P(OrderTest, RandpermIsAPermutationEqualOnEveryDevice) {
  for (std::int64_t n : {0, 1, 2, 1000, 100003}) {
    const auto p = kiln::randperm(n, 1234 + n, dev()).to_vector<std::int32_t>();
    ASSERT_EQ(static_cast<std::int64_t>(p.size()), n);
    std::vector<std::int32_t> s = p;
    std::sort(s.begin(), s.end());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(s[i], i);
    // The host reference: the same keys from the same Philox uniforms, stably sorted.
    const auto u =
        Tensor<2>::random({2, n}, kiln::Distribution::uniform(), kiln::Device::cpu(), 1234 + n)
            .to_vector<float>();
    std::vector<std::int64_t> keys(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      keys[i] = static_cast<std::int64_t>(u[i] * 32768.0f) * 65536 +
                static_cast<std::int64_t>(u[n + i] * 65536.0f);
    std::vector<std::int32_t> want(static_cast<std::size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return keys[a] < keys[b]; });
    ASSERT_EQ(p, want) << "n=" << n;
  }
  const auto a = kiln::randperm(1000, 1).to_vector<std::int32_t>();
  EXPECT_NE(a, kiln::randperm(1000, 2).to_vector<std::int32_t>());
  EXPECT_THROW(kiln::randperm(-1, 0, dev()), kiln::ValueError);
}

TEST_P(OrderTest, BincountAgainstHostCounts) {
  for (std::int64_t n : {0, 1, 1000, 100000}) {
    const auto ids = kt::ints(static_cast<std::size_t>(n), 0, 300, rng());
    const auto t = Tensor<1>::from_data(ids, {n}, dev());
    for (std::int64_t minlength : {0, 10, 500}) {
      std::int64_t len = minlength;
      for (auto i : ids) len = std::max<std::int64_t>(len, i + 1);
      std::vector<std::int32_t> want(static_cast<std::size_t>(len), 0);
      for (auto i : ids) ++want[i];
      const auto c = kiln::bincount(t, minlength);
      ASSERT_EQ(c.dtype(), DType::i32);
      ASSERT_EQ(c.to_vector<std::int32_t>(), want) << "n=" << n << " minlength=" << minlength;
    }
  }
  const auto neg = Tensor<1>::from_data(std::vector<std::int32_t>{1, -1}, {2}, dev());
  EXPECT_THROW(kiln::bincount(neg), kiln::ValueError);
  EXPECT_THROW(kiln::bincount(Tensor<1>::zeros({3}, DType::f32, dev())), kiln::DTypeError);
  EXPECT_THROW(kiln::bincount(neg, -1), kiln::ValueError);
}

TEST_P(OrderTest, ErrorsNameTheOp) {
  const auto x = Tensor<2>::from_data(kt::uniform(12, -1, 1, rng()), {3, 4}, dev());
  EXPECT_THROW(x.topk(5), kiln::ValueError);
  EXPECT_THROW(x.topk(-1), kiln::ValueError);
  EXPECT_THROW(x.sort(2), kiln::IndexError);
  EXPECT_THROW(x.cumsum(-3), kiln::IndexError);
  EXPECT_THROW(x.max_with_indices(2), kiln::IndexError);
  const auto empty = Tensor<2>::zeros({3, 0}, DType::f32, dev());
  EXPECT_THROW(empty.max_with_indices(1), kiln::ValueError);
  EXPECT_EQ(empty.sort(1).values.shape(), (kiln::Shape<2>{3, 0}));
  EXPECT_EQ(empty.cumsum(1).shape(), (kiln::Shape<2>{3, 0}));
  EXPECT_EQ(Tensor<2>::zeros({0, 4}, DType::f32, dev()).max_with_indices(1).values.shape(),
            (kiln::Shape<1>{0}));
  try {
    (void)x.topk(9);
    FAIL();
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("topk"), std::string::npos) << e.what();
  }
  Tensor<2> unassigned;
  EXPECT_THROW(unassigned.sort(), kiln::ValueError);
}

}  // namespace
