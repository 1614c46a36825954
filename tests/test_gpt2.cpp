// GPT-2 (kiln/nn/gpt2.hpp): nanoGPT's parameter names and count, the tied output layer, causal
// attention (an output never depends on a later token), the residual adds inside the norms giving
// the written-out model's logits and gradients, a small config's forward + backward and its loss
// falling over AdamW steps on a tiny token stream, and GPT-2 small (124M) constructing.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.hpp"
#include "kiln/nn/gpt2.hpp"
#include "kiln/optim.hpp"
#include "temp_dir.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace nn = kiln::nn;

const nn::GPT2Config kSmall{.block_size = 16,
                            .vocab_size = 64,
                            .n_layer = 2,
                            .n_head = 2,
                            .n_embd = 32,
                            .dropout = 0.0,
                            .bias = true};

std::int64_t parameter_count(const nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(Gpt2, NamesAreNanoGptsAndTheHeadIsTied) {
  nn::GPT2 model(kSmall);
  const auto names = model.state_dict().names();
  for (const char* name :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_attn.bias", "transformer.h.1.attn.c_proj.weight",
        "transformer.h.1.ln_2.bias", "transformer.h.1.mlp.c_fc.weight",
        "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight", "lm_head.weight"})
    EXPECT_TRUE(std::find(names.begin(), names.end(), name) != names.end()) << name;
  EXPECT_EQ(names.size(), 4u + 12u * 2 + 1u);  // wte, wpe, ln_f x2, lm_head; 12 per block
  EXPECT_EQ(model.lm_head.weight.slot(), model.transformer.wte.weight.slot());
  EXPECT_EQ(model.named_parameters().size(), names.size() - 1);  // the tied weight once
  const std::int64_t c = 32, v = 64,
                     per_block = 4 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) +
                                 (4 * c * c + c);
  EXPECT_EQ(parameter_count(model), v * c + 16 * c + 2 * per_block + 2 * c);
  // nanoGPT's initialisation: std 0.02, and 0.02 / sqrt(2 n_layer) on the residual projections.
  auto std_of = [](const Tensor<2>& w) {
    const auto x = w.to_vector();
    double s = 0;
    for (float e : x) s += double(e) * e;
    return std::sqrt(s / x.size());
  };
  EXPECT_NEAR(std_of(model.transformer.h[0].attn.c_attn.weight.tensor()), 0.02, 0.002);
  EXPECT_NEAR(std_of(model.transformer.h[1].mlp.c_proj.weight.tensor()), 0.01, 0.001);
  EXPECT_EQ(model.transformer.h[0].attn.c_attn.bias.tensor().abs().max().item(), 0.0f);
}

TEST(Gpt2, OutputsNeverDependOnLaterTokens) {
  nn::GPT2 model(kSmall);
  auto a = kiln::from_data({1, 2, 3, 4, 5, 6}, {1, 6});
  auto b = kiln::from_data({1, 2, 3, 4, 5, 60}, {1, 6});
  const auto la = model(a).to_vector(), lb = model(b).to_vector();
  for (std::size_t i = 0; i < 5 * 64; ++i) ASSERT_EQ(la[i], lb[i]) << i;
  EXPECT_NE(std::vector<float>(la.begin() + 5 * 64, la.end()),
            std::vector<float>(lb.begin() + 5 * 64, lb.end()));
  EXPECT_THROW(model(Tensor<2>::zeros({1, 17}, DType::i32)), kiln::ShapeError);
  EXPECT_THROW(nn::GPT2({.n_head = 4, .n_embd = 30}), kiln::ValueError);
}

// The model leaves each residual add to the norm that reads the sum (LayerNorm::add): its logits
// and gradients are those of the blocks written out as nanoGPT writes them, adds apart.
TEST(Gpt2, FusedResidualAddsGiveTheWrittenOutModelsLogitsAndGradients) {
  nn::GPT2 model(kSmall);
  const auto ids = kiln::from_data({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 6});
  const auto pos = kiln::arange(0, 6, 1, DType::i32);
  const auto& t = model.transformer;
  const auto written = [&] {
    auto x = t.wte(ids) + t.wpe(pos);
    for (std::size_t i = 0; i < t.h.size(); ++i) {
      const auto& b = t.h[i];
      x = x + b.attn(b.ln_1(x));
      x = x + b.mlp(b.ln_2(x));
    }
    return model.lm_head(t.ln_f(x));
  };
  const auto gradients = [&](const Tensor<3>& logits) {
    model.zero_grad();
    (logits * logits).sum().backward();
    // Parameters of every place in the model: both ends, both blocks, norms before and after.
    return std::vector<std::vector<float>>{t.wte.weight.grad()->to_vector(),
                                           t.wpe.weight.grad()->to_vector(),
                                           t.h[0].ln_1.weight.grad()->to_vector(),
                                           t.h[0].ln_2.bias.grad()->to_vector(),
                                           t.h[0].attn.c_attn.weight.grad()->to_vector(),
                                           t.h[1].ln_1.bias.grad()->to_vector(),
                                           t.h[1].mlp.c_proj.bias.grad()->to_vector(),
                                           t.ln_f.weight.grad()->to_vector()};
  };
  const auto fused = model(ids), apart = written();
  const auto a = fused.to_vector(), b = apart.to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
  const auto ga = gradients(model(ids)), gb = gradients(written());
  ASSERT_EQ(ga.size(), gb.size());
  for (std::size_t p = 0; p < ga.size(); ++p) {
    double scale = 0;
    for (float v : gb[p]) scale = std::max(scale, std::abs(double{v}));
    for (std::size_t i = 0; i < ga[p].size(); ++i)
      ASSERT_NEAR(ga[p][i], gb[p][i], 1e-5 * scale + 1e-7) << "parameter " << p << " at " << i;
  }
}

