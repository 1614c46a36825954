// Backend::rows on every chain, called directly, against a float64 reference on fresh random
// inputs with poisoned outputs: softmax, log_softmax, layer_norm and rms_norm over f32, bf16 and
// f16; contiguous rows, rows at an offset, rows that are slices of wider rows (a row stride larger
// than n) and a broadcast row (stride 0); rows of 1, odd and vector-multiple lengths, rows that fit
// a block's registers on CUDA and rows that do not (the streaming kernel); the norms with and
// without weight and bias, writing their statistics or not; empty inputs; extreme values (large
// logits, -inf, +inf, NaN, rows of -inf: as PyTorch); a pending input of a fusion group; and the
// contract's errors (src/backend/rows_contract.cpp), norm_backward's included (its results are
// tested where a backend has the kernel: tests/test_cuda_norm_backward.cpp).
#include <limits>

#include "chains.hpp"
#include "kiln/error.hpp"

namespace {

using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::Out;
using kiln::detail::RowOp;
using kiln::detail::RowParams;
using kiln::detail::RowStats;
using kiln::detail::TensorImpl;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr RowOp kOps[] = {RowOp::softmax, RowOp::log_softmax, RowOp::layer_norm, RowOp::rms_norm,
                          RowOp::logsumexp};

struct Ref {
  Values y, mean, rstd;
};

// x: rows x n row-major, as stored. PyTorch's semantics: the max of a row holding a NaN is NaN.
Ref reference(RowOp op, const Values& x, std::int64_t rows, std::int64_t n, const Values* w,
              const Values* b, double eps) {
  Ref r;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double* row = x.data() + i * n;
    if (!kiln::detail::row_op_normalises(op)) {
      double m = -kInf, s = 0;
      for (std::int64_t j = 0; j < n; ++j)
        m = std::isnan(row[j]) || std::isnan(m) ? kNaN : std::max(m, row[j]);
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(row[j] - m);
      if (op == RowOp::logsumexp) {  // (a row of -inf, or holding +inf: NaN, as its softmax)
        r.y.push_back(m + std::log(s));
        continue;
      }
      for (std::int64_t j = 0; j < n; ++j)
        r.y.push_back(op == RowOp::softmax ? std::exp(row[j] - m) / s : row[j] - m - std::log(s));
      continue;
    }
    double mean = 0, var = 0;
    if (op == RowOp::layer_norm) {
      for (std::int64_t j = 0; j < n; ++j) mean += row[j];
      mean /= static_cast<double>(n);
    }
    for (std::int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(n) + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (std::int64_t j = 0; j < n; ++j) {
      double y = (row[j] - mean) * rstd;
      if (w) y *= (*w)[static_cast<std::size_t>(j)];
      if (b) y += (*b)[static_cast<std::size_t>(j)];
      r.y.push_back(y);
    }
  }
  return r;
}

// Rows that are slices of wider rows: x[..., 1:n+1] of a buffer whose rows have n + 3 elements.
Layout columns() {
  return {"columns", [](const Dims& s) {
            Dims wide = s;
            wide.back() += 3;
            Dims st = kc::detail::dense_strides(wide, kc::detail::identity_order(s.size()));
            return kc::detail::placed(s, st, 1);
          }};
}

std::vector<Layout> row_layouts() {
  return {kc::contiguous(), kc::offset(), columns(), kc::broadcast_outer()};
}

// f32: the kernels' f32 arithmetic over long rows (sums of up to 1e5 terms in f32 on CUDA).
kt::Tol tol(RowOp op) {
  switch (op) {
    case RowOp::softmax:
      return {16, 2e-5, 1e-9};
    case RowOp::log_softmax:
    case RowOp::logsumexp:
      return {16, 1e-5, 2e-5};
    default:
      return {16, 2e-5, 2e-5};
  }
}

class BackendRows : public kc::ChainTest {
 protected:
  // Runs op on x (weight, bias optional), with stats written where `stats`, and checks y and the
  // statistics against the reference; y and the statistics are poisoned first.
  void check(RowOp op, const Operand& x, const Operand* w, const Operand* b, bool stats,
             double eps = 1e-5) {
    const Dims& s = x.shape();
    const std::int64_t n = s.back(), rows = n ? kc::detail::numel(s) / n : 0;
    const Dims rs(s.begin(), s.end() - 1);
    const DType t = x.view.dtype;
    const bool norm = kiln::detail::row_op_normalises(op);
    // logsumexp: one f32 per row, held to the f32 bound whatever x's dtype.
    const bool reduces = kiln::detail::row_op_reduces(op), half_y = kiln::is_half(t) && !reduces;
    const Dims ys = reduces ? rs : s;
    Operand y = output(ys, reduces ? DType::f32 : t);
    Operand mean = output(rs, DType::f32), rstd = output(rs, DType::f32);
    RowStats st;
    if (stats && op == RowOp::layer_norm) st.mean.emplace(mean.view);
    if (stats && norm) st.rstd.emplace(rstd.view);
    RowParams p{w ? &w->view : nullptr, b ? &b->view : nullptr, norm ? eps : 0.0};
    be().rows(op, x.view, p, Out(y.view), st);
    const Values wv = w ? w->values() : Values{}, bv = b ? b->values() : Values{};
    const Ref want = reference(op, x.values(), rows, n, w ? &wv : nullptr, b ? &bv : nullptr, eps);
    // Half types: within one ULP of the type plus the f32 work's absolute error.
    const Values slack(want.y.size(), half_y ? 2e-5 : 0.0);
    EXPECT_TRUE(
        kc::matches(read(y), ys, want.y, half_y ? kt::Tol{1} : tol(op), half_y ? &slack : nullptr));
    if (st.mean) {
      EXPECT_TRUE(kc::matches(read(mean), rs, want.mean, kt::Tol{0, 1e-5, 1e-5}));
    }
    if (st.rstd) {
      EXPECT_TRUE(kc::matches(read(rstd), rs, want.rstd, kt::Tol{0, 2e-5, 0}));
    }
  }
};
KILN_INSTANTIATE_CHAINS(BackendRows);

TEST_P(BackendRows, MatchesDoubleReferenceAcrossDTypesLayoutsAndLengths) {
  const std::vector<Dims> shapes = {{3, 1}, {4, 33}, {2, 3, 40}, {3, 768}, {2, 4096}, {2, 5000}};
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (const Dims& s : shapes) {
      for (const Layout& l : row_layouts()) {
        if (l.name == "broadcast_outer" && s.size() > 2) continue;  // not one row stride
        const Operand x = input(s, t, l);
        const std::int64_t n = s.back();
        const Operand w = input({n}, t, kc::contiguous(), 0.5, 1.5);
        const Operand b = input({n}, t, kc::offset(), -1, 1);
        for (RowOp op : kOps) {
          SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + kiln::format_dims(s) + " " +
                       l.name + " " + kiln::detail::row_op_name(op));
          if (op == RowOp::layer_norm) {
            check(op, x, &w, &b, true);
            check(op, x, nullptr, &b, false);
          } else if (op == RowOp::rms_norm) {
            check(op, x, &w, nullptr, true);
          }
          check(op, x, nullptr, nullptr, kiln::detail::row_op_normalises(op));
        }
      }
    }
  }
}

