// Shape ops: reshape, transpose, permute, slice, expand, unsqueeze, squeeze (views that share
// the buffer), cat, and their error paths; ops on views of views.
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kt::Ref;

class ShapeTest : public kt::DeviceTest {
 protected:
  // A contiguous tensor of the given shape with fresh values, and its reference.
  template <std::size_t D>
  std::pair<Tensor<D>, Ref> input(const Shape<D>& s) {
    kiln::Dims dims(s.begin(), s.end());
    auto v = kt::uniform(static_cast<std::size_t>(kt::numel_of(dims)), -9, 9, rng());
    return {Tensor<D>::from_data(v, s, dev()), Ref::of(v, dims)};
  }
};
KILN_INSTANTIATE_DEVICES(ShapeTest);

TEST_P(ShapeTest, Reshape) {
  auto [x, r] = input<2>({4, 6});
  auto y = x.reshape(Shape<2>{3, 8});
  EXPECT_TRUE(kt::matches(y, r.reshape({3, 8})));
  EXPECT_TRUE(kt::shares_buffer(x, y)) << "reshape of a contiguous tensor is a view";
  EXPECT_TRUE(kt::matches(x.reshape(Shape<2>{-1, 4}), r.reshape({6, 4})));
  EXPECT_TRUE(kt::matches(x.reshape(Shape<1>{-1}), r.reshape({24})));
  EXPECT_TRUE(kt::matches(x.reshape(Shape<3>{2, -1, 3}), r.reshape({2, 4, 3})));
  EXPECT_TRUE(kt::matches(x.reshape(Shape<4>{1, 24, 1, 1}), r.reshape({1, 24, 1, 1})));
  // A non-contiguous input reshapes by copy, in the row-major order of its logical shape.
  auto t = x.transpose(0, 1).reshape(Shape<2>{3, -1});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(kt::matches(t, r.transpose(0, 1).reshape({3, 8})));
  EXPECT_FALSE(kt::shares_buffer(x, t));
  // One the strides allow is a view (PyTorch's rule): the rows of a step-2 slice laid out as one
  // run, the last dim of a column slice split (the heads of a q/k/v slice of a projection).
  auto s = x.slice(1, 1, 6, 2).reshape(Shape<1>{-1});
  EXPECT_TRUE(kt::matches(s, r.slice(1, 1, 6, 2).reshape({12})));
  EXPECT_TRUE(kt::shares_buffer(x, s));
  auto heads = x.slice(1, 2, 6).reshape(Shape<3>{4, 2, 2});
  EXPECT_TRUE(kt::matches(heads, r.slice(1, 2, 6, 1).reshape({4, 2, 2})));
  EXPECT_TRUE(kt::shares_buffer(x, heads));
  EXPECT_FALSE(heads.is_contiguous());
  auto e = x.slice(0, 0, 1).expand(Shape<3>{2, 4, 6}).reshape(Shape<2>{8, 6});
  EXPECT_TRUE(kt::matches(e, r.slice(0, 0, 1).expand({2, 4, 6}).reshape({8, 6})));
  auto one = Tensor<2>::full({1, 1}, 2.5, DType::f32, dev()).reshape(Shape<0>{});
  EXPECT_EQ(one.item(), 2.5f);
  EXPECT_EQ(Tensor<2>::zeros({0, 3}, DType::f32, dev()).reshape(Shape<3>{-1, 1, 3}).shape(),
            (Shape<3>{0, 1, 3}));
  EXPECT_THROW(x.reshape(Shape<2>{5, 5}), kiln::ShapeError);
  EXPECT_THROW(x.reshape(Shape<2>{-1, 5}), kiln::ShapeError);
  EXPECT_THROW(x.reshape(Shape<1>{25}), kiln::ShapeError);
  EXPECT_THROW(x.reshape(Shape<2>{-1, -1}), kiln::Error);
  EXPECT_THROW(x.reshape(Shape<2>{-2, -12}), kiln::Error);
}

