// Masks and shape ops of issue 19: tril, triu, masked_fill, split, chunk, stack, repeat, pad.
// Every op against a host reference computed index by index (exact: these ops move values),
// in every dtype, on contiguous, transposed and sliced inputs, with size-1 and empty dims, and
// every error path; then a chain of them with fusion on and off, bit for bit.
#include <cstring>
#include <limits>

#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Dims;
using kt::Ref;

constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};
constexpr std::int64_t kBig = std::numeric_limits<std::int64_t>::max();

// The reference of shape `shape` whose element at idx is f(idx).
template <class F>
Ref by_index(const Dims& shape, F f) {
  std::vector<double> v(static_cast<std::size_t>(kt::numel_of(shape)));
  for (std::size_t k = 0; k < v.size(); ++k)
    v[k] = f(kt::unflatten(static_cast<std::int64_t>(k), shape));
  return Ref(shape, std::move(v));
}

// `value` as a tensor of dtype t stores it (full's conversion).
double stored(double value, DType t) {
  switch (t) {
    case DType::f32:
      return static_cast<float>(value);
    case DType::i32:
      return std::trunc(value);
    case DType::boolean:
      return value != 0;
    case DType::bf16:
    case DType::f16:
      return kt::round_to_half(value, t);
  }
  return value;
}

template <std::size_t D>
struct Case {
  std::string name;
  Tensor<D> t;
  Ref r;
};

class ShapeOpsTest : public kt::DeviceTest {
 protected:
  static void set_fusion(bool on) {
    kiln::Config c = kiln::config();
    c.fusion = on;
    kiln::set_config(c);
  }
  // Whether the fusion decorator is compiled in and switched on (it is by default).
  static bool fusion_live() {
    for (const auto& f : kiln::features())
      if (f.name == "fusion") return f.live;
    return false;
  }
  // A contiguous tensor of dtype t with fresh values that every dtype holds exactly (integers
  // in [-9, 9]; 0 and 1 for bool; halves of them for the floating dtypes), and its reference.
  template <std::size_t D>
  std::pair<Tensor<D>, Ref> input(const Shape<D>& s, DType t) {
    Dims dims(s.begin(), s.end());
    const bool b = t == DType::boolean;
    auto v = kt::ints(static_cast<std::size_t>(kt::numel_of(dims)), b ? 0 : -18, b ? 1 : 18, rng());
    std::vector<float> f(v.begin(), v.end());
    if (kiln::is_floating(t))
      for (auto& x : f) x /= 2;
    auto x = Tensor<D>::from_data(f, s, dev()).to(t);
    return {x, Ref::of(f, dims)};
  }
  // The same logical shape `s` as a contiguous tensor, a transposed view of the last two dims
  // and a slice with step 2 of the last dim (D >= 2).
  template <std::size_t D>
  std::vector<Case<D>> layouts(const Shape<D>& s, DType t) {
    std::vector<Case<D>> out;
    auto [c, cr] = input<D>(s, t);
    out.push_back({"contiguous", c, cr});
    Shape<D> swapped = s;
    std::swap(swapped[D - 1], swapped[D - 2]);
    auto [tb, tr] = input<D>(swapped, t);
    out.push_back({"transposed", tb.transpose(-1, -2), tr.transpose(D - 1, D - 2)});
    Shape<D> wide = s;
    wide[D - 1] = 2 * s[D - 1] + 1;
    auto [sb, sr] = input<D>(wide, t);
    out.push_back({"sliced", sb.slice(-1, 1, kBig, 2), sr.slice(D - 1, 1, kBig, 2)});
    return out;
  }
};
KILN_INSTANTIATE_DEVICES(ShapeOpsTest);

// ---- tril, triu ----

template <std::size_t D>
Ref triangle_ref(const Ref& r, std::int64_t k, bool lower) {
  return by_index(r.shape(), [&](const Dims& i) {
    const std::int64_t d = i[D - 1] - i[D - 2];
    return (lower ? d <= k : d >= k) ? r.at(i) : 0.0;
  });
}

template <std::size_t D>
void check_triangles(const std::vector<Case<D>>& cases) {
  for (const auto& c : cases) {
    for (std::int64_t k : {-kBig, -4L, -1L, 0L, 1L, 2L, 5L, kBig}) {
      SCOPED_TRACE(c.name + " " + kiln::dtype_name(c.t.dtype()) + " offset " + std::to_string(k));
      auto lo = c.t.tril(k), up = c.t.triu(k);
      EXPECT_EQ(lo.dtype(), c.t.dtype());
      EXPECT_TRUE(kt::matches(lo, triangle_ref<D>(c.r, k, true)));
      EXPECT_TRUE(kt::matches(up, triangle_ref<D>(c.r, k, false)));
    }
  }
}