// Rows longer than a CUDA block's registers hold (the streaming kernel; 16-byte loads and single
// elements), and long rows on the CPU.
TEST_P(BackendRows, LongRows) {
  for (DType t : {DType::f32, DType::bf16}) {
    for (const Dims& s : {Dims{2, 100000}, Dims{1, 100001}}) {
      const Operand x = input(s, t, kc::contiguous());
      const Operand w = input({s.back()}, t, kc::contiguous(), 0.5, 1.5);
      const Operand b = input({s.back()}, t, kc::contiguous(), -1, 1);
      for (RowOp op : kOps) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + kiln::format_dims(s) + " " +
                     kiln::detail::row_op_name(op));
        const bool layer = op == RowOp::layer_norm, norm = kiln::detail::row_op_normalises(op);
        check(op, x, norm ? &w : nullptr, layer ? &b : nullptr, norm);
      }
    }
  }
}

// A row of 1e4 + noise: the variance comes from (x - mean)^2, so it stays accurate.
TEST_P(BackendRows, LargeOffsetKeepsTheVariance) {
  for (std::int64_t n : {64, 50000}) {
    const Operand x = input({3, n}, DType::f32, kc::contiguous(), [&](std::int64_t m) {
      Values v = kc::random_values(DType::f32, m, rng(), -1, 1);
      for (auto& e : v) e = static_cast<float>(e + 1e4);
      return v;
    });
    SCOPED_TRACE(n);
    check(RowOp::layer_norm, x, nullptr, nullptr, true);
  }
}

