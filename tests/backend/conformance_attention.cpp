// Backend::attention on every chain, called directly, against a float64 reference on fresh random
// inputs with poisoned outputs (o and lse): causal and not, Tq != Tk (both ways), T of 1, 7, 65 and
// 130 (one query block, several, a ragged last one), D of 1, 8, 64 and 128, f32, bf16 and f16;
// contiguous heads, heads cut in place from a [B, T, 3, H, D] projection, k and v shared by every
// head (stride 0), o in [B, T, H, D] memory with the qkv heads (as the front end writes it), a
// pending input of a fusion group; Tk == 0 (o = 0, lse = -inf), D == 0 and
// Tq == 0; the contract's errors (src/backend/attention_contract.cpp). A backend that declines
// (returns false) must leave o and lse untouched; the test then says it skipped the numbers.
// Backend::attention_backward likewise, below (its bound stated there).
//
// The error bound per element, from strict f32 arithmetic (docs/ops.md): a score s_ij is a D-term
// dot product, off by at most e_ij = (D + 1) 2^-24 scale sum_c |q_ic k_jc|; with E_i = max_j e_ij,
// lse_i is off by at most E_i + (Tk + 4) 2^-24 (1 + |lse_i|), and o_ic by
// (2 E_i + (2 Tk + 8) 2^-24 + u) sum_j p_ij |v_jc|, where u allows a kernel that rounds the
// probabilities to the half type before its P V product (2^-8 for bf16, 2^-11 for f16, 0 for f32),
// as tensor-core flash kernels do. The test allows twice that; a half-type o is rounded once more.
#include <limits>

#include "chains.hpp"
#include "kiln/error.hpp"

namespace {

using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::AttentionParams;
using kiln::detail::Handle;
using kiln::detail::Out;
using kiln::detail::TensorImpl;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Ref {
  Values o, lse, o_bound, lse_bound;
};

// q [BH, tq, d], k and v [BH, tk, d] row-major (as Operand::values() reads them).
Ref reference(const Values& q, const Values& k, const Values& v, std::int64_t bh, std::int64_t tq,
              std::int64_t tk, std::int64_t d, const AttentionParams& p, DType t) {
  const double u = t == DType::bf16 ? std::ldexp(1, -8) : t == DType::f16 ? std::ldexp(1, -11) : 0;
  const double f32 = std::ldexp(1, -24);
  Ref r;
  std::vector<double> s(static_cast<std::size_t>(tk));
  for (std::int64_t n = 0; n < bh; ++n)
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::int64_t visible = p.causal ? std::min(tk, i + 1) : tk;
      double m = -kInf, e = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        double dot = 0, mag = 0;
        for (std::int64_t c = 0; c < d; ++c) {
          const double a = q[((n * tq + i) * d + c)], b = k[((n * tk + j) * d + c)];
          dot += a * b;
          mag += std::fabs(a * b);
        }
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
        e = std::max(e, static_cast<double>(d + 1) * f32 * std::fabs(p.scale) * mag);
      }
      double z = 0;
      for (std::int64_t j = 0; j < visible; ++j) z += std::exp(s[j] - m);
      const double lse = visible ? m + std::log(z) : -kInf;
      r.lse.push_back(lse);
      r.lse_bound.push_back(
          visible ? 2 * (e + static_cast<double>(tk + 4) * f32 * (1 + std::fabs(lse))) : 0);
      for (std::int64_t c = 0; c < d; ++c) {
        double acc = 0, mag = 0;
        for (std::int64_t j = 0; j < visible; ++j) {
          const double pj = std::exp(s[j] - lse), vj = v[((n * tk + j) * d + c)];
          acc += pj * vj;
          mag += pj * std::fabs(vj);
        }
        r.o.push_back(acc);
        r.o_bound.push_back(2 * (2 * e + static_cast<double>(2 * tk + 8) * f32 + u) * mag);
      }
    }
  return r;
}

