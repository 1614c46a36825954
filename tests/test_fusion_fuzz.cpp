// Differential fuzzer of fusion (src/fusion/). Random DAGs of 1-40 ops over 1-4 inputs of
// ranks 0-4 (extents 1-6 taken from one frame, or 1, so that most nodes broadcast together):
// unary ops, binary ops of two nodes or of a node and a scalar (NaN, inf, zeros, negatives),
// pow, clamp, comparisons and where, casts between f32, i32, bool, bf16 and f16, views (transpose,
// permute, slice with a step, expand, unsqueeze, squeeze, reshape), and now and then a
// reduction or a matmul whose result feeds further ops. Some intermediates are kept and read
// (some as soon as they are made); the others are dropped after their last use.
//
// Each program runs with fusion on and off. The two must agree bit for bit (NaN equals NaN),
// and both must match a float64 reference evaluated here, in which every element carries a
// bound on how far a float32 chain can have drifted from it. Where no bound holds (a cast or
// a comparison right at its edge, an overflow, and what depends on them) the element is
// compared bit for bit only.
//
// The half types. About a third of the programs may make bf16 and f16 inputs and casts (the
// others keep f32, i32 and bool, so that most programs still check fusion bit for bit). A half
// op computes in f32 and rounds what it stores; inside a fused group its result stays an f32
// register (docs/accuracy.md), so fused and unfused runs of a half program differ by design, and
// which intermediates a fused run rounds depends on where its groups end. The reference
// therefore lets every half-typed result be rounded or not: each adds half a ULP of its type to
// the element's bound (stored()), unless it is exact and the type holds it; an explicit cast to
// a half type always rounds (rounded()). In a program with a half type, fused and unfused runs
// are each held to that bound instead of to each other. A few ops must throw (shapes that cannot
// broadcast, a condition that is not bool, a matmul whose inner dimensions differ): they must throw
// at that op, and the program goes on.
//
// KILN_FUZZ_SEED=N sets the base seed (program i uses N + i); KILN_FUZZ_PROGRAMS=M the count
// (default 2000 on the CPU, 100 on CUDA).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::Dims;
using kiln::DType;
using kiln::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kMaxNumel = 1296;  // 6^4: every node stays tiny

// NumPy's minimum and maximum as kiln computes them: NaN wins, -0 < +0 (docs/accuracy.md).
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  return a == b ? (std::signbit(a) ? a : b) : std::min(a, b);
}
double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  return a == b ? (std::signbit(a) ? b : a) : std::max(a, b);
}
std::int64_t minimum(std::int64_t a, std::int64_t b) { return std::min(a, b); }
std::int64_t maximum(std::int64_t a, std::int64_t b) { return std::max(a, b); }

// Every op written once. Unary: name, float64 value of x, float ULPs allowed beyond rounding
// the exact value (0 for exact ops; the others generously above docs/accuracy.md's bounds for
// the CPU and CUDA). Binary: name and one expression that serves for tensors (the kiln op),
// doubles (the f32 reference) and int64 (the i32 reference, wrapped afterwards).
// clang-format off
#define FUZZ_UNARY(X)                                                                       \
  X(neg, -x, 0) X(abs, std::fabs(x), 0) X(sin, std::sin(x), 8) X(cos, std::cos(x), 8)      \
  X(tan, std::tan(x), 8) X(exp, std::exp(x), 8) X(log, std::log(x), 8)                     \
  X(sqrt, std::sqrt(x), 0.5) X(rsqrt, 1 / std::sqrt(x), 8) X(tanh, std::tanh(x), 8)        \
  X(sigmoid, 1 / (1 + std::exp(-x)), 8) X(relu, x <= 0 ? 0.0 : x, 0)                      \
  X(gelu, x < -15 ? -0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)), 8)                   \
  X(silu, x / (1 + std::exp(-x)), 8) X(erf, std::erf(x), 8)
#define FUZZ_BINARY(X)                                                                      \
  X(add, a + b) X(sub, a - b) X(mul, a * b) X(div, a / b) X(minimum, minimum(a, b))         \
  X(maximum, maximum(a, b)) X(eq, a == b) X(ne, a != b) X(lt, a < b) X(le, a <= b)          \
  X(gt, a > b) X(ge, a >= b)
#define FUZZ_REDUCTION(X) X(sum) X(mean) X(max) X(min)
#define FUZZ_ENUM(name, ...) name,
#define FUZZ_NAME(name, ...) #name,
// clang-format on
enum class U { FUZZ_UNARY(FUZZ_ENUM) };
enum class B { FUZZ_BINARY(FUZZ_ENUM) };
enum class R { FUZZ_REDUCTION(FUZZ_ENUM) };
enum class V { transpose, permute, slice, expand, unsqueeze, squeeze, reshape };
enum class K { input, unary, pow, clamp, binary, scalar, where, cast, view, reduce, matmul };
const char* const kUnary[] = {FUZZ_UNARY(FUZZ_NAME)};
const char* const kBinary[] = {FUZZ_BINARY(FUZZ_NAME)};
const char* const kReduction[] = {FUZZ_REDUCTION(FUZZ_NAME)};
const char* const kView[] = {"transpose", "permute", "slice",  "expand",
                             "unsqueeze", "squeeze", "reshape"};

double unary_value(U op, double x) {
#define FUZZ_IF(name, expr, ulps) \
  if (op == U::name) return expr;
  FUZZ_UNARY(FUZZ_IF)
#undef FUZZ_IF
  return kNaN;
}
double unary_ulps(U op) {
#define FUZZ_IF(name, expr, ulps) \
  if (op == U::name) return ulps;
  FUZZ_UNARY(FUZZ_IF)
#undef FUZZ_IF
  return 0;
}
template <class T>
T binary_value(B op, T a, T b) {  // never called for an integer div
#define FUZZ_IF(name, expr) \
  if (op == B::name) return static_cast<T>(expr);
  FUZZ_BINARY(FUZZ_IF)
#undef FUZZ_IF
  return T{};
}
bool is_cmp(B op) { return op >= B::eq; }

// ---- the float64 reference ----

// An element: its exact value v and a bound e on kiln's distance from it; e is 0 where kiln
// must give v exactly (always, for i32 and bool), and kUnknown where nothing can be promised.
constexpr double kUnknown = kInf;
struct VE {
  double v, e;
};
struct Val {  // a node's elements, dense and row-major
  Dims shape;
  DType dtype = DType::f32;
  std::vector<VE> x;
};

std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
  Dims out = a.size() >= b.size() ? a : b;
  const Dims& o = a.size() >= b.size() ? b : a;
  for (std::size_t i = 0; i < o.size(); ++i) {
    auto& x = out[out.size() - o.size() + i];
    if (x != o[i] && x != 1 && o[i] != 1) return std::nullopt;
    x = x == 1 ? o[i] : x;
  }
  return out;
}

// A view of src: f applied to a kt::Ref holding the positions 0, 1, 2, ... (test_support's
// NumPy view semantics, written independently of kiln's).
template <class F>
Val view_of(const Val& src, F f) {
  std::vector<double> iota(src.x.size());
  for (std::size_t k = 0; k < iota.size(); ++k) iota[k] = static_cast<double>(k);
  const kt::Ref r = f(kt::Ref(src.shape, iota));
  Val out{r.shape(), src.dtype, {}};
  for (double k : r.values()) out.x.push_back(src.x[static_cast<std::size_t>(k)]);
  return out;
}

