// Backend::matmul on every chain: out[b] = a[b] @ c[b] for a [B, m, k], c [B, k, n] of any
// strides (stride 0 on a broadcast batch) into a contiguous out [B, m, n], against a float64
// reference within the strict-fp32 bound of docs/ops.md (k * 2^-24 * sum |a_i c_i|); k = 0
// (zeros), empty products, operands not yet computed, and the operands the contract excludes.
// Half operands (bf16, f16) on the chains whose supports() accepts them (docs/accuracy.md: f32
// products and accumulation, one rounding to the half type).
#include <cmath>

#include "chains.hpp"

namespace {

using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

struct Problem {
  std::int64_t batch, m, k, n;
};

class BackendMatmul : public kc::ChainTest {
 protected:
  // The reference of a @ c (values in row-major order) and its error bound per element: strict
  // fp32 (the default precision), each element a k-term dot product in any order, is within
  // k * 2^-24 * sum |a_i c_i| of the exact value (plus the final rounding, counted in k + 1).
  static void reference(const Problem& p, const Values& a, const Values& c, Values& want,
                        Values& bound) {
    want.assign(static_cast<std::size_t>(p.batch * p.m * p.n), 0.0);
    bound.assign(want.size(), 0.0);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.m; ++i)
        for (std::int64_t j = 0; j < p.n; ++j) {
          double s = 0, mag = 0;
          for (std::int64_t q = 0; q < p.k; ++q) {
            const double x = a[static_cast<std::size_t>((b * p.m + i) * p.k + q)];
            const double y = c[static_cast<std::size_t>((b * p.k + q) * p.n + j)];
            s += x * y;
            mag += std::fabs(x * y);
          }
          const auto o = static_cast<std::size_t>((b * p.m + i) * p.n + j);
          want[o] = s;
          bound[o] = static_cast<double>(p.k + 1) * std::ldexp(mag, -24);
        }
  }

  // a @ c for a and c of dtype t laid out as la and lc, into a poisoned out laid out as lo. For a
  // half type, the f32 result (within the bound above) is rounded once: within half a half ULP
  // of the exact value plus twice the f32 bound (the rounding of a value that is itself off by
  // the bound lands at most that bound further from the exact value's rounding).
  void check(const Problem& p, const Layout& la, const Layout& lc,
             const Layout& lo = kc::contiguous(), DType t = DType::f32) {
    SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " [" + std::to_string(p.batch) + ", " +
                 std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                 std::to_string(p.batch) + ", " + std::to_string(p.k) + ", " + std::to_string(p.n) +
                 "], a " + la.name + ", c " + lc.name + ", out " + lo.name);
    const Operand a = input({p.batch, p.m, p.k}, t, la, -2, 2);
    const Operand c = input({p.batch, p.k, p.n}, t, lc, -2, 2);
    Values want, bound;
    reference(p, a.values(), c.values(), want, bound);
    const bool half = kiln::is_half(t);
    if (half)
      for (double& b : bound) b *= 2;
    const Dims os{p.batch, p.m, p.n};
    Operand out = output(os, t, lo);
    be().matmul(a.view, c.view, kiln::detail::Out(out.view));
    EXPECT_TRUE(kc::matches(read(out), os, want, half ? kt::Tol{0.5, 0, 0} : kt::kExact, &bound));
    EXPECT_TRUE(untouched_outside(out));
  }
};
KILN_INSTANTIATE_CHAINS(BackendMatmul);

// Vectors, odd sizes, k = 1, several batches; each operand in every layout the front end makes
// (transposes, general permutations, offsets, step-2 slices that BLAS cannot describe, a
// broadcast batch), the other dense, then both alike; outputs dense and at an offset.
TEST_P(BackendMatmul, EveryOperandLayout) {
  const std::vector<Layout> layouts = {kc::contiguous(), kc::transposed(), kc::permuted(),
                                       kc::offset(),     kc::sliced(),     kc::broadcast_outer()};
  for (const Problem& p :
       {Problem{1, 1, 1, 1}, Problem{1, 5, 7, 3}, Problem{3, 17, 33, 9}, Problem{2, 64, 65, 66},
        Problem{1, 1, 100, 1}, Problem{4, 3, 1, 5}, Problem{2, 130, 40, 1}}) {
    for (const Layout& l : layouts) {
      check(p, l, kc::contiguous());
      check(p, kc::contiguous(), l, kc::offset());
      check(p, l, l);
    }
  }
}

// k = 0: every output element is an empty sum, 0 (the output is poisoned first).
TEST_P(BackendMatmul, ZeroInnerDimensionWritesZeros) {
  for (const Layout& l : {kc::contiguous(), kc::offset()}) {
    check({2, 3, 0, 4}, kc::contiguous(), kc::contiguous(), l);
    check({1, 1, 0, 1}, l, l, l);
  }
}