// [B, H, T, D] stored as [B, T, H, D] (the heads of a projection, strided, before a transpose).
kc::Layout heads_inner() {
  return {
      "heads_inner", [](const Dims& s) {
        return kc::Placement{{s[2] * s[1] * s[3], s[3], s[1] * s[3], 1}, 0, kc::detail::numel(s)};
      }};
}

// How q, k and v sit in memory (and, for qkv, o as the front end lays it out and the gradients
// as autodiff does: one [B, T, 3, H, D] buffer).
enum class Heads { contiguous, qkv, shared_kv };

class BackendAttention : public kc::ChainTest {
 protected:
  struct Case {
    std::int64_t b, h, tq, tk, d;
    bool causal;
    Heads heads = Heads::contiguous;
  };

  // A [B, H, T, D] view of `buffer` with these strides and offset, and its values.
  static Operand view(const Operand& buffer, const Dims& shape, const Dims& strides,
                      std::int64_t offset) {
    Operand o;
    o.buffer = buffer.buffer;
    o.view = *buffer.buffer;
    o.view.shape = shape;
    o.view.strides = strides;
    o.view.offset = offset;
    o.host = buffer.host;
    return o;
  }

  // q, k, v for case c: values in [-1, 1] (so that scores stay moderate), laid out as c.heads.
  std::array<Operand, 3> operands(const Case& c, DType t) {
    const Dims qs = {c.b, c.h, c.tq, c.d}, ks = {c.b, c.h, c.tk, c.d};
    if (c.heads == Heads::qkv) {  // [B, T, 3, H, D], one buffer
      const std::int64_t row = 3 * c.h * c.d;
      const Operand all = input({c.b * c.tq * row}, t, kc::contiguous(), -1, 1);
      const Dims st = {c.tq * row, c.d, row, 1};
      return {view(all, qs, st, 0), view(all, ks, st, c.h * c.d), view(all, ks, st, 2 * c.h * c.d)};
    }
    Operand q = input(qs, t, kc::contiguous(), -1, 1);
    if (c.heads == Heads::shared_kv) {  // every head reads the same k and v
      const Operand k = input({c.b, 1, c.tk, c.d}, t, kc::contiguous(), -1, 1);
      const Operand v = input({c.b, 1, c.tk, c.d}, t, kc::contiguous(), -1, 1);
      const Dims st = {c.tk * c.d, 0, c.d, 1};
      return {std::move(q), view(k, ks, st, 0), view(v, ks, st, 0)};
    }
    return {std::move(q), input(ks, t, kc::contiguous(), -1, 1),
            input(ks, t, kc::contiguous(), -1, 1)};
  }

  // Runs case c; false where the backend declined (having checked that it wrote nothing).
  bool check(const Case& c, DType t, double scale) {
    SCOPED_TRACE(::testing::Message()
                 << kiln::dtype_name(t) << " B " << c.b << " H " << c.h << " Tq " << c.tq << " Tk "
                 << c.tk << " D " << c.d << (c.causal ? " causal" : "") << " heads "
                 << static_cast<int>(c.heads));
    const auto in = operands(c, t);
    const Dims qs = {c.b, c.h, c.tq, c.d};
    Operand o = output(qs, t, c.heads == Heads::qkv ? heads_inner() : kc::contiguous()),
            lse = output({c.b, c.h, c.tq}, DType::f32);
    const AttentionParams p{c.causal, scale};
    if (!be().attention(in[0].view, in[1].view, in[2].view, p, Out(o.view), Out(lse.view))) {
      const kc::Raw ro = read(o), rl = read(lse);
      for (std::int64_t i = 0; i < ro.size(); ++i) EXPECT_TRUE(ro.poisoned(i)) << "o written";
      for (std::int64_t i = 0; i < rl.size(); ++i) EXPECT_TRUE(rl.poisoned(i)) << "lse written";
      return false;
    }
    const Ref r =
        reference(in[0].values(), in[1].values(), in[2].values(), c.b * c.h, c.tq, c.tk, c.d, p, t);
    const bool half = kiln::is_half(t);
    Values ob = r.o_bound;
    if (half)
      for (double& x : ob) x *= 2;  // (the rounding of a value off by the bound: matmul's rule)
    EXPECT_TRUE(kc::matches(read(o), qs, r.o, half ? kt::Tol{0.5, 0, 0} : kt::kExact, &ob));
    EXPECT_TRUE(kc::matches(read(lse), {c.b, c.h, c.tq}, r.lse, kt::kExact, &r.lse_bound));
    return true;
  }
};