// f(operands) for every element of the broadcast shape.
template <class F>
Val elementwise(const std::vector<const Val*>& in, DType dtype, F f) {
  Dims s = in[0]->shape;
  for (const Val* v : in) s = *broadcast(s, v->shape);
  std::vector<Val> ex;
  for (const Val* v : in) ex.push_back(view_of(*v, [&](const kt::Ref& r) { return r.expand(s); }));
  Val out{s, dtype, {}};
  std::vector<VE> args(in.size());
  for (std::int64_t k = 0; k < kt::numel_of(s); ++k) {
    for (std::size_t j = 0; j < in.size(); ++j) args[j] = ex[j].x[k];
    out.x.push_back(f(args));
  }
  return out;
}

using kiln::is_floating;
using kiln::is_half;

// A half-typed result whose value, in f32 (within r.e of r.v), kiln may store rounded to t or
// keep unrounded in a fused group's register: either is within r.e plus half a ULP of t at the
// largest value it may have. Exact values t holds stay exact; a value that may reach f16's
// overflow (65520 rounds to Inf) is unknown.
VE stored(VE r, DType t) {
  if (!is_half(t) || !std::isfinite(r.v) || std::isinf(r.e)) return r;
  if (r.e == 0 && kt::round_to_half(r.v, t) == r.v) return r;
  const double top = std::fabs(r.v) + r.e;
  if (t == DType::f16 && top >= 65504) return {r.v, kUnknown};
  return {r.v, r.e + 0.5 * kt::half_ulp(top, t)};
}
// An explicit cast to half type t, which always rounds: of an exact f32 value, exactly.
VE rounded(VE r, DType t) { return r.e == 0 ? VE{kt::round_to_half(r.v, t), 0} : stored(r, t); }

bool same_bits(double a, double b) {  // NaN equals NaN, -0 differs from +0
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}
double to_f32(double x) { return static_cast<float>(x); }
double wrap32(std::int64_t x) {  // kiln's i32 arithmetic wraps
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(x)));
}
double f2i(double x) {  // f32 -> i32 truncates and saturates, NaN -> 0; an i32 0 has no sign
  return std::isnan(x) ? 0 : std::clamp(std::trunc(x), -2147483648.0, 2147483647.0) + 0.0;
}

// One f32 op's result: the bound carried from the operands plus the op's own rounding, in
// float ULPs of the result (0.5: correctly rounded). NaN and inf from exact operands are what
// IEEE gives; from inexact ones, or near float's overflow, nothing is promised.
VE f32_result(double v, double prop, double ulps, bool exact_in) {
  if (!std::isfinite(v)) return {v, exact_in ? 0 : kUnknown};
  if (std::isnan(prop) || std::fabs(v) > 1e30 || prop > 1e30) return {v, kUnknown};
  const bool exact = exact_in && ulps <= 0.5 && to_f32(v) == v;  // the exact value is a float
  return {v, exact ? prop : prop + ulps * kt::float_ulp(v)};
}

// Casts, and a cast's edge: a value whose bound straddles an integer (to i32) or 0 (to bool).
VE cast_ve(VE x, DType from, DType to) {
  if (from == to) return x;
  if (!is_floating(from)) {  // i32 and bool hold exact integers (f32 rounds beyond 2^24)
    if (to == DType::f32) return {to_f32(x.v), x.e};
    if (is_half(to)) return rounded({to_f32(x.v), x.e}, to);
    return {to == DType::boolean ? double(x.v != 0) : x.v, x.e};
  }
  // From a half type to f32: exact (a cast from a half type rounds its operand to that type
  // first, which the operand's bound allows already).
  if (to == DType::f32) return x;
  if (is_half(to)) return rounded(x, to);
  const double v = to == DType::i32 ? f2i(x.v) : double(x.v != 0);
  if (x.e == 0 || std::isinf(x.e)) return {v, x.e};
  if (to == DType::i32) return {v, f2i(x.v - x.e) == f2i(x.v + x.e) ? 0 : kUnknown};
  return {v, std::fabs(x.v) > 2 * x.e ? 0 : kUnknown};
}

VE unary_ve(U op, VE x) {
  const double v = unary_value(op, x.v), ulps = unary_ulps(op);
  if (x.e == 0) return f32_result(v, 0, ulps, true);
  if (std::isinf(x.e)) return {v, kUnknown};
  const double lo = x.v - x.e, hi = x.v + x.e;
  double prop = 0;
  if (op == U::sin || op == U::cos) {
    prop = std::min(x.e, 2.0);  // 1-Lipschitz
  } else if (op == U::gelu || op == U::silu) {
    prop = 1.13 * x.e;  // |gelu'| < 1.129, |silu'| < 1.1 (neither is monotone)
  } else if (op == U::tan && (x.e > 0.1 || std::cos(lo) * std::cos(hi) <= 0)) {
    prop = kUnknown;  // a pole may lie in [lo, hi]
  } else {  // monotone on [lo, hi] (abs: convex), so the ends bound it; NaN there: unknown
    prop = std::max(std::fabs(unary_value(op, lo) - v), std::fabs(unary_value(op, hi) - v));
  }
  return f32_result(v, prop, ulps, false);
}

VE pow_ve(VE x, double y) {  // y is the float kiln uses; pow(x, 0) = pow(1, y) = 1
  if (y == 0 || (x.e == 0 && x.v == 1)) return {1, 0};
  const double v = std::pow(x.v, y);
  if (x.e == 0) return f32_result(v, 0, 8, true);
  if (std::isinf(x.e)) return {v, kUnknown};
  const double lo = x.v - x.e, hi = x.v + x.e;
  const bool spans0 = lo <= 0 && hi >= 0;
  if (spans0 && (y < 0 || y != std::floor(y))) return {v, kUnknown};  // a pole or a domain edge
  const double prop = std::max(std::fabs(std::pow(lo, y) - v), std::fabs(std::pow(hi, y) - v));
  return f32_result(v, spans0 ? std::max(prop, std::fabs(v)) : prop, 8, false);
}

// a op b, both already in the compute dtype t. A comparison is decided when its operands are
// exact, or further apart than their bounds (or one is an exact NaN).
VE binary_ve(B op, VE a, VE b, DType t) {
  const bool exact = a.e == 0 && b.e == 0, known = !std::isinf(a.e) && !std::isinf(b.e);
  if (is_cmp(op)) {
    const bool decided =
        exact || (known && ((std::isnan(a.v) && a.e == 0) || (std::isnan(b.v) && b.e == 0) ||
                            std::fabs(a.v - b.v) > 2 * (a.e + b.e)));
    return {binary_value(op, a.v, b.v), decided ? 0 : kUnknown};
  }
  if (t == DType::i32) {
    if (!exact) return {0, kUnknown};
    return {wrap32(binary_value<std::int64_t>(op, std::int64_t(a.v), std::int64_t(b.v))), 0};
  }
  const double v = binary_value(op, a.v, b.v);
  switch (op) {
    case B::add:
    case B::sub:
      return f32_result(v, a.e + b.e, 0.5, exact);
    case B::mul:
      return f32_result(v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e, 0.5, exact);
    case B::div:
      if (exact) return f32_result(v, 0, 0.5, true);
      if (!(std::fabs(b.v) > 2 * b.e)) return {v, kUnknown};  // b may be 0
      return f32_result(v, (a.e + std::fabs(v) * b.e) / (std::fabs(b.v) - b.e), 0.5, false);
    default:  // minimum, maximum
      return f32_result(v, std::max(a.e, b.e), 0, exact);
  }
}

