// Backend::elementwise on every chain for the half types bf16 and f16 (docs/accuracy.md, "The
// half types"): every op on half operands, comparisons, where, copies, scalars, and casts between
// every pair of the five dtypes that involves a half type, over the layouts of
// conformance_elementwise.cpp (every input layout in every slot; strided outputs, whose elements
// are 2 bytes here); and calls that read earlier half results (a fusion decorator records them).
//
// The bounds. A half op loads its operands to f32, computes as the f32 op and rounds the stored
// result once, to nearest even. Where the f32 result is exact IEEE arithmetic (neg, abs, relu,
// sqrt, + - * /, minimum, maximum, copies, casts), the test computes it in float and the result
// must be exactly its rounding to the half type (tolerance 0: kc::half_close). For the functions
// (sin, exp, pow...) the f32 result is within a few f32 ULPs of float64 (4 ULP or 1e-6 relative,
// kt::kMath), which is under 2^-9 of a half ULP; rounded once, the result is within half a half
// ULP of float64 plus that: 0.51 half ULPs. That is tighter than the one ULP of
// tests/test_half.cpp on purpose: a conversion that truncates instead of rounding errs by up to a
// whole ULP and fails it.
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

constexpr DType kHalves[] = {DType::bf16, DType::f16};
constexpr DType kAll[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};
// Half a half ULP (the rounding) plus the f32 function's error (see the header comment).
constexpr kt::Tol kHalfMath{0.51, 0, 0};

