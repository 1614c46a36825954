// Backend::order on every chain, called directly, with poisoned outputs: sort (both directions),
// topk, max, min and cumsum (forward and reverse) over f32, bf16, i32 and bool rows of many ties
// and NaNs, against exact host references (a stable sort in double, NaN last ascending; a float64
// prefix sum); rows longer than CUDA's shared-memory tile; a pending input of a fusion group; and
// the contract's errors (src/backend/order_contract.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "chains.hpp"
#include "kiln/error.hpp"

namespace {

using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::OrderOp;
using kiln::detail::OrderParams;
using kiln::detail::Out;

bool before(double a, double b, bool descending) {
  if (descending) return a > b || (std::isnan(a) && !std::isnan(b));
  return a < b || (!std::isnan(a) && std::isnan(b));
}

// Values on a grid of 0.5 in [-5, 5] (ties), some NaN for the floating dtypes.
Values tied(DType t, std::int64_t m, std::mt19937_64& g) {
  std::uniform_int_distribution<int> d(-10, 10);
  Values v(static_cast<std::size_t>(m));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = t == DType::boolean ? (d(g) > 0) : t == DType::i32 ? d(g) : d(g) * 0.5;
    if (kiln::is_floating(t) && i % 29 == 3) v[i] = NAN;
  }
  return v;
}

class BackendOrder : public kc::ChainTest {
 protected:
  // One call on x ([rows, n]); values and indices checked against the reference.
  void check(OrderOp op, const Operand& x, OrderParams p) {
    const std::int64_t n = x.shape().back(), rows = kc::detail::numel(x.shape()) / n;
    const std::int64_t k = kiln::detail::order_out_length(op, p, n);
    Dims s = x.shape();
    s.back() = k;
    Operand v = output(s, kiln::detail::order_values_dtype(op, x.view.dtype));
    Operand ix = output(s, DType::i32);
    std::optional<Out> io;
    if (kiln::detail::order_op_has_indices(op)) io.emplace(ix.view);
    be().order(op, x.view, p, Out(v.view), io);
    const Values xv = x.values();
    Values want_v, want_i;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double* row = xv.data() + r * n;
      if (op == OrderOp::cumsum) {
        Values y(static_cast<std::size_t>(n));
        double acc = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t j = p.reverse ? n - 1 - i : i;
          y[static_cast<std::size_t>(j)] = acc += row[j];
        }
        want_v.insert(want_v.end(), y.begin(), y.end());
        continue;
      }
      std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
      std::iota(idx.begin(), idx.end(), 0);
      const bool desc = op == OrderOp::max || p.descending;
      if (op == OrderOp::max || op == OrderOp::min) {
        std::int64_t best = 0;
        for (std::int64_t i = 1; i < n && !std::isnan(row[best]); ++i)
          if (std::isnan(row[i]) || before(row[i], row[best], desc)) best = i;
        idx[0] = best;
      } else {
        std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
          return before(row[a], row[b], desc);
        });
      }
      for (std::int64_t i = 0; i < k; ++i) {
        want_v.push_back(row[idx[static_cast<std::size_t>(i)]]);
        want_i.push_back(static_cast<double>(idx[static_cast<std::size_t>(i)]));
      }
    }
    const bool sum = op == OrderOp::cumsum && kiln::is_floating(x.view.dtype);
    const bool half = kiln::is_half(x.view.dtype);
    // cumsum in f32 (CUDA's scan) and one rounding to a half type; the others exact.
    const Values slack(want_v.size(), sum ? 1e-5 * static_cast<double>(n) : 0.0);
    EXPECT_TRUE(kc::matches(read(v), s, want_v, sum && half ? kt::Tol{2} : kt::Tol{},
                            sum ? &slack : nullptr));
    if (io) {
      EXPECT_TRUE(kc::matches(read(ix), s, want_i, kt::Tol{}));
    }
  }
};
KILN_INSTANTIATE_CHAINS(BackendOrder);

