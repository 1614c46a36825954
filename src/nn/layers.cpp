// Construction of the small layers: Embedding, LayerNorm, RMSNorm, Dropout.
#include <fmt/format.h>

#include "kiln/nn/dropout.hpp"
#include "kiln/nn/embedding.hpp"
#include "kiln/nn/init.hpp"
#include "kiln/nn/norm.hpp"

namespace kiln::nn {
namespace {
void check_positive(const char* what, std::int64_t n) {
  if (n <= 0) throw ValueError(fmt::format("{}: size must be positive, got {}", what, n));
}
}  // namespace

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim) {
  check_positive("Embedding", num_embeddings);
  check_positive("Embedding", embedding_dim);
  weight = Parameter<2>(Tensor<2>::random({num_embeddings, embedding_dim}, Distribution::normal(),
                                          Device::cpu(), next_seed()));
  register_parameter("weight", weight);
}

LayerNorm::LayerNorm(std::int64_t n, double eps, bool has_bias) : eps_(eps) {
  check_positive("LayerNorm", n);
  weight = Parameter<1>(Tensor<1>::ones({n}));
  register_parameter("weight", weight);
  if (has_bias) bias = Parameter<1>(Tensor<1>::zeros({n}));
  register_parameter("bias", bias);
}

RMSNorm::RMSNorm(std::int64_t n, double eps) : eps_(eps) {
  check_positive("RMSNorm", n);
  weight = Parameter<1>(Tensor<1>::ones({n}));
  register_parameter("weight", weight);
}

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0))
    throw ValueError(fmt::format("Dropout: p must be in [0, 1], got {}", p));
}

}  // namespace kiln::nn
