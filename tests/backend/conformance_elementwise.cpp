// Backend::elementwise on every chain: every IR op against a float64 (or exact) reference, every
// input layout in every input slot, strided outputs (cat writes slices) that must leave the rest
// of their buffer alone, several outputs, scalars as parameters, aliased inputs, empty shapes,
// and chains of calls whose results are read only at the end (a fusion decorator records them).
//
// backend.hpp documents no errors for elementwise (the front end checks dtypes and shapes, and
// the IR builder rejects ill-typed programs), so there is no error test here.
#include <cmath>
#include <set>

#include "elementwise_cases.hpp"

namespace {

using namespace kc::ew;  // the op table's vocabulary: InputSpec, Case, the Program builders
using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

std::vector<Case> cases() {
  std::vector<Case> c;
  const InputSpec F{DType::f32}, I{DType::i32, -30000, 30000}, B{DType::boolean};
  const InputSpec Ft{DType::f32, -4, 4, true}, It{DType::i32, -3, 3};
  using X = const std::vector<double>&;
  auto un = [&](const char* name, Op op, InputSpec in, auto ref, kt::Tol tol = kt::kExact) {
    c.push_back({std::string(name) + "_" + kiln::dtype_name(in.dtype),
                 unary(op, in.dtype),
                 {in},
                 {},
                 [ref](X x, std::int64_t) { return ref(x[0]); },
                 tol});
  };
  // f32 unary: ranges and tolerances as the front end's tests (docs/accuracy.md's bounds).
  un("neg", Op::neg, F, [](double x) { return -x; });
  un("abs", Op::abs, F, [](double x) { return std::fabs(x); });
  un("relu", Op::relu, F, relu);
  un(
      "sin", Op::sin, {DType::f32, -10, 10}, [](double x) { return std::sin(x); }, kt::kMath);
  un(
      "cos", Op::cos, {DType::f32, -10, 10}, [](double x) { return std::cos(x); }, kt::kMath);
  un(
      "tan", Op::tan, {DType::f32, -1.5, 1.5}, [](double x) { return std::tan(x); }, kt::kMath);
  un(
      "exp", Op::exp, {DType::f32, -20, 20}, [](double x) { return std::exp(x); }, kt::kMath);
  un(
      "log", Op::log, {DType::f32, 1e-3, 100}, [](double x) { return std::log(x); }, kt::kMath);
  un("sqrt", Op::sqrt, {DType::f32, 0, 100}, [](double x) { return std::sqrt(x); });
  un(
      "rsqrt", Op::rsqrt, {DType::f32, 1e-3, 100}, [](double x) { return 1 / std::sqrt(x); },
      kt::kMath);
  un(
      "tanh", Op::tanh, {DType::f32, -5, 5}, [](double x) { return std::tanh(x); }, kt::kMath);
  un(
      "sigmoid", Op::sigmoid, {DType::f32, -10, 10},
      [](double x) { return 1 / (1 + std::exp(-x)); }, kt::kMath);
  un(
      "gelu", Op::gelu, {DType::f32, -5, 5},
      [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, kt::kMath);
  un(
      "silu", Op::silu, {DType::f32, -10, 10}, [](double x) { return x / (1 + std::exp(-x)); },
      kt::kMath);
  un(
      "erf", Op::erf, {DType::f32, -4, 4}, [](double x) { return std::erf(x); }, kt::kMath);
  // i32 unary.
  un("neg", Op::neg, I, [](double x) { return -x; });
  un("abs", Op::abs, I, [](double x) { return std::fabs(x); });
  un("relu", Op::relu, I, relu);

  auto bin = [&](const char* name, Op op, InputSpec a, InputSpec b, auto ref,
                 kt::Tol tol = kt::kExact) {
    c.push_back({std::string(name) + "_" + kiln::dtype_name(a.dtype),
                 binary(op, a.dtype),
                 {a, b},
                 {},
                 [ref](X x, std::int64_t) { return ref(x[0], x[1]); },
                 tol});
  };
  // f32 arithmetic is IEEE, computed here in float (the test is built with -ffp-contract=off).
  bin("add", Op::add, F, F, [](double a, double b) { return f(a) + f(b); });
  bin("sub", Op::sub, F, F, [](double a, double b) { return f(a) - f(b); });
  bin("mul", Op::mul, F, F, [](double a, double b) { return f(a) * f(b); });
  bin("div", Op::div, F, F, [](double a, double b) { return f(a) / f(b); });
  bin(
      "pow", Op::pow, {DType::f32, 0.1, 3}, {DType::f32, -2, 2},
      [](double a, double b) { return std::pow(a, b); }, kt::kMath);
  bin("minimum", Op::minimum, Ft, Ft, [](double a, double b) { return std::min(a, b); });
  bin("maximum", Op::maximum, Ft, Ft, [](double a, double b) { return std::max(a, b); });
  bin("add", Op::add, I, I, [](double a, double b) { return wrap(i(a) + i(b)); });
  bin("sub", Op::sub, I, I, [](double a, double b) { return wrap(i(a) - i(b)); });
  bin("mul", Op::mul, I, I, [](double a, double b) { return wrap(i(a) * i(b)); });
  bin("minimum", Op::minimum, It, It, [](double a, double b) { return std::min(a, b); });
  bin("maximum", Op::maximum, It, It, [](double a, double b) { return std::max(a, b); });
  // Comparisons on every operand dtype, with ties.
  for (InputSpec t : {Ft, It, B}) {
    bin("eq", Op::eq, t, t, [](double a, double b) { return double(a == b); });
    bin("ne", Op::ne, t, t, [](double a, double b) { return double(a != b); });
    bin("lt", Op::lt, t, t, [](double a, double b) { return double(a < b); });
    bin("le", Op::le, t, t, [](double a, double b) { return double(a <= b); });
    bin("gt", Op::gt, t, t, [](double a, double b) { return double(a > b); });
    bin("ge", Op::ge, t, t, [](double a, double b) { return double(a >= b); });
  }
  // Casts between every pair of dtypes: f32 -> i32 truncates toward zero, to bool is x != 0.
  for (DType from : {DType::f32, DType::i32, DType::boolean}) {
    for (DType to : {DType::f32, DType::i32, DType::boolean}) {
      if (from == to) continue;
      const InputSpec in = from == DType::f32   ? InputSpec{DType::f32, -1000, 1000, true}
                           : from == DType::i32 ? InputSpec{DType::i32, -3, 3}
                                                : B;
      c.push_back({std::string("cast_") + kiln::dtype_name(from) + "_" + kiln::dtype_name(to),
                   cast(from, to),
                   {in},
                   {},
                   [to](X x, std::int64_t) {
                     return to == DType::boolean ? double(x[0] != 0) : std::trunc(x[0]);
                   }});
    }
  }
  for (DType t : {DType::f32, DType::i32, DType::boolean}) {
    const InputSpec v = t == DType::f32 ? F : t == DType::i32 ? I : B;
    c.push_back({std::string("where_") + kiln::dtype_name(t),
                 where(t),
                 {B, v, v},
                 {},
                 [](X x, std::int64_t) { return x[0] != 0 ? x[1] : x[2]; }});
    // An input leaf as the output: a strided copy (the backend's contiguous()).
    c.push_back(
        {std::string("copy_") + kiln::dtype_name(t), copy(t), {v}, {}, [](X x, std::int64_t) {
           return x[0];
         }});
    // A scalar leaf as the output: full().
    Program full;
    full.output(full.scalar(t));
    const double value = t == DType::f32 ? -2.75 : t == DType::i32 ? 123456 : 1;
    c.push_back(
        {std::string("full_") + kiln::dtype_name(t), full, {}, {value}, [value](X, std::int64_t) {
           return value;
         }});
  }
  {
    // The element's index: arange(start, step) as the front end builds it, in f32 and i32.
    for (DType t : {DType::f32, DType::i32}) {
      Program p;
      // (Each builder call a statement of its own: argument evaluation order is unspecified, and
      // scalar slots are numbered in the order they are made.)
      const auto idx = p.cast(p.index(), t);
      const auto step_slot = p.scalar(t), start_slot = p.scalar(t);
      p.output(p.binary(Op::add, p.binary(Op::mul, idx, step_slot), start_slot));
      const double step = t == DType::f32 ? 0.5 : 3, start = t == DType::f32 ? -7.25 : -40;
      c.push_back({std::string("arange_") + kiln::dtype_name(t),
                   p,
                   {},
                   {step, start},
                   [t, step, start](X, std::int64_t k) {
                     return t == DType::f32 ? double(f(f(double(k)) * f(step)) + f(start))
                                            : double(k) * step + start;
                   }});
    }
  }
  {
    // Scalars beside tensors, of each dtype: x * s + t (f32), x - s (i32), where(s, a, b) with a
    // bool scalar as the condition.
    Program p;
    const auto x = p.input(DType::f32);
    const auto s0 = p.scalar(DType::f32), s1 = p.scalar(DType::f32);
    p.output(p.binary(Op::add, p.binary(Op::mul, x, s0), s1));
    c.push_back({"affine_scalars_f32", p, {F}, {0.75, -1.5}, [](X x, std::int64_t) {
                   return f(f(x[0]) * 0.75f) + -1.5f;
                 }});
    Program q;
    q.output(q.binary(Op::sub, q.input(DType::i32), q.scalar(DType::i32)));
    c.push_back(
        {"sub_scalar_i32", q, {I}, {-77}, [](X x, std::int64_t) { return wrap(i(x[0]) + 77); }});
    Program w;
    const auto s = w.scalar(DType::boolean);
    const auto a = w.input(DType::f32), b = w.input(DType::f32);
    w.output(w.where(s, a, b));
    c.push_back({"where_scalar_condition", w, {F, F}, {0}, [](X x, std::int64_t) { return x[1]; }});
  }
  return c;
}

class BackendElementwise : public ElementwiseChainTest {};
KILN_INSTANTIATE_CHAINS(BackendElementwise);

// Every row of the op table (check_every_op says over which shapes and layouts).
TEST_P(BackendElementwise, EveryOp) { check_every_op(cases()); }

// The rows whose operands differ in dtype or role, with each input slot in turn (the others
// dense) and then all of them in every layout: contiguous, transposed, permuted, offset,
// step-2 slices, broadcast rows and columns, and a splat; over a rank-3 shape and empty ones.
TEST_P(BackendElementwise, EveryInputLayoutInEverySlot) {
  check_every_input_layout(rows(cases(), {"copy_f32", "copy_bool", "sub_f32", "lt_i32", "where_f32",
                                          "cast_bool_f32", "sub_scalar_i32"}));
}

// Outputs may be strided views (the front end's cat writes slices of one tensor): every element
// of the view is written, and nothing else in its buffer.
TEST_P(BackendElementwise, StridedOutputsWriteOnlyTheirView) {
  check_every_output_layout(
      rows(cases(), {"copy_f32", "sub_f32", "where_i32", "lt_f32", "full_bool"}));
}

// One call, three outputs of three dtypes (one of them an input read straight through), each in
// its own layout.
TEST_P(BackendElementwise, SeveralOutputs) {
  Program p;
  const auto x = p.input(DType::f32);
  const auto s = p.scalar(DType::f32);
  p.output(p.binary(Op::mul, x, s));
  p.output(p.binary(Op::gt, x, s));
  p.output(p.cast(x, DType::i32));
  p.output(x);
  const Dims shape{6, 45};
  const Operand in = input(shape, DType::f32, kc::transposed(), -100, 100);
  const Values xs = in.values();
  const double sv = -1.25;
  Values mul, gt, to_int;
  for (double v : xs) {
    mul.push_back(f(v) * f(sv));
    gt.push_back(v > sv);
    to_int.push_back(std::trunc(v));
  }
  {
    Operand o0 = output(shape, DType::f32, kc::offset());
    Operand o1 = output(shape, DType::boolean, kc::permuted());
    Operand o2 = output(shape, DType::i32);
    Operand o3 = output(shape, DType::f32, kc::sliced());
    elementwise(p, {&in.view}, {sv}, {&o0.view, &o1.view, &o2.view, &o3.view});
    EXPECT_TRUE(kc::matches(read(o0), shape, mul));
    EXPECT_TRUE(kc::matches(read(o1), shape, gt));
    EXPECT_TRUE(kc::matches(read(o2), shape, to_int));
    EXPECT_TRUE(kc::matches(read(o3), shape, xs));
    for (const Operand* o : {&o0, &o1, &o2, &o3}) EXPECT_TRUE(untouched_outside(*o));
  }
  {
    SCOPED_TRACE("fresh outputs from empty()");
    Handle o0 = be().empty(shape, DType::f32), o1 = be().empty(shape, DType::boolean);
    Handle o2 = be().empty(shape, DType::i32), o3 = be().empty(shape, DType::f32);
    elementwise(p, {&in.view}, {sv}, {o0.get(), o1.get(), o2.get(), o3.get()});
    EXPECT_TRUE(kc::matches(read(*o2), shape, to_int));
    EXPECT_TRUE(kc::matches(read(*o0), shape, mul));
    EXPECT_TRUE(kc::matches(read(*o1), shape, gt));
    EXPECT_TRUE(kc::matches(read(*o3), shape, xs));
  }
}

// Scalars are parameters: one Program run with other values gives other results (a backend that
// caches compiled kernels, or a decorator that caches plans, must not keep the first values).
TEST_P(BackendElementwise, ScalarsAreParametersNotConstants) {
  const Dims shape{33, 17};
  for (const Case& c : rows(cases(), {"affine_scalars_f32", "sub_scalar_i32",
                                      "where_scalar_condition", "full_i32"})) {
    SCOPED_TRACE(c.name);
    std::vector<Operand> in;
    for (const auto& spec : c.inputs) in.push_back(input_for(shape, spec, kc::contiguous()));
    std::vector<const TensorImpl*> ins;
    for (const auto& o : in) ins.push_back(&o.view);
    for (int round = 0; round < 3; ++round) {
      std::vector<double> scalars;
      for (DType t : c.program.scalars) {
        const double v = round == 0   ? 0.0
                         : round == 1 ? (t == DType::boolean ? 1.0 : 5.5)
                                      : (t == DType::boolean ? 0.0 : -19.0);
        scalars.push_back(as(t, v));
      }
      SCOPED_TRACE("round " + std::to_string(round));
      // The reference with these scalars: the program evaluated in the test.
      Values want;
      std::vector<Values> vals;
      for (const auto& o : in) vals.push_back(o.values());
      for (std::int64_t k = 0; k < kc::detail::numel(shape); ++k) {
        const auto at = [&](std::size_t j) { return vals[j][static_cast<std::size_t>(k)]; };
        if (c.name == "affine_scalars_f32") {
          want.push_back(f(f(at(0)) * f(scalars[0])) + f(scalars[1]));
        } else if (c.name == "sub_scalar_i32") {
          want.push_back(wrap(i(at(0)) - i(scalars[0])));
        } else if (c.name == "where_scalar_condition") {
          want.push_back(scalars[0] != 0 ? at(0) : at(1));
        } else {
          want.push_back(scalars[0]);
        }
      }
      Operand out = output(shape, c.program.dtype(c.program.outputs[0]));
      elementwise(c.program, ins, scalars, {&out.view});
      EXPECT_TRUE(kc::matches(read(out), shape, want));
      Handle fresh = be().empty(shape, out.view.dtype);
      elementwise(c.program, ins, scalars, {fresh.get()});
      EXPECT_TRUE(kc::matches(read(*fresh), shape, want));
    }
  }
}

// Two inputs that share a buffer: the same view twice, and a matrix with its own transpose.
TEST_P(BackendElementwise, InputsThatShareABuffer) {
  const Dims shape{24, 24};
  const Program sub = binary(Op::sub, DType::f32);
  const Operand a = input(shape, DType::f32);
  TensorImpl at = a.view;
  at.strides = {1, 24};
  const Values av = a.values();
  Values same(av.size(), 0.0), minus_t;
  for (std::int64_t r = 0; r < 24; ++r)
    for (std::int64_t c = 0; c < 24; ++c) minus_t.push_back(f(av[r * 24 + c]) - f(av[c * 24 + r]));
  for (const bool fresh : {false, true}) {
    SCOPED_TRACE(fresh ? "fresh outputs" : "poisoned outputs");
    Operand o1 = output(shape, DType::f32), o2 = output(shape, DType::f32);
    Handle h1 = be().empty(shape, DType::f32), h2 = be().empty(shape, DType::f32);
    const TensorImpl* out1 = fresh ? h1.get() : &o1.view;
    const TensorImpl* out2 = fresh ? h2.get() : &o2.view;
    elementwise(sub, {&a.view, &a.view}, {}, {out1});
    elementwise(sub, {&a.view, &at}, {}, {out2});
    EXPECT_TRUE(kc::matches(read(*out1), shape, same));
    EXPECT_TRUE(kc::matches(read(*out2), shape, minus_t));
  }
}

// Results used by later calls before anything is read: on a fusion decorator these calls are
// recorded and run as one group at the first read, with intermediates the test dropped kept in
// registers, and a view of a pending result other than element for element (a transpose)
// making it exist in memory first. Every chain must give the values of running them in order.
TEST_P(BackendElementwise, CallsThatReadEarlierResults) {
  const Dims shape{128, 128};  // 64 KiB of f32: big enough for the CPU's cache of freed blocks
  const std::int64_t n = kc::detail::numel(shape);
  const Operand x = input(shape, DType::f32);
  const Values xs = x.values();
  poison_allocator(n, DType::f32);
  poison_allocator(n, DType::boolean);

  Program affine;  // x * s + t
  {
    const auto in = affine.input(DType::f32);
    const auto s0 = affine.scalar(DType::f32), s1 = affine.scalar(DType::f32);
    affine.output(affine.binary(Op::add, affine.binary(Op::mul, in, s0), s1));
  }
  const Program sin = unary(Op::sin, DType::f32), gt = binary(Op::gt, DType::f32);
  const Program mul = binary(Op::mul, DType::f32), add = binary(Op::add, DType::f32);
  const Program sub = binary(Op::sub, DType::f32), sel = where(DType::f32);

  Handle y = be().empty(shape, DType::f32), z = be().empty(shape, DType::f32);
  Handle b = be().empty(shape, DType::boolean), u = be().empty(shape, DType::f32);
  Handle w = be().empty(shape, DType::f32), v = be().empty(shape, DType::f32);
  elementwise(affine, {&x.view}, {0.5, 0.25}, {y.get()});  // y = x * 0.5 + 0.25
  elementwise(sin, {y.get()}, {}, {z.get()});              // z = sin(y)
  elementwise(gt, {z.get(), y.get()}, {}, {b.get()});      // b = z > y
  {
    Handle t = be().empty(shape, DType::f32);
    elementwise(mul, {&x.view, &x.view}, {}, {t.get()});
    elementwise(add, {t.get(), y.get()}, {}, {u.get()});  // u = x * x + y; t is dropped below
  }
  elementwise(sel, {b.get(), z.get(), u.get()}, {}, {w.get()});  // w = b ? z : u
  TensorImpl yt = *y;  // y transposed: not element for element
  yt.strides = {1, shape[1]};
  elementwise(sub, {&yt, w.get()}, {}, {v.get()});  // v = y^T - w
  // An empty call in between (a fusion decorator runs it at once, it must keep the rest).
  Handle e_in = be().empty({0, 128}, DType::f32), e_out = be().empty({0, 128}, DType::f32);
  elementwise(sin, {e_in.get()}, {}, {e_out.get()});

  // y and u are exact; z is within kMath of the exact sine; b, w and v are checked against the
  // values of their operands read back (a comparison or a select of values within rounding of
  // each other may go either way between exact and computed operands).
  Values ys, zs, us;
  for (double xv : xs) {
    const float yv = f(xv) * 0.5f + 0.25f;
    ys.push_back(yv);
    zs.push_back(std::sin(static_cast<double>(yv)));
    us.push_back(f(xv) * f(xv) + yv);
  }
  const kc::Raw vr = read(*v);  // the last result first: it forces everything before it
  const kc::Raw wr = read(*w), br = read(*b), zr = read(*z);
  EXPECT_TRUE(kc::matches(read(*y), shape, ys));
  EXPECT_TRUE(kc::matches(zr, shape, zs, kt::kMath));
  EXPECT_TRUE(kc::matches(read(*u), shape, us));
  Values bs, ws, vs;
  for (std::int64_t k = 0; k < n; ++k) {
    bs.push_back(zr.value(k) > ys[static_cast<std::size_t>(k)]);
    ws.push_back(br.value(k) != 0 ? zr.value(k) : us[static_cast<std::size_t>(k)]);
  }
  for (std::int64_t r = 0; r < shape[0]; ++r)
    for (std::int64_t c = 0; c < shape[1]; ++c)
      vs.push_back(f(ys[static_cast<std::size_t>(c * shape[1] + r)]) -
                   f(wr.value(r * shape[1] + c)));
  EXPECT_TRUE(kc::matches(br, shape, bs));
  EXPECT_TRUE(kc::matches(wr, shape, ws));
  EXPECT_TRUE(kc::matches(vr, shape, vs));
}

}  // namespace

// Every ir::Op appears in some row of the table above, so that an op added to the IR without a
// conformance row fails here.
TEST(ConformanceCoverage, EveryIrOpHasARow) {
  std::set<int> seen;
  for (const Case& c : cases())
    for (const auto& node : c.program.nodes) seen.insert(static_cast<int>(node.op));
  for (int op = 0; op <= static_cast<int>(Op::where); ++op) {
    EXPECT_TRUE(seen.count(op)) << kiln::ir::op_name(static_cast<Op>(op))
                                << " has no row in cases()";
  }
}
