// kiln::nn modules on every device: registration and names, parameters() with tied weights,
// train/eval, to(dtype), state_dict round trips through kiln::save / kiln::load, Linear,
// Embedding, the norms, Dropout and Sequential against float64 references, and the error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "temp_dir.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace nn = kiln::nn;

class NnTest : public kt::DeviceTest {};
KILN_INSTANTIATE_DEVICES(NnTest);

struct Mlp : nn::Module {
  nn::Linear fc1{8, 16}, fc2{16, 4, false};
  nn::LayerNorm norm{16};
  nn::Dropout drop{0.5};
  Mlp() {
    register_module("fc1", fc1);
    register_module("norm", norm);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor<2> forward(const Tensor<2>& x) const { return fc2(drop(norm(fc1(x)).relu())); }
};

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

TEST(Nn, RegistrationNamesInOrder) {
  Mlp m;
  EXPECT_EQ(names_of(m), (std::vector<std::string>{"fc1.weight", "fc1.bias", "norm.weight",
                                                   "norm.bias", "fc2.weight"}));
  EXPECT_EQ(m.parameters().size(), 5u);
  EXPECT_EQ(m.named_children().size(), 4u);
  for (const auto& p : m.parameters()) EXPECT_TRUE(kiln::detail::requires_grad(p.handle()));
  EXPECT_EQ(m.fc1.weight.tensor().shape(), (kiln::Shape<2>{16, 8}));
}

TEST(Nn, BadRegistrationsAreValueErrors) {
  struct Bad : nn::Module {
    nn::Linear a{2, 2};
    void add(const std::string& name) { register_module(name, a); }
  } bad;
  EXPECT_THROW(bad.add("x.y"), kiln::ValueError);
  EXPECT_THROW(bad.add(""), kiln::ValueError);
  bad.add("a");
  EXPECT_THROW(bad.add("a"), kiln::ValueError);
  EXPECT_THROW(nn::Linear(0, 3), kiln::ValueError);
  EXPECT_THROW(nn::Dropout(1.5), kiln::ValueError);
  nn::Parameter<1> empty;
  EXPECT_THROW(empty.tensor(), kiln::ValueError);
}

TEST(Nn, TrainEvalReachesEverySubModule) {
  Mlp m;
  EXPECT_TRUE(m.drop.is_training());
  m.eval();
  EXPECT_FALSE(m.is_training());
  EXPECT_FALSE(m.drop.is_training());
  auto x = Tensor<2>::ones({4, 8});
  EXPECT_EQ(m.forward(x).to_vector(), m.forward(x).to_vector());  // no dropout in eval
  m.train();
  EXPECT_TRUE(m.fc1.is_training());
}

// Tied parameters: one slot, listed once, its gradient the sum of both uses.
TEST(Nn, TiedParameterIsListedOnceAndItsGradientsSum) {
  struct Tied : nn::Module {
    nn::Embedding emb{5, 3};
    nn::Linear head{3, 5, false};
    Tied() {
      head.weight.tie(emb.weight);
      register_module("emb", emb);
      register_module("head", head);
    }
  } m;
  EXPECT_EQ(names_of(m), std::vector<std::string>{"emb.weight"});
  EXPECT_EQ(m.state_dict().names(), (std::vector<std::string>{"emb.weight", "head.weight"}));
  const auto ids = kiln::from_data({1, 3}, {2});
  const auto x = m.emb(ids);          // rows 1 and 3
  const auto loss = m.head(x).sum();  // + x @ W^T
  loss.backward();
  const auto g = m.emb.weight.grad()->to_vector();
  const auto w = m.emb.weight.tensor().to_vector();
  // d/dW of sum(x W^T) = sum over rows of x = w[1] + w[3] for every row of W; plus, for the
  // embedding rows 1 and 3, d/dx = sum_v W[v] (each).
  for (int v = 0; v < 5; ++v)
    for (int c = 0; c < 3; ++c) {
      double want = w[1 * 3 + c] + w[3 * 3 + c];
      if (v == 1 || v == 3)
        for (int u = 0; u < 5; ++u) want += w[u * 3 + c];
      EXPECT_NEAR(g[v * 3 + c], want, 1e-5) << v << "," << c;
    }
}

TEST_P(NnTest, LinearMatchesFloat64AtRanks2To4) {
  nn::Linear lin(6, 5);
  lin.to(dev());
  const auto W = kt::host_values(lin.weight.tensor()), b = kt::host_values(lin.bias.tensor());
  auto check = [&](const std::vector<float>& xs, const std::vector<float>& ys) {
    ASSERT_EQ(ys.size() / 5, xs.size() / 6);
    for (std::size_t r = 0; r < xs.size() / 6; ++r)
      for (int o = 0; o < 5; ++o) {
        double want = b[o];
        for (int i = 0; i < 6; ++i) want += double(xs[r * 6 + i]) * W[o * 6 + i];
        EXPECT_NEAR(ys[r * 5 + o], want, 1e-5);
      }
  };
  const auto xs = kt::uniform(2 * 3 * 2 * 6, -1, 1, rng());
  auto x4 = Tensor<4>::from_data(xs, {2, 3, 2, 6}, dev());
  check(xs, lin(x4).to_vector());
  check(xs, lin(x4.reshape({12, 6})).to_vector());
  check(xs, lin(x4.reshape({4, 3, 6})).to_vector());
  // A transposed (strided) input.
  auto xt = Tensor<2>::from_data(xs, {6, 12}, dev()).transpose(0, 1);
  check(xt.contiguous().to_vector(), lin(xt).to_vector());
  EXPECT_THROW(lin(Tensor<2>::ones({2, 5}, DType::f32, dev())), kiln::ShapeError);
  EXPECT_THROW(lin(Tensor<2>::ones({2, 6}, DType::i32, dev())), kiln::DTypeError);
}

TEST_P(NnTest, NormsEmbeddingAndActivations) {
  nn::LayerNorm ln(4);
  nn::RMSNorm rms(4);
  ln.to(dev());
  rms.to(dev());
  const auto xs = kt::uniform(12, -2, 2, rng());
  const auto x = Tensor<2>::from_data(xs, {3, 4}, dev());
  const auto y = ln(x).to_vector(), z = rms(x).to_vector();
  for (int r = 0; r < 3; ++r) {
    double mean = 0, sq = 0, var = 0;
    for (int c = 0; c < 4; ++c)
      mean += xs[r * 4 + c] / 4.0, sq += double(xs[r * 4 + c]) * xs[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += std::pow(xs[r * 4 + c] - mean, 2) / 4;
    for (int c = 0; c < 4; ++c) {
      EXPECT_NEAR(y[r * 4 + c], (xs[r * 4 + c] - mean) / std::sqrt(var + 1e-5), 1e-4);
      EXPECT_NEAR(z[r * 4 + c], xs[r * 4 + c] / std::sqrt(sq + 1e-6), 1e-4);
    }
  }
  nn::Embedding emb(7, 3);
  emb.to(dev());
  const auto table = emb.weight.tensor().to_vector();
  const auto rows = emb(Tensor<1>::from_data(std::vector<std::int32_t>{6, 0, 6}, {3}, dev()));
  const auto got = rows.to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(got[c], table[18 + c]);
    EXPECT_EQ(got[3 + c], table[c]);
  }
  EXPECT_THROW(emb(Tensor<1>::from_data(std::vector<std::int32_t>{7}, {1}, dev())).to_vector(),
               kiln::IndexError);
  const auto r = nn::ReLU{}(x).to_vector(), s = nn::SiLU{}(x).to_vector(),
             g = nn::GELU{}(x).to_vector();
  for (int i = 0; i < 12; ++i) {
    const double v = xs[i];
    EXPECT_NEAR(r[i], std::max(v, 0.0), 1e-6);
    EXPECT_NEAR(s[i], v / (1 + std::exp(-v)), 1e-5);
    EXPECT_NEAR(g[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-5);
  }
}

TEST_P(NnTest, DropoutKeepsScaledElementsWithProbabilityOneMinusP) {
  nn::manual_seed(seed());
  nn::Dropout drop(0.25);
  const auto x = Tensor<2>::ones({256, 256}, DType::f32, dev());
  const auto a = drop(x).to_vector(), b = drop(x).to_vector();
  std::size_t kept = 0, same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i] == 0.0f || std::fabs(a[i] - 1 / 0.75f) < 1e-6) << a[i];
    kept += a[i] != 0.0f;
    same += a[i] == b[i];
  }
  EXPECT_NEAR(double(kept) / a.size(), 0.75, 0.01);
  EXPECT_LT(same, a.size());  // a fresh mask per call
  drop.eval();
  EXPECT_EQ(drop(x).to_vector(), x.to_vector());
  EXPECT_EQ(nn::Dropout(0.0)(x).to_vector(), x.to_vector());
  EXPECT_THROW(nn::dropout(x, -0.1, 1), kiln::ValueError);
}