TEST_P(BackendAttention, MatchesDoubleReference) {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, false},
      {2, 3, 7, 7, 8, true},
      {1, 2, 65, 65, 64, true},
      {1, 1, 130, 130, 128, true},
      {1, 1, 130, 130, 128, false},
      {2, 2, 7, 65, 64, false},           // Tq < Tk
      {1, 2, 65, 7, 8, true},             // Tq > Tk, causal: late queries see every key
      {1, 1, 130, 65, 1, false},          // D = 1
      {2, 3, 7, 7, 8, true, Heads::qkv},  // heads of a fused projection, in place
      {1, 2, 65, 65, 64, false, Heads::qkv},
      {2, 2, 7, 130, 8, false, Heads::shared_kv},
      {1, 2, 65, 65, 8, true, Heads::shared_kv},
  };
  int ran = 0, run = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      ++run;
      ran += check(c, t, 1.0 / std::sqrt(static_cast<double>(c.d)));
    }
  ran += check({2, 1, 7, 7, 8, false}, DType::f32, 0.3);  // an explicit scale
  ++run;
  if (ran == 0) GTEST_SKIP() << "the backend declined every case (no attention kernel)";
  if (ran < run) std::cout << "declined " << run - ran << " of " << run << " cases\n";
}

TEST_P(BackendAttention, EdgeShapes) {
  for (DType t : {DType::f32, DType::bf16}) {
    // Tk == 0: no key, o = 0 and lse = -inf.
    const Operand q = input({2, 2, 5, 8}, t), k = input({2, 2, 0, 8}, t),
                  v = input({2, 2, 0, 8}, t);
    Operand o = output({2, 2, 5, 8}, t), lse = output({2, 2, 5}, DType::f32);
    const AttentionParams p{true, 0.5};
    if (!be().attention(q.view, k.view, v.view, p, Out(o.view), Out(lse.view))) {
      GTEST_SKIP() << "the backend declined Tk == 0";
    }
    EXPECT_TRUE(kc::matches(read(o), o.shape(), Values(160, 0.0)));
    EXPECT_TRUE(kc::matches(read(lse), lse.shape(), Values(20, -kInf)));
    // D == 0: o is empty; lse is log of the number of keys a query sees (every score is 0).
    const Operand q0 = input({1, 1, 3, 0}, t), k0 = input({1, 1, 2, 0}, t);
    Operand o0 = output({1, 1, 3, 0}, t), lse0 = output({1, 1, 3}, DType::f32);
    if (be().attention(q0.view, k0.view, k0.view, p, Out(o0.view), Out(lse0.view))) {
      EXPECT_TRUE(kc::matches(read(lse0), lse0.shape(), {0.0, std::log(2.0), std::log(2.0)},
                              kt::Tol{2, 0, 0}));
    }
    // Tq == 0: nothing to write.
    const Operand qe = input({1, 2, 0, 4}, t), ke = input({1, 2, 3, 4}, t);
    Operand oe = output({1, 2, 0, 4}, t), lsee = output({1, 2, 0}, DType::f32);
    be().attention(qe.view, ke.view, ke.view, p, Out(oe.view), Out(lsee.view));
    be().sync();
  }
}