// kiln's promotion (src/frontend/ops_elementwise.cpp): bool < i32 < bf16, f16 < f32 (bf16 with
// f16 gives f32), / keeps a floating dtype and gives f32 otherwise, arithmetic on bool is i32; a
// floating scalar takes a floating tensor's dtype (used as an f32) and is f32 otherwise, an
// integral one takes the tensor's dtype (bool: i32).
DType compute_dtype(B op, DType a, DType b) {
  const DType t = kiln::promote(a, b);
  if (op == B::div) return is_floating(t) ? t : DType::f32;
  return t == DType::boolean ? DType::i32 : t;
}
Val scalar_val(double s, bool integral, DType t) {
  const DType st = !integral             ? (is_floating(t) ? t : DType::f32)
                   : t == DType::boolean ? DType::i32
                                         : t;
  return Val{{}, st, {{is_floating(st) ? to_f32(s) : s, 0}}};
}

Val binary_val(B op, const Val& a, const Val& b) {
  const DType t = compute_dtype(op, a.dtype, b.dtype);
  return elementwise({&a, &b}, is_cmp(op) ? DType::boolean : t, [&](const std::vector<VE>& x) {
    const VE r = binary_ve(op, cast_ve(x[0], a.dtype, t), cast_ve(x[1], b.dtype, t), t);
    return is_cmp(op) ? r : stored(r, t);
  });
}

Val unary_val(U op, const Val& x) {  // neg, abs and relu keep i32 (bool becomes i32)
  const bool int_ok = op == U::neg || op == U::abs || op == U::relu;
  const DType t = is_floating(x.dtype) ? x.dtype : int_ok ? DType::i32 : DType::f32;
  return elementwise({&x}, t, [&](const std::vector<VE>& a) -> VE {
    const VE y = cast_ve(a[0], x.dtype, t);
    if (is_floating(t)) return stored(unary_ve(op, y), t);
    const auto i = static_cast<std::int64_t>(y.v);
    return {op == U::relu ? std::max(y.v, 0.0) : wrap32(op == U::neg || i < 0 ? -i : i), y.e};
  });
}

Val where_val(const Val& c, const Val& a, const Val& b) {
  const DType t = kiln::promote(a.dtype, b.dtype);
  return elementwise({&c, &a, &b}, t, [&](const std::vector<VE>& x) -> VE {
    const VE p = cast_ve(x[1], a.dtype, t), q = cast_ve(x[2], b.dtype, t);
    if (x[0].e == 0) return x[0].v != 0 ? p : q;
    const bool same = p.e == 0 && q.e == 0 && same_bits(p.v, q.v);
    return {p.v, same ? 0 : kUnknown};
  });
}

Val clamp_val(const Val& x, double lo, double hi, bool integral) {  // min(max(x, lo), hi)
  const DType xt = x.dtype == DType::boolean ? DType::i32 : x.dtype;
  const DType t = kiln::promote(scalar_val(lo, integral, x.dtype).dtype, xt);
  if (is_floating(t)) lo = to_f32(lo), hi = to_f32(hi);
  return elementwise({&x}, t, [&](const std::vector<VE>& a) -> VE {
    const VE y = cast_ve(a[0], x.dtype, t);
    return stored(f32_result(minimum(maximum(y.v, lo), hi), y.e, 0, y.e == 0), t);
  });
}

// Over one dim (dims = {d}) or all elements. f32 sums accumulate in double in kiln (its error
// is far below 1e-9 of the sum of magnitudes); integer sums in 64 bits, wrapped to i32. Half
// types reduce to their own type, rounded once.
Val reduce_val(const Val& x, R op, const Dims& dims, bool keepdim) {
  Val lanes = x;  // the reduced dim last, so that each lane is a run
  Dims out;
  std::int64_t n = kt::numel_of(x.shape);
  if (!dims.empty()) {
    const auto r = static_cast<std::int64_t>(x.shape.size());
    const auto d = static_cast<int>(dims[0] < 0 ? dims[0] + r : dims[0]);
    std::vector<int> order;
    for (int i = 0; i < r; ++i)
      if (i != d) order.push_back(i);
    order.push_back(d);
    lanes = view_of(x, [&](const kt::Ref& t) { return t.permute(order); });
    n = x.shape[d], out = x.shape, out[d] = 1;
    if (!keepdim) out.erase(out.begin() + d);
  }
  const bool fl = is_floating(x.dtype);
  DType t = op == R::mean && !fl ? DType::f32 : x.dtype;
  if (op == R::sum && t == DType::boolean) t = DType::i32;
  Val res{out, t, {}};
  for (std::int64_t k = 0; k < kt::numel_of(out); ++k) {
    const VE* l = &lanes.x[k * n];
    bool exact = true, known = true;
    double s = 0, esum = 0, emax = 0, mag = 0, m = l[0].v;
    for (std::int64_t j = 0; j < n; ++j) {
      exact = exact && l[j].e == 0, known = known && !std::isinf(l[j].e);
      s += l[j].v, esum += l[j].e, emax = std::max(emax, l[j].e), mag += std::fabs(l[j].v);
      m = op == R::max ? maximum(m, l[j].v) : minimum(m, l[j].v);
    }
    const double dn = op == R::mean ? double(n) : 1.0;
    if (!known) {
      res.x.push_back({0, kUnknown});
    } else if (op == R::max || op == R::min) {
      // Between +0 and -0 the CPU keeps the first (docs/accuracy.md): a zero's sign is unknown.
      if (m == 0 && fl) emax = std::max(emax, 0x1p-149);
      res.x.push_back(fl ? stored(f32_result(m, emax, 0, exact), t) : VE{m, 0});
    } else if (!fl && op == R::sum) {
      res.x.push_back({wrap32(static_cast<std::int64_t>(s)), 0});
    } else {
      const VE r = f32_result(s / dn, (esum + 1e-9 * mag) / dn, op == R::mean ? 1 : 0.5, false);
      res.x.push_back(stored(r, t));
    }
  }
  return res;
}

// [m, k] x [k, n], either side batched ([b, ., .]; a batch of 1 or a rank-2 side broadcasts).
// The bound allows any summation order in float, and products that underflow.
Val matmul_val(const Val& a, const Val& b) {
  const std::size_t ra = a.shape.size(), rb = b.shape.size();
  const std::int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  const std::int64_t ba = ra == 3 ? a.shape[0] : 1, bb = rb == 3 ? b.shape[0] : 1;
  const std::int64_t nb = std::max(ba, bb);
  Val out{ra == 3 || rb == 3 ? Dims{nb, m, n} : Dims{m, n}, DType::f32, {}};
  for (std::int64_t p = 0; p < nb; ++p)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, prop = 0, mag = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const VE x = a.x[((ba == 1 ? 0 : p) * m + i) * k + q];
          const VE y = b.x[((bb == 1 ? 0 : p) * k + q) * n + j];
          s += x.v * y.v, mag += std::fabs(x.v * y.v);
          prop += std::fabs(x.v) * y.e + std::fabs(y.v) * x.e + x.e * y.e;
        }
        prop += double(k + 2) * 0x1p-24 * mag + double(k) * 0x1p-150;
        out.x.push_back(f32_result(s, prop, 0.5, false));
      }
  return out;
}

