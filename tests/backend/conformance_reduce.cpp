// Backend::reduce and Backend::reduce_prologue on every chain: every op over every dtype, every
// dim and every input layout against a float64 (or exact) reference; outputs at an offset; empty
// inputs (the identities); long lanes; NaN and ties; a reduction of a pending element-wise
// result (a fusion decorator evaluates it as the reduction's prologue); prologues passed
// directly; and the errors of the contract (check_reduce_call in src/backend/backend.hpp).
//
// The contract, from backend.hpp and docs/ops.md: out has x's shape with `dim` set to 1 (all dims
// 1 for dim < 0) and is contiguous; sum keeps f32 and sums i32/bool to i32, mean is f32, max/min
// keep the dtype, argmax/argmin write i32 indices (in x's row-major order over all elements;
// the first on ties, the first NaN if any); an empty lane sums to 0 and has mean NaN; f32 sums
// and means accumulate in double (within about 1e-9 of the sum of magnitudes, docs/ops.md).
// bf16 and f16 (docs/accuracy.md, "The half types"): sum and mean keep the half type, accumulate
// in f32 or wider like f32's and round once, so they are within half a half ULP of float64 plus
// the accumulation's error (the f32 bound, plus an f32 rounding on the way: 0.51 half ULPs plus
// 1e-9 of the magnitudes); max and min are one of the values, exactly.
#include <algorithm>
#include <cmath>
#include <limits>

#include "chains.hpp"

namespace {

using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::Prologue;
using kiln::detail::ReduceOp;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::max,
                             ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin};
constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};
constexpr DType kHalves[] = {DType::bf16, DType::f16};

float f(double x) { return static_cast<float>(x); }

// The shape of out for x's shape and dim.
Dims out_shape(const Dims& x, int dim) {
  Dims o = x;
  if (dim >= 0) {
    o[static_cast<std::size_t>(dim)] = 1;
  } else {
    o.assign(o.size(), 1);
  }
  return o;
}

// The lanes of x (values in row-major order of `shape`), one per output element in row-major
// order; each lane in the order the indices of arg* count (along dim, or row-major over all).
std::vector<Values> lanes(const Values& x, const Dims& shape, int dim) {
  const Dims o = out_shape(shape, dim);
  const std::int64_t outs = kc::detail::numel(o);
  std::vector<Values> out(static_cast<std::size_t>(outs));
  if (dim < 0) {
    if (outs > 0) out[0] = x;
    return out;
  }
  const auto d = static_cast<std::size_t>(dim);
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  for (std::int64_t j = 0; j < outs; ++j) {
    const std::int64_t outer = j / inner, in = j % inner;
    for (std::int64_t r = 0; r < shape[d]; ++r)
      out[static_cast<std::size_t>(j)].push_back(
          x[static_cast<std::size_t>((outer * shape[d] + r) * inner + in)]);
  }
  return out;
}

// The exact result of op over one lane, and the error the contract allows beyond kt::close.
struct Expected {
  double value;
  double slack;
};
Expected reduce_ref(ReduceOp op, const Values& lane) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double sum = 0, magnitude = 0;
  for (double v : lane) sum += v, magnitude += std::fabs(v);
  const auto n = static_cast<double>(lane.size());
  const auto first_nan =
      std::find_if(lane.begin(), lane.end(), [](double v) { return std::isnan(v); });
  const bool any_nan = first_nan != lane.end();
  switch (op) {
    case ReduceOp::sum:
      return {sum, 1e-9 * magnitude};
    case ReduceOp::mean:
      return {lane.empty() ? nan : sum / n, lane.empty() ? 0 : 1e-9 * magnitude / n};
    case ReduceOp::max:
      return {any_nan ? nan : *std::max_element(lane.begin(), lane.end()), 0};
    case ReduceOp::min:
      return {any_nan ? nan : *std::min_element(lane.begin(), lane.end()), 0};
    case ReduceOp::argmax:  // std::max_element and min_element return the first of equals
      return {double(any_nan ? first_nan - lane.begin()
                             : std::max_element(lane.begin(), lane.end()) - lane.begin()),
              0};
    case ReduceOp::argmin:
      return {double(any_nan ? first_nan - lane.begin()
                             : std::min_element(lane.begin(), lane.end()) - lane.begin()),
              0};
  }
  return {nan, 0};
}

