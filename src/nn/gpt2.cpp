// GPT-2 (kiln/nn/gpt2.hpp), module by module as nanoGPT's model.py lays it out.
#include "kiln/nn/gpt2.hpp"

#include <cmath>

#include "kiln/autocast.hpp"
#include "kiln/nn/init.hpp"

namespace kiln::nn {
namespace {

void init_linear(Linear& l, double std) {
  l.weight.set(normal<2>({l.out_features(), l.in_features()}, std));
  if (l.bias.defined()) l.bias.set(Tensor<1>::zeros({l.out_features()}));
}

void init_embedding(Embedding& e, double std) {
  const auto s = e.weight.tensor().shape();
  e.weight.set(normal<2>({s[0], s[1]}, std));
}

const GPT2Config& checked(const GPT2Config& c) {
  if (c.block_size <= 0 || c.vocab_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0)
    throw ValueError(
        "GPT2Config: block_size, vocab_size, n_layer, n_head and n_embd must be "
        "positive");
  return c;
}

}  // namespace

GPT2MLP::GPT2MLP(const GPT2Config& c)
    : c_fc(c.n_embd, 4 * c.n_embd, c.bias),
      c_proj(4 * c.n_embd, c.n_embd, c.bias),
      dropout(c.dropout) {
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
  register_module("dropout", dropout);
}

Tensor<3> GPT2MLP::forward(const Tensor<3>& x) const { return dropout(c_proj(c_fc(x).gelu())); }

GPT2Block::GPT2Block(const GPT2Config& c)
    : ln_1(c.n_embd, 1e-5, c.bias),
      attn(c.n_embd, c.n_head, true, c.dropout, c.bias),
      ln_2(c.n_embd, 1e-5, c.bias),
      mlp(c) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

// Under autocast the norms' results feed only half products (c_attn, c_fc, lm_head), which would
// cast them to the half type: the norms round to it in their own pass instead (the same values,
// and no f32 result written and read back). The residual adds happen in the norms after them
// (LayerNorm::add): the same values as x + branch and a norm of it, with the sum written once.
Tensor<3> GPT2Block::forward(const Tensor<3>& x) const {
  const auto [h, m] = forward_unadded(x, ln_1(x, autocast_dtype()));
  return h + m;
}

std::pair<Tensor<3>, Tensor<3>> GPT2Block::forward_unadded(const Tensor<3>& x,
                                                           const Tensor<3>& x_normed) const {
  const auto [h, z] = ln_2.add(x, attn(x_normed), autocast_dtype());
  return {h, mlp(z)};
}

GPT2Transformer::GPT2Transformer(const GPT2Config& c)
    : wte(c.vocab_size, c.n_embd),
      wpe(c.block_size, c.n_embd),
      drop(c.dropout),
      ln_f(c.n_embd, 1e-5, c.bias) {
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("drop", drop);
  for (std::int64_t i = 0; i < c.n_layer; ++i) h.push_back(std::make_unique<GPT2Block>(c));
  register_module("h", h);
  register_module("ln_f", ln_f);
}

GPT2::GPT2(const GPT2Config& c)
    : transformer(checked(c)), lm_head(c.n_embd, c.vocab_size, false), config_(c) {
  lm_head.weight.tie(transformer.wte.weight);
  register_module("transformer", transformer);
  register_module("lm_head", lm_head);
  init_embedding(transformer.wte, 0.02);
  init_embedding(transformer.wpe, 0.02);
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& block : transformer.h) {
    init_linear(block->attn.c_attn, 0.02);
    init_linear(block->attn.c_proj, proj_std);
    init_linear(block->mlp.c_fc, 0.02);
    init_linear(block->mlp.c_proj, proj_std);
  }
}

Tensor<3> GPT2::forward(const Tensor<2>& ids) const {
  const auto [b, t] = ids.shape();
  if (t > config_.block_size)
    throw ShapeError("GPT2: a sequence of " + std::to_string(t) + " tokens is longer than " +
                     "block_size " + std::to_string(config_.block_size));
  const auto pos = arange(0, static_cast<double>(t), 1.0, DType::i32, ids.device());
  auto x = transformer.drop(transformer.wte(ids) + transformer.wpe(pos));
  // Each block's output h + m is added by the norm that reads it next (the next block's ln_1,
  // or ln_f), in that norm's pass.
  auto x_normed = transformer.h[0].ln_1(x, autocast_dtype());
  const std::size_t n = transformer.h.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto [h, m] = transformer.h[i].forward_unadded(x, x_normed);
    const LayerNorm& next = i + 1 < n ? transformer.h[i + 1].ln_1 : transformer.ln_f;
    auto r = next.add(h, m, autocast_dtype());
    x = r.sum;
    x_normed = r.y;
  }
  return lm_head(x_normed);
}

Tensor<0> GPT2::loss(const Tensor<2>& ids, const Tensor<2>& targets) const {
  const auto logits = forward(ids);
  return cross_entropy(logits.reshape(Shape<2>{-1, config_.vocab_size}),
                       targets.reshape(Shape<1>{-1}), -1);
}

}  // namespace kiln::nn
