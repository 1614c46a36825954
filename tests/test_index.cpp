// gather, index_select, scatter_add, index_add, one_hot and embedding against a float64 host
// reference on fresh random inputs: every dim of a rank-3 tensor, contiguous, transposed and
// sliced inputs, broadcast index and src, every dtype, duplicate indices, empty indices, and the
// error paths (an index out of range or negative, a wrong index dtype, shapes that do not fit).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
using Dims3 = std::array<std::int64_t, 3>;

constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::boolean};
constexpr DType kAddDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32};

// 2^-p: the relative rounding of one store in dtype t (0: exact).
double rounding(DType t) {
  return t == DType::bf16 ? std::ldexp(1.0, -8) : t == DType::f16 ? std::ldexp(1.0, -11) : 0.0;
}

std::int64_t flat(const Dims3& s, std::int64_t a, std::int64_t b, std::int64_t c) {
  return (a * s[1] + b) * s[2] + c;
}

class IndexTest : public kt::DeviceTest {
 protected:
  // A [s0, s1, s2] tensor of dtype t with random values, seen through `layout`: 0 contiguous,
  // 1 a transpose of a [s1, s0, s2] tensor, 2 a slice (every other row) of a wider one.
  Tensor<3> data(const Dims3& s, DType t, int layout) {
    std::uniform_real_distribution<float> u(-4.f, 4.f);
    auto make = [&](Dims3 shape) {
      std::vector<float> v(static_cast<std::size_t>(shape[0] * shape[1] * shape[2]));
      for (float& e : v) e = t == DType::i32 ? std::round(u(rng()) * 100) : u(rng());
      return Tensor<3>::from_data(v, shape, dev()).to(t);
    };
    if (layout == 1) return make({s[1], s[0], s[2]}).transpose(0, 1);
    if (layout == 2) return make({s[0], 2 * s[1], s[2]}).slice(1, 0, 2 * s[1], 2);
    return make(s);
  }
  std::vector<std::int32_t> indices(std::size_t count, std::int64_t bound) {
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(bound - 1));
    std::vector<std::int32_t> v(count);
    for (auto& e : v) e = d(rng());
    return v;
  }
};

TEST_P(IndexTest, GatherEveryDimDTypeAndLayout) {
  const Dims3 xs{3, 4, 5};
  for (DType t : kDTypes) {
    for (int layout = 0; layout < 3; ++layout) {
      for (int dim = 0; dim < 3; ++dim) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " layout " + std::to_string(layout) +
                     " dim " + std::to_string(dim));
        Dims3 is{2, 3, 4};  // smaller than x outside dim
        is[dim] = 6;        // more indices than x's extent: duplicates
        const Tensor<3> x = data(xs, t, layout);
        const auto iv = indices(static_cast<std::size_t>(is[0] * is[1] * is[2]), xs[dim]);
        const auto index = Tensor<3>::from_data(iv, is, dev());
        const auto got = x.gather(dim, index).to_vector<float>();
        const auto xv = x.to_vector<float>();
        ASSERT_EQ(got.size(), iv.size());
        for (std::int64_t a = 0; a < is[0]; ++a)
          for (std::int64_t b = 0; b < is[1]; ++b)
            for (std::int64_t c = 0; c < is[2]; ++c) {
              const std::int64_t j = flat(is, a, b, c);
              std::int64_t p[3] = {a, b, c};
              p[dim] = iv[j];
              ASSERT_EQ(got[j], xv[flat(xs, p[0], p[1], p[2])]) << j;
            }
      }
    }
  }
}

TEST_P(IndexTest, IndexSelectEveryDimDTypeAndLayout) {
  const Dims3 xs{3, 4, 6};
  for (DType t : kDTypes) {
    for (int layout = 0; layout < 3; ++layout) {
      for (int dim = 0; dim < 3; ++dim) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " dim " + std::to_string(dim));
        const Tensor<3> x = data(xs, t, layout);
        const auto iv = indices(7, xs[dim]);
        const auto got =
            x.index_select(dim, Tensor<1>::from_data(iv, {7}, dev())).to_vector<float>();
        const auto xv = x.to_vector<float>();
        Dims3 os = xs;
        os[dim] = 7;
        for (std::int64_t a = 0; a < os[0]; ++a)
          for (std::int64_t b = 0; b < os[1]; ++b)
            for (std::int64_t c = 0; c < os[2]; ++c) {
              std::int64_t p[3] = {a, b, c};
              p[dim] = iv[p[dim]];
              ASSERT_EQ(got[flat(os, a, b, c)], xv[flat(xs, p[0], p[1], p[2])]);
            }
      }
    }
  }
}