class BackendReduce : public kc::ChainTest {
 protected:
  // x's values for reductions: f32, bf16, f16 with ties (every third a whole number), small i32
  // (many ties), bools.
  Operand values_for(const Dims& shape, DType t, const Layout& layout) {
    return input(shape, t, layout, [&](std::int64_t n) {
      Values v = kc::random_values(t, n, rng(), t == DType::i32 ? -5 : -4, t == DType::i32 ? 5 : 4);
      if (kiln::is_floating(t))
        for (std::size_t k = 0; k < v.size(); k += 3) v[k] = std::round(v[k]);
      return v;
    });
  }

  // The reference of reduce(op, x, dim) for x's values in row-major order of `shape`.
  static void expected(ReduceOp op, DType in, const Values& x, const Dims& shape, int dim,
                       Values& want, Values& slack, kt::Tol& tol) {
    want.clear(), slack.clear();
    for (const Values& lane : lanes(x, shape, dim)) {
      const Expected e = reduce_ref(op, lane);
      want.push_back(e.value);
      slack.push_back(e.slack);
    }
    // f32 results (sums, means of any dtype) are rounded once more at the end; half results
    // once to the half type (in half ULPs, see the header comment).
    const DType result = kiln::detail::reduce_result_dtype(op, in);
    const bool rounded = op == ReduceOp::sum || op == ReduceOp::mean;
    tol = !rounded                ? kt::kExact
          : kiln::is_half(result) ? kt::Tol{0.51, 0, 0}
          : result == DType::f32  ? kt::Tol{1, 0, 0}
                                  : kt::kExact;
  }

  // reduce(op, x, dim) into a poisoned output laid out as out_layout, checked.
  void check(ReduceOp op, const Operand& x, int dim, const Layout& out_layout = kc::contiguous()) {
    const Dims& shape = x.shape();
    SCOPED_TRACE(std::string(kiln::detail::reduce_name(op)) + " of " +
                 kiln::dtype_name(x.view.dtype) + " " + kiln::format_dims(shape) + " over " +
                 (dim < 0 ? std::string("all") : "dim " + std::to_string(dim)) + ", out " +
                 out_layout.name);
    Values want, slack;
    kt::Tol tol;
    expected(op, x.view.dtype, x.values(), shape, dim, want, slack, tol);
    const Dims os = out_shape(shape, dim);
    Operand out = output(os, kiln::detail::reduce_result_dtype(op, x.view.dtype), out_layout);
    be().reduce(op, x.view, dim, kiln::detail::Out(out.view));
    EXPECT_TRUE(kc::matches(read(out), os, want, tol, &slack));
    EXPECT_TRUE(untouched_outside(out));
  }

  // Expects reduce(op, x, dim, out) to throw E naming the op, out being a poisoned tensor of
  // shape os, dtype ot and layout l; x is read from memory, or, with pending_, is the pending
  // result of an element-wise copy of x.
  template <class E>
  void expect(const char* what, ReduceOp op, const Operand& x, int dim, const Dims& os, DType ot,
              const Layout& l = kc::contiguous()) {
    SCOPED_TRACE(what);
    Handle copied;
    if (pending_) {
      Program copy;
      copy.output(copy.input(x.view.dtype));
      copied = be().empty(x.shape(), x.view.dtype);
      elementwise(copy, {&x.view}, {}, {copied.get()});
    }
    Operand out = output(os, ot, l);
    try {
      be().reduce(op, pending_ ? *copied : x.view, dim, kiln::detail::Out(out.view));
      ADD_FAILURE() << what << ": no exception";
    } catch (const E& e) {
      EXPECT_NE(std::string(e.what()).find(kiln::detail::reduce_name(op)), std::string::npos)
          << "the message does not name the op: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": another exception: " << e.what();
    }
  }
  bool pending_ = false;
};
KILN_INSTANTIATE_CHAINS(BackendReduce);