TEST_P(ShapeOpsTest, TrilTriu) {
  for (DType t : kDTypes) {
    for (Shape<2> s : {Shape<2>{4, 6}, Shape<2>{6, 4}, Shape<2>{1, 1}, Shape<2>{0, 3},
                       Shape<2>{3, 0}, Shape<2>{1, 5}})
      check_triangles<2>(layouts<2>(s, t));
    for (Shape<3> s : {Shape<3>{2, 3, 5}, Shape<3>{1, 4, 4}, Shape<3>{0, 2, 2}})
      check_triangles<3>(layouts<3>(s, t));
  }
  // Defaults are the main diagonal, as torch.tril(x) and torch.triu(x).
  auto [x, r] = input<2>({3, 3}, DType::f32);
  EXPECT_TRUE(kt::matches(x.tril(), triangle_ref<2>(r, 0, true)));
  EXPECT_TRUE(kt::matches(x.triu(), triangle_ref<2>(r, 0, false)));
  // A broadcast (stride-0) input: every row the same.
  auto row = input<2>({1, 4}, DType::i32);
  auto e = row.first.expand(Shape<2>{3, 4});
  EXPECT_TRUE(kt::matches(e.tril(1), triangle_ref<2>(row.second.expand({3, 4}), 1, true)));
}

TEST_P(ShapeOpsTest, TrilTriuErrors) {
  // Rank < 2 does not compile (requires D >= 2); the dynamic layer's check says so at run time.
  auto v = Tensor<1>::zeros({4}, DType::f32, dev());
  EXPECT_THROW(kiln::detail::triangle(v.handle(), 0, true), kiln::ShapeError);
  try {
    kiln::detail::triangle(v.handle(), 0, false);
  } catch (const kiln::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("triu"), std::string::npos) << e.what();
  }
  Tensor<2> placeholder;
  EXPECT_THROW(placeholder.tril(), kiln::ValueError);
}

// ---- masked_fill ----

TEST_P(ShapeOpsTest, MaskedFill) {
  for (DType t : kDTypes) {
    for (const auto& c : layouts<2>({3, 4}, t)) {
      for (double value : {7.0, 0.0, 2.5, -0.1, 1.0}) {
        SCOPED_TRACE(c.name + " " + kiln::dtype_name(t) + " value " + std::to_string(value));
        // Masks of x's shape, broadcast ones (a row, a column, one element, rank 0) and a
        // transposed one.
        auto [m2, mr2] = input<2>({3, 4}, DType::boolean);
        auto [mrow, mrrow] = input<1>({4}, DType::boolean);
        auto [mcol, mrcol] = input<2>({3, 1}, DType::boolean);
        auto [mt, mrt] = input<2>({4, 3}, DType::boolean);
        const double v = stored(value, t);
        auto check = [&](const auto& mask, const Ref& mref) {
          auto y = c.t.masked_fill(mask, value);
          EXPECT_EQ(y.dtype(), t) << "masked_fill keeps x's dtype";
          EXPECT_TRUE(kt::matches(
              y, Ref::zip(c.r, mref, [&](double x, double m) { return m != 0 ? v : x; })));
        };
        check(m2, mr2);
        check(mrow, mrrow);
        check(mcol, mrcol);
        check(mt.transpose(0, 1), mrt.transpose(0, 1));
        check(Tensor<0>::full({}, true, DType::boolean, dev()), Ref::scalar(1));
        check(Tensor<1>::full({1}, false, DType::boolean, dev()), Ref({1}, {0}));
      }
    }
  }
  // Empty and size-1 tensors.
  auto e = Tensor<2>::zeros({0, 3}, DType::f32, dev());
  EXPECT_EQ(e.masked_fill(Tensor<1>::ones({3}, DType::boolean, dev()), 1).shape(),
            (Shape<2>{0, 3}));
  auto one = Tensor<2>::full({1, 1}, 4, DType::i32, dev());
  EXPECT_EQ(one.masked_fill(Tensor<2>::ones({1, 1}, DType::boolean, dev()), -3).item<int>(), -3);
}

