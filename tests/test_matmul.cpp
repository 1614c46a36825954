// matmul against a float64 reference: rank 2, batched rank 3, broadcast batches, strided
// operands, zero-sized dimensions, and the error paths.
#include <cmath>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;

class MatmulTest : public kt::DeviceTest {
 protected:
  template <std::size_t D>
  std::pair<Tensor<D>, Ref> input(const Shape<D>& s) {
    kiln::Dims dims(s.begin(), s.end());
    auto v = kt::uniform(static_cast<std::size_t>(kt::numel_of(dims)), -1, 1, rng());
    return {Tensor<D>::from_data(v, s, dev()), Ref::of(v, dims)};
  }
};
KILN_INSTANTIATE_DEVICES(MatmulTest);

// The product in float64 of a [.., m, k] and b [.., k, n] (rank 2 or 3, batch broadcast), and
// per element the bound k * 1e-6 * sum |a||b| (a float dot product of length k is well within).
struct Expected {
  Ref value;
  Ref bound;
};
Expected ref_matmul(Ref a, Ref b) {
  if (a.rank() == 2) a = a.unsqueeze(0);
  if (b.rank() == 2) b = b.unsqueeze(0);
  const auto batch = std::max(a.shape()[0], b.shape()[0]);
  const auto m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  const auto av = a.expand({batch, m, k}).values(), bv = b.expand({batch, k, n}).values();
  std::vector<double> v, e;
  for (std::int64_t p = 0; p < batch; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, abs = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          double x = av[static_cast<std::size_t>((p * m + i) * k + q)] *
                     bv[static_cast<std::size_t>((p * k + q) * n + j)];
          s += x, abs += std::fabs(x);
        }
        v.push_back(s), e.push_back(static_cast<double>(k) * 1e-6 * abs + 1e-30);
      }
    }
  }
  return {Ref({batch, m, n}, v), Ref({batch, m, n}, e)};
}

// Every element of c within its bound of the reference (c is rank 2 or 3).
template <std::size_t D>
void expect_product(const Tensor<D>& c, const Ref& a, const Ref& b) {
  auto want = ref_matmul(a, b);
  kiln::Dims shape = want.value.shape();
  if (D == 2) shape.erase(shape.begin());
  kiln::Dims got_shape(D);
  for (std::size_t i = 0; i < D; ++i) got_shape[i] = c.shape()[i];
  ASSERT_EQ(got_shape, shape);
  EXPECT_EQ(c.dtype(), DType::f32);
  auto got = c.to_vector();
  auto v = want.value.values(), e = want.bound.values();
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - v[i]);
    if (!(err <= e[i]) && ++bad <= 8) {  // NaN fails
      ADD_FAILURE() << "at " << kt::fmt_index(kt::unflatten(static_cast<std::int64_t>(i), shape))
                    << ": got " << got[i] << ", expected " << v[i] << " (error " << err
                    << ", bound " << e[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << "elements wrong of " << got.size();
}

TEST_P(MatmulTest, Rank2) {
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, std::tuple{3, 5, 4}, std::tuple{17, 33, 9},
                         std::tuple{64, 64, 64}, std::tuple{1, 100, 1}, std::tuple{70, 3, 129}}) {
    SCOPED_TRACE(testing::Message() << m << "x" << k << " @ " << k << "x" << n);
    auto [a, ra] = input<2>({m, k});
    auto [b, rb] = input<2>({k, n});
    expect_product(kiln::matmul(a, b), ra, rb);
  }
}

// Big enough for BLAS's threaded path, with a transposed operand.
TEST_P(MatmulTest, Large) {
  auto [a, ra] = input<2>({130, 257});
  auto [b, rb] = input<2>({190, 257});
  expect_product(kiln::matmul(a, b.transpose(0, 1)), ra, rb.transpose(0, 1));
  auto [x, rx] = input<3>({3, 70, 129});
  auto [y, ry] = input<3>({1, 129, 90});
  expect_product(kiln::matmul(x, y), rx, ry);
}

TEST_P(MatmulTest, BatchedAndBroadcast) {
  auto [a, ra] = input<3>({4, 5, 6});
  auto [b, rb] = input<3>({4, 6, 3});
  expect_product(kiln::matmul(a, b), ra, rb);
  auto [a1, ra1] = input<3>({1, 5, 6});  // a batch of 1 broadcasts
  expect_product(kiln::matmul(a1, b), ra1, rb);
  auto [b1, rb1] = input<3>({1, 6, 3});
  expect_product(kiln::matmul(a, b1), ra, rb1);
  auto [m, rm] = input<2>({6, 3});  // rank 3 x rank 2
  expect_product(kiln::matmul(a, m), ra, rm);
  auto [l, rl] = input<2>({2, 6});  // rank 2 x rank 3
  expect_product(kiln::matmul(l, b), rl, rb);
  // An expanded batch: stride 0 along the batch.
  auto e = m.unsqueeze(0).expand(Shape<3>{4, 6, 3});
  expect_product(kiln::matmul(a, e), ra, rm.unsqueeze(0).expand({4, 6, 3}));
}