// Every op, dtype, dim and input layout; the output dense, then at an offset in its buffer (the
// contract asks for a contiguous output, which may start anywhere).
TEST_P(BackendReduce, EveryOpDtypeDimAndLayout) {
  const Dims shape{3, 37, 41};
  for (DType t : kDTypes) {
    for (const Layout& layout : kc::input_layouts()) {
      SCOPED_TRACE("x " + layout.name);
      const Operand x = values_for(shape, t, layout);
      for (ReduceOp op : kOps) {
        for (int dim : {-1, 0, 1, 2}) {
          check(op, x, dim);
          check(op, x, dim, kc::offset());
        }
      }
    }
  }
}

// Lanes longer than the CPU's row blocks (32768) and the CUDA kernels' chunks, whole and strided.
TEST_P(BackendReduce, LongLanes) {
  for (DType t : {DType::f32, DType::i32, DType::bf16, DType::f16}) {
    for (const Layout& layout : {kc::contiguous(), kc::transposed()}) {
      const Operand x = values_for({2, 70001}, t, layout);
      for (ReduceOp op : kOps)
        for (int dim : {-1, 0, 1}) check(op, x, dim);
    }
  }
}

// Empty inputs: sum gives 0 and mean NaN over an empty lane; every op with an empty output is a
// call that writes nothing (its buffer keeps its poison) and throws nothing.
TEST_P(BackendReduce, EmptyInputs) {
  for (DType t : kDTypes) {
    for (const Dims& shape : {Dims{0, 5}, Dims{4, 0}, Dims{0}}) {
      for (const Layout& layout : {kc::contiguous(), kc::permuted()}) {
        const Operand x = values_for(shape, t, layout);
        for (ReduceOp op : kOps) {
          for (int dim = -1; dim < static_cast<int>(shape.size()); ++dim) {
            const std::int64_t len = dim < 0 ? 0 : shape[static_cast<std::size_t>(dim)];
            const bool identity = op == ReduceOp::sum || op == ReduceOp::mean;
            if (!identity && len == 0 && kc::detail::numel(out_shape(shape, dim)) > 0)
              continue;  // a ValueError: the Errors test
            check(op, x, dim, kc::offset());
          }
        }
      }
    }
  }
}

// NaN makes max/min (and sum, mean) NaN, and argmax/argmin the index of the first NaN; ties give
// the first index.
TEST_P(BackendReduce, NaNsAndTies) {
  const Dims shape{5, 9};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Layout& layout : {kc::contiguous(), kc::transposed()}) {
      SCOPED_TRACE(kiln::dtype_name(t));
      Operand x = input(shape, t, layout, [&](std::int64_t n) {
        Values v = kc::random_values(t, n, rng(), -2, 2);
        for (auto& e : v) e = std::round(e);  // many ties
        return v;
      });
      // Plant NaNs at chosen logical positions: row 1 one, row 3 two, column 4 of row 0.
      const auto where = x.where();
      for (auto [r, c] : {std::pair{1, 6}, {3, 2}, {3, 7}, {0, 4}})
        x.host[static_cast<std::size_t>(where[static_cast<std::size_t>(r * 9 + c)])] = nan;
      be().upload(kc::encode(x.host, t).bytes.data(), kiln::detail::Out(*x.buffer));
      for (ReduceOp op : kOps)
        for (int dim : {-1, 0, 1}) check(op, x, dim);
    }
}