TEST_P(ShapeOpsTest, MaskedFillErrors) {
  auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  auto xi = Tensor<2>::zeros({3, 4}, DType::i32, dev());
  auto mask = Tensor<2>::ones({3, 4}, DType::boolean, dev());
  EXPECT_THROW(x.masked_fill(Tensor<2>::ones({3, 4}, DType::f32, dev()), 1), kiln::DTypeError);
  EXPECT_THROW(x.masked_fill(Tensor<2>::ones({3, 4}, DType::i32, dev()), 1), kiln::DTypeError);
  EXPECT_THROW(x.masked_fill(Tensor<2>::ones({2, 4}, DType::boolean, dev()), 1), kiln::ShapeError);
  EXPECT_THROW(x.masked_fill(Tensor<1>::ones({5}, DType::boolean, dev()), 1), kiln::ShapeError);
  // The mask broadcasts to x, never x to the mask.
  auto row = Tensor<2>::zeros({1, 4}, DType::f32, dev());
  try {
    row.masked_fill(mask, 1);
    ADD_FAILURE() << "x broadcast to the mask";
  } catch (const kiln::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("masked_fill"), std::string::npos) << e.what();
  }
  EXPECT_THROW(xi.masked_fill(mask, 1e10), kiln::ValueError);
  EXPECT_THROW(xi.masked_fill(mask, std::nan("")), kiln::ValueError);
  Tensor<2> placeholder;
  EXPECT_THROW(x.masked_fill(placeholder, 1), kiln::ValueError);
}

// ---- split, chunk ----

TEST_P(ShapeOpsTest, SplitAndChunk) {
  for (DType t : kDTypes) {
    for (const auto& c : layouts<2>({7, 4}, t)) {
      SCOPED_TRACE(c.name + " " + kiln::dtype_name(t));
      // Pieces along dim `dim` of the given sizes, each a view of x.
      auto expect_pieces = [&](const std::vector<Tensor<2>>& got, int dim,
                               const std::vector<std::int64_t>& sizes) {
        ASSERT_EQ(got.size(), sizes.size());
        std::int64_t at = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          EXPECT_TRUE(kt::matches(got[i], c.r.slice(dim, at, at + sizes[i])));
          EXPECT_TRUE(kt::shares_buffer(got[i], c.t)) << "piece " << i << " is not a view";
          at += sizes[i];
        }
      };
      expect_pieces(c.t.split(3), 0, {3, 3, 1});
      expect_pieces(c.t.split(3, -2), 0, {3, 3, 1});
      expect_pieces(c.t.split(2, 1), 1, {2, 2});
      expect_pieces(c.t.split(1, 1), 1, {1, 1, 1, 1});
      expect_pieces(c.t.split(10), 0, {7});
      expect_pieces(c.t.split(kBig, 1), 1, {4});
      expect_pieces(c.t.split(std::vector<std::int64_t>{2, 0, 5}), 0, {2, 0, 5});
      expect_pieces(c.t.split({2, 5}), 0, {2, 5});  // a braced list of two or more: sizes
      expect_pieces(c.t.split(std::vector<std::int64_t>{4}, -1), 1, {4});
      expect_pieces(c.t.chunk(3), 0, {3, 3, 1});
      expect_pieces(c.t.chunk(4), 0, {2, 2, 2, 1});
      expect_pieces(c.t.chunk(7), 0, {1, 1, 1, 1, 1, 1, 1});
      expect_pieces(c.t.chunk(100), 0, {1, 1, 1, 1, 1, 1, 1});
      expect_pieces(c.t.chunk(3, 1), 1, {2, 2});
      expect_pieces(c.t.chunk(1, 1), 1, {4});
    }
  }
  // 5 in 4 chunks gives 2, 2, 1 (torch.chunk); an empty dim gives one empty piece.
  auto x = Tensor<1>::zeros({5}, DType::f32, dev());
  auto pieces = x.chunk(4);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].numel(), 1);
  auto e = Tensor<2>::zeros({0, 3}, DType::f32, dev());
  ASSERT_EQ(e.split(2).size(), 1u);
  EXPECT_EQ(e.split(2)[0].shape(), (Shape<2>{0, 3}));
  ASSERT_EQ(e.chunk(3).size(), 1u);
  EXPECT_EQ(e.split(std::vector<std::int64_t>{0, 0}).size(), 2u);
}