// scatter_add and index_add: x plus every src term at its destination, summed in double; the
// result may differ by the f32 sum's rounding and one rounding to the dtype.
void expect_sums(const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& abs_sum, DType t, int terms) {
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t j = 0; j < ref.size(); ++j) {
    const double bound = abs_sum[j] * (terms + 1) * std::ldexp(1.0, -24) +
                         std::abs(ref[j]) * rounding(t) + (t == DType::i32 ? 0 : 1e-30);
    ASSERT_LE(std::abs(got[j] - ref[j]), bound) << j << ": " << got[j] << " vs " << ref[j];
  }
}

TEST_P(IndexTest, ScatterAddEveryDimDTypeAndLayoutWithDuplicates) {
  const Dims3 xs{3, 4, 5};
  for (DType t : kAddDTypes) {
    for (int layout = 0; layout < 3; ++layout) {
      for (int dim = 0; dim < 3; ++dim) {
        for (bool smaller : {false, true}) {
          SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " layout " + std::to_string(layout) +
                       " dim " + std::to_string(dim) + (smaller ? " smaller index" : ""));
          Dims3 is = smaller ? Dims3{2, 3, 4} : xs;
          is[dim] = 9;  // more than x's extent: duplicates
          Dims3 ss = xs;
          ss[dim] = 10;  // src larger than the index: its extra elements are not read
          const Tensor<3> x = data(xs, t, layout), src = data(ss, t, layout);
          const auto iv = indices(static_cast<std::size_t>(is[0] * is[1] * is[2]), xs[dim]);
          const auto got =
              x.scatter_add(dim, Tensor<3>::from_data(iv, is, dev()), src).to_vector<float>();
          const auto xv = x.to_vector<float>(), sv = src.to_vector<float>();
          std::vector<double> ref(xv.begin(), xv.end()), abs_sum(xv.size());
          for (std::size_t j = 0; j < xv.size(); ++j) abs_sum[j] = std::abs(xv[j]);
          for (std::int64_t a = 0; a < is[0]; ++a)
            for (std::int64_t b = 0; b < is[1]; ++b)
              for (std::int64_t c = 0; c < is[2]; ++c) {
                std::int64_t p[3] = {a, b, c};
                p[dim] = iv[flat(is, a, b, c)];
                const std::int64_t d = flat(xs, p[0], p[1], p[2]);
                ref[d] += sv[flat(ss, a, b, c)];
                abs_sum[d] += std::abs(sv[flat(ss, a, b, c)]);
              }
          expect_sums(got, ref, abs_sum, t, 9);
        }
      }
    }
  }
}

TEST_P(IndexTest, IndexAddEveryDimDTypeAndLayoutWithDuplicates) {
  const Dims3 xs{3, 4, 5};
  for (DType t : kAddDTypes) {
    for (int layout = 0; layout < 3; ++layout) {
      for (int dim = 0; dim < 3; ++dim) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " dim " + std::to_string(dim));
        Dims3 ss = xs;
        ss[dim] = 11;
        const Tensor<3> x = data(xs, t, layout), src = data(ss, t, layout);
        const auto iv = indices(11, xs[dim]);
        const auto got =
            x.index_add(dim, Tensor<1>::from_data(iv, {11}, dev()), src).to_vector<float>();
        const auto xv = x.to_vector<float>(), sv = src.to_vector<float>();
        std::vector<double> ref(xv.begin(), xv.end()), abs_sum(xv.size());
        for (std::size_t j = 0; j < xv.size(); ++j) abs_sum[j] = std::abs(xv[j]);
        for (std::int64_t a = 0; a < ss[0]; ++a)
          for (std::int64_t b = 0; b < ss[1]; ++b)
            for (std::int64_t c = 0; c < ss[2]; ++c) {
              std::int64_t p[3] = {a, b, c};
              p[dim] = iv[p[dim]];
              const std::int64_t d = flat(xs, p[0], p[1], p[2]);
              ref[d] += sv[flat(ss, a, b, c)];
              abs_sum[d] += std::abs(sv[flat(ss, a, b, c)]);
            }
        expect_sums(got, ref, abs_sum, t, 11);
      }
    }
  }
}

// A broadcast (stride-0) index and src: expanded views are read element for element.
TEST_P(IndexTest, BroadcastIndexAndSrc) {
  const auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  const auto index = Tensor<2>::from_data({2, 0, 2, 1}, {1, 4}, dev()).expand({3, 4});
  const auto src = Tensor<2>::full({1, 1}, 1.5f, DType::f32, dev()).expand({3, 4});
  const auto got = x.scatter_add(0, index, src).to_vector<float>();
  const std::vector<float> want = {4.5f, 4.5f, 0, 0, 0, 0, 0, 4.5f, 0, 0, 4.5f, 0};
  (void)want;
  // Each column c gets 3 * 1.5 at row index[c].
  const std::int32_t rows[] = {2, 0, 2, 1};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(got[r * 4 + c], rows[c] == r ? 4.5f : 0.f);
  const auto g = x.gather(0, index).to_vector<float>();
  for (float v : g) EXPECT_EQ(v, 0.f);
}