Val view_val(const Val& x, V v, const Dims& p) {  // p as kiln is given it: dims may be negative
  const auto r = static_cast<std::int64_t>(x.shape.size());
  auto dim = [](std::int64_t d, std::int64_t rank) { return int(d < 0 ? d + rank : d); };
  return view_of(x, [&](const kt::Ref& t) {
    switch (v) {
      case V::transpose:
        return t.transpose(dim(p[0], r), dim(p[1], r));
      case V::permute: {
        std::vector<int> o;
        for (auto d : p) o.push_back(dim(d, r));
        return t.permute(o);
      }
      case V::slice:
        return t.slice(dim(p[0], r), p[1], p[2], p[3]);
      case V::expand:
        return t.expand(p);
      case V::unsqueeze:
        return t.unsqueeze(dim(p[0], r + 1));
      case V::squeeze:
        return t.squeeze(dim(p[0], r));
      case V::reshape: {  // one -1 may stand for the rest
        Dims s = p;
        std::int64_t known = 1;
        for (auto d : s) known *= d == -1 ? 1 : d;
        for (auto& d : s) d = d == -1 ? t.numel() / known : d;
        return t.reshape(s);
      }
    }
    return t;
  });
}

// ---- programs ----

enum class Expect { value, shape_error, dtype_error };
struct Node {
  K kind = K::input;
  int op = 0;                // a U, B, R or V, by kind
  std::vector<int> args;     // operand nodes
  double s0 = 0, s1 = 0;     // scalar, exponent, clamp bounds
  bool integral = false;     // scalars passed as C++ ints
  bool scalar_left = false;  // s0 op x
  bool keepdim = false;
  DType to = DType::f32;     // input dtype, cast target
  Dims p;                    // input shape; view parameters; {dim} of a reduction, {} for all
  std::vector<double> data;  // input values
  Expect expect = Expect::value;
  bool keep = false, read_early = false;  // held to the end and read / read as soon as made
  Val ref;
};
struct Program {
  std::vector<Node> nodes;
  std::vector<int> last_use;  // the last node that reads each node, -1 if none
};

Val reference(const Node& n, const std::vector<Node>& nodes) {
  auto arg = [&](std::size_t k) -> const Val& { return nodes[n.args[k]].ref; };
  switch (n.kind) {
    case K::input: {
      Val v{n.p, n.to, {}};
      for (double d : n.data) v.x.push_back({d, 0});
      return v;
    }
    case K::unary:
      return unary_val(U(n.op), arg(0));
    case K::pow: {  // a floating dtype kept, f32 otherwise
      const DType t = is_floating(arg(0).dtype) ? arg(0).dtype : DType::f32;
      return elementwise({&arg(0)}, t, [&](const std::vector<VE>& x) {
        return stored(pow_ve(cast_ve(x[0], arg(0).dtype, t), to_f32(n.s0)), t);
      });
    }
    case K::clamp:
      return clamp_val(arg(0), n.s0, n.s1, n.integral);
    case K::binary:
      return binary_val(B(n.op), arg(0), arg(1));
    case K::scalar: {
      const Val s = scalar_val(n.s0, n.integral, arg(0).dtype);
      return n.scalar_left ? binary_val(B(n.op), s, arg(0)) : binary_val(B(n.op), arg(0), s);
    }
    case K::where:
      return where_val(arg(0), arg(1), arg(2));
    case K::cast:
      return elementwise({&arg(0)}, n.to, [&](const std::vector<VE>& x) {
        return cast_ve(x[0], arg(0).dtype, n.to);
      });
    case K::view:
      return view_val(arg(0), V(n.op), n.p);
    case K::reduce:
      return reduce_val(arg(0), R(n.op), n.p, n.keepdim);
    case K::matmul:
      return matmul_val(arg(0), arg(1));
  }
  return {};
}

// "%7 = where(%3, %5, %6) -> f32 [2, 1, 3] kept", one line a node.
std::string listing(const Program& prog) {
  std::ostringstream o;
  o << std::setprecision(9);
  for (std::size_t i = 0; i < prog.nodes.size(); ++i) {
    const Node& n = prog.nodes[i];
    const char* other[] = {"input", "", "pow", "clamp", "", "", "where", "to", "", "", "matmul"};
    const char* name = n.kind == K::unary                           ? kUnary[n.op]
                       : n.kind == K::binary || n.kind == K::scalar ? kBinary[n.op]
                       : n.kind == K::view                          ? kView[n.op]
                       : n.kind == K::reduce                        ? kReduction[n.op]
                                                                    : other[int(n.kind)];
    const std::string s0 = (std::ostringstream() << std::setprecision(9) << n.s0).str();
    const std::string scalar = s0 + (n.integral ? "" : "f");
    o << "\n  %" << i << " = " << name << "("
      << (n.kind == K::scalar && n.scalar_left ? scalar + ", " : "");
    for (std::size_t k = 0; k < n.args.size(); ++k) o << (k ? ", %" : "%") << n.args[k];
    for (std::size_t k = 0; k < n.data.size(); ++k) o << (k ? ", " : "") << n.data[k];
    if (n.kind == K::pow || (n.kind == K::scalar && !n.scalar_left)) o << ", " << scalar;
    if (n.kind == K::clamp) o << ", " << scalar << ", " << n.s1 << (n.integral ? "" : "f");
    if (n.kind == K::cast) o << ", " << kiln::dtype_name(n.to);
    if (n.kind == K::view || n.kind == K::reduce) o << "; " << kiln::format_dims(n.p);
    o << (n.keepdim ? ", keepdim)" : ")");
    if (n.expect != Expect::value) {
      o << "  must throw " << (n.expect == Expect::shape_error ? "ShapeError" : "DTypeError");
    } else {
      o << " -> " << kiln::dtype_name(n.ref.dtype) << " " << kiln::format_dims(n.ref.shape)
        << (n.keep ? " kept" : "") << (n.read_early ? " read-early" : "");
    }
  }
  return o.str();
}

// Random programs. Inputs take their extents from one rank-4 frame (each extent, or 1), so
// most nodes broadcast with each other; views may leave the frame, and a binary op then picks
// only an operand that broadcasts.
class Generator {
 public:
  explicit Generator(std::uint64_t seed) : g_(seed) {}

  Program make() {
    halves_ = chance(0.35);
    do {
      frame_.clear();
      for (int i = 0; i < 4; ++i) frame_.push_back(uni(1, 6));
    } while (kt::numel_of(frame_) > 360);
    const int inputs = uni(1, 4), ops = uni(1, 40), errors = chance(0.06) ? uni(1, 2) : 0;
    for (int i = 0; i < inputs; ++i) framed_input(uni(0, 4));
    for (int i = 0; i < ops; ++i) chance(double(errors) / ops) ? error_op() : op();
    auto& ns = p_.nodes;
    p_.last_use.assign(ns.size(), -1);
    int last = -1;
    for (std::size_t i = 0; i < ns.size(); ++i) {
      for (int a : ns[i].args) p_.last_use[a] = int(i);
      if (ns[i].kind == K::input || ns[i].expect != Expect::value) continue;
      ns[i].keep = chance(0.3), ns[i].read_early = chance(0.08), last = int(i);
    }
    if (last >= 0) ns[last].keep = true;  // the program's result
    return std::move(p_);
  }