// Forward + backward: every parameter gets a gradient, and the tied weight's is the sum of its two
// uses (the embedding's and the head's).
TEST(Gpt2, BackwardReachesEveryParameterAndSumsTheTiedUses) {
  nn::manual_seed(1);
  nn::GPT2 model(kSmall);
  const auto ids = kiln::from_data({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  const auto targets = kiln::from_data({1, 4, 1, 5, 9, 2, 6, 5}, {2, 4});
  model.loss(ids, targets).backward();
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(kiln::detail::grad(p.handle()) != nullptr) << name;
  // The head's share alone: the loss through logits = x W^T with W detached from the embedding.
  const auto g = model.transformer.wte.weight.grad()->to_vector();
  model.zero_grad();
  const auto w = model.transformer.wte.weight.tensor();
  {
    // Rebuild the forward with the embedding reading a detached copy: its gradient is the head's.
    const auto [b, t] = ids.shape();
    const auto pos = kiln::arange(0, double(t), 1.0, DType::i32);
    auto x = kiln::embedding(w.detach(), ids) + model.transformer.wpe(pos);
    for (const auto& block : model.transformer.h) x = (*block)(x);
    const auto logits = model.lm_head(model.transformer.ln_f(x));
    kiln::cross_entropy(logits.reshape({b * t, 64}), targets.reshape({b * t})).backward();
  }
  const auto head = model.transformer.wte.weight.grad()->to_vector();
  double differs = 0;
  for (std::size_t i = 0; i < g.size(); ++i) differs += std::fabs(g[i] - head[i]);
  EXPECT_GT(differs, 1e-4);          // the embedding's use adds to rows 1..9
  for (int row : {0, 7, 8, 10, 63})  // ids never used: only the head's share
    for (int c = 0; c < 32; ++c) EXPECT_NEAR(g[row * 32 + c], head[row * 32 + c], 1e-7);
}

TEST(Gpt2, SmallModelLearnsATinyTokenStream) {
  nn::manual_seed(2);
  nn::GPT2 model(kSmall);
  std::vector<std::int32_t> stream;
  for (int i = 0; i < 4 * 17; ++i) stream.push_back((i * 7) % 13);
  std::vector<std::int32_t> x, y;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 16; ++t) {
      x.push_back(stream[b * 17 + t]);
      y.push_back(stream[b * 17 + t + 1]);
    }
  const auto ids = Tensor<2>::from_data(x, {4, 16}), targets = Tensor<2>::from_data(y, {4, 16});
  kiln::optim::AdamW opt(kiln::optim::decay_groups(model, 0.1), {.lr = 1e-2});
  float first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    const auto loss = model.loss(ids, targets);
    loss.backward();
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_NEAR(first, std::log(64.0), 0.5);
  EXPECT_LT(last, 0.5f * first) << "from " << first;
}

// A trained model saved with kiln::save and loaded into a fresh one gives the same logits, and
// the loaded head is still tied.
TEST(Gpt2, StateDictRoundTripsThroughSafetensors) {
  nn::GPT2 a(kSmall), b(kSmall);
  const auto ids = kiln::from_data({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  const auto targets = kiln::from_data({1, 4, 1, 5, 9, 2, 6, 5}, {2, 4});
  kiln::optim::AdamW opt(a.parameters(), {.lr = 1e-2});
  a.loss(ids, targets).backward();
  opt.step();
  kt::TempDir dir;
  kiln::save(dir.path() / "gpt2.safetensors", a.state_dict());
  b.load_state_dict(kiln::load(dir.path() / "gpt2.safetensors"));
  EXPECT_EQ(a(ids).to_vector(), b(ids).to_vector());
  EXPECT_EQ(b.lm_head.weight.slot(), b.transformer.wte.weight.slot());
}

TEST(Gpt2, SmallConstructsWith124MParameters) {
  nn::GPT2 model(nn::GPT2Config{});
  EXPECT_EQ(parameter_count(model), 124475904);  // nanoGPT's GPT-2 small, vocab 50304, with wpe
}

}  // namespace