// A reduction of a result no one has read yet: a fusion decorator evaluates the open group inside
// the reduction (reduce_prologue) or runs the group first; either way the values are those of
// the element-wise call followed by the reduction, and the result itself, still referenced,
// is written when its group runs.
TEST_P(BackendReduce, PendingInput) {
  const Dims shape{5, 37, 41};
  const std::int64_t n = kc::detail::numel(shape);
  Program affine;  // x * s + t over x (any layout) and t (a broadcast row)
  {
    const auto x = affine.input(DType::f32), t = affine.input(DType::f32);
    const auto s = affine.scalar(DType::f32);
    affine.output(affine.binary(Op::add, affine.binary(Op::mul, x, s), t));
  }
  Program positive;  // x > 0 (bool), reduced to counts
  {
    const auto x = positive.input(DType::f32), zero = positive.scalar(DType::f32);
    positive.output(positive.binary(Op::gt, x, zero));
  }
  Program to_int;  // i32(x * 10)
  {
    const auto x = to_int.input(DType::f32), ten = to_int.scalar(DType::f32);
    to_int.output(to_int.cast(to_int.binary(Op::mul, x, ten), DType::i32));
  }
  for (const Layout& layout : {kc::contiguous(), kc::permuted(), kc::sliced()}) {
    SCOPED_TRACE("x " + layout.name);
    const Operand x = input(shape, DType::f32, layout);
    const Operand t = input(shape, DType::f32, kc::broadcast_outer());
    const Values xs = x.values(), ts = t.values();
    for (ReduceOp op : kOps) {
      for (int dim : {-1, 0, 1, 2}) {
        for (int which = 0; which < 3; ++which) {
          const Program& p = which == 0 ? affine : which == 1 ? positive : to_int;
          const DType vt = p.dtype(p.outputs[0]);
          SCOPED_TRACE(std::string(kiln::detail::reduce_name(op)) + " over dim " +
                       std::to_string(dim) + " of\n" + kiln::ir::describe(p));
          Values v;
          for (std::int64_t k = 0; k < n; ++k) {
            const auto j = static_cast<std::size_t>(k);
            v.push_back(which == 0   ? double(f(xs[j]) * 0.5f + f(ts[j]))
                        : which == 1 ? double(xs[j] > 0)
                                     : std::trunc(double(f(xs[j]) * 10.0f)));
          }
          Handle y = be().empty(shape, vt);
          if (which == 0) {
            elementwise(p, {&x.view, &t.view}, {0.5}, {y.get()});
          } else {
            elementwise(p, {&x.view}, {which == 1 ? 0.0 : 10.0}, {y.get()});
          }
          Values want, slack;
          kt::Tol tol;
          expected(op, vt, v, shape, dim, want, slack, tol);
          const Dims os = out_shape(shape, dim);
          Operand out = output(os, kiln::detail::reduce_result_dtype(op, vt));
          be().reduce(op, *y, dim, kiln::detail::Out(out.view));
          EXPECT_TRUE(kc::matches(read(out), os, want, tol, &slack));
          EXPECT_TRUE(kc::matches(read(*y), shape, v)) << "the reduced result itself";
        }
      }
    }
  }
}