 private:
  std::mt19937_64 g_;
  Program p_;
  Dims frame_;

  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g_); }
  bool chance(double p) { return std::bernoulli_distribution(std::min(p, 1.0))(g_); }
  const Val& ref(int i) const { return p_.nodes[i].ref; }
  int rank(int i) const { return int(ref(i).shape.size()); }
  bool halves_ = false;  // whether this program's inputs and casts may be bf16 and f16
  DType dtype() {
    const int r = uni(0, halves_ ? 13 : 9);
    return r < 7    ? DType::f32
           : r < 9  ? DType::i32
           : r < 10 ? DType::boolean
           : r < 12 ? DType::bf16
                    : DType::f16;
  }
  static Node node(K kind, int op, std::vector<int> args, Dims p = {}) {
    Node n;
    n.kind = kind, n.op = op, n.args = std::move(args), n.p = std::move(p);
    return n;
  }
  int add(Node n) {  // -1, and not added, for a node too big for a tiny program
    if (n.expect == Expect::value) n.ref = reference(n, p_.nodes);
    if (kt::numel_of(n.ref.shape) > kMaxNumel) return -1;
    p_.nodes.push_back(std::move(n));
    return int(p_.nodes.size()) - 1;
  }

  // A node that gives a value and satisfies ok: half the time one of the last few; -1 if none.
  template <class F>
  int pick(F ok) {
    std::vector<int> c;
    for (int i = 0; i < int(p_.nodes.size()); ++i)
      if (p_.nodes[i].expect == Expect::value && ok(i)) c.push_back(i);
    if (c.empty()) return -1;
    const int n = int(c.size());
    return c[chance(0.5) ? std::max(0, n - 1 - uni(0, 3)) : uni(0, n - 1)];
  }
  int any() {
    return pick([](int) { return true; });
  }
  bool fit(const Dims& a, const Dims& b) {
    auto s = broadcast(a, b);
    return s && kt::numel_of(*s) <= kMaxNumel;
  }
  int fits(int a) {  // an operand that broadcasts with a (a itself, if no other does)
    const int b = pick([&](int b) { return fit(ref(a).shape, ref(b).shape); });
    return b < 0 ? a : b;
  }

  // Mostly ordinary values and exact small integers (ties for comparisons, casts and where);
  // some zeros of both signs, tiny and huge values; in some inputs NaN and inf.
  double value(DType t, bool specials) {
    if (is_half(t))
      return kt::round_to_half(value(DType::f32, specials), t);  // (f16: Inf from 65520)
    if (t == DType::boolean) return uni(0, 1);
    const int r = uni(0, 99);
    if (t == DType::i32)  // large values make + and * wrap
      return r < 80 ? uni(-5, 5) : r < 95 ? uni(-1000, 1000) : uni(-1, 1) * (1 << 30) + uni(-9, 9);
    if (specials && r < 6) return std::array{kNaN, kInf, -kInf}[uni(0, 2)];
    if (r < 60) return to_f32(real(-3, 3));
    if (r < 75) return uni(-4, 4);
    if (r < 80) return chance(0.5) ? 0.0 : -0.0;
    if (r < 90) return to_f32(real(-1, 1) * 1e-3);
    return to_f32(real(-1, 1) * std::ldexp(1.0, uni(4, 40)));
  }
  int input(const Dims& shape, DType t) {
    Node n = node(K::input, 0, {}, shape);
    n.to = t;
    const bool specials = chance(0.3);
    for (std::int64_t k = 0; k < kt::numel_of(shape); ++k) n.data.push_back(value(t, specials));
    return add(std::move(n));
  }
  int view(int x, V v, Dims p) { return add(node(K::view, int(v), {x}, std::move(p))); }

  // An input of rank r in the frame: contiguous, or stored transposed, or every other element
  // of a larger one (a step-2 slice at offset 1), or broadcast from size-1 dims and fewer dims.
  void framed_input(int r) {
    Dims s(frame_.end() - r, frame_.end());
    for (auto& d : s) d = chance(0.25) ? 1 : d;
    const DType t = dtype();
    const int layout = uni(0, 5), d = r ? uni(0, r - 1) : 0, d1 = r ? (d + 1) % r : 0;
    Dims base = s;
    if (layout == 1 && r >= 2) {
      std::swap(base[d], base[d1]);
      view(input(base, t), V::transpose, {d, chance(0.5) ? d1 - r : d1});
    } else if (layout == 2 && r >= 1) {
      base[d] = 2 * s[d] + 1;
      view(input(base, t), V::slice, {d, chance(0.5) ? 1 : -2 * s[d], 100, 2});
    } else if (layout == 3 && r >= 1) {
      base.erase(base.begin(), base.begin() + uni(0, r));
      for (auto& e : base) e = chance(0.5) ? 1 : e;
      view(input(base, t), V::expand, s);
    } else {
      input(s, t);
    }
  }

  void op() {
    const int r = uni(0, 99), x = any();
    if (r >= 76 && r < 92) return random_view(x);
    Node n = node(K::unary, uni(0, 12), {x});
    if (r < 20) {
      // a unary op, as made
    } else if (r < 24) {
      n.kind = K::pow;
      n.s0 = std::array{2.0, 3.0, 0.5, -1.0, -2.0, 2.5, 0.0, 1.0 / 3, real(-3, 3)}[uni(0, 8)];
    } else if (r < 27) {
      n.kind = K::clamp, n.integral = chance(0.4);  // sometimes lo > hi: then hi
      n.s0 = n.integral ? uni(-3, 1) : real(-3, 1), n.s1 = n.integral ? uni(-1, 3) : real(-1, 3);
    } else if (r < 50) {
      n.kind = K::binary, n.op = chance(0.7) ? uni(0, 5) : uni(6, 11), n.args.push_back(fits(x));
    } else if (r < 64) {
      n.kind = K::scalar, n.op = chance(0.75) ? uni(0, 5) : uni(6, 11);
      n.integral = chance(0.3), n.scalar_left = chance(0.3);
      const double special[] = {0, -0.0, 1,   -1,   0.5,  2,     -2.5,
                                3, 1e-3, 100, kNaN, kInf, -kInf, 1e10};
      n.s0 = n.integral ? uni(-3, 4) : chance(0.5) ? special[uni(0, 13)] : real(-4, 4);
    } else if (r < 70) {
      const int b = fits(x);
      const Dims s = *broadcast(ref(x).shape, ref(b).shape);
      int c = pick([&](int i) { return ref(i).dtype == DType::boolean && fit(ref(i).shape, s); });
      if (c < 0) {  // a condition: x compared with a small integer
        Node cmp = node(K::scalar, uni(6, 11), {x});
        cmp.s0 = uni(-1, 1), cmp.integral = true;
        c = add(std::move(cmp));
      }
      n.kind = K::where, n.args = {c, x, b};
    } else if (r < 76) {
      n.kind = K::cast, n.to = dtype();
    } else if (r < 96) {
      if (rank(x) == 0) return;
      n.kind = K::reduce, n.op = uni(0, 3);
      const int d = uni(0, rank(x) - 1);
      if (chance(0.85)) n.p = {chance(0.3) ? d - rank(x) : d};  // else over all: rank 0
      n.keepdim = !n.p.empty() && chance(0.5);
    } else {
      const int a =
          pick([&](int i) { return ref(i).dtype == DType::f32 && (rank(i) == 2 || rank(i) == 3); });
      if (a < 0) return;
      const Dims s = ref(a).shape;
      int b = -1;
      if (chance(0.5)) {
        b = view(a, V::transpose, {-1, -2});  // a Gram matrix
      } else {
        Dims bs = {s.back(), uni(1, 6)};
        if (s.size() == 3 && chance(0.5)) bs.insert(bs.begin(), chance(0.5) ? s[0] : 1);
        b = input(bs, DType::f32);
      }
      if (b < 0) return;
      n.kind = K::matmul, n.args = {a, b};
    }
    add(std::move(n));
  }

  void random_view(int x) {
    const Dims s = ref(x).shape;
    const int r = int(s.size());
    auto dim = [&](int rr) {
      const int d = uni(0, rr - 1);
      return chance(0.3) ? d - rr : d;
    };
    switch (uni(0, 6)) {
      case 0:
        if (r >= 2) return void(view(x, V::transpose, {dim(r), dim(r)}));
        break;
      case 1:
        if (r >= 2) {
          Dims o(r);
          for (int i = 0; i < r; ++i) o[i] = chance(0.2) ? i - r : i;
          std::shuffle(o.begin(), o.end(), g_);
          return void(view(x, V::permute, o));
        }
        break;
      case 2:
        if (r >= 1) {
          const int d = dim(r), dd = d < 0 ? d + r : d, start = uni(0, int(s[dd]) - 1);
          const int stop = uni(start + 1, int(s[dd]) + 2), step = uni(1, 3);
          return void(view(x, V::slice, {d, chance(0.3) ? start - s[dd] : start, stop, step}));
        }
        break;
      case 3: {  // size-1 dims broadcast (mostly to the frame's extent), leading dims added
        Dims t = s;
        for (std::size_t i = 0; i < t.size(); ++i)
          if (t[i] == 1 && chance(0.6)) t[i] = frame_[4 - t.size() + i];
        while (t.size() < 4 && chance(0.4)) t.insert(t.begin(), frame_[3 - t.size()]);
        if (kt::numel_of(t) <= kMaxNumel) return void(view(x, V::expand, t));
        break;
      }
      case 4:
        if (r < 4) return void(view(x, V::unsqueeze, {chance(0.6) ? 0 : dim(r + 1)}));
        break;
      case 5:
        for (int d = 0; d < r; ++d)
          if (s[d] == 1) return void(view(x, V::squeeze, {chance(0.5) ? d : d - r}));
        break;
      default: {  // merge two neighbours, flatten, or lead with 1s up to rank 4; maybe a -1
        Dims t = s;
        if (r >= 2 && chance(0.4)) {
          const int d = uni(0, r - 2);
          t[d] *= t[d + 1];
          t.erase(t.begin() + d + 1);
        } else if (chance(0.3)) {
          t = kt::numel_of(s) == 1 && chance(0.5) ? Dims{} : Dims{kt::numel_of(s)};
        } else {
          t.insert(t.begin(), 4 - t.size(), 1);
        }
        if (!t.empty() && chance(0.3)) t[uni(0, int(t.size()) - 1)] = -1;
        return void(view(x, V::reshape, t));
      }
    }
    r < 4 ? view(x, V::unsqueeze, {0}) : view(x, V::transpose, {0, 3});  // none applied
  }

  // An op that must throw: operands that cannot broadcast (every extent > 1 grown by one), a
  // condition that is not bool, or a matmul whose inner dimensions differ.
  void error_op() {
    Node n;
    const int kind = uni(0, 2);
    if (kind == 0) {
      const int x = pick(
          [&](int i) { return std::ranges::any_of(ref(i).shape, [](auto e) { return e > 1; }); });
      if (x < 0) return;
      Dims s = ref(x).shape;
      for (auto& e : s) e += e > 1;
      const int y = input(s, dtype());
      if (y < 0) return;
      n = node(K::binary, uni(0, 11), {x, y});
      n.expect = Expect::shape_error;
    } else if (kind == 1) {
      const int c = pick([&](int i) { return ref(i).dtype != DType::boolean; });
      if (c < 0) return;
      n = node(K::where, 0, {c, c, c});
      n.expect = Expect::dtype_error;
    } else {
      const int x = pick([&](int i) { return ref(i).dtype == DType::f32 && rank(i) == 2; });
      if (x < 0) return;
      const int y = input({ref(x).shape[1] + 1, 1}, DType::f32);
      if (y < 0) return;
      n = node(K::matmul, 0, {x, y});
      n.expect = Expect::shape_error;
    }
    add(std::move(n));
  }
};