// An input that a fusion decorator has recorded and not run yet is computed before the call.
TEST_P(BackendAttention, PendingInput) {
  const Operand x = input({1, 2, 9, 8}, DType::f32, kc::contiguous(), -1, 1);
  const Operand k = input({1, 2, 9, 8}, DType::f32, kc::contiguous(), -1, 1);
  const Handle q = be().empty({1, 2, 9, 8}, DType::f32);
  kiln::ir::Program neg;
  neg.output(neg.unary(kiln::ir::Op::neg, neg.input(DType::f32)));
  elementwise(neg, {&x.view}, {}, {q.get()});
  Operand o = output({1, 2, 9, 8}, DType::f32);
  if (!be().attention(*q, k.view, k.view, {false, 0.25}, Out(o.view), std::nullopt))
    GTEST_SKIP() << "the backend declined";
  Values qv = x.values();
  for (double& e : qv) e = -e;
  const Ref r = reference(qv, k.values(), k.values(), 2, 9, 9, 8, {false, 0.25}, DType::f32);
  EXPECT_TRUE(kc::matches(read(o), o.shape(), r.o, kt::kExact, &r.o_bound));
}

TEST_P(BackendAttention, Errors) {
  const Operand q = input({1, 2, 3, 4}, DType::f32), k = input({1, 2, 5, 4}, DType::f32);
  const Handle o = be().empty({1, 2, 3, 4}, DType::f32);
  const Handle lse = be().empty({1, 2, 3}, DType::f32);
  auto call = [&](const TensorImpl& qq, const TensorImpl& kk, const TensorImpl& vv,
                  const TensorImpl& oo, const TensorImpl* ll, double scale = 0.5) {
    std::optional<Out> l;
    if (ll) l.emplace(*ll);
    be().attention(qq, kk, vv, {false, scale}, Out(oo), l);
  };
  const Operand qh = input({1, 2, 3, 4}, DType::bf16);
  EXPECT_THROW(call(qh.view, k.view, k.view, *o, lse.get()), kiln::DTypeError);  // mixed
  const Operand qi = input({1, 2, 3, 4}, DType::i32);
  const Handle oi = be().empty({1, 2, 3, 4}, DType::i32);
  EXPECT_THROW(call(qi.view, qi.view, qi.view, *oi, nullptr), kiln::DTypeError);  // not floating
  const Operand kd = input({1, 2, 5, 3}, DType::f32);
  EXPECT_THROW(call(q.view, kd.view, kd.view, *o, lse.get()), kiln::ShapeError);  // D differs
  const Operand vt = input({1, 2, 6, 4}, DType::f32);
  EXPECT_THROW(call(q.view, k.view, vt.view, *o, lse.get()), kiln::ShapeError);  // k, v differ
  const Operand k3 = input({2, 5, 4}, DType::f32);
  EXPECT_THROW(call(q.view, k3.view, k3.view, *o, lse.get()), kiln::ShapeError);  // rank 3
  const Operand kt_ = input({1, 2, 5, 4}, DType::f32, kc::transposed());  // last stride not 1
  EXPECT_THROW(call(q.view, kt_.view, kt_.view, *o, lse.get()), kiln::ValueError);
  const Operand ot = output({1, 2, 3, 4}, DType::f32, kc::transposed());
  EXPECT_THROW(call(q.view, k.view, k.view, ot.view, lse.get()), kiln::ValueError);
  TensorImpl ob = *o;  // a broadcast output: two heads written to one place
  ob.strides[1] = 0;
  EXPECT_THROW(call(q.view, k.view, k.view, ob, lse.get()), kiln::ValueError);
  const Handle o_wrong = be().empty({1, 2, 4, 4}, DType::f32);
  EXPECT_THROW(call(q.view, k.view, k.view, *o_wrong, lse.get()), kiln::ShapeError);
  const Handle lse_wrong = be().empty({1, 2, 4}, DType::f32);
  EXPECT_THROW(call(q.view, k.view, k.view, *o, lse_wrong.get()), kiln::ShapeError);
  const Handle lse_half = be().empty({1, 2, 3}, DType::bf16);
  EXPECT_THROW(call(q.view, k.view, k.view, *o, lse_half.get()), kiln::DTypeError);
  EXPECT_THROW(call(q.view, k.view, k.view, *o, lse.get(), kInf), kiln::ValueError);
  EXPECT_THROW(call(q.view, k.view, k.view, *o, lse.get(), std::nan("")), kiln::ValueError);
}

