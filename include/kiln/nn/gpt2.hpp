// GPT-2 as nanoGPT writes it, with its parameter names, so that state_dict() speaks PyTorch's
// GPT-2 checkpoint names ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...).
// The output layer lm_head (no bias) is tied to the token embedding: lm_head.weight and
// transformer.wte.weight are one Parameter slot, so the two uses' gradients land in one grad and
// sum; named_parameters() lists it once (as transformer.wte.weight), state_dict() under both
// names, as nanoGPT's torch state_dict does.
#pragma once

#include <utility>

#include "kiln/loss.hpp"
#include "kiln/nn/attention.hpp"
#include "kiln/nn/dropout.hpp"
#include "kiln/nn/embedding.hpp"
#include "kiln/nn/linear.hpp"
#include "kiln/nn/module_list.hpp"
#include "kiln/nn/norm.hpp"

namespace kiln::nn {

struct GPT2Config {
  std::int64_t block_size = 1024;  // longest sequence (positions)
  std::int64_t vocab_size = 50304;
  std::int64_t n_layer = 12, n_head = 12, n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // in the Linears and LayerNorms
};

class GPT2MLP : public Module {
 public:
  explicit GPT2MLP(const GPT2Config& c);
  Tensor<3> forward(const Tensor<3>& x) const;
  Tensor<3> operator()(const Tensor<3>& x) const { return forward(x); }
  Linear c_fc, c_proj;
  Dropout dropout;
};

// Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
class GPT2Block : public Module {
 public:
  explicit GPT2Block(const GPT2Config& c);
  Tensor<3> forward(const Tensor<3>& x) const;
  Tensor<3> operator()(const Tensor<3>& x) const { return forward(x); }
  // The block as GPT2 runs it, its last residual add left to the norm that follows: from the
  // block's input x and ln_1(x) (which that norm of the previous block computed), {h, m} with
  // the block's output h + m unadded (the next norm adds it in its pass: LayerNorm::add).
  std::pair<Tensor<3>, Tensor<3>> forward_unadded(const Tensor<3>& x,
                                                  const Tensor<3>& x_normed) const;
  LayerNorm ln_1;
  MultiHeadAttention attn;
  LayerNorm ln_2;
  GPT2MLP mlp;
};

// nanoGPT's `transformer` ModuleDict.
class GPT2Transformer : public Module {
 public:
  explicit GPT2Transformer(const GPT2Config& c);
  Embedding wte, wpe;
  Dropout drop;
  ModuleList<GPT2Block> h;
  LayerNorm ln_f;
};

class GPT2 : public Module {
 public:
  // Initialised as nanoGPT: every Linear weight and embedding N(0, 0.02), biases zero, LayerNorms
  // ones and zeros, and each residual projection (attn.c_proj, mlp.c_proj) N(0, 0.02 /
  // sqrt(2 n_layer)). Draws from kiln::nn::manual_seed's sequence.
  explicit GPT2(const GPT2Config& c);

  // ids [B, T] (i32, T <= block_size) -> logits [B, T, vocab_size].
  Tensor<3> forward(const Tensor<2>& ids) const;
  Tensor<3> operator()(const Tensor<2>& ids) const { return forward(ids); }
  // Mean cross-entropy of the next-token logits against targets [B, T] (i32; -1 is ignored).
  Tensor<0> loss(const Tensor<2>& ids, const Tensor<2>& targets) const;

  const GPT2Config& config() const { return config_; }

  GPT2Transformer transformer;
  Linear lm_head;

 private:
  GPT2Config config_;
};

}  // namespace kiln::nn