// ---- running a program through kiln ----

using AnyT = std::variant<Tensor<0>, Tensor<1>, Tensor<2>, Tensor<3>, Tensor<4>>;

template <std::size_t E>
kiln::Shape<E> shape_of(const Dims& d) {
  kiln::Shape<E> s{};
  std::copy_n(d.begin(), E, s.begin());
  return s;
}

// f(std::integral_constant<std::size_t, R>{}) for the run-time rank r.
template <class F>
AnyT with_rank(std::size_t r, F&& f) {
  switch (r) {
    case 0:
      return f(std::integral_constant<std::size_t, 0>{});
    case 1:
      return f(std::integral_constant<std::size_t, 1>{});
    case 2:
      return f(std::integral_constant<std::size_t, 2>{});
    case 3:
      return f(std::integral_constant<std::size_t, 3>{});
    case 4:
      return f(std::integral_constant<std::size_t, 4>{});
  }
  throw std::logic_error("fuzzer: rank " + std::to_string(r));
}

template <class A, class C>
AnyT kiln_binary(B op, const A& a, const C& b) {
#define FUZZ_IF(name, expr) \
  if (op == B::name) return expr;
  FUZZ_BINARY(FUZZ_IF)
#undef FUZZ_IF
  throw std::logic_error("fuzzer: binary op");
}

template <std::size_t D>
AnyT kiln_reduce(const Tensor<D>& t, R op, const Node& n) {
  const int d = n.p.empty() ? 0 : static_cast<int>(n.p[0]);
#define FUZZ_IF(name)                               \
  if (op == R::name) {                              \
    if (n.p.empty()) return t.name();               \
    if (n.keepdim) return t.name(d, kiln::keepdim); \
    if constexpr (D > 0) return t.name(d);          \
  }
  FUZZ_REDUCTION(FUZZ_IF)
#undef FUZZ_IF
  throw std::logic_error("fuzzer: reduction");
}

template <std::size_t D>
AnyT kiln_view(const Tensor<D>& t, V v, const Dims& p) {
  const auto i = [&](std::size_t k) { return static_cast<int>(p[k]); };
  switch (v) {
    case V::transpose:
      return t.transpose(i(0), i(1));
    case V::permute: {
      std::array<int, D> o{};
      for (std::size_t k = 0; k < D; ++k) o[k] = i(k);
      return t.permute(o);
    }
    case V::slice:
      return t.slice(i(0), p[1], p[2], p[3]);
    case V::unsqueeze:
      if constexpr (D < 4) return t.unsqueeze(i(0));
      break;
    case V::squeeze:
      if constexpr (D > 0) return t.squeeze(i(0));
      break;
    case V::expand:
      return with_rank(p.size(), [&](auto e) -> AnyT {
        if constexpr (decltype(e)::value >= D) return t.expand(shape_of<decltype(e)::value>(p));
        throw std::logic_error("fuzzer: expand to a lower rank");
      });
    case V::reshape:
      return with_rank(p.size(),
                       [&](auto e) -> AnyT { return t.reshape(shape_of<decltype(e)::value>(p)); });
  }
  throw std::logic_error("fuzzer: view");
}