// ---- Backend::attention_backward ----
//
// The gradients of the call's own inputs, as the contract defines them (backend.hpp): with
// P = exp(s - lse) from the lse given (0 where masked) and delta_i = dO_i . o_i for the o given,
// dv = P^T dO, dS = P (dO V^T - delta), dq = scale dS K, dk = scale dS^T Q. o and lse are the
// float64 forward's, rounded to the dtype and to f32 as a forward would store them, and the
// reference reads those stored values, so that only the backward's own arithmetic is measured.
//
// The bound per element, to first order in strict f32 arithmetic (u = 2^-24; exp within 2 ULP,
// as docs/ops.md allows the kernels): a score is off by e_ij = (D + 1) u scale sum_c |q_ic k_jc|,
// and s - lse by e_ij + 2 u (|s_ij| + |lse_i|) more, so P_ij is off by P_ij eps_ij with
// eps_ij = e_ij + 2 u (|s_ij| + |lse_i|) + 4 u + u_h (u_h = 2^-8 for bf16, 2^-11 for f16, 0 for
// f32: a kernel may round P and dS to the half type before its tensor-core products). dP_ij is
// off by f_ij = (D + 1) u sum_c |dO_ic v_jc|, delta_i by h_i = (D + 1) u sum_c |dO_ic o_ic|, so
// with t_ij = dP_ij - delta_i, dS_ij is off by sig_ij = P_ij (f_ij + h_i + (eps_ij + 2 u + u_h)
// |t_ij|). Then (T the length of the sum)
//   dv_jc within sum_i P_ij |dO_ic| (eps_ij + (Tq + 2) u),
//   dq_ic within scale sum_j (sig_ij |k_jc| + (Tk + 2) u |dS_ij k_jc|),
//   dk_jc within scale sum_i (sig_ij |q_ic| + (Tq + 2) u |dS_ij q_ic|).
// The test allows twice that (for the second-order terms); a half-type gradient is rounded once
// more (half a ULP beyond twice its bound, as the forward's o).
struct GradRef {
  Values dq, dk, dv, dq_bound, dk_bound, dv_bound;
};