// A reduction of a pending half result, y = x * s + u (x, u and y of dtype bf16 or f16): what is
// reduced is y as elementwise() stores it, rounded to the half type, also where a fusion
// decorator evaluates the call as the reduction's prologue. s is small beside u's spacing, so
// the rounded y of a lane along dim 0 (where u, broadcast, is one value) mostly ties, and
// argmax/argmin of the unrounded values would differ from the first index of the tie.
TEST_P(BackendReduce, PendingHalfInput) {
  const Dims shape{5, 37, 41};
  const std::int64_t n = kc::detail::numel(shape);
  for (const DType t : kHalves) {
    Program affine;
    {
      const auto x = affine.input(t), u = affine.input(t);
      const auto s = affine.scalar(t);
      affine.output(affine.binary(Op::add, affine.binary(Op::mul, x, s), u));
    }
    const Operand x = input(shape, t, kc::permuted(), -1, 1);
    const Operand u = input(shape, t, kc::broadcast_outer(), -4, 4);
    const Values xs = x.values(), us = u.values();
    const double s = 1e-3;
    Values v;  // y as stored: the f32 register x * s + u, rounded once
    for (std::int64_t k = 0; k < n; ++k) {
      const auto j = static_cast<std::size_t>(k);
      v.push_back(kt::round_to_half(f(f(xs[j]) * f(s)) + f(us[j]), t));
    }
    for (ReduceOp op : kOps) {
      for (int dim : {-1, 0, 2}) {
        SCOPED_TRACE(std::string(kiln::detail::reduce_name(op)) + " over dim " +
                     std::to_string(dim) + " of " + kiln::dtype_name(t) + "\n" +
                     kiln::ir::describe(affine));
        Handle y = be().empty(shape, t);
        elementwise(affine, {&x.view, &u.view}, {s}, {y.get()});
        Values want, slack;
        kt::Tol tol;
        expected(op, t, v, shape, dim, want, slack, tol);
        const Dims os = out_shape(shape, dim);
        Operand out = output(os, kiln::detail::reduce_result_dtype(op, t));
        be().reduce(op, *y, dim, kiln::detail::Out(out.view));
        EXPECT_TRUE(kc::matches(read(out), os, want, tol, &slack));
        EXPECT_TRUE(kc::matches(read(*y), shape, v)) << "the reduced result itself";
      }
    }
  }
}

// A reduction of views of a pending result other than element for element (a transpose, rows
// from an offset): a fusion decorator must give the result memory first.
TEST_P(BackendReduce, ViewsOfAPendingInput) {
  const Dims shape{37, 41};
  const Operand x = input(shape, DType::f32);
  Program twice;
  {
    const auto in = twice.input(DType::f32), s = twice.scalar(DType::f32);
    twice.output(twice.binary(Op::mul, in, s));
  }
  Values ys;
  for (double v : x.values()) ys.push_back(f(v) * 2.0f);
  for (int view = 0; view < 2; ++view) {
    Handle y = be().empty(shape, DType::f32);
    elementwise(twice, {&x.view}, {2.0}, {y.get()});
    TensorImpl v = *y;
    Values vs;
    if (view == 0) {  // y^T, [41, 37]
      v.shape = {41, 37};
      v.strides = {1, 41};
      for (std::int64_t r = 0; r < 41; ++r)
        for (std::int64_t c = 0; c < 37; ++c)
          vs.push_back(ys[static_cast<std::size_t>(c * 41 + r)]);
    } else {  // rows 5 to 14, [10, 41] from an offset
      v.shape = {10, 41};
      v.offset = 5 * 41;
      vs.assign(ys.begin() + 5 * 41, ys.begin() + 15 * 41);
    }
    SCOPED_TRACE(view == 0 ? "transposed" : "rows from an offset");
    for (ReduceOp op : kOps) {
      for (int dim : {-1, 0, 1}) {
        Values want, slack;
        kt::Tol tol;
        expected(op, DType::f32, vs, v.shape, dim, want, slack, tol);
        const Dims os = out_shape(v.shape, dim);
        Operand out = output(os, kiln::detail::reduce_result_dtype(op, DType::f32));
        be().reduce(op, v, dim, kiln::detail::Out(out.view));
        EXPECT_TRUE(kc::matches(read(out), os, want, tol, &slack))
            << kiln::detail::reduce_name(op) << " over dim " << dim;
      }
    }
  }
}