AnyT exec(const Node& n, const std::vector<std::optional<AnyT>>& vals, Device dev) {
  auto arg = [&](std::size_t k) -> const AnyT& { return *vals[n.args[k]]; };
  auto on1 = [&](auto f) {
    return std::visit([&](const auto& t) -> AnyT { return f(t); }, arg(0));
  };
  switch (n.kind) {
    case K::input:
      return with_rank(n.p.size(), [&](auto r) -> AnyT {
        using T = Tensor<decltype(r)::value>;
        const auto s = shape_of<decltype(r)::value>(n.p);
        const auto& d = n.data;
        if (n.to == DType::f32) return T::from_data(std::vector<float>(d.begin(), d.end()), s, dev);
        if (n.to == DType::i32)
          return T::from_data(std::vector<std::int32_t>(d.begin(), d.end()), s, dev);
        if (n.to == DType::bf16) {
          std::vector<kiln::bfloat16> h;
          for (double x : d) h.emplace_back(static_cast<float>(x));
          return T::from_data(h, s, dev);
        }
        if (n.to == DType::f16) {
          std::vector<kiln::float16> h;
          for (double x : d) h.emplace_back(static_cast<float>(x));
          return T::from_data(h, s, dev);
        }
        return T::from_data(std::vector<bool>(d.begin(), d.end()), s, dev);
      });
    case K::unary:
      return on1([&](const auto& t) -> AnyT {
#define FUZZ_IF(name, expr, ulps) \
  if (U(n.op) == U::name) return t.name();
        FUZZ_UNARY(FUZZ_IF)
#undef FUZZ_IF
        throw std::logic_error("fuzzer: unary op");
      });
    case K::pow:
      return on1([&](const auto& t) { return t.pow(n.s0); });
    case K::clamp:
      return on1([&](const auto& t) {
        return n.integral ? t.clamp(int(n.s0), int(n.s1)) : t.clamp(n.s0, n.s1);
      });
    case K::binary:
      return std::visit([&](const auto& a, const auto& b) { return kiln_binary(B(n.op), a, b); },
                        arg(0), arg(1));
    case K::scalar:
      return on1([&](const auto& t) {
        const B op = B(n.op);
        if (n.integral) {
          const int s = int(n.s0);
          return n.scalar_left ? kiln_binary(op, s, t) : kiln_binary(op, t, s);
        }
        return n.scalar_left ? kiln_binary(op, n.s0, t) : kiln_binary(op, t, n.s0);
      });
    case K::where:
      return std::visit(
          [](const auto& c, const auto& a, const auto& b) -> AnyT { return kiln::where(c, a, b); },
          arg(0), arg(1), arg(2));
    case K::cast:
      return on1([&](const auto& t) { return t.to(n.to); });
    case K::view:
      return on1([&](const auto& t) { return kiln_view(t, V(n.op), n.p); });
    case K::reduce:
      return on1([&](const auto& t) { return kiln_reduce(t, R(n.op), n); });
    case K::matmul:
      return std::visit(
          [](const auto& a, const auto& b) -> AnyT {
            constexpr auto D = std::decay_t<decltype(a)>::rank;
            constexpr auto E = std::decay_t<decltype(b)>::rank;
            if constexpr ((D == 2 || D == 3) && (E == 2 || E == 3)) return kiln::matmul(a, b);
            throw std::logic_error("fuzzer: matmul of ranks " + std::to_string(D) + ", " +
                                   std::to_string(E));
          },
          arg(0), arg(1));
  }
  throw std::logic_error("fuzzer: node kind");
}

struct Result {  // a node as kiln gave it: read at the end (if kept), and when made (if early)
  Dims shape;
  DType dtype = DType::f32;
  std::vector<double> last, early;
};
struct Outcome {
  std::vector<std::optional<Result>> out;
  std::vector<std::string> problems;
};

// What the fuzz test of the moment covered (printed at its end).
struct Coverage {
  long long programs = 0, half_programs = 0, results = 0, elements = 0, bitwise = 0, bounded = 0,
            thrown = 0;
} coverage;

// Whether a node of prog has a half type: then fused and unfused runs may differ (see the top).
bool has_half(const Program& prog) {
  return std::ranges::any_of(prog.nodes, [](const Node& n) {
    return is_half(n.ref.dtype) || ((n.kind == K::input || n.kind == K::cast) && is_half(n.to));
  });
}

// Runs prog on dev with fusion on or off. A handle is dropped after its last use unless the
// node is kept, so that fusion may leave it unwritten.
Outcome run(const Program& prog, Device dev, bool fusion) {
  kt::ConfigGuard guard;  // restores the config, on failure too
  kiln::Config c = guard.saved;
  c.fusion = fusion;
  kiln::set_config(c);
  Outcome r;
  r.out.resize(prog.nodes.size());
  std::vector<std::optional<AnyT>> vals(prog.nodes.size());
  auto read = [](const AnyT& t) {
    return std::visit([](const auto& x) { return kt::host_values(x); }, t);
  };
  std::size_t i = 0;
  try {
    for (; i < prog.nodes.size(); ++i) {
      const Node& n = prog.nodes[i];
      if (n.expect != Expect::value) {
        std::string got = "no exception";
        try {
          exec(n, vals, dev);
        } catch (const kiln::ShapeError& e) {
          got = n.expect == Expect::shape_error ? "" : std::string("ShapeError: ") + e.what();
        } catch (const kiln::DTypeError& e) {
          got = n.expect == Expect::dtype_error ? "" : std::string("DTypeError: ") + e.what();
        }
        if (!got.empty())
          r.problems.push_back("%" + std::to_string(i) + " should throw, got " + got);
        coverage.thrown += got.empty();
        continue;
      }
      vals[i] = exec(n, vals, dev);
      Result& res = r.out[i].emplace();
      std::visit(
          [&](const auto& t) {
            const auto s = t.shape();
            res.shape.assign(s.begin(), s.end());
            res.dtype = t.dtype();
          },
          *vals[i]);
      if (n.read_early) res.early = read(*vals[i]);
      for (int a : n.args)
        if (prog.last_use[a] == int(i) && !prog.nodes[a].keep) vals[a].reset();
      if (prog.last_use[i] < 0 && !n.keep) vals[i].reset();
    }
    for (i = 0; i < prog.nodes.size(); ++i)
      if (prog.nodes[i].keep) r.out[i]->last = read(*vals[i]);
  } catch (const std::exception& e) {
    r.problems.push_back("%" + std::to_string(i) + " threw: " + e.what());
  }
  return r;
}

// ---- comparisons ----

// Unknown elements pass; NaN and inf must match, numbers be within twice the bound.
bool within(const VE& r, double got) {
  if (std::isinf(r.e)) return true;
  if (std::isnan(r.v)) return std::isnan(got);
  return std::isinf(r.v) ? got == r.v : std::fabs(got - r.v) <= 2 * r.e;
}

