// kiln::nn::Embedding: rows of a [num_embeddings, embedding_dim] table looked up by i32 ids, as
// torch.nn.Embedding (weight initialised N(0, 1), as PyTorch's).
#pragma once

#include "kiln/nn/module.hpp"

namespace kiln::nn {

class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim);

  Parameter<2> weight;  // [num_embeddings, embedding_dim]

  // ids (i32, any shape) -> ids.shape + [embedding_dim]. IndexError for an id out of range.
  template <std::size_t D>
  Tensor<D + 1> forward(const Tensor<D>& ids) const {
    return embedding(weight.tensor(), ids);
  }
  template <std::size_t D>
  Tensor<D + 1> operator()(const Tensor<D>& ids) const {
    return forward(ids);
  }
};

}  // namespace kiln::nn