TEST_P(ShapeTest, TransposeAndPermuteAreViews) {
  auto [x, r] = input<3>({2, 3, 4});
  auto t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape<3>{4, 3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(kt::shares_buffer(x, t));
  EXPECT_TRUE(kt::matches(t, r.transpose(0, 2)));
  EXPECT_TRUE(kt::matches(x.transpose(-1, -2), r.transpose(2, 1)));
  EXPECT_TRUE(kt::matches(x.transpose(1, 1), r));
  auto p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape<3>{4, 2, 3}));
  EXPECT_TRUE(kt::shares_buffer(x, p));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_TRUE(kt::matches(p, r.permute({2, 0, 1})));
  EXPECT_TRUE(kt::matches(p.permute({1, 2, 0}), r));  // the inverse permutation
  EXPECT_TRUE(x.permute({0, 1, 2}).is_contiguous());
  EXPECT_THROW(x.permute({0, 0, 1}), kiln::ValueError);
  try {
    x.permute({0, 1, 3});
    ADD_FAILURE() << "permute({0, 1, 3}) of a rank-3 tensor did not throw";
  } catch (const kiln::IndexError&) {
  } catch (const kiln::ValueError&) {
  }
  EXPECT_THROW(x.transpose(0, 3), kiln::IndexError);
  EXPECT_THROW(x.transpose(-4, 0), kiln::IndexError);
  EXPECT_THROW((void)x.size(3), kiln::IndexError);
  EXPECT_EQ(x.size(-1), 4);
}

// Python slice semantics: negative indices count from the end, then clamp; step >= 1.
TEST_P(ShapeTest, Slice) {
  auto [x, r] = input<2>({6, 8});
  struct Case {
    int dim;
    std::int64_t start, stop, step;
  };
  for (Case c : {Case{1, 1, 7, 2}, Case{0, 0, 6, 1}, Case{0, 2, 4, 1}, Case{1, -3, -1, 1},
                 Case{1, -100, 100, 3}, Case{0, 4, 100, 1}, Case{1, 5, 2, 1}, Case{1, 8, 9, 1},
                 Case{0, -1, 6, 1}, Case{-1, 0, 8, 7}, Case{-2, 1, -1, 4}, Case{1, 3, 3, 1}}) {
    SCOPED_TRACE(testing::Message() << "slice(" << c.dim << ", " << c.start << ", " << c.stop
                                    << ", " << c.step << ")");
    auto s = x.slice(c.dim, c.start, c.stop, c.step);
    EXPECT_TRUE(kt::matches(s, r.slice(c.dim < 0 ? c.dim + 2 : c.dim, c.start, c.stop, c.step)));
    if (s.numel() > 0) {
      EXPECT_TRUE(kt::shares_buffer(x, s)) << "slice is a view";
    }
  }
  EXPECT_TRUE(x.slice(0, 1, 3).is_contiguous());
  EXPECT_FALSE(x.slice(1, 1, 3).is_contiguous());
  EXPECT_FALSE(x.slice(0, 0, 6, 2).is_contiguous());
  EXPECT_THROW(x.slice(1, 0, 8, 0), kiln::ValueError);
  EXPECT_THROW(x.slice(1, 8, 0, -1), kiln::ValueError);
  EXPECT_THROW(x.slice(2, 0, 1), kiln::IndexError);
  EXPECT_THROW(x.slice(-3, 0, 1), kiln::IndexError);
  // Slices of slices and of a transpose.
  auto ss = x.slice(1, 1, 8, 2).slice(1, 1, 4, 2).slice(0, -4, -1);
  EXPECT_TRUE(kt::matches(ss, r.slice(1, 1, 8, 2).slice(1, 1, 4, 2).slice(0, -4, -1)));
  auto ts = x.transpose(0, 1).slice(0, 2, 7, 3).slice(1, 1, 5);
  EXPECT_TRUE(kt::matches(ts, r.transpose(0, 1).slice(0, 2, 7, 3).slice(1, 1, 5)));
}