TEST_P(BackendRows, ExtremeValuesAsPyTorch) {
  const Values rows = {1000,  1001,  1002,  -1000, -kInf, 0,     -kInf, 5,  // large, -inf entries
                       88,    89,    -kInf, -kInf, 3,     kNaN,  1,     2,  // a NaN
                       -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,  // all -inf
                       1,     kInf,  2,     3,     4,     5,     6,     7,      // +inf
                       3e38,  3e38,  -3e38, 0,     1,     2,     3,     4};
  for (std::int64_t n : {8, 40000}) {  // CUDA: the fit and the streaming kernels
    const std::int64_t r = 5;
    const Operand x = input({r, n}, DType::f32, kc::contiguous(), [&](std::int64_t m) {
      Values v(static_cast<std::size_t>(m), -kInf);
      for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < 8; ++j)  // the 8 values spread over the row
          v[static_cast<std::size_t>(i * n + j * (n / 8))] =
              rows[static_cast<std::size_t>(i * 8 + j)];
      return v;
    });
    for (RowOp op : {RowOp::softmax, RowOp::log_softmax, RowOp::logsumexp}) {
      SCOPED_TRACE(std::to_string(n) + " " + kiln::detail::row_op_name(op));
      check(op, x, nullptr, nullptr, false);
    }
  }
}

TEST_P(BackendRows, EmptyInputsWriteNothing) {
  for (const Dims& s : {Dims{0, 8}, Dims{3, 0}, Dims{2, 0, 5}}) {
    const Operand x = input(s, DType::f32);
    Handle y = be().empty(s, DType::f32);
    be().rows(RowOp::softmax, x.view, {}, Out(*y), {});
    if (s.back() > 0 || kc::detail::numel(Dims(s.begin(), s.end() - 1)) == 0) {
      Handle m = be().empty(Dims(s.begin(), s.end() - 1), DType::f32);
      RowStats st;
      st.rstd.emplace(*m);
      be().rows(RowOp::rms_norm, x.view, {nullptr, nullptr, 1e-6}, Out(*y), st);
    }
  }
  be().sync();
}

// A pending result of an element-wise group (fusion) is written before the row kernel reads it.
TEST_P(BackendRows, ReadsAPendingResult) {
  const Dims s{6, 130};
  const Operand x = input(s, DType::f32);
  kiln::ir::Program p;  // x * 3
  {
    const auto a = p.input(DType::f32);
    p.output(p.binary(kiln::ir::Op::mul, a, p.scalar(DType::f32)));
  }
  poison_allocator(kc::detail::numel(s), DType::f32);
  Handle tripled = be().empty(s, DType::f32);
  elementwise(p, {&x.view}, {3.0}, {tripled.get()});
  Operand y = output(s, DType::f32);
  be().rows(RowOp::log_softmax, *tripled, {}, Out(y.view), {});
  Values xs = x.values();
  for (auto& v : xs) v = static_cast<float>(v * 3);
  EXPECT_TRUE(kc::matches(read(y), s,
                          reference(RowOp::log_softmax, xs, 6, 130, nullptr, nullptr, 0).y,
                          tol(RowOp::log_softmax)));
}