// reduce_prologue called directly with a prologue the test builds: where a backend takes it, the
// result is reduce() of the prologue's value; where it declines (it may, for any layout: the
// base class declines everything), it returns false having written nothing.
TEST_P(BackendReduce, PrologueCalledDirectly) {
  const Dims shape{4, 33, 20};
  const std::int64_t n = kc::detail::numel(shape);
  Program p;  // x * s - t
  {
    const auto x = p.input(DType::f32), t = p.input(DType::f32);
    const auto s = p.scalar(DType::f32);
    p.output(p.binary(Op::sub, p.binary(Op::mul, x, s), t));
  }
  Program q;  // x < s, from i32
  {
    const auto x = q.input(DType::i32), s = q.scalar(DType::i32);
    q.output(q.binary(Op::lt, x, s));
  }
  int taken = 0, declined = 0;
  for (const Layout& layout : kc::input_layouts()) {
    SCOPED_TRACE("x " + layout.name);
    const Operand xf = input(shape, DType::f32, layout);
    const Operand xi = input(shape, DType::i32, layout, -5, 5);
    const Operand t = input(shape, DType::f32, kc::broadcast_inner());
    const Values xfs = xf.values(), xis = xi.values(), ts = t.values();
    for (int which = 0; which < 2; ++which) {
      const Program& prog = which == 0 ? p : q;
      const DType vt = prog.dtype(prog.outputs[0]);
      const std::vector<const TensorImpl*> ins =
          which == 0 ? std::vector<const TensorImpl*>{&xf.view, &t.view}
                     : std::vector<const TensorImpl*>{&xi.view};
      const std::vector<double> scalars = {which == 0 ? 1.5 : 1.0};
      Values v;
      for (std::int64_t k = 0; k < n; ++k) {
        const auto j = static_cast<std::size_t>(k);
        v.push_back(which == 0 ? double(f(xfs[j]) * 1.5f - f(ts[j])) : double(xis[j] < 1));
      }
      for (ReduceOp op : kOps) {
        for (int dim : {-1, 0, 1, 2}) {
          SCOPED_TRACE(std::string(kiln::detail::reduce_name(op)) + " over dim " +
                       std::to_string(dim) + " of\n" + kiln::ir::describe(prog));
          const Dims os = out_shape(shape, dim);
          Operand out = output(os, kiln::detail::reduce_result_dtype(op, vt));
          const Prologue pro{prog, ins, scalars, shape};
          if (be().reduce_prologue(op, pro, dim, kiln::detail::Out(out.view))) {
            ++taken;
            Values want, slack;
            kt::Tol tol;
            expected(op, vt, v, shape, dim, want, slack, tol);
            EXPECT_TRUE(kc::matches(read(out), os, want, tol, &slack));
          } else {
            ++declined;
            const kc::Raw got = read(out);
            for (std::int64_t k = 0; k < got.size(); ++k)
              ASSERT_TRUE(got.poisoned(k)) << "declined, but wrote element " << k;
          }
        }
      }
    }
  }
  RecordProperty("prologues_taken", taken);
  RecordProperty("prologues_declined", declined);
}