TEST_P(ShapeOpsTest, SplitAndChunkErrors) {
  auto x = Tensor<2>::zeros({7, 4}, DType::f32, dev());
  EXPECT_THROW(x.split(0), kiln::ValueError);
  EXPECT_THROW(x.split(-2), kiln::ValueError);
  EXPECT_THROW(x.split(std::vector<std::int64_t>{3, 3}), kiln::ValueError);
  EXPECT_THROW(x.split(std::vector<std::int64_t>{8, -1}), kiln::ValueError);
  EXPECT_THROW(x.split(std::vector<std::int64_t>{kBig, kBig, 2}), kiln::ValueError);
  EXPECT_THROW(x.split(2, 2), kiln::IndexError);
  EXPECT_THROW(x.split(2, -3), kiln::IndexError);
  EXPECT_THROW(x.chunk(0), kiln::ValueError);
  EXPECT_THROW(x.chunk(-1), kiln::ValueError);
  EXPECT_THROW(x.chunk(2, 5), kiln::IndexError);
}

// ---- stack ----

TEST_P(ShapeOpsTest, Stack) {
  for (DType t : kDTypes) {
    for (Shape<2> s : {Shape<2>{2, 3}, Shape<2>{1, 1}, Shape<2>{0, 3}}) {
      auto cases = layouts<2>(s, t);  // three tensors of shape s, in three layouts
      std::vector<Tensor<2>> xs;
      for (const auto& c : cases) xs.push_back(c.t);
      for (int dim = -3; dim <= 2; ++dim) {
        SCOPED_TRACE(kiln::dtype_name(t) + std::string(" dim ") + std::to_string(dim));
        const int d = dim < 0 ? dim + 3 : dim;
        Dims shape{s[0], s[1]};
        shape.insert(shape.begin() + d, 3);
        auto want = by_index(shape, [&](Dims i) {
          const auto k = static_cast<std::size_t>(i[d]);
          i.erase(i.begin() + d);
          return cases[k].r.at(i);
        });
        auto y = kiln::stack(xs, dim);
        EXPECT_EQ(y.dtype(), t);
        EXPECT_TRUE(kt::matches(y, want));
      }
    }
  }
  // A braced list deduces D; the default dim is 0; one tensor is fine.
  auto a = Tensor<1>::full({2}, 1, DType::i32, dev());
  auto b = Tensor<1>::full({2}, 2, DType::i32, dev());
  auto y = kiln::stack({a, b});
  static_assert(std::is_same_v<decltype(y), Tensor<2>>);
  EXPECT_EQ(y.to_vector<int>(), (std::vector<int>{1, 1, 2, 2}));
  EXPECT_EQ(kiln::stack({a}, 1).shape(), (Shape<2>{2, 1}));
  auto s0 = kiln::stack({Tensor<0>::full({}, 3, DType::f32, dev())});
  EXPECT_EQ(s0.shape(), (Shape<1>{1}));
}

TEST_P(ShapeOpsTest, StackErrors) {
  auto a = Tensor<2>::zeros({2, 3}, DType::f32, dev());
  EXPECT_THROW(kiln::stack(std::vector<Tensor<2>>{}), kiln::ValueError);
  EXPECT_THROW(kiln::stack({a, Tensor<2>::zeros({3, 3}, DType::f32, dev())}), kiln::ShapeError);
  EXPECT_THROW(kiln::stack({a, a.transpose(0, 1)}), kiln::ShapeError);
  EXPECT_THROW(kiln::stack({a, Tensor<2>::zeros({2, 3}, DType::i32, dev())}), kiln::DTypeError);
  EXPECT_THROW(kiln::stack({a, a}, 3), kiln::IndexError);
  EXPECT_THROW(kiln::stack({a, a}, -4), kiln::IndexError);
  try {
    kiln::stack({a, Tensor<2>::zeros({2, 4}, DType::f32, dev())}, 0);
  } catch (const kiln::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("stack"), std::string::npos) << e.what();
  }
}

// ---- repeat ----