TEST_P(BackendOrder, MatchesExactReferenceAcrossDTypesAndLengths) {
  const std::vector<Dims> shapes = {{3, 1}, {4, 33}, {2, 3, 40}, {2, 4096}, {2, 5000}};
  for (DType t : {DType::f32, DType::bf16, DType::i32, DType::boolean}) {
    for (const Dims& s : shapes) {
      const Operand x =
          input(s, t, kc::contiguous(), [&](std::int64_t m) { return tied(t, m, rng()); });
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + kiln::format_dims(s));
      for (bool desc : {false, true}) {
        OrderParams p;
        p.descending = desc;
        check(OrderOp::sort, x, p);
        p.k = std::min<std::int64_t>(s.back(), 5);
        check(OrderOp::topk, x, p);
      }
      check(OrderOp::max, x, {});
      check(OrderOp::min, x, {});
      OrderParams r;
      check(OrderOp::cumsum, x, r);
      r.reverse = true;
      check(OrderOp::cumsum, x, r);
    }
  }
}

// A pending result of an element-wise group (fusion) is written before the sort reads it.
TEST_P(BackendOrder, ReadsAPendingResult) {
  const Dims s{6, 130};
  const Operand x = input(s, DType::f32);
  kiln::ir::Program p;  // -x
  p.output(p.unary(kiln::ir::Op::neg, p.input(DType::f32)));
  poison_allocator(kc::detail::numel(s), DType::f32);
  Handle negated = be().empty(s, DType::f32);
  elementwise(p, {&x.view}, {}, {negated.get()});
  Operand v = output(s, DType::f32), ix = output(s, DType::i32);
  be().order(OrderOp::sort, *negated, {}, Out(v.view), Out(ix.view));
  Values want;
  const Values xv = x.values();
  for (int r = 0; r < 6; ++r) {
    Values row(xv.begin() + r * 130, xv.begin() + (r + 1) * 130);
    for (auto& e : row) e = -e;
    std::sort(row.begin(), row.end());
    want.insert(want.end(), row.begin(), row.end());
  }
  EXPECT_TRUE(kc::matches(read(v), s, want, kt::Tol{}));
}

TEST_P(BackendOrder, ContractErrors) {
  const Operand x = input({4, 6}, DType::f32);
  const Operand xt = input({4, 6}, DType::f32, kc::transposed());
  Handle v = be().empty({4, 6}, DType::f32), i = be().empty({4, 6}, DType::i32);
  Handle v5 = be().empty({4, 5}, DType::f32), vh = be().empty({4, 6}, DType::bf16);
  Handle m = be().empty({4, 1}, DType::f32), mi = be().empty({4, 1}, DType::i32);
  auto expect = [&](const char* what, auto f, auto error) {
    SCOPED_TRACE(what);
    using E = decltype(error);
    try {
      f();
      ADD_FAILURE() << "no exception";
    } catch (const E&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another exception: " << e.what();
    }
  };
  expect(
      "strided x", [&] { be().order(OrderOp::sort, xt.view, {}, Out(*v), Out(*i)); },
      kiln::ValueError{""});
  expect(
      "values shape", [&] { be().order(OrderOp::sort, x.view, {}, Out(*v5), Out(*i)); },
      kiln::ShapeError{""});
  expect(
      "values dtype", [&] { be().order(OrderOp::sort, x.view, {}, Out(*vh), Out(*i)); },
      kiln::DTypeError{""});
  expect(
      "indices dtype", [&] { be().order(OrderOp::sort, x.view, {}, Out(*v), Out(*v)); },
      kiln::DTypeError{""});
  expect(
      "no indices", [&] { be().order(OrderOp::max, x.view, {}, Out(*m), std::nullopt); },
      kiln::ValueError{""});
  expect(
      "cumsum indices", [&] { be().order(OrderOp::cumsum, x.view, {}, Out(*v), Out(*i)); },
      kiln::ValueError{""});
  expect(
      "k too large",
      [&] {
        OrderParams p;
        p.k = 7;
        be().order(OrderOp::topk, x.view, p, Out(*v), Out(*i));
      },
      kiln::ValueError{""});
  expect(
      "k on sort",
      [&] {
        OrderParams p;
        p.k = 1;
        be().order(OrderOp::max, x.view, p, Out(*m), Out(*mi));
      },
      kiln::ValueError{""});
}

}  // namespace