// Strided operands: transposed views (BLAS's transpose flags), slices with leading-dimension
// gaps, step-2 slices (no BLAS layout: a copy or a strided kernel), permuted batches.
TEST_P(MatmulTest, ViewOperands) {
  auto [at, rat] = input<2>({7, 5});
  auto [bt, rbt] = input<2>({9, 7});
  expect_product(kiln::matmul(at.transpose(0, 1), bt.transpose(0, 1)), rat.transpose(0, 1),
                 rbt.transpose(0, 1));
  auto [a, ra] = input<2>({5, 7});
  expect_product(kiln::matmul(a, bt.transpose(0, 1)), ra, rbt.transpose(0, 1));
  auto [w, rw] = input<2>({8, 20});
  auto as = w.slice(0, 1, 6).slice(1, 3, 10);     // [5, 7], row stride 20
  auto bs = w.slice(1, 0, 20, 2).slice(0, 1, 8);  // [7, 10], column stride 2
  expect_product(kiln::matmul(as, bs), rw.slice(0, 1, 6).slice(1, 3, 10),
                 rw.slice(1, 0, 20, 2).slice(0, 1, 8));
  auto [x, rx] = input<3>({5, 3, 4});  // permuted: [3, 5, 4], batch stride 4
  auto [y, ry] = input<3>({3, 4, 2});
  expect_product(kiln::matmul(x.permute({1, 0, 2}), y.transpose(1, 2).transpose(1, 2)),
                 rx.permute({1, 0, 2}), ry);
  auto row = a.slice(0, 0, 1).expand(Shape<2>{4, 7});  // stride-0 rows
  expect_product(kiln::matmul(row, bt.transpose(0, 1)), ra.slice(0, 0, 1).expand({4, 7}),
                 rbt.transpose(0, 1));
}

TEST_P(MatmulTest, ZeroSizedDimensions) {
  auto a = Tensor<2>::zeros({3, 0}, DType::f32, dev()),
       b = Tensor<2>::zeros({0, 4}, DType::f32, dev());
  auto c = kiln::matmul(a, b);  // k == 0: the sum of nothing
  EXPECT_EQ(c.shape(), (Shape<2>{3, 4}));
  EXPECT_EQ(c.to_vector(), std::vector<float>(12, 0.0f));
  auto [x, rx] = input<2>({0, 5});
  auto [y, ry] = input<2>({5, 3});
  EXPECT_EQ(kiln::matmul(x, y).shape(), (Shape<2>{0, 3}));
  EXPECT_EQ(kiln::matmul(y.transpose(0, 1), x.transpose(0, 1)).shape(), (Shape<2>{3, 0}));
  auto z = Tensor<3>::zeros({0, 2, 5}, DType::f32, dev());
  EXPECT_EQ(kiln::matmul(z, y).shape(), (Shape<3>{0, 2, 3}));
  auto k0 = kiln::matmul(Tensor<3>::ones({2, 2, 0}, DType::f32, dev()),
                         Tensor<3>::ones({2, 0, 3}, DType::f32, dev()));
  EXPECT_EQ(k0.to_vector(), std::vector<float>(12, 0.0f));
}

TEST_P(MatmulTest, NaNAndInfinityPropagate) {
  auto a = Tensor<2>::from_data(std::vector<float>{1, 2, std::nanf(""), 4}, {2, 2}, dev());
  auto b = Tensor<2>::from_data(std::vector<float>{1, 0, 0, 1}, {2, 2}, dev());
  auto c = kiln::matmul(a, b).to_vector();  // a NaN reaches every output of its row
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(c[1], 2.0f);
  EXPECT_TRUE(std::isnan(c[2]) && std::isnan(c[3]));
  auto inf = Tensor<2>::full({1, 1}, std::numeric_limits<float>::infinity(), DType::f32, dev());
  EXPECT_EQ(kiln::matmul(inf, Tensor<2>::full({1, 1}, 2, DType::f32, dev())).item(),
            std::numeric_limits<float>::infinity());
}

TEST_P(MatmulTest, Errors) {
  auto a = Tensor<2>::zeros({2, 3}, DType::f32, dev()),
       b = Tensor<2>::zeros({4, 5}, DType::f32, dev());
  try {
    kiln::matmul(a, b);
    ADD_FAILURE() << "matmul of [2, 3] x [4, 5] did not throw";
  } catch (const kiln::ShapeError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("matmul"), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 5]"), std::string::npos) << what;
  }
  auto x = Tensor<3>::zeros({2, 3, 4}, DType::f32, dev()),
       y = Tensor<3>::zeros({3, 4, 5}, DType::f32, dev());
  EXPECT_THROW(kiln::matmul(x, y), kiln::ShapeError);  // batches 2 and 3
  EXPECT_THROW(kiln::matmul(x, Tensor<2>::zeros({5, 4}, DType::f32, dev())), kiln::ShapeError);
  auto i = Tensor<2>::zeros({2, 2}, DType::i32, dev());
  EXPECT_THROW(kiln::matmul(i, i), kiln::DTypeError);
  auto t = Tensor<2>::zeros({2, 2}, DType::boolean, dev());
  EXPECT_THROW(kiln::matmul(t, t), kiln::DTypeError);
}

}  // namespace