TEST_P(NnTest, SequentialChainsModulesAtRanks2And3) {
  nn::Sequential seq;
  auto& first = seq.push_back(std::make_shared<nn::Linear>(4, 8));
  seq.push_back(std::make_shared<nn::GELU>());
  auto& last = seq.push_back(std::make_shared<nn::Linear>(8, 2));
  seq.to(dev());
  EXPECT_EQ(names_of(seq), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  const auto x = Tensor<3>::from_data(kt::uniform(2 * 3 * 4, -1, 1, rng()), {2, 3, 4}, dev());
  const auto want = last(first(x).gelu()).to_vector();
  EXPECT_EQ(seq(x).to_vector(), want);
  // Rank 2: another matmul problem, for which CUDA may tune another kernel (1 ulp apart seen on
  // the H100).
  const auto flat = seq(x.reshape({6, 4})).to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(flat[i], want[i], 1e-6) << i;
  nn::Sequential with_embedding;
  with_embedding.push_back(std::make_shared<nn::Embedding>(3, 2));
  EXPECT_THROW(with_embedding(x), kiln::ShapeError);
}

// state_dict -> kiln::save -> kiln::load -> load_state_dict gives a module with equal values
// and outputs; a wrong shape or name is an error that leaves the module as it was.
TEST_P(NnTest, StateDictRoundTripsThroughSafetensors) {
  Mlp a, b;
  a.to(dev());
  b.to(dev());
  a.eval();
  b.eval();
  kt::TempDir dir;
  const auto path = dir.path() / "mlp.safetensors";
  kiln::save(path, a.state_dict());
  b.load_state_dict(kiln::load(path, dev()));
  const auto x = Tensor<2>::from_data(kt::uniform(3 * 8, -1, 1, rng()), {3, 8}, dev());
  EXPECT_EQ(a.forward(x).to_vector(), b.forward(x).to_vector());
  for (const auto& p : b.parameters()) {
    EXPECT_TRUE(kiln::detail::requires_grad(p.handle()));
    EXPECT_EQ(p.device(), dev());
  }
  // Loaded values are b's own: a's parameters keep theirs when b trains.
  EXPECT_FALSE(kt::shares_buffer(a.fc1.weight.tensor(), b.fc1.weight.tensor()));

  auto state = a.state_dict();
  state.add("extra.weight", Tensor<1>::ones({1}));
  EXPECT_THROW(b.load_state_dict(state), kiln::ValueError);
  b.load_state_dict(state, false);
  auto wrong = a.state_dict();
  wrong.add("fc1.weight", Tensor<2>::ones({8, 16}));
  const auto before = b.fc1.bias.tensor().to_vector();
  EXPECT_THROW(b.load_state_dict(wrong), kiln::ShapeError);
  EXPECT_EQ(b.fc1.bias.tensor().to_vector(), before);
}

TEST(Nn, ToDtypeCastsEveryParameterAndLoadCasts) {
  Mlp m;
  m.eval();
  kiln::Checkpoint f32 = m.state_dict();
  std::mt19937_64 g(7);
  const auto x = Tensor<2>::from_data(kt::uniform(4 * 8, -1, 1, g), {4, 8});
  const auto want = m.forward(x).to_vector();
  m.to(DType::bf16);
  const auto y = m.forward(x.to(DType::bf16));
  EXPECT_EQ(y.dtype(), DType::bf16);
  const auto got = y.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 0.05 + 0.02 * std::fabs(want[i]));
  for (const auto& p : m.parameters()) EXPECT_EQ(p.dtype(), DType::bf16);
  m.load_state_dict(f32);  // f32 values cast to the bf16 parameters
  EXPECT_EQ(m.fc1.weight.tensor().dtype(), DType::bf16);
  EXPECT_THROW(m.to(DType::i32), kiln::DTypeError);
}

}  // namespace