TEST_P(BackendRows, ContractErrors) {
  const Operand x = input({4, 6}, DType::f32);
  const Operand xi = input({4, 6}, DType::i32);
  const Operand w = input({6}, DType::f32), w5 = input({5}, DType::f32);
  const Operand wb = input({6}, DType::bf16);
  Handle y = be().empty({4, 6}, DType::f32), ybad = be().empty({4, 5}, DType::f32);
  Handle yh = be().empty({4, 6}, DType::bf16), stat = be().empty({4}, DType::f32);
  Handle stat_i = be().empty({4}, DType::i32), stat_bad = be().empty({5}, DType::f32);
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
      "i32 x", [&] { be().rows(RowOp::softmax, xi.view, {}, Out(*y), {}); }, kiln::DTypeError{""});
  expect(
      "y shape", [&] { be().rows(RowOp::softmax, x.view, {}, Out(*ybad), {}); },
      kiln::ShapeError{""});
  expect(
      "y dtype", [&] { be().rows(RowOp::softmax, x.view, {}, Out(*yh), {}); },
      kiln::DTypeError{""});
  expect(
      "softmax weight", [&] { be().rows(RowOp::softmax, x.view, {&w.view}, Out(*y), {}); },
      kiln::ValueError{""});
  expect(
      "rms bias",
      [&] {
        be().rows(RowOp::rms_norm, x.view, {nullptr, &w.view, 1e-5}, Out(*y), {});
      },
      kiln::ValueError{""});
  expect(
      "weight shape",
      [&] {
        be().rows(RowOp::layer_norm, x.view, {&w5.view, nullptr, 1e-5}, Out(*y), {});
      },
      kiln::ShapeError{""});
  expect(
      "weight dtype",
      [&] {
        be().rows(RowOp::layer_norm, x.view, {&wb.view, nullptr, 1e-5}, Out(*y), {});
      },
      kiln::DTypeError{""});
  expect(
      "eps",
      [&] {
        be().rows(RowOp::layer_norm, x.view, {nullptr, nullptr, -1}, Out(*y), {});
      },
      kiln::ValueError{""});
  expect(
      "rms mean",
      [&] {
        RowStats st;
        st.mean.emplace(*stat);
        be().rows(RowOp::rms_norm, x.view, {nullptr, nullptr, 1e-5}, Out(*y), st);
      },
      kiln::ValueError{""});
  expect(
      "stat dtype",
      [&] {
        RowStats st;
        st.rstd.emplace(*stat_i);
        be().rows(RowOp::layer_norm, x.view, {nullptr, nullptr, 1e-5}, Out(*y), st);
      },
      kiln::DTypeError{""});
  expect(
      "stat shape",
      [&] {
        RowStats st;
        st.rstd.emplace(*stat_bad);
        be().rows(RowOp::layer_norm, x.view, {nullptr, nullptr, 1e-5}, Out(*y), st);
      },
      kiln::ShapeError{""});
  // A transposed x is no sequence of rows: the front end copies it first.
  TensorImpl t = x.view;
  t.shape = {6, 4};
  t.strides = {1, 6};
  Handle yt = be().empty({6, 4}, DType::f32);
  expect(
      "transposed", [&] { be().rows(RowOp::softmax, t, {}, Out(*yt), {}); }, kiln::ValueError{""});
  const Operand e = input({3, 0}, DType::f32);
  Handle ye = be().empty({3, 0}, DType::f32);
  expect(
      "norm of empty rows",
      [&] {
        be().rows(RowOp::layer_norm, e.view, {nullptr, nullptr, 1e-5}, Out(*ye), {});
      },
      kiln::ValueError{""});
  // logsumexp writes one f32 per row.
  Handle row_f32 = be().empty({4}, DType::f32), row_bf16 = be().empty({4}, DType::bf16);
  Handle e_rows = be().empty({3}, DType::f32);
  expect(
      "logsumexp y shape", [&] { be().rows(RowOp::logsumexp, x.view, {}, Out(*y), {}); },
      kiln::ShapeError{""});
  expect(
      "logsumexp y dtype", [&] { be().rows(RowOp::logsumexp, x.view, {}, Out(*row_bf16), {}); },
      kiln::DTypeError{""});
  expect(
      "logsumexp weight",
      [&] { be().rows(RowOp::logsumexp, x.view, {&w.view}, Out(*row_f32), {}); },
      kiln::ValueError{""});
  expect(
      "logsumexp of empty rows", [&] { be().rows(RowOp::logsumexp, e.view, {}, Out(*e_rows), {}); },
      kiln::ValueError{""});
  // A norm of x + residual (version 13): the residual comes with its sum, on norms only.
  const Operand r = input({4, 6}, DType::f32), rb = input({4, 6}, DType::bf16);
  const Operand r5 = input({4, 5}, DType::f32), ri = input({4, 6}, DType::i32);
  Handle sum = be().empty({4, 6}, DType::f32), sum_h = be().empty({4, 6}, DType::bf16);
  const auto with_sum = [](const Handle& s) {
    RowStats st;
    st.sum.emplace(*s);
    return st;
  };
  const auto add_norm = [&](const TensorImpl& xv, const TensorImpl* res, const RowStats& st) {
    be().rows(RowOp::layer_norm, xv, {nullptr, nullptr, 1e-5, res}, Out(*y), st);
  };
  expect(
      "residual without sum", [&] { add_norm(x.view, &r.view, {}); }, kiln::ValueError{""});
  expect(
      "sum without residual", [&] { add_norm(x.view, nullptr, with_sum(sum)); },
      kiln::ValueError{""});
  expect(
      "softmax residual",
      [&] {
        be().rows(RowOp::softmax, x.view, {nullptr, nullptr, 0, &r.view}, Out(*y), with_sum(sum));
      },
      kiln::ValueError{""});
  expect(
      "residual shape", [&] { add_norm(x.view, &r5.view, with_sum(sum)); }, kiln::ShapeError{""});
  expect(
      "residual dtype", [&] { add_norm(x.view, &ri.view, with_sum(sum)); }, kiln::DTypeError{""});
  expect(
      "sum dtype", [&] { add_norm(x.view, &rb.view, with_sum(sum_h)); }, kiln::DTypeError{""});
  TensorImpl strided = x.view;  // rows 0, 2, 4 and 6 of [8, 6] memory
  strided.strides = {12, 1};
  const Operand x8 = input({8, 6}, DType::f32);
  strided.buffer = x8.view.buffer;
  expect(
      "strided x with a residual", [&] { add_norm(strided, &r.view, with_sum(sum)); },
      kiln::ValueError{""});
}