TEST_P(ShapeOpsTest, Repeat) {
  for (DType t : kDTypes) {
    for (Shape<2> s : {Shape<2>{2, 3}, Shape<2>{1, 1}, Shape<2>{0, 3}}) {
      for (const auto& c : layouts<2>(s, t)) {
        SCOPED_TRACE(c.name + " " + kiln::dtype_name(t) + " " + kiln::format_dims({s[0], s[1]}));
        auto tiled = [&](const Dims& shape) {
          const std::size_t lead = shape.size() - 2;
          return by_index(shape, [&](const Dims& i) {
            return c.r.at({i[lead] % s[0], i[lead + 1] % s[1]});
          });
        };
        auto y = c.t.repeat(2, 3);
        EXPECT_TRUE(y.is_contiguous());
        EXPECT_TRUE(kt::matches(y, tiled({2 * s[0], 3 * s[1]})));
        EXPECT_TRUE(kt::matches(c.t.repeat(1, 1), c.r));
        EXPECT_TRUE(kt::matches(c.t.repeat(0, 2), tiled({0, 2 * s[1]})));
        auto z = c.t.repeat(2, 1, 3);  // a leading dim, as torch's x.repeat(2, 1, 3)
        static_assert(std::is_same_v<decltype(z), Tensor<3>>);
        EXPECT_TRUE(kt::matches(z, tiled({2, s[0], 3 * s[1]})));
      }
    }
  }
  auto x = Tensor<0>::full({}, 5, DType::i32, dev());
  EXPECT_EQ(x.repeat(3).to_vector<int>(), (std::vector<int>{5, 5, 5}));
  auto b = Tensor<1>::from_data({true, false}, {2}, dev());
  EXPECT_EQ(b.repeat(2).to_vector<bool>(), (std::vector<bool>{true, false, true, false}));
}

TEST_P(ShapeOpsTest, Flip) {
  for (DType t : kDTypes) {
    for (Shape<2> s : {Shape<2>{3, 5}, Shape<2>{1, 4}, Shape<2>{0, 3}}) {
      for (const auto& c : layouts<2>(s, t)) {
        SCOPED_TRACE(c.name + " " + kiln::dtype_name(t) + " " + kiln::format_dims({s[0], s[1]}));
        auto flipped = [&](bool rows, bool cols) {
          return by_index({s[0], s[1]}, [&](const Dims& i) {
            return c.r.at({rows ? s[0] - 1 - i[0] : i[0], cols ? s[1] - 1 - i[1] : i[1]});
          });
        };
        EXPECT_TRUE(kt::matches(c.t.flip({0}), flipped(true, false)));
        EXPECT_TRUE(kt::matches(c.t.flip({-1}), flipped(false, true)));
        EXPECT_TRUE(kt::matches(c.t.flip({1, 0}), flipped(true, true)));
        EXPECT_TRUE(kt::matches(c.t.flip({}), c.r));
        EXPECT_EQ(c.t.flip({0}).dtype(), t);
      }
    }
  }
  EXPECT_THROW((void)Tensor<2>::zeros({2, 2}, DType::f32, dev()).flip({0, -2}), kiln::ValueError);
  EXPECT_THROW((void)Tensor<2>::zeros({2, 2}, DType::f32, dev()).flip({2}), kiln::IndexError);
}

TEST_P(ShapeOpsTest, RepeatErrors) {
  auto x = Tensor<2>::zeros({2, 3}, DType::f32, dev());
  EXPECT_THROW(x.repeat(-1, 2), kiln::ValueError);
  EXPECT_THROW(x.repeat(kBig, 2), kiln::ShapeError);
  EXPECT_THROW(x.repeat(std::int64_t{1} << 40, std::int64_t{1} << 40), kiln::ShapeError);
  // The dynamic layer's check of too few counts (which Tensor<D> rejects at compile time).
  const std::int64_t one[] = {2};
  EXPECT_THROW(kiln::detail::repeat(x.handle(), one), kiln::ValueError);
}

// ---- pad ----

// F.pad's reference: element i of the result is x[i - before] where that is in range.
template <std::size_t D>
Ref pad_ref(const Ref& r, const std::vector<std::int64_t>& pads, double value) {
  Dims before(D, 0), shape = r.shape();
  for (std::size_t j = 0; j < pads.size() / 2; ++j) {
    before[D - 1 - j] = pads[2 * j];
    shape[D - 1 - j] += pads[2 * j] + pads[2 * j + 1];
  }
  return by_index(shape, [&](const Dims& i) {
    Dims src(D);
    for (std::size_t d = 0; d < D; ++d) {
      src[d] = i[d] - before[d];
      if (src[d] < 0 || src[d] >= r.shape()[d]) return value;
    }
    return r.at(src);
  });
}