TEST_P(ShapeTest, ExpandUnsqueezeSqueeze) {
  auto [c, rc] = input<2>({3, 1});
  auto e = c.expand(Shape<2>{3, 4});
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_TRUE(kt::shares_buffer(c, e));
  EXPECT_TRUE(kt::matches(e, rc.expand({3, 4})));
  EXPECT_TRUE(kt::matches(c.expand(Shape<4>{2, 5, 3, 4}), rc.expand({2, 5, 3, 4})));
  EXPECT_TRUE(kt::matches(c.expand(Shape<2>{3, 1}), rc));
  EXPECT_EQ(c.expand(Shape<2>{3, 0}).numel(), 0);
  auto [row, rr] = input<1>({4});
  EXPECT_TRUE(kt::matches(row.expand(Shape<3>{2, 3, 4}), rr.expand({2, 3, 4})));
  EXPECT_THROW(c.expand(Shape<2>{4, 4}), kiln::ShapeError);
  EXPECT_THROW(row.expand(Shape<2>{3, 5}), kiln::ShapeError);
  EXPECT_THROW(c.expand(Shape<3>{2, 3, 4}).expand(Shape<3>{2, 6, 4}), kiln::ShapeError);

  auto [x, r] = input<2>({3, 4});
  for (int d : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(testing::Message() << "unsqueeze(" << d << ")");
    auto u = x.unsqueeze(d);
    EXPECT_TRUE(kt::shares_buffer(x, u));
    EXPECT_TRUE(u.is_contiguous());
    EXPECT_TRUE(kt::matches(u, r.unsqueeze(d < 0 ? d + 3 : d)));
  }
  EXPECT_THROW(x.unsqueeze(3), kiln::IndexError);
  EXPECT_THROW(x.unsqueeze(-4), kiln::IndexError);
  auto [y, ry] = input<3>({3, 1, 4});
  EXPECT_TRUE(kt::matches(y.squeeze(1), ry.squeeze(1)));
  EXPECT_TRUE(kt::matches(y.squeeze(-2), ry.squeeze(1)));
  EXPECT_TRUE(kt::shares_buffer(y, y.squeeze(1)));
  EXPECT_TRUE(kt::matches(y.transpose(0, 2).squeeze(1), ry.transpose(0, 2).squeeze(1)));
  EXPECT_EQ(Tensor<1>::full({1}, 3, DType::f32, dev()).squeeze(0).item(), 3.0f);
  EXPECT_THROW(y.squeeze(0), kiln::ShapeError);
  EXPECT_THROW(y.squeeze(3), kiln::IndexError);
  EXPECT_THROW(Tensor<2>::zeros({0, 3}, DType::f32, dev()).squeeze(0), kiln::ShapeError);
}

// Concatenation of references along dim.
Ref ref_cat(const std::vector<Ref>& xs, int dim) {
  kiln::Dims s = xs[0].shape();
  s[dim] = 0;
  for (const auto& x : xs) s[dim] += x.shape()[dim];
  std::vector<double> v;
  for (std::int64_t k = 0; k < kt::numel_of(s); ++k) {
    auto idx = kt::unflatten(k, s);
    std::size_t i = 0;
    while (idx[dim] >= xs[i].shape()[dim]) idx[dim] -= xs[i++].shape()[dim];
    v.push_back(xs[i].at(idx));
  }
  return Ref(s, v);
}