// All operands row-major [BH, T, D] (lse [BH, Tq]), as stored.
GradRef grad_reference(const Values& q, const Values& k, const Values& v, const Values& o,
                       const Values& g, const Values& lse, std::int64_t bh, std::int64_t tq,
                       std::int64_t tk, std::int64_t d, const AttentionParams& p, DType t) {
  const double uh = t == DType::bf16 ? std::ldexp(1, -8) : t == DType::f16 ? std::ldexp(1, -11) : 0;
  const double u = std::ldexp(1, -24), sc = std::fabs(p.scale);
  const auto q_at = [&](std::int64_t n, std::int64_t i, std::int64_t c) {
    return static_cast<std::size_t>((n * tq + i) * d + c);
  };
  const auto k_at = [&](std::int64_t n, std::int64_t j, std::int64_t c) {
    return static_cast<std::size_t>((n * tk + j) * d + c);
  };
  GradRef r;
  for (Values* x : {&r.dq, &r.dq_bound}) x->assign(q.size(), 0.0);
  for (Values* x : {&r.dk, &r.dk_bound, &r.dv, &r.dv_bound}) x->assign(k.size(), 0.0);
  for (std::int64_t n = 0; n < bh; ++n)
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::int64_t visible = p.causal ? std::min(tk, i + 1) : tk;
      const double l = lse[static_cast<std::size_t>(n * tq + i)];
      double delta = 0, h = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        delta += g[q_at(n, i, c)] * o[q_at(n, i, c)];
        h += std::fabs(g[q_at(n, i, c)] * o[q_at(n, i, c)]);
      }
      h *= static_cast<double>(d + 1) * u;
      for (std::int64_t j = 0; j < visible; ++j) {
        double s = 0, e = 0, dp = 0, f = 0;
        for (std::int64_t c = 0; c < d; ++c) {
          s += q[q_at(n, i, c)] * k[k_at(n, j, c)];
          e += std::fabs(q[q_at(n, i, c)] * k[k_at(n, j, c)]);
          dp += g[q_at(n, i, c)] * v[k_at(n, j, c)];
          f += std::fabs(g[q_at(n, i, c)] * v[k_at(n, j, c)]);
        }
        s *= p.scale;
        e *= static_cast<double>(d + 1) * u * sc;
        f *= static_cast<double>(d + 1) * u;
        const double pij = std::exp(s - l);
        const double eps = e + 2 * u * (std::fabs(s) + std::fabs(l)) + 4 * u + uh;
        const double tij = dp - delta, ds = pij * tij;
        const double sig = pij * (f + h + (eps + 2 * u + uh) * std::fabs(tij));
        for (std::int64_t c = 0; c < d; ++c) {
          const double gi = g[q_at(n, i, c)], kj = k[k_at(n, j, c)], qi = q[q_at(n, i, c)];
          r.dv[k_at(n, j, c)] += pij * gi;
          r.dv_bound[k_at(n, j, c)] +=
              pij * std::fabs(gi) * (eps + static_cast<double>(tq + 2) * u);
          r.dq[q_at(n, i, c)] += p.scale * ds * kj;
          r.dq_bound[q_at(n, i, c)] +=
              sc * (sig * std::fabs(kj) + static_cast<double>(tk + 2) * u * std::fabs(ds * kj));
          r.dk[k_at(n, j, c)] += p.scale * ds * qi;
          r.dk_bound[k_at(n, j, c)] +=
              sc * (sig * std::fabs(qi) + static_cast<double>(tq + 2) * u * std::fabs(ds * qi));
        }
      }
    }
  const double twice = kiln::is_half(t) ? 4 : 2;  // (a half type rounds once more: matmul's rule)
  for (Values* x : {&r.dq_bound, &r.dk_bound, &r.dv_bound})
    for (double& b : *x) b *= twice;
  return r;
}

class BackendAttentionBackward : public BackendAttention {
 protected:
  // An input of shape s laid out as l whose view holds `want` (rounded to t as stored; the values
  // outside the view random), and the stored values of the view.
  Operand given(const Dims& s, DType t, const kc::Layout& l, Values& want) {
    for (double& x : want)
      x = t == DType::f32 ? static_cast<float>(x) : kt::round_to_half(static_cast<float>(x), t);
    const kc::Placement pl = l.place(s);
    const auto at = kc::positions(s, pl.strides, pl.offset);
    return input(s, t, l, [&](std::int64_t n) {
      Values all = kc::random_values(t, n, rng(), -1, 1);
      for (std::size_t e = 0; e < at.size(); ++e) all[static_cast<std::size_t>(at[e])] = want[e];
      return all;
    });
  }

