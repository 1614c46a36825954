// A GPT-2 small enough for a test to train in a few steps (2 layers, 2 heads, 32 wide, 64 tokens,
// 16 positions) and a batch of 4 x 16 tokens from an arithmetic stream, row b and position t
// holding (b * row_step + t * token_step) % 64, the next token the target: the setup the
// training tests under autocast and the gradient scaler share.
#pragma once

#include <cstdint>
#include <kiln/kiln.hpp>
#include <kiln/nn/gpt2.hpp>
#include <vector>

namespace kiln_test {

inline constexpr kiln::nn::GPT2Config kTinyGpt2{
    .block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32};

struct TinyGpt2Batch {
  kiln::Tensor<2> ids, targets;
};

inline TinyGpt2Batch tiny_gpt2_batch(int row_step, int token_step, const kiln::Device& dev) {
  std::vector<std::int32_t> x, y;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 16; ++t) {
      x.push_back((b * row_step + t * token_step) % 64);
      y.push_back((b * row_step + (t + 1) * token_step) % 64);
    }
  return {kiln::Tensor<2>::from_data(x, {4, 16}, dev), kiln::Tensor<2>::from_data(y, {4, 16}, dev)};
}

}  // namespace kiln_test