TEST_P(ShapeTest, Cat) {
  auto [a, ra] = input<2>({2, 3});
  auto [b, rb] = input<2>({4, 3});
  auto [c, rc] = input<2>({3, 2});  // transposed: [2, 3]
  auto [d, rd] = input<2>({2, 7});  // sliced: [2, 3]
  auto cv = c.transpose(0, 1);
  auto dv = d.slice(1, 1, 7, 2);
  Ref rcv = rc.transpose(0, 1), rdv = rd.slice(1, 1, 7, 2);
  auto z = Tensor<2>::zeros({0, 3}, DType::f32, dev());
  Ref rz({0, 3}, {});
  EXPECT_TRUE(kt::matches(kiln::cat<2>({a, b}, 0), ref_cat({ra, rb}, 0)));
  EXPECT_TRUE(kt::matches(kiln::cat<2>({a, cv, dv, b, z}, 0), ref_cat({ra, rcv, rdv, rb, rz}, 0)));
  EXPECT_TRUE(kt::matches(kiln::cat<2>({a, cv, dv}, 1), ref_cat({ra, rcv, rdv}, 1)));
  EXPECT_TRUE(kt::matches(kiln::cat<2>({dv, a}, -1), ref_cat({rdv, ra}, 1)));
  EXPECT_TRUE(kt::matches(kiln::cat<2>({a}, 0), ra));
  EXPECT_TRUE(kt::matches(kiln::cat<2>({z, z}, 0), rz));
  auto e = a.slice(0, 0, 1).expand(Shape<2>{3, 3});
  EXPECT_TRUE(
      kt::matches(kiln::cat<2>({e, a}, 0), ref_cat({ra.slice(0, 0, 1).expand({3, 3}), ra}, 0)));
  auto [x, rx] = input<3>({2, 3, 4});
  for (int dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    auto y = x.transpose(0, 2).transpose(0, 2);
    EXPECT_TRUE(kt::matches(kiln::cat<3>({x, y, x}, dim), ref_cat({rx, rx, rx}, dim)));
  }
  auto i = Tensor<1>::from_data(std::vector<std::int32_t>{1, 2}, {2}, dev());
  auto j = Tensor<1>::from_data(std::vector<std::int32_t>{3}, {1}, dev());
  auto ij = kiln::cat<1>({i, j}, 0);
  EXPECT_EQ(ij.dtype(), DType::i32);
  EXPECT_EQ(ij.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 3}));
  auto t = Tensor<1>::from_data(std::vector<bool>{true, false}, {2}, dev());
  EXPECT_EQ(kiln::cat<1>({t, t}, 0).to_vector<bool>(), (std::vector<bool>{1, 0, 1, 0}));

  EXPECT_THROW(kiln::cat<2>({a, b}, 1), kiln::ShapeError);
  EXPECT_THROW(kiln::cat<2>({a, c}, 0), kiln::ShapeError);
  EXPECT_THROW(kiln::cat<2>({}, 0), kiln::ValueError);
  EXPECT_THROW(kiln::cat<2>({a, b}, 2), kiln::IndexError);
  EXPECT_THROW(kiln::cat<1>({i, i.to(DType::f32)}, 0), kiln::DTypeError);
}

// Views of views of views, then ops and copies of them.
TEST_P(ShapeTest, ViewsOfViews) {
  auto [x, r] = input<2>({6, 1});
  auto v = x.expand(Shape<3>{4, 6, 5}).transpose(0, 2).slice(1, 1, 6, 2).permute({2, 0, 1});
  Ref rv = r.expand({4, 6, 5}).transpose(0, 2).slice(1, 1, 6, 2).permute({2, 0, 1});
  EXPECT_TRUE(kt::matches(v, rv));
  EXPECT_TRUE(kt::shares_buffer(x, v));
  auto w = v.unsqueeze(1).squeeze(1).slice(2, -2, 100);
  Ref rw = rv.slice(2, -2, 100);
  EXPECT_TRUE(kt::matches(w, rw));
  EXPECT_TRUE(kt::matches(w * 2 + 1, rw.map([](double a) { return float(a) * 2.0f + 1.0f; })));
  EXPECT_TRUE(kt::matches(w.contiguous(), rw));
  EXPECT_TRUE(kt::matches(w.reshape(Shape<1>{-1}), rw.reshape({rw.numel()})));
  EXPECT_TRUE(kt::matches(kiln::cat<3>({w, w}, 1), ref_cat({rw, rw}, 1)));
  EXPECT_TRUE(kt::matches(w.to(DType::i32), rw.map([](double a) { return std::trunc(a); })));
}

}  // namespace