  // Runs case c's backward; false where the backend declined (having checked it wrote nothing).
  bool check_backward(const Case& c, DType t) {
    SCOPED_TRACE(::testing::Message()
                 << "backward " << kiln::dtype_name(t) << " B " << c.b << " H " << c.h << " Tq "
                 << c.tq << " Tk " << c.tk << " D " << c.d << (c.causal ? " causal" : "")
                 << " heads " << static_cast<int>(c.heads));
    const auto in = operands(c, t);
    const Dims qs = {c.b, c.h, c.tq, c.d}, ks = {c.b, c.h, c.tk, c.d};
    const AttentionParams p{c.causal, 1.0 / std::sqrt(static_cast<double>(c.d))};
    const Values qv = in[0].values(), kv = in[1].values(), vv = in[2].values();
    Ref fwd = reference(qv, kv, vv, c.b * c.h, c.tq, c.tk, c.d, p, t);
    const kc::Layout rows = c.heads == Heads::contiguous ? kc::contiguous() : heads_inner();
    const Operand o = given(qs, t, rows, fwd.o);
    const Operand g = input(qs, t, rows, -1, 1);
    const Operand lse = given({c.b, c.h, c.tq}, DType::f32, kc::contiguous(), fwd.lse);
    Operand dq = output(qs, t), dk = output(ks, t), dv = output(ks, t);
    if (c.heads == Heads::qkv) {  // the three slices of one [B, T, 3, H, D] buffer
      const std::int64_t row = 3 * c.h * c.d;
      const Operand all = output({c.b * c.tq * row}, t);
      const Dims st = {c.tq * row, c.d, row, 1};
      dq = view(all, qs, st, 0), dk = view(all, ks, st, c.h * c.d);
      dv = view(all, ks, st, 2 * c.h * c.d);
    }
    if (!be().attention_backward(in[0].view, in[1].view, in[2].view, o.view, g.view, lse.view, p,
                                 Out(dq.view), Out(dk.view), Out(dv.view))) {
      for (const Operand* x : {&dq, &dk, &dv}) {
        const kc::Raw r = read(*x);
        for (std::int64_t e = 0; e < r.size(); ++e) EXPECT_TRUE(r.poisoned(e)) << "written";
      }
      return false;
    }
    const GradRef r =
        grad_reference(qv, kv, vv, fwd.o, g.values(), fwd.lse, c.b * c.h, c.tq, c.tk, c.d, p, t);
    const kt::Tol tol = kiln::is_half(t) ? kt::Tol{0.5, 0, 0} : kt::kExact;
    EXPECT_TRUE(kc::matches(read(dq), qs, r.dq, tol, &r.dq_bound)) << "dq";
    EXPECT_TRUE(kc::matches(read(dk), ks, r.dk, tol, &r.dk_bound)) << "dk";
    EXPECT_TRUE(kc::matches(read(dv), ks, r.dv, tol, &r.dv_bound)) << "dv";
    return true;
  }
};

TEST_P(BackendAttentionBackward, MatchesDoubleReference) {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, false},
      {2, 3, 7, 7, 8, true},
      {1, 2, 65, 65, 64, true},
      {1, 1, 130, 130, 64, false},
      {2, 2, 7, 65, 64, false},  // Tq < Tk
      {1, 2, 65, 7, 8, true},    // Tq > Tk, causal: late queries see every key
      {1, 1, 130, 65, 1, false},
      {1, 1, 67, 67, 1, true},            // D = 1, odd T
      {2, 3, 7, 7, 8, true, Heads::qkv},  // heads of a fused projection; o and dO strided too
      {1, 2, 65, 65, 64, false, Heads::qkv},
      {2, 2, 7, 130, 8, false, Heads::shared_kv},
      {1, 2, 65, 65, 8, true, Heads::shared_kv},
      {1, 2, 130, 97, 32, true},  // D = 32, Tq > Tk
  };
  int ran = 0, run = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      ++run;
      ran += check_backward(c, t);
    }
  if (ran == 0) GTEST_SKIP() << "the backend declined every case (no attention_backward kernel)";
  if (ran < run) std::cout << "declined " << run - ran << " of " << run << " cases\n";
}

