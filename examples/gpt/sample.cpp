// generate (sample.hpp): the last position's logits read back per byte and sampled on the host;
// 256 values a byte is a small read next to the forward pass that makes them.
#include "sample.hpp"

#include <algorithm>
#include <cmath>
#include <kiln/autograd.hpp>
#include <numeric>
#include <vector>

namespace {

// A byte index drawn from softmax(logits / temperature) restricted to the top_k largest logits.
int draw(const std::vector<float>& logits, const SampleOptions& o, SplitMix64& rng) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<std::ptrdiff_t>(o.top_k);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  // Subtracting the largest logit keeps exp() in range.
  std::vector<double> weight(k);
  double total = 0;
  for (std::ptrdiff_t i = 0; i < k; ++i)
    total += weight[i] = std::exp((logits[order[i]] - logits[order[0]]) / o.temperature);
  double u = rng.uniform() * total;
  for (std::ptrdiff_t i = 0; i < k; ++i)
    if ((u -= weight[i]) < 0) return order[i];
  return order[k - 1];  // u within rounding of total
}

}  // namespace

std::string generate(kiln::nn::GPT2& model, const std::string& prompt, const SampleOptions& o,
                     SplitMix64& rng, kiln::Device device) {
  const bool was_training = model.is_training();
  model.eval();
  kiln::NoGradGuard no_grad;
  // Bytes as unsigned: a char above 127 would otherwise become a negative id.
  std::vector<std::int32_t> ids;
  for (const unsigned char c : prompt) ids.push_back(c);
  const auto block = static_cast<std::size_t>(model.config().block_size);
  std::string text = prompt;
  for (std::int64_t i = 0; i < o.bytes; ++i) {
    const std::size_t from = ids.size() > block ? ids.size() - block : 0;
    const std::vector<std::int32_t> context(ids.begin() + from, ids.end());
    const auto t = static_cast<std::int64_t>(context.size());
    const auto x = kiln::Tensor<2>::from_data(context, {1, t}, device);
    const auto logits = model.forward(x).slice(1, t - 1, t).to_vector<float>();
    const int next = draw(logits, o, rng);
    ids.push_back(next);
    text.push_back(static_cast<char>(next));
  }
  model.train(was_training);
  return text;
}