// The norms' backward contract (check_norm_backward_call), which a backend's norm_backward runs
// before it launches anything: a backend without the kernel declines instead, so the function is
// called directly here.
TEST_P(BackendRows, NormBackwardContractErrors) {
  using kiln::detail::check_norm_backward_call;
  using kiln::detail::NormGrads;
  const Operand x = input({4, 6}, DType::f32), g = input({4, 6}, DType::f32);
  const Operand gb = input({4, 6}, DType::bf16), g5 = input({4, 5}, DType::f32);
  const Operand gi = input({4, 6}, DType::i32);
  const Operand w = input({6}, DType::f32), stat = input({4}, DType::f32);
  const Operand stat5 = input({5}, DType::f32);
  Handle dx = be().empty({4, 6}, DType::f32), dxb = be().empty({4, 6}, DType::bf16);
  Handle dw = be().empty({6}, DType::f32), dw5 = be().empty({5}, DType::f32);
  const auto grads = [](Handle dx_, Handle dw_, Handle db_) {
    NormGrads r;
    if (dx_) r.dx = Out(*dx_);
    if (dw_) r.dw = Out(*dw_);
    if (db_) r.db = Out(*db_);
    return r;
  };
  // A valid call, then one change each.
  EXPECT_EQ(check_norm_backward_call(RowOp::layer_norm, x.view, g.view, &w.view, &stat.view,
                                     stat.view, grads(dx, dw, dw))
                .n,
            6);
  const auto refused = [&](const char* what, RowOp op, const TensorImpl& gv, const TensorImpl* mean,
                           const TensorImpl& rstd, const NormGrads& gr, const TensorImpl* wv,
                           auto error) {
    SCOPED_TRACE(what);
    try {
      check_norm_backward_call(op, x.view, gv, wv, mean, rstd, gr);
      ADD_FAILURE() << "no exception";
    } catch (const decltype(error)&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another exception: " << e.what();
    }
  };
  const NormGrads all = grads(dx, dw, dw);
  refused("softmax", RowOp::softmax, g.view, &stat.view, stat.view, all, &w.view,
          kiln::ValueError{""});
  // A half g of an f32 x is autocast's gradient, and accepted.
  EXPECT_NO_THROW(check_norm_backward_call(RowOp::layer_norm, x.view, gb.view, &w.view, &stat.view,
                                           stat.view, grads(dx, dw, dw)));
  refused("g dtype", RowOp::layer_norm, gi.view, &stat.view, stat.view, all, &w.view,
          kiln::DTypeError{""});
  refused("g shape", RowOp::layer_norm, g5.view, &stat.view, stat.view, all, &w.view,
          kiln::ShapeError{""});
  refused("layer_norm without mean", RowOp::layer_norm, g.view, nullptr, stat.view, all, &w.view,
          kiln::ValueError{""});
  refused("rms_norm with mean", RowOp::rms_norm, g.view, &stat.view, stat.view, grads(dx, dw, {}),
          &w.view, kiln::ValueError{""});
  refused("rms_norm db", RowOp::rms_norm, g.view, nullptr, stat.view, grads(dx, dw, dw), &w.view,
          kiln::ValueError{""});
  refused("dw without weight", RowOp::layer_norm, g.view, &stat.view, stat.view, all, nullptr,
          kiln::ValueError{""});
  refused("rstd shape", RowOp::layer_norm, g.view, &stat.view, stat5.view, all, &w.view,
          kiln::ShapeError{""});
  refused("dx dtype", RowOp::layer_norm, g.view, &stat.view, stat.view, grads(dxb, {}, {}), &w.view,
          kiln::DTypeError{""});
  refused("dw shape", RowOp::layer_norm, g.view, &stat.view, stat.view, grads({}, dw5, {}), &w.view,
          kiln::ShapeError{""});
  // Version 13: dsum (x's shape and dtype) and dx_half (a half type for an f32 x) need dx.
  NormGrads sum_only = grads({}, dw, {});
  sum_only.dsum = &g.view;
  refused("dsum without dx", RowOp::layer_norm, g.view, &stat.view, stat.view, sum_only, &w.view,
          kiln::ValueError{""});
  NormGrads bad_sum = grads(dx, {}, {});
  bad_sum.dsum = &g5.view;
  refused("dsum shape", RowOp::layer_norm, g.view, &stat.view, stat.view, bad_sum, &w.view,
          kiln::ShapeError{""});
  NormGrads f32_half = grads(dx, {}, {});
  f32_half.dx_half = Out(*dx);
  refused("dx_half f32", RowOp::layer_norm, g.view, &stat.view, stat.view, f32_half, &w.view,
          kiln::DTypeError{""});
  NormGrads ok = grads(dx, {}, {});
  ok.dsum = &g.view;
  ok.dx_half = Out(*dxb);
  EXPECT_NO_THROW(check_norm_backward_call(RowOp::layer_norm, x.view, g.view, &w.view, &stat.view,
                                           stat.view, ok));
}

}  // namespace