// Empty products write nothing and throw nothing.
TEST_P(BackendMatmul, EmptyProducts) {
  for (const Problem& p :
       {Problem{0, 3, 4, 5}, Problem{2, 0, 4, 5}, Problem{2, 3, 4, 0}, Problem{0, 0, 0, 0}}) {
    check(p, kc::contiguous(), kc::contiguous(), kc::offset());
    check(p, kc::transposed(), kc::permuted(), kc::offset());
  }
}

// Operands that are results of element-wise calls not yet read (a fusion decorator has them
// recorded; matmul must see their values), and a result used by a later call.
TEST_P(BackendMatmul, PendingOperands) {
  const Problem p{3, 20, 30, 10};
  const Operand x = input({p.batch, p.m, p.k}, DType::f32, kc::contiguous(), -2, 2);
  const Operand y = input({p.batch, p.k, p.n}, DType::f32, kc::transposed(), -2, 2);
  Program twice, neg;
  {
    const auto in = twice.input(DType::f32), s = twice.scalar(DType::f32);
    twice.output(twice.binary(Op::mul, in, s));
    neg.output(neg.unary(Op::neg, neg.input(DType::f32)));
  }
  Handle a = be().empty(x.shape(), DType::f32), c = be().empty(y.shape(), DType::f32);
  elementwise(twice, {&x.view}, {2.0}, {a.get()});  // a = x * 2
  elementwise(neg, {&y.view}, {}, {c.get()});       // c = -y (y transposed)
  TensorImpl at = *a;  // a's transpose over its pending buffer: [B, k, m]
  at.shape = {p.batch, p.k, p.m};
  at.strides = {p.m * p.k, 1, p.k};
  Handle out = be().empty({p.batch, p.m, p.n}, DType::f32);
  Handle out2 = be().empty({p.batch, p.k, p.k}, DType::f32);
  Handle back = be().empty({p.batch, p.m, p.n}, DType::f32);
  be().matmul(*a, *c, kiln::detail::Out(*out));
  be().matmul(at, *a, kiln::detail::Out(*out2));    // a^T a: a transposed view of a pending a
  elementwise(neg, {out.get()}, {}, {back.get()});  // a result of matmul read by a later call

  Values av, cv;
  for (double v : x.values()) av.push_back(static_cast<float>(v) * 2.0f);
  for (double v : y.values()) cv.push_back(-v);
  Values want, bound;
  reference(p, av, cv, want, bound);
  const Dims os{p.batch, p.m, p.n};
  const kc::Raw got = read(*out), neg_got = read(*back);
  EXPECT_TRUE(kc::matches(got, os, want, kt::kExact, &bound));
  Values negated;
  for (std::int64_t k = 0; k < got.size(); ++k) negated.push_back(-got.value(k));
  EXPECT_TRUE(kc::matches(neg_got, os, negated));
  // a^T a.
  Values atv;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t q = 0; q < p.k; ++q)
      for (std::int64_t i = 0; i < p.m; ++i)
        atv.push_back(av[static_cast<std::size_t>((b * p.m + i) * p.k + q)]);
  Values want2, bound2;
  reference({p.batch, p.k, p.m, p.k}, atv, av, want2, bound2);
  EXPECT_TRUE(kc::matches(read(*out2), {p.batch, p.k, p.k}, want2, kt::kExact, &bound2));
  EXPECT_TRUE(kc::matches(read(*a), x.shape(), av)) << "a, still referenced, is written";
}

