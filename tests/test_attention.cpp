// kiln::scaled_dot_product_attention (composed from matmul, masked_fill, softmax) against a
// float64 evaluation on fresh random inputs: causal and not, default and explicit scale, Tq != Tk,
// strided (transposed) inputs; the error paths. nn::MultiHeadAttention against the same
// evaluation of its heads (q, k, v cut from c_attn's output as nanoGPT does).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dispatch/registry.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn/attention.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;

class AttentionTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(AttentionTest);

// softmax(q k^T * scale, masked) v for row-major [B, H, T, D] host data.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int bh, int tq, int tk, int d,
                              bool causal, double scale) {
  std::vector<double> out(static_cast<std::size_t>(bh) * tq * d);
  for (int n = 0; n < bh; ++n)
    for (int i = 0; i < tq; ++i) {
      std::vector<double> s(tk, -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < tk; ++j) {
        if (causal && j > i) continue;
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += double(q[(n * tq + i) * d + c]) * k[(n * tk + j) * d + c];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (int j = 0; j < tk; ++j) z += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
      for (int c = 0; c < d; ++c) {
        double acc = 0;
        for (int j = 0; j < tk; ++j)
          if (s[j] != -INFINITY) acc += std::exp(s[j] - mx) / z * v[(n * tk + j) * d + c];
        out[(n * tq + i) * d + c] = acc;
      }
    }
  return out;
}

TEST_P(AttentionTest, MatchesFloat64) {
  struct Case {
    int b, h, tq, tk, d;
    bool causal;
    std::optional<double> scale;
  };
  for (const Case c : {Case{2, 3, 5, 5, 4, false, {}}, Case{2, 3, 5, 5, 4, true, {}},
                       Case{1, 2, 3, 7, 8, false, 0.3}, Case{1, 1, 6, 6, 16, true, 1.0},
                       Case{1, 2, 6, 6, 8, true, 0.0}, Case{1, 2, 5, 5, 8, true, -0.5}}) {
    SCOPED_TRACE(::testing::Message() << "causal " << c.causal << " tq " << c.tq << " tk " << c.tk);
    const auto qs = kt::uniform(std::size_t(c.b) * c.h * c.tq * c.d, -2, 2, rng());
    const auto ks = kt::uniform(std::size_t(c.b) * c.h * c.tk * c.d, -2, 2, rng());
    const auto vs = kt::uniform(std::size_t(c.b) * c.h * c.tk * c.d, -2, 2, rng());
    const auto q = Tensor<4>::from_data(qs, {c.b, c.h, c.tq, c.d}, dev());
    const auto k = Tensor<4>::from_data(ks, {c.b, c.h, c.tk, c.d}, dev());
    const auto v = Tensor<4>::from_data(vs, {c.b, c.h, c.tk, c.d}, dev());
    const double scale = c.scale.value_or(1.0 / std::sqrt(double(c.d)));
    const auto want = reference(qs, ks, vs, c.b * c.h, c.tq, c.tk, c.d, c.causal, scale);
    const auto got = kiln::scaled_dot_product_attention(q, k, v, c.causal, c.scale).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
    // The same values through strided views ([B, T, H, D] transposed to [B, H, T, D]).
    auto strided = [&](const Tensor<4>& t) {
      return t.transpose(1, 2).contiguous().transpose(1, 2);
    };
    const auto again =
        kiln::scaled_dot_product_attention(strided(q), strided(k), strided(v), c.causal, c.scale);
    EXPECT_EQ(again.to_vector(), got);
  }
}

TEST_P(AttentionTest, ErrorsNameTheProblem) {
  const auto q = Tensor<4>::ones({1, 2, 3, 4}, DType::f32, dev());
  const auto bad = Tensor<4>::ones({1, 2, 3, 5}, DType::f32, dev());
  EXPECT_THROW(kiln::scaled_dot_product_attention(q, bad, bad), kiln::ShapeError);
  EXPECT_THROW(
      kiln::scaled_dot_product_attention(q, q, Tensor<4>::ones({1, 2, 4, 4}, DType::f32, dev())),
      kiln::ShapeError);
  const auto ints = Tensor<4>::ones({1, 2, 3, 4}, DType::i32, dev());
  EXPECT_THROW(kiln::scaled_dot_product_attention(ints, ints, ints), kiln::DTypeError);
}

// Linear on host data: rows x [n, in] -> [n, out] with weight [out, in] and bias [out].
std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& b, int n, int in, int out) {
  std::vector<double> y(std::size_t(n) * out);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double acc = b[o];
      for (int i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

TEST_P(AttentionTest, MultiHeadAttentionMatchesItsHeadsInFloat64) {
  const int B = 2, T = 5, C = 12, H = 3, D = C / H;
  for (bool causal : {true, false}) {
    kiln::nn::MultiHeadAttention mha(C, H, causal);
    mha.to(dev());
    const auto xs = kt::uniform(std::size_t(B) * T * C, -1, 1, rng());
    const auto x = Tensor<3>::from_data(xs, {B, T, C}, dev());
    const auto got = mha(x).to_vector();
    const auto qkv = linear(std::vector<double>(xs.begin(), xs.end()),
                            kt::host_values(mha.c_attn.weight.tensor()),
                            kt::host_values(mha.c_attn.bias.tensor()), B * T, C, 3 * C);
    // Heads as [B * H, T, D] float data for reference().
    std::vector<float> q(std::size_t(B) * T * C), k(q.size()), v(q.size());
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          for (int d = 0; d < D; ++d) {
            const std::size_t to = ((std::size_t(b) * H + h) * T + t) * D + d;
            const std::size_t from = (std::size_t(b) * T + t) * 3 * C + h * D + d;
            q[to] = float(qkv[from]);
            k[to] = float(qkv[from + C]);
            v[to] = float(qkv[from + 2 * C]);
          }
    const auto heads = reference(q, k, v, B * H, T, T, D, causal, 1.0 / std::sqrt(double(D)));
    std::vector<double> joined(std::size_t(B) * T * C);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          for (int d = 0; d < D; ++d)
            joined[(std::size_t(b) * T + t) * C + h * D + d] =
                heads[((std::size_t(b) * H + h) * T + t) * D + d];
    const auto want = linear(joined, kt::host_values(mha.c_proj.weight.tensor()),
                             kt::host_values(mha.c_proj.bias.tensor()), B * T, C, C);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  }
  EXPECT_THROW(kiln::nn::MultiHeadAttention(10, 3), kiln::ValueError);
  kiln::nn::MultiHeadAttention mha(C, H);
  EXPECT_THROW(mha(Tensor<3>::ones({1, 2, 8})), kiln::ShapeError);
}

// Whether the device's backend runs attention itself (Backend::attention) rather than declining,
// in which case the front end composes it.
bool kernel_runs(kiln::Device device) {
  kiln::detail::Backend& be = kiln::detail::backend(device);
  const auto q = Tensor<4>::ones({1, 1, 2, 8}, DType::f32, device);
  const auto o = Tensor<4>::ones({1, 1, 2, 8}, DType::f32, device);
  return be.attention(*q.handle(), *q.handle(), *q.handle(), {false, 1.0},
                      kiln::detail::Out(*o.handle()), std::nullopt);
}

// What a recorded attention keeps for backward. Where the backend runs the kernel: q, k, v, o and
// the per-row logsumexp, no score-sized tensor at all. Where it declines (the composition): the
// probabilities (one [B H, T, T] tensor), not the raw or masked scores, which its gradient never
// reads (autodiff keeps only what a gradient reads); with every input kept it held three.
TEST_P(AttentionTest, ForwardKeepsNoScoreSizedTensorForBackward) {
  if (!KILN_WITH_AUTODIFF) GTEST_SKIP() << "built without autodiff";
  const std::int64_t B = 2, H = 2, T = 128, D = 8;
  const double scores = static_cast<double>(B * H * T * T * 4);
  auto make = [&](std::uint64_t seed) {
    return Tensor<4>::random({B, H, T, D}, kiln::Distribution::uniform(-1, 1), dev(), seed)
        .requires_grad(true);
  };
  const auto q = make(1), k = make(2), v = make(3);
  dev().sync();
  const long long before = kiln::memory_stats().live_bytes;
  const auto loss = kiln::scaled_dot_product_attention(q, k, v, true).sum();
  loss.item();
  const double kept = static_cast<double>(kiln::memory_stats().live_bytes - before) / scores;
  if (kernel_runs(dev())) {
    // o and lse: (D + 1) / T of the scores' size.
    EXPECT_LT(kept, 0.25) << "score-sized tensors kept after forward";
  } else {
    EXPECT_GT(kept, 0.9) << "the probabilities";
    EXPECT_LT(kept, 1.5) << "score-sized tensors kept after forward";
  }
  loss.backward();
  EXPECT_TRUE(q.grad() && k.grad() && v.grad());
}

// softmax(q k^T * scale, masked) v from kiln's ops, as the front end composes it where the backend
// has no kernel: the reference for the kernel's gradients.
Tensor<4> composed(const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v, bool causal,
                   double scale) {
  auto fold = [](const Tensor<4>& t) {
    const auto s = t.shape();
    return t.contiguous().reshape({s[0] * s[1], s[2], s[3]});
  };
  auto scores = kiln::matmul(fold(q), fold(k).transpose(1, 2)) * static_cast<float>(scale);
  if (causal) {
    const auto above = Tensor<2>::ones({q.size(2), k.size(2)}, DType::boolean, q.device()).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  }
  const auto s = q.shape();
  return kiln::matmul(scores.softmax(2), fold(v)).reshape({s[0], s[1], s[2], s[3]});
}

// The gradients of q, k and v through the attention node (attention_backward) against those of
// the composition on the same inputs: causal and not, Tq != Tk, heads cut from one [B, T, 3 C]
// projection (strided, sharing a buffer); in f32 and, against the f32 composition of the same
// rounded values, in bf16 and f16 (computed in f32, rounded once per gradient).
TEST_P(AttentionTest, GradientsMatchTheComposition) {
  if (!KILN_WITH_AUTODIFF) GTEST_SKIP() << "built without autodiff";
  struct Case {
    std::int64_t b, h, tq, tk, d;
    bool causal, qkv;
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Case c : {Case{2, 3, 7, 7, 8, true, false}, Case{1, 2, 5, 9, 4, false, false},
                         Case{1, 2, 9, 5, 4, true, false}, Case{2, 2, 6, 6, 8, true, true},
                         Case{1, 1, 33, 33, 16, false, true}}) {
      SCOPED_TRACE(::testing::Message() << kiln::dtype_name(t) << " causal " << c.causal << " tq "
                                        << c.tq << " tk " << c.tk << " qkv " << c.qkv);
      const double scale = 1.0 / std::sqrt(double(c.d));
      const std::int64_t C = c.h * c.d;
      // Leaves in f32 (rounded to t's values), the inputs of each path as views of them.
      auto leaf = [&](std::vector<std::int64_t> shape) {
        std::int64_t n = 1;
        for (auto e : shape) n *= e;
        auto x = Tensor<1>::from_data(kt::uniform(std::size_t(n), -1, 1, rng()), {n}, dev());
        return x.to(t).to(DType::f32);
      };
      auto heads = [&](const Tensor<1>& x, std::int64_t part, std::int64_t tt) {
        if (!c.qkv) return x.reshape({c.b, c.h, tt, c.d});
        return x.reshape({c.b, tt, 3 * C})
            .slice(2, part * C, (part + 1) * C)
            .reshape({c.b, tt, c.h, c.d})
            .transpose(1, 2);
      };
      const auto xq = leaf({c.b * c.h * c.tq * c.d * (c.qkv ? 3 : 1)});
      const auto xk = c.qkv ? xq : leaf({c.b * c.h * c.tk * c.d});
      const auto xv = c.qkv ? xq : leaf({c.b * c.h * c.tk * c.d});
      const auto w =
          Tensor<4>::from_data(kt::uniform(std::size_t(c.b * c.h * c.tq * c.d), -1, 1, rng()),
                               {c.b, c.h, c.tq, c.d}, dev());
      auto grads = [&](bool kernel, DType dtype) {
        const auto lq = xq.detach().to(dtype).requires_grad(true);
        const auto lk = c.qkv ? lq : xk.detach().to(dtype).requires_grad(true);
        const auto lv = c.qkv ? lq : xv.detach().to(dtype).requires_grad(true);
        const auto q = heads(lq, 0, c.tq), k = heads(lk, 1, c.tk), v = heads(lv, 2, c.tk);
        const auto o = kernel ? kiln::scaled_dot_product_attention(q, k, v, c.causal)
                              : composed(q, k, v, c.causal, scale);
        (o.to(DType::f32) * w).sum().backward();
        std::vector<std::vector<double>> g;
        for (const auto& l : {lq, lk, lv}) g.push_back(kt::host_values(l.grad()->to(DType::f32)));
        return g;
      };
      const auto got = grads(true, t), want = grads(false, DType::f32);
      const double tol = t == DType::f32 ? 2e-5 : t == DType::f16 ? 2e-3 : 1e-2;
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t e = 0; e < want[i].size(); ++e)
          ASSERT_NEAR(got[i][e], want[i][e], tol * (1 + std::fabs(want[i][e])))
              << "gradient "
              << "qkv"[i] << " element " << e;
    }
}

// Only the inputs that need a gradient get one (the others' are not computed), and no key at all
// (Tk == 0: o = 0) gives zero gradients; a non-finite scale is refused before anything runs.
TEST_P(AttentionTest, SomeInputsEmptyKeysAndBadScale) {
  if (!KILN_WITH_AUTODIFF) GTEST_SKIP() << "built without autodiff";
  auto make = [&](std::int64_t t, bool grad) {
    return Tensor<4>::from_data(kt::uniform(std::size_t(2 * 3 * t * 4), -1, 1, rng()), {2, 3, t, 4},
                                dev())
        .requires_grad(grad);
  };
  const auto q = make(5, false), k = make(6, false), v = make(6, true);
  kiln::scaled_dot_product_attention(q, k, v, true).sum().backward();
  EXPECT_FALSE(q.grad() || k.grad());
  ASSERT_TRUE(v.grad());
  // Each query's probabilities sum to 1, so the gradient of sum(o) summed over v is B H Tq per
  // element of D: 2 * 3 * 5 * 4 in all.
  EXPECT_NEAR(v.grad()->sum().item(), 2 * 3 * 5 * 4, 1e-3);

  const auto q2 = make(5, true), k0 = make(0, true), v0 = make(0, true);
  const auto o = kiln::scaled_dot_product_attention(q2, k0, v0, false);
  for (float e : o.to_vector<float>()) EXPECT_EQ(e, 0.0f);
  o.sum().backward();
  ASSERT_TRUE(q2.grad());
  for (float e : q2.grad()->to_vector<float>()) EXPECT_EQ(e, 0.0f);

  EXPECT_THROW(kiln::scaled_dot_product_attention(q, k, v, false, INFINITY), kiln::ValueError);
  EXPECT_THROW(kiln::scaled_dot_product_attention(q, k, v, false, NAN), kiln::ValueError);
}

}  // namespace