// The errors of the contract (check_reduce_call), on x in memory and on a pending x (which a
// fusion decorator tries to take as a prologue first). Each message names the op.
TEST_P(BackendReduce, Errors) {
  using kiln::DTypeError, kiln::IndexError, kiln::ShapeError, kiln::ValueError;
  const Dims shape{3, 4, 5};
  const Operand xf = input(shape, DType::f32);
  const Operand xi = input(shape, DType::i32, kc::contiguous(), -5, 5);
  const Operand xb = input(shape, DType::boolean);
  const Operand xh = input(shape, DType::bf16), xg = input(shape, DType::f16);
  const Operand empty_lane = input({3, 0, 5}, DType::f32), empty_all = input({0}, DType::f32);
  for (const bool pending : {false, true}) {
    pending_ = pending;
    SCOPED_TRACE(pending ? "x pending" : "x in memory");
    expect<IndexError>("dim == rank", ReduceOp::sum, xf, 3, {1, 1, 1}, DType::f32);
    expect<IndexError>("dim > rank", ReduceOp::argmax, xf, 7, {1, 1, 1}, DType::i32);
    expect<ShapeError>("reduced dim kept", ReduceOp::sum, xf, 1, {3, 4, 5}, DType::f32);
    expect<ShapeError>("reduced dim dropped", ReduceOp::max, xf, 1, {3, 5}, DType::f32);
    expect<ShapeError>("all into rank 1", ReduceOp::mean, xf, -1, {1}, DType::f32);
    expect<ShapeError>("all into rank 0", ReduceOp::min, xi, -1, {}, DType::i32);
    expect<ShapeError>("another extent", ReduceOp::sum, xf, 2, {3, 5, 1}, DType::f32);
    expect<ShapeError>("output not contiguous", ReduceOp::sum, xf, 1, {3, 1, 5}, DType::f32,
                       kc::permuted());
    expect<DTypeError>("sum f32 into i32", ReduceOp::sum, xf, 0, {1, 4, 5}, DType::i32);
    expect<DTypeError>("sum bf16 into f32", ReduceOp::sum, xh, 0, {1, 4, 5}, DType::f32);
    expect<DTypeError>("mean f16 into bf16", ReduceOp::mean, xg, 1, {3, 1, 5}, DType::bf16);
    expect<DTypeError>("sum bool into bool", ReduceOp::sum, xb, 0, {1, 4, 5}, DType::boolean);
    expect<DTypeError>("mean i32 into i32", ReduceOp::mean, xi, 2, {3, 4, 1}, DType::i32);
    expect<DTypeError>("max i32 into f32", ReduceOp::max, xi, -1, {1, 1, 1}, DType::f32);
    expect<DTypeError>("argmax into f32", ReduceOp::argmax, xf, 1, {3, 1, 5}, DType::f32);
    expect<DTypeError>("argmin bool into bool", ReduceOp::argmin, xb, 1, {3, 1, 5}, DType::boolean);
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin}) {
      const DType ot = kiln::detail::reduce_result_dtype(op, DType::f32);
      expect<ValueError>("an empty lane", op, empty_lane, 1, {3, 1, 5}, ot);
      expect<ValueError>("all of an empty x", op, empty_all, -1, {1}, ot);
    }
  }
}

// reduce_prologue's errors are reduce()'s; a backend may also decline the call (false, nothing
// written), after which the caller's reduce() throws.
TEST_P(BackendReduce, PrologueErrorsOrDeclines) {
  const Dims shape{3, 4, 5};
  const Operand x = input(shape, DType::f32);
  Program neg;
  neg.output(neg.unary(Op::neg, neg.input(DType::f32)));
  const std::vector<const TensorImpl*> ins{&x.view};
  struct Bad {
    const char* what;
    ReduceOp op;
    int dim;
    Dims os;
    DType ot;
  };
  for (const Bad& b : {Bad{"dim == rank", ReduceOp::sum, 3, {1, 1, 1}, DType::f32},
                       Bad{"reduced dim kept", ReduceOp::max, 1, {3, 4, 5}, DType::f32},
                       Bad{"argmax into f32", ReduceOp::argmax, 0, {1, 4, 5}, DType::f32}}) {
    SCOPED_TRACE(b.what);
    Operand out = output(b.os, b.ot);
    bool taken = false;
    try {
      taken = be().reduce_prologue(b.op, Prologue{neg, ins, {}, shape}, b.dim,
                                   kiln::detail::Out(out.view));
      EXPECT_FALSE(taken) << "an invalid call was taken";
      const kc::Raw got = read(out);
      for (std::int64_t k = 0; k < got.size(); ++k)
        EXPECT_TRUE(got.poisoned(k)) << "declined, but wrote element " << k;
    } catch (const kiln::IndexError&) {
      EXPECT_STREQ(b.what, "dim == rank");
    } catch (const kiln::ShapeError&) {
      EXPECT_STREQ(b.what, "reduced dim kept");
    } catch (const kiln::DTypeError&) {
      EXPECT_STREQ(b.what, "argmax into f32");
    }
  }
}

}  // namespace