// bf16 and f16 operands, on a chain whose supports(matmul, {t, t}) says yes (a chain that says no
// is asked nothing: CUDA's half matmul is not there yet): the layouts and sizes above, k = 0
// and empty products, and operands pending as results of half element-wise calls.
TEST_P(BackendMatmul, HalfOperands) {
  using kiln::detail::BackendOp;
  const std::vector<Layout> layouts = {kc::contiguous(), kc::transposed(), kc::permuted(),
                                       kc::offset(),     kc::sliced(),     kc::broadcast_outer()};
  int ran = 0;
  for (const DType t : {DType::bf16, DType::f16}) {
    const DType both[] = {t, t};
    if (!be().supports(BackendOp::matmul, both)) continue;
    ++ran;
    for (const Problem& p : {Problem{1, 1, 1, 1}, Problem{3, 17, 33, 9}, Problem{2, 64, 65, 66},
                             Problem{1, 1, 300, 1}, Problem{2, 130, 40, 1}}) {
      for (const Layout& l : layouts) {
        check(p, l, kc::contiguous(), kc::contiguous(), t);
        check(p, kc::contiguous(), l, kc::offset(), t);
      }
    }
    check({2, 3, 0, 4}, kc::contiguous(), kc::contiguous(), kc::offset(), t);
    check({0, 3, 4, 5}, kc::transposed(), kc::permuted(), kc::offset(), t);
    check({2, 3, 4, 0}, kc::contiguous(), kc::contiguous(), kc::offset(), t);

    // Pending operands: a = x * 2 (exact), c = -y, both of dtype t.
    SCOPED_TRACE(std::string("pending ") + kiln::dtype_name(t));
    const Problem p{2, 20, 30, 10};
    const Operand x = input({p.batch, p.m, p.k}, t, kc::contiguous(), -2, 2);
    const Operand y = input({p.batch, p.k, p.n}, t, kc::transposed(), -2, 2);
    Program twice, neg;
    {
      const auto in = twice.input(t), s = twice.scalar(t);
      twice.output(twice.binary(Op::mul, in, s));
      neg.output(neg.unary(Op::neg, neg.input(t)));
    }
    Handle a = be().empty(x.shape(), t), c = be().empty(y.shape(), t);
    elementwise(twice, {&x.view}, {2.0}, {a.get()});
    elementwise(neg, {&y.view}, {}, {c.get()});
    Handle out = be().empty({p.batch, p.m, p.n}, t);
    be().matmul(*a, *c, kiln::detail::Out(*out));
    Values av, cv;
    for (double v : x.values()) av.push_back(2 * v);
    for (double v : y.values()) cv.push_back(-v);
    Values want, bound;
    reference(p, av, cv, want, bound);
    for (double& b : bound) b *= 2;
    EXPECT_TRUE(kc::matches(read(*out), {p.batch, p.m, p.n}, want, kt::Tol{0.5, 0, 0}, &bound));
  }
  if (ran == 0) GTEST_SKIP() << be().name() << " supports no half matmul";
}

// What the contract excludes: operands other than f32 (DTypeError), and shapes other than
// [B, m, k] x [B, k, n] into a contiguous [B, m, n] (ShapeError). backend.hpp states these
// preconditions without naming errors; the CPU backend throws these, as check_reduce_call does
// for reduce, so that a direct call gets an error and not a wrong kernel. (Ranks other than 3 are
// left out: a backend that reads shape[2] of a rank-2 tensor would not fail cleanly.)
TEST_P(BackendMatmul, RejectsOperandsOutsideTheContract) {
  const Operand a = input({2, 3, 4}, DType::f32), c = input({2, 4, 5}, DType::f32);
  const Operand ai = input({2, 3, 4}, DType::i32), cb = input({2, 4, 5}, DType::boolean);
  const Operand c_wide = input({2, 6, 5}, DType::f32);  // inner dim 6 against a's 4
  const Operand c_batch = input({3, 4, 5}, DType::f32);
  struct Bad {
    const char* what;
    const TensorImpl* a;
    const TensorImpl* c;
    Dims os;
    DType ot;
    Layout lo;
    bool dtype_error;
  };
  for (const Bad& b : {
           Bad{"i32 a", &ai.view, &c.view, {2, 3, 5}, DType::f32, kc::contiguous(), true},
           Bad{"bool c", &a.view, &cb.view, {2, 3, 5}, DType::f32, kc::contiguous(), true},
           Bad{"i32 out", &a.view, &c.view, {2, 3, 5}, DType::i32, kc::contiguous(), true},
           Bad{"inner dims differ",
               &a.view,
               &c_wide.view,
               {2, 3, 5},
               DType::f32,
               kc::contiguous(),
               false},
           Bad{"batches differ",
               &a.view,
               &c_batch.view,
               {2, 3, 5},
               DType::f32,
               kc::contiguous(),
               false},
           Bad{"out of another shape",
               &a.view,
               &c.view,
               {2, 3, 4},
               DType::f32,
               kc::contiguous(),
               false},
           Bad{"out not contiguous",
               &a.view,
               &c.view,
               {2, 3, 5},
               DType::f32,
               kc::transposed(),
               false},
       }) {
    SCOPED_TRACE(b.what);
    Operand out = output(b.os, b.ot, b.lo);
    try {
      be().matmul(*b.a, *b.c, kiln::detail::Out(out.view));
      be().sync();
      ADD_FAILURE() << b.what << ": no exception";
    } catch (const kiln::DTypeError& e) {
      EXPECT_TRUE(b.dtype_error) << "DTypeError for a shape error: " << e.what();
    } catch (const kiln::ShapeError& e) {
      EXPECT_FALSE(b.dtype_error) << "ShapeError for a dtype error: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << b.what << ": another exception: " << e.what();
    }
  }
}

}  // namespace