// No key: dq = 0; no query: dk = dv = 0 (empty sums); D == 0: nothing to write.
TEST_P(BackendAttentionBackward, EdgeShapes) {
  const AttentionParams p{true, 0.5};
  const auto call = [&](std::int64_t tq, std::int64_t tk, std::int64_t d) {
    const Operand q = input({1, 2, tq, d}, DType::f32), k = input({1, 2, tk, d}, DType::f32);
    const Operand lse = input({1, 2, tq}, DType::f32);
    Operand dq = output({1, 2, tq, d}, DType::f32), dk = output({1, 2, tk, d}, DType::f32),
            dv = output({1, 2, tk, d}, DType::f32);
    if (!be().attention_backward(q.view, k.view, k.view, q.view, q.view, lse.view, p, Out(dq.view),
                                 Out(dk.view), Out(dv.view)))
      return false;
    for (const Operand* x : {&dq, &dk, &dv})
      EXPECT_TRUE(kc::matches(read(*x), x->shape(),
                              Values(static_cast<std::size_t>(x->view.numel()), 0.0)));
    return true;
  };
  if (!call(5, 0, 8)) GTEST_SKIP() << "the backend declined Tk == 0";
  call(0, 5, 8);
  call(3, 4, 0);
}

TEST_P(BackendAttentionBackward, Errors) {
  const Dims qs = {1, 2, 3, 4}, ks = {1, 2, 5, 4};
  const Operand q = input(qs, DType::f32), k = input(ks, DType::f32), g = input(qs, DType::f32);
  const Operand lse = input({1, 2, 3}, DType::f32);
  const Handle dq = be().empty(qs, DType::f32), dk = be().empty(ks, DType::f32),
               dv = be().empty(ks, DType::f32);
  struct Call {
    const TensorImpl *o, *g, *lse, *dq, *dk;
  };
  auto call = [&](Call c) {
    return be().attention_backward(q.view, k.view, k.view, *c.o, *c.g, *c.lse, {false, 0.5},
                                   Out(*c.dq), Out(*c.dk), Out(*dv));
  };
  const Call ok{&q.view, &g.view, &lse.view, dq.get(), dk.get()};
  if (!call(ok)) GTEST_SKIP() << "the backend declined";
  Call c = ok;
  const Operand gh = input(qs, DType::bf16);
  c.g = &gh.view;
  EXPECT_THROW(call(c), kiln::DTypeError);  // dout's dtype
  const Operand g3 = input({1, 2, 3, 5}, DType::f32);
  c = ok, c.g = &g3.view;
  EXPECT_THROW(call(c), kiln::ShapeError);  // dout's shape
  const Operand gt = input(qs, DType::f32, kc::transposed());
  c = ok, c.g = &gt.view;
  EXPECT_THROW(call(c), kiln::ValueError);  // dout's last stride
  c = ok, c.o = &gt.view;
  EXPECT_THROW(call(c), kiln::ValueError);  // o's last stride
  const Operand l4 = input({1, 2, 4}, DType::f32);
  c = ok, c.lse = &l4.view;
  EXPECT_THROW(call(c), kiln::ShapeError);  // lse's shape
  const Handle dqh = be().empty(qs, DType::f16);
  c = ok, c.dq = dqh.get();
  EXPECT_THROW(call(c), kiln::DTypeError);  // dq's dtype
  const Handle dk3 = be().empty({1, 2, 4, 4}, DType::f32);
  c = ok, c.dk = dk3.get();
  EXPECT_THROW(call(c), kiln::ShapeError);  // dk's shape
  const Operand dkt = output(ks, DType::f32, kc::transposed());
  c = ok, c.dk = &dkt.view;
  EXPECT_THROW(call(c), kiln::ValueError);  // dk's last stride
  TensorImpl dkb = *dk;                     // every head on one: written twice
  dkb.strides[1] = 0;
  c = ok, c.dk = &dkb;
  EXPECT_THROW(call(c), kiln::ValueError);  // dk broadcast
  EXPECT_THROW(be().attention_backward(q.view, k.view, k.view, q.view, g.view, lse.view,
                                       {false, kInf}, Out(*dq), Out(*dk), Out(*dv)),
               kiln::ValueError);  // scale
}

KILN_INSTANTIATE_CHAINS(BackendAttention);
KILN_INSTANTIATE_CHAINS(BackendAttentionBackward);

}  // namespace