std::vector<Case> half_cases() {
  std::vector<Case> c;
  using X = const std::vector<double>&;
  for (DType t : kHalves) {
    const std::string tn = kiln::dtype_name(t);
    const InputSpec H{t, -9, 9}, Ht{t, -4, 4, true}, B{DType::boolean};
    auto un = [&](const char* name, Op op, InputSpec in, auto ref, kt::Tol tol) {
      c.push_back({std::string(name) + "_" + tn,
                   unary(op, t),
                   {in},
                   {},
                   [ref](X x, std::int64_t) { return ref(x[0]); },
                   tol});
    };
    // Exact in f32: the reference is the f32 result, which the half result must round.
    un(
        "neg", Op::neg, H, [](double x) { return -x; }, kt::kExact);
    un(
        "abs", Op::abs, H, [](double x) { return std::fabs(x); }, kt::kExact);
    un("relu", Op::relu, H, relu, kt::kExact);
    un(
        "sqrt", Op::sqrt, {t, 0, 1000}, [](double x) { return f(std::sqrt(x)); }, kt::kExact);
    // Functions: float64, within kHalfMath. exp reaches f16's overflow (e^11.1 > 65504) and its
    // subnormals (e^-12 < 2^-14).
    un(
        "sin", Op::sin, {t, -10, 10}, [](double x) { return std::sin(x); }, kHalfMath);
    un(
        "cos", Op::cos, {t, -10, 10}, [](double x) { return std::cos(x); }, kHalfMath);
    un(
        "tan", Op::tan, {t, -1.5, 1.5}, [](double x) { return std::tan(x); }, kHalfMath);
    un(
        "exp", Op::exp, {t, -12, 12}, [](double x) { return std::exp(x); }, kHalfMath);
    un(
        "log", Op::log, {t, 1e-3, 1000}, [](double x) { return std::log(x); }, kHalfMath);
    un(
        "rsqrt", Op::rsqrt, {t, 1e-3, 1000}, [](double x) { return 1 / std::sqrt(x); }, kHalfMath);
    un(
        "tanh", Op::tanh, {t, -5, 5}, [](double x) { return std::tanh(x); }, kHalfMath);
    un(
        "sigmoid", Op::sigmoid, {t, -12, 12}, [](double x) { return 1 / (1 + std::exp(-x)); },
        kHalfMath);
    un(
        "gelu", Op::gelu, {t, -6, 6},
        [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, kHalfMath);
    un(
        "silu", Op::silu, {t, -12, 12}, [](double x) { return x / (1 + std::exp(-x)); }, kHalfMath);
    un(
        "erf", Op::erf, {t, -4, 4}, [](double x) { return std::erf(x); }, kHalfMath);

    auto bin = [&](const char* name, Op op, InputSpec a, InputSpec b, auto ref, kt::Tol tol) {
      c.push_back({std::string(name) + "_" + tn,
                   binary(op, t),
                   {a, b},
                   {},
                   [ref](X x, std::int64_t) { return ref(x[0], x[1]); },
                   tol});
    };
    // IEEE f32 arithmetic of two half values (the test is built with -ffp-contract=off); + and -
    // meet operands of very different size (bf16's range is f32's), so the f32 result is
    // rounded twice: to f32, then to the half type, as kiln must.
    const InputSpec Hw{t, -1000, 1000};
    bin(
        "add", Op::add, Hw, H, [](double a, double b) { return f(a) + f(b); }, kt::kExact);
    bin(
        "sub", Op::sub, H, Hw, [](double a, double b) { return f(a) - f(b); }, kt::kExact);
    bin(
        "mul", Op::mul, Hw, H, [](double a, double b) { return f(a) * f(b); }, kt::kExact);
    bin(
        "div", Op::div, Hw, H, [](double a, double b) { return f(a) / f(b); }, kt::kExact);
    bin(
        "pow", Op::pow, {t, 0.1, 3}, {t, -2, 2}, [](double a, double b) { return std::pow(a, b); },
        kHalfMath);
    bin(
        "minimum", Op::minimum, Ht, Ht, [](double a, double b) { return std::min(a, b); },
        kt::kExact);
    bin(
        "maximum", Op::maximum, Ht, Ht, [](double a, double b) { return std::max(a, b); },
        kt::kExact);
    bin(
        "eq", Op::eq, Ht, Ht, [](double a, double b) { return double(a == b); }, kt::kExact);
    bin(
        "ne", Op::ne, Ht, Ht, [](double a, double b) { return double(a != b); }, kt::kExact);
    bin(
        "lt", Op::lt, Ht, Ht, [](double a, double b) { return double(a < b); }, kt::kExact);
    bin(
        "le", Op::le, Ht, Ht, [](double a, double b) { return double(a <= b); }, kt::kExact);
    bin(
        "gt", Op::gt, Ht, Ht, [](double a, double b) { return double(a > b); }, kt::kExact);
    bin(
        "ge", Op::ge, Ht, Ht, [](double a, double b) { return double(a >= b); }, kt::kExact);

    c.push_back({"where_" + tn, where(t), {B, H, H}, {}, [](X x, std::int64_t) {
                   return x[0] != 0 ? x[1] : x[2];
                 }});
    c.push_back({"copy_" + tn, copy(t), {H}, {}, [](X x, std::int64_t) { return x[0]; }});
    // A scalar leaf as the output (full): a value no half holds, stored rounded.
    Program full;
    full.output(full.scalar(t));
    c.push_back({"full_" + tn, full, {}, {0.1}, [](X, std::int64_t) { return f(0.1); }});
    // x * s + u in one program: the product is a half-typed node whose value is an f32 register
    // (not rounded: only the stored result is), and the scalars are used as f32 (0.1 and -1.3
    // are no half's values).
    Program affine;
    {
      const auto x = affine.input(t);
      const auto s0 = affine.scalar(t), s1 = affine.scalar(t);
      affine.output(affine.binary(Op::add, affine.binary(Op::mul, x, s0), s1));
    }
    c.push_back({"affine_scalars_" + tn, affine, {Hw}, {0.1, -1.3}, [](X x, std::int64_t) {
                   return f(f(x[0]) * 0.1f) + -1.3f;
                 }});
  }
  // Casts between every pair of dtypes with a half type on either side. To a half type: the
  // source's value (an i32 converted to f32 first, exactly below 2^24) rounded to nearest even;
  // f16 overflows to Inf from 65520. From a half type: exact to f32, truncation to i32, x != 0
  // to bool.
  for (DType from : kAll) {
    for (DType to : kAll) {
      if (from == to || (!kiln::is_half(from) && !kiln::is_half(to))) continue;
      InputSpec in{DType::boolean};
      if (from == DType::i32) in = {DType::i32, -100000, 100000};
      if (kiln::is_floating(from)) in = {from, -1000, 1000, true};
      // Past f16's range, into its overflow, from the sources that reach it.
      if (to == DType::f16 && (from == DType::f32 || from == DType::bf16))
        in.lo = -1e5, in.hi = 1e5;
      c.push_back({std::string("cast_") + kiln::dtype_name(from) + "_" + kiln::dtype_name(to),
                   cast(from, to),
                   {in},
                   {},
                   [to](X x, std::int64_t) {
                     if (to == DType::boolean) return double(x[0] != 0);
                     if (to == DType::i32) return std::trunc(x[0]);
                     return double(f(x[0]));
                   }});
    }
  }
  return c;
}

class BackendElementwiseHalf : public ElementwiseChainTest {};
KILN_INSTANTIATE_CHAINS(BackendElementwiseHalf);

// Every half row (check_every_op says over which shapes and layouts).
TEST_P(BackendElementwiseHalf, EveryOp) { check_every_op(half_cases()); }

// Half operands (2-byte elements) in every input layout, in each slot and in all, beside
// operands of other sizes (a bool condition, an f32 or i32 source).
TEST_P(BackendElementwiseHalf, EveryInputLayoutInEverySlot) {
  check_every_input_layout(
      rows(half_cases(), {"copy_bf16", "copy_f16", "sub_bf16", "lt_f16", "where_f16",
                          "cast_bf16_f32", "cast_f32_f16", "cast_i32_bf16", "cast_f16_bf16"}));
}

// Half outputs as strided views: every 2-byte element of the view written, its neighbours in
// the buffer (the other half of a 4-byte word, on the step-2 slice) left alone.
TEST_P(BackendElementwiseHalf, StridedOutputsWriteOnlyTheirView) {
  check_every_output_layout(
      rows(half_cases(), {"copy_bf16", "sub_f16", "where_bf16", "cast_f32_bf16", "cast_i32_f16",
                          "full_f16", "exp_bf16"}));
}

// Calls that read earlier half results before anything is read: y = a * b, z = y + c (both of
// dtype t), w = f32(y). Every stored result is rounded once, so y is exactly the rounding of
// the f32 product, on every chain. A cast from a half type rounds its operand first, so w is y's
// stored value on every chain, even where y is still an f32 register in a fused group. z: a
// chain that runs each call gives the rounding of (stored y) + c; a fusion decorator may add the
// unrounded product instead (docs/accuracy.md: fused and unfused half chains differ by design),
// so z must be one of the two, and the first on a chain without decorators.
TEST_P(BackendElementwiseHalf, CallsThatReadEarlierHalfResults) {
  const Dims shape{96, 80};
  const std::int64_t n = kc::detail::numel(shape);
  for (DType t : kHalves) {
    SCOPED_TRACE(kiln::dtype_name(t));
    const Operand a = input(shape, t, kc::contiguous(), -30, 30);
    const Operand b = input(shape, t, kc::transposed(), -30, 30);
    const Operand cc = input(shape, t, kc::contiguous(), -1, 1);
    poison_allocator(n, t);
    const Program mul = binary(Op::mul, t), add = binary(Op::add, t);
    const Program to_f32 = cast(t, DType::f32);
    Handle y = be().empty(shape, t), z = be().empty(shape, t), w = be().empty(shape, DType::f32);
    elementwise(mul, {&a.view, &b.view}, {}, {y.get()});
    elementwise(add, {y.get(), &cc.view}, {}, {z.get()});
    elementwise(to_f32, {y.get()}, {}, {w.get()});

    const Values av = a.values(), bv = b.values(), cv = cc.values();
    Values ys, eager, fused;
    for (std::int64_t k = 0; k < n; ++k) {
      const auto j = static_cast<std::size_t>(k);
      const float product = f(av[j]) * f(bv[j]);  // exact: 8 x 8 or 11 x 11 significant bits
      const double stored = kt::round_to_half(product, t);
      ys.push_back(stored);
      eager.push_back(kt::round_to_half(f(stored) + f(cv[j]), t));
      fused.push_back(kt::round_to_half(product + f(cv[j]), t));
    }
    const kc::Raw zr = read(*z);  // the last call's result first: it forces the others
    EXPECT_TRUE(kc::matches(read(*w), shape, ys));
    EXPECT_TRUE(kc::matches(read(*y), shape, ys));
    const bool plain = chain().depth() == 1;
    Values chosen;
    for (std::int64_t k = 0; k < n; ++k) {
      const auto j = static_cast<std::size_t>(k);
      chosen.push_back(plain || zr.value(k) != fused[j] ? eager[j] : fused[j]);
    }
    EXPECT_TRUE(kc::matches(zr, shape, chosen))
        << (plain ? "a backend alone must round each stored result"
                  : "neither y's rounding nor the f32 product was added");
  }
}

}  // namespace