// One run against the reference and, given other, bit for bit against other (unless the program
// has a half type: then each run is held to the reference's bound only). Coverage is counted on
// the call that is given other.
void check(const Program& prog, const Outcome& run, const std::string& name, const Outcome* other,
           const std::string& other_name, std::vector<std::string>& problems) {
  const bool bitwise = other && !has_half(prog);
  for (const auto& p : run.problems) problems.push_back("\n" + name + ": " + p);
  if (!run.problems.empty() || (other && !other->problems.empty())) return;
  std::ostringstream o;
  o << std::setprecision(9);
  for (std::size_t i = 0; i < prog.nodes.size(); ++i) {
    const Node& n = prog.nodes[i];
    if (!run.out[i] || (!n.keep && !n.read_early)) continue;
    const Result& got = *run.out[i];
    const std::string at = "\n" + name + " %" + std::to_string(i);
    if (got.shape != n.ref.shape || got.dtype != n.ref.dtype) {
      o << at << ": " << kiln::dtype_name(got.dtype) << " " << kiln::format_dims(got.shape);
      continue;
    }
    coverage.results += other != nullptr;
    int bad = 0;
    for (const bool early : {false, true}) {
      const auto& g = early ? got.early : got.last;
      const auto* theirs = !bitwise ? nullptr
                           : early  ? &other->out[i]->early
                                    : &other->out[i]->last;
      for (std::size_t k = 0; k < g.size() && bad < 4; ++k) {
        const VE& r = n.ref.x[k];
        if (other) {
          ++coverage.elements, coverage.bounded += !std::isinf(r.e), coverage.bitwise += bitwise;
        }
        auto here = [&] {
          ++bad;
          return at + (early ? " (read early)" : "") + " at " +
                 kt::fmt_index(kt::unflatten(std::int64_t(k), got.shape)) + ": ";
        };
        if (!within(r, g[k]))
          o << here() << g[k] << ", reference " << std::setprecision(17) << r.v << " +- 2 * " << r.e
            << std::setprecision(9);
        if (theirs && !same_bits(g[k], (*theirs)[k]))
          o << here() << g[k] << " but " << other_name << " gives " << (*theirs)[k];
        if (early && !got.last.empty() && !same_bits(g[k], got.last[k]))
          o << here() << g[k] << ", read at the end " << got.last[k];
      }
    }
  }
  if (!o.str().empty()) problems.push_back(o.str());
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::strtoull(s, nullptr, 10) : fallback;
}

bool fusion_live(std::string* why = nullptr) {
  for (const auto& f : kiln::features()) {
    if (f.name != "fusion") continue;
    if (why) *why = f.why;
    return f.live;
  }
  if (why) *why = "kiln::features() has no \"fusion\"";
  return false;
}

// Generates the programs and hands each to check_one, which adds what went wrong. A failing
// program is reported once, with its seed and its listing; after three, the test stops.
template <class F>
void fuzz(std::uint64_t default_count, F check_one) {
  const std::uint64_t base = env_or("KILN_FUZZ_SEED", 20261203);
  const std::uint64_t count = env_or("KILN_FUZZ_PROGRAMS", default_count);
  coverage = {};
  int failed = 0;
  for (std::uint64_t i = 0; i < count && failed < 3; ++i) {
    const std::uint64_t seed = base + i;
    Program prog;
    std::vector<std::string> problems;
    try {
      prog = Generator(seed).make();
      coverage.half_programs += has_half(prog);
      check_one(prog, problems);
    } catch (const std::exception& e) {  // a bug of the fuzzer itself
      problems.push_back(std::string("\nthe fuzzer threw: ") + e.what());
    }
    ++coverage.programs;
    if (problems.empty()) continue;
    ++failed;
    std::ostringstream msg;
    msg << "program " << i << " of base seed " << base << " (alone: KILN_FUZZ_SEED=" << seed
        << " KILN_FUZZ_PROGRAMS=1):" << listing(prog) << "\nwhat went wrong:";
    for (const auto& p : problems) msg << p;
    ADD_FAILURE() << msg.str();
  }
  const Coverage& c = coverage;
  std::printf(
      "[  FUZZ    ] %lld programs (base seed %llu), %lld of them with bf16 or f16: %lld results "
      "read, %lld elements, %lld of them compared bit for bit fused against unfused, %lld "
      "(%.0f%%) within the float64 bound; %lld ops threw as they must\n",
      c.programs, static_cast<unsigned long long>(base), c.half_programs, c.results, c.elements,
      c.bitwise, c.bounded, 100.0 * double(c.bounded) / double(std::max(1LL, c.elements)),
      c.thrown);
}

TEST(FusionFuzzer, CpuFusedMatchesUnfusedAndTheReference) {
  const auto before = kiln::fusion_stats().ops_recorded;
  fuzz(2000, [](const Program& prog, std::vector<std::string>& problems) {
    const Outcome fused = run(prog, Device::cpu(), true), eager = run(prog, Device::cpu(), false);
    check(prog, fused, "cpu fused", &eager, "cpu unfused", problems);
    check(prog, eager, "cpu unfused", nullptr, "", problems);
  });
  if (fusion_live()) {
    EXPECT_GT(kiln::fusion_stats().ops_recorded, before) << "the fused runs recorded nothing";
  }
}

// On CUDA, fused against unfused bit for bit, and both against the reference (within the same
// bounds: CUDA's functions differ from the CPU's in the last bits, docs/accuracy.md). 100
// programs by default: nearly every random program compiles new kernels with NVRTC (2000 took
// 8 minutes on an H200); KILN_FUZZ_PROGRAMS=2000 runs the CPU's count.
TEST(FusionFuzzer, CudaFusedMatchesUnfusedAndTheReference) {
  std::optional<Device> cuda;
  std::string why = "kiln::devices() lists no CUDA device";
  for (const auto& d : kiln::devices()) {
    if (d.present && !cuda && d.name.rfind("cuda:", 0) == 0)
      cuda = Device::cuda(std::stoi(d.name.substr(5)));
    if (!d.present && d.name.rfind("cuda", 0) == 0) why = d.name + ": " + d.reason;
  }
  if (!cuda) GTEST_SKIP() << why;
  fuzz(100, [&](const Program& prog, std::vector<std::string>& problems) {
    const Outcome fused = run(prog, *cuda, true), eager = run(prog, *cuda, false);
    check(prog, fused, "cuda fused", &eager, "cuda unfused", problems);
    check(prog, eager, "cuda unfused", nullptr, "", problems);
  });
}

TEST(FusionFuzzer, StatsCountRecordedOps) {
  std::string why;
  if (!fusion_live(&why)) GTEST_SKIP() << "fusion is not live: " << why;
  kt::ConfigGuard guard;
  kiln::Config c = guard.saved;
  c.fusion = true;
  kiln::set_config(c);
  const auto before = kiln::fusion_stats();
  auto x = Tensor<2>::from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto y = ((x * 0.5f + 1.0f).sin() - x).exp();  // five element-wise ops
  EXPECT_EQ(y.to_vector<float>().size(), 6u);
  const auto fused = kiln::fusion_stats();
  EXPECT_GE(fused.ops_recorded - before.ops_recorded, 5);
  EXPECT_GE(fused.groups_run - before.groups_run, 1);
  c.fusion = false;  // eager: nothing is recorded
  kiln::set_config(c);
  EXPECT_EQ((x * 2.0f).exp().to_vector<float>().size(), 6u);
  EXPECT_EQ(kiln::fusion_stats().ops_recorded, fused.ops_recorded);
}

}  // namespace