TEST_P(IndexTest, EmptyIndex) {
  const auto x = Tensor<2>::full({3, 4}, 2.f, DType::f32, dev());
  const auto none = Tensor<1>::zeros({0}, DType::i32, dev());
  EXPECT_EQ(x.index_select(1, none).shape(), (kiln::Shape<2>{3, 0}));
  const auto src = Tensor<2>::zeros({3, 0}, DType::f32, dev());
  EXPECT_EQ(x.index_add(1, none, src).to_vector<float>(), x.to_vector<float>());
  const auto none2 = Tensor<2>::zeros({0, 4}, DType::i32, dev());
  EXPECT_EQ(x.gather(0, none2).numel(), 0);
  EXPECT_EQ(x.scatter_add(0, none2, Tensor<2>::zeros({0, 4}, DType::f32, dev())).to_vector<float>(),
            x.to_vector<float>());
}

TEST_P(IndexTest, OneHotAndEmbedding) {
  const auto ids = Tensor<2>::from_data({3, 0, 4, 3, 1, 2}, {2, 3}, dev());
  const auto oh = kiln::one_hot(ids, 5);
  EXPECT_EQ(oh.shape(), (kiln::Shape<3>{2, 3, 5}));
  const auto v = oh.to_vector<int>();
  const int idv[] = {3, 0, 4, 3, 1, 2};
  for (int j = 0; j < 6; ++j)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(v[j * 5 + c], idv[j] == c ? 1 : 0);
  EXPECT_EQ(kiln::one_hot(ids, 5, DType::f32).to_vector<float>()[3], 1.f);

  for (DType t : {DType::f32, DType::bf16}) {
    const Tensor<3> w3 = data({1, 6, 24}, t, 0);
    const auto w = w3.reshape(kiln::Shape<2>{6, 24});
    const auto e = kiln::embedding(w, ids);
    EXPECT_EQ(e.shape(), (kiln::Shape<3>{2, 3, 24}));
    const auto ev = e.to_vector<float>(), wv = w.to_vector<float>();
    for (int j = 0; j < 6; ++j)
      for (int c = 0; c < 24; ++c) ASSERT_EQ(ev[j * 24 + c], wv[idv[j] * 24 + c]);
  }
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_P(IndexTest, Errors) {
  const auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  // Out of range and negative: IndexError naming the op, the value and the bound. On CUDA the
  // error surfaces at the read.
  auto bad = [&](std::int32_t v) { return Tensor<1>::from_data({0, v}, {2}, dev()); };
  const std::string high = error_of([&] { (void)x.index_select(0, bad(3)).to_vector<float>(); });
  EXPECT_NE(high.find("index_select: index 3 is out of range for a dim of size 3"),
            std::string::npos)
      << high;
  const std::string neg = error_of([&] { (void)x.index_select(1, bad(-1)).to_vector<float>(); });
  EXPECT_NE(neg.find("index_select: index -1"), std::string::npos) << neg;
  EXPECT_THROW(
      (void)x.index_add(0, bad(7), Tensor<2>::zeros({2, 4}, DType::f32, dev())).to_vector<float>(),
      kiln::IndexError);
  const auto gi = Tensor<2>::from_data({0, 1, 2, 5}, {1, 4}, dev());
  const std::string g = error_of([&] { (void)x.gather(1, gi).to_vector<float>(); });
  EXPECT_NE(g.find("gather: index 5"), std::string::npos) << g;
  EXPECT_THROW(
      (void)x.scatter_add(1, gi, Tensor<2>::ones({1, 4}, DType::f32, dev())).to_vector<float>(),
      kiln::IndexError);
  const std::string oh = error_of([&] {
    (void)kiln::one_hot(Tensor<1>::from_data({0, 5}, {2}, dev()), 5).to_vector<int>();
  });
  EXPECT_NE(oh.find("index 5"), std::string::npos) << oh;
  const std::string em = error_of(
      [&] { (void)kiln::embedding(x, Tensor<1>::from_data({3}, {1}, dev())).to_vector<float>(); });
  EXPECT_NE(em.find("index 3"), std::string::npos) << em;
  // After an error the device works on.
  EXPECT_EQ(x.index_select(0, bad(2)).to_vector<float>().size(), 8u);

  // Index dtype, shapes, src dtype, bool sums.
  const auto fidx = Tensor<1>::from_data({0.f}, {1}, dev());
  EXPECT_THROW((void)x.index_select(0, fidx), kiln::DTypeError);
  EXPECT_THROW((void)x.gather(0, Tensor<2>::zeros({4, 5}, DType::i32, dev())), kiln::ShapeError);
  EXPECT_THROW((void)x.index_add(0, bad(1), Tensor<2>::zeros({3, 4}, DType::f32, dev())),
               kiln::ShapeError);
  EXPECT_THROW((void)x.index_add(0, bad(1), Tensor<2>::zeros({2, 4}, DType::bf16, dev())),
               kiln::DTypeError);
  EXPECT_THROW((void)x.scatter_add(0, Tensor<2>::zeros({2, 4}, DType::i32, dev()),
                                   Tensor<2>::zeros({1, 4}, DType::f32, dev())),
               kiln::ShapeError);
  const auto b = Tensor<2>::zeros({3, 4}, DType::boolean, dev());
  EXPECT_THROW((void)b.index_add(0, bad(1), Tensor<2>::zeros({2, 4}, DType::boolean, dev())),
               kiln::DTypeError);
  EXPECT_THROW((void)kiln::one_hot(bad(1), 0), kiln::ValueError);
}

// Deterministic mode: the same sums bit for bit on every run (the CPU always; CUDA sums each
// destination in index order instead of with atomics).
TEST_P(IndexTest, DeterministicModeIsBitIdentical) {
  const kt::DeterministicFor scope;
  const auto w = Tensor<2>::random({64, 96}, kiln::Distribution::normal(), dev(), seed());
  const auto grad = Tensor<2>::random({2000, 96}, kiln::Distribution::normal(), dev(), seed() + 1);
  const auto ids = Tensor<1>::from_data(indices(2000, 64), {2000}, dev());
  const auto first = w.index_add(0, ids, grad).to_vector<float>();
  for (int run = 0; run < 3; ++run) EXPECT_EQ(w.index_add(0, ids, grad).to_vector<float>(), first);
  // scatter_add's per-element owners, in bf16 (f32 sums rounded once).
  const auto wb = w.to(DType::bf16), gb = grad.slice(0, 0, 200).to(DType::bf16);
  const auto sidx = Tensor<2>::from_data(indices(200 * 96, 64), {200, 96}, dev());
  const auto sfirst = wb.scatter_add(0, sidx, gb).to_vector<float>();
  for (int run = 0; run < 3; ++run)
    EXPECT_EQ(wb.scatter_add(0, sidx, gb).to_vector<float>(), sfirst);
}

// Deterministic index_add sums each destination in increasing index order from x's value (f32
// for the half types, rounded once): the CPU's order, so every device gives the CPU's bits.
// Along a middle dim (outer O = 3), with one index repeated many times (a long run after the
// sort), rows no index names, and every accumulating dtype.
TEST_P(IndexTest, DeterministicIndexAddEqualsTheCpuBitForBit) {
  const kt::DeterministicFor scope;
  const auto cpu = kiln::Device::cpu();
  // 40 features: rows of 16-byte words in every dtype; 5: an element per lane.
  for (const auto& [t, features] :
       {std::pair{DType::f32, 40}, std::pair{DType::bf16, 40}, std::pair{DType::f16, 40},
        std::pair{DType::i32, 40}, std::pair{DType::f32, 5}, std::pair{DType::bf16, 5}}) {
    SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + std::to_string(features));
    const Tensor<3> x = data({3, 50, features}, t, 0), src = data({3, 700, features}, t, 0);
    auto iv = indices(700, 45);  // rows 45-49 keep x
    for (std::size_t k = 0; k < iv.size(); k += 3) iv[k] = 7;
    const auto ids = Tensor<1>::from_data(iv, {700}, dev());
    const auto got = x.index_add(1, ids, src).to_vector<float>();
    const auto want = x.to(cpu).index_add(1, ids.to(cpu), src.to(cpu)).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t e = 0; e < got.size(); ++e)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), std::bit_cast<std::uint32_t>(want[e])) << e;
  }
  // A bad index is still reported.
  const auto w = Tensor<2>::zeros({4, 3}, DType::f32, dev());
  const auto bad = Tensor<1>::from_data(std::vector<std::int32_t>{1, 4}, {2}, dev());
  EXPECT_THROW(
      (void)w.index_add(0, bad, Tensor<2>::zeros({2, 3}, DType::f32, dev())).to_vector<float>(),
      kiln::IndexError);
}

// An index op reads the pending result of an element-wise chain (fusion runs the group first)
// and its own result feeds the next chain.
TEST_P(IndexTest, ReadsAndFeedsElementwiseWork) {
  const auto x = Tensor<2>::from_data({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 2}, dev());
  const auto y = x * 2.f + 1.f;  // recorded, not run, where fusion is live
  const auto idx = Tensor<1>::from_data({2, 0}, {2}, dev());
  const auto z = y.index_select(0, idx) - 1.f;
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{10, 12, 2, 4}));
}

KILN_INSTANTIATE_DEVICES(IndexTest);

}  // namespace