TEST_P(ShapeOpsTest, Pad) {
  for (DType t : kDTypes) {
    for (Shape<2> s : {Shape<2>{3, 4}, Shape<2>{1, 1}, Shape<2>{0, 3}}) {
      for (const auto& c : layouts<2>(s, t)) {
        for (const std::vector<std::int64_t>& pads :
             std::vector<std::vector<std::int64_t>>{{1, 2},
                                                    {0, 0},
                                                    {1, 2, 3, 0},
                                                    {0, 1, 2, 0},
                                                    {2, 2, 2, 2},
                                                    {-1, 1},
                                                    {1, -1, 0, 1},
                                                    {0, -1, 1, 0},
                                                    {}}) {
          for (double value : {0.0, 1.5, -7.0}) {
            SCOPED_TRACE(c.name + " " + kiln::dtype_name(t) + " " +
                         kiln::format_dims({s[0], s[1]}) + " pads " + kiln::format_dims(pads) +
                         " value " + std::to_string(value));
            auto y = kiln::pad(c.t, pads, value);
            EXPECT_EQ(y.dtype(), t);
            EXPECT_TRUE(kt::matches(y, pad_ref<2>(c.r, pads, stored(value, t))));
          }
        }
      }
    }
  }
  // Rank 3, pads on all three dims, the default value 0; cropping a dim to nothing.
  auto [x, r] = input<3>({2, 3, 4}, DType::f32);
  EXPECT_TRUE(kt::matches(kiln::pad(x, {1, 0, 0, 2, 1, 1}), pad_ref<3>(r, {1, 0, 0, 2, 1, 1}, 0)));
  EXPECT_TRUE(kt::matches(kiln::pad(x.transpose(0, 2), {1, 1}, 9),
                          pad_ref<3>(r.transpose(0, 2), {1, 1}, 9)));
  EXPECT_EQ(kiln::pad(x, {-2, -2}).shape(), (Shape<3>{2, 3, 0}));
  EXPECT_EQ(kiln::pad(x, {-2, -2, 1, 1}).shape(), (Shape<3>{2, 5, 0}));
}

TEST_P(ShapeOpsTest, PadErrors) {
  auto x = Tensor<2>::zeros({3, 4}, DType::f32, dev());
  EXPECT_THROW(kiln::pad(x, {1}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {1, 1, 1}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {1, 1, 1, 1, 1, 1}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {-3, -2}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {-5, 0}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {0, 0, 0, -4}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {kBig, kBig}), kiln::ValueError);
  EXPECT_THROW(kiln::pad(x, {kBig - 10, 0}), kiln::ShapeError);  // too many elements
  auto xi = Tensor<2>::zeros({3, 4}, DType::i32, dev());
  EXPECT_THROW(kiln::pad(xi, {1, 1}, std::nan("")), kiln::ValueError);
  EXPECT_THROW(kiln::pad(xi, {1, 1}, 1e12), kiln::ValueError);
  try {
    kiln::pad(x, {1, 2, 3});
  } catch (const kiln::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("pad"), std::string::npos) << e.what();
  }
}

// ---- fusion ----

// A chain of every op above (and element-wise work between them), run with fusion on and off:
// the results must agree bit for bit, in f32 and bf16.
TEST_P(ShapeOpsTest, FusionOnAndOffAgreeBitForBit) {
  kt::ConfigGuard guard;
  for (DType t : {DType::f32, DType::bf16, DType::i32}) {
    const Tensor<2> x = input<2>({5, 6}, t).first;
    const Tensor<1> mask = input<1>({6}, DType::boolean).first;
    auto chain = [&] {
      auto y = ((x * 2).tril(1).masked_fill(mask, 3) + 1).triu(-2);
      auto parts = y.transpose(0, 1).chunk(4);  // views of a pending result
      auto tiled = (parts[0] * 3).repeat(2, 1);
      auto padded = kiln::pad(tiled.split(2)[1] - 1, {1, 2, 0, 1}, 4);
      auto s = kiln::stack({padded, padded * 2}, 1).sum(1);
      return std::vector<std::vector<float>>{y.to_vector(), tiled.to_vector(), padded.to_vector(),
                                             s.to_vector()};
    };
    set_fusion(true);
    const auto before = kiln::fusion_stats().ops_recorded;
    const auto fused = chain();
    if (fusion_live()) {
      EXPECT_GT(kiln::fusion_stats().ops_recorded, before) << "nothing was recorded: not fused";
    }
    set_fusion(false);
    const auto eager = chain();
    ASSERT_EQ(fused.size(), eager.size());
    for (std::size_t i = 0; i < fused.size(); ++i) {
      ASSERT_EQ(fused[i].size(), eager[i].size());
      EXPECT_EQ(0, std::memcmp(fused[i].data(), eager[i].data(), fused[i].size() * sizeof(float)))
          << kiln::dtype_name(t) << " result " << i << " differs with fusion on";
    }
  }
}

}  // namespace
