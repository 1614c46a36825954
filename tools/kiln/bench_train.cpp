#include "bench_train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench.hpp"
#include "kiln/loss.hpp"
#include "kiln/nn/gpt2.hpp"
#include "kiln/optim.hpp"

namespace kiln::cli {
namespace {

// A dense bf16 peak of H100 and H200 SXM, the denominator nanoGPT-style MFU figures use there.
constexpr double kPeakFlops = 989e12;

void check_loss(const char* workload, const Device& device, const Tensor<0>& loss) {
  const float l = loss.item();
  if (!std::isfinite(l)) {
    throw CheckError(fmt::format("{} on {}: the loss is {}", workload, device.str(), l));
  }
}

// Times `step` (returning its loss), with the peak bytes of kiln's buffers over all of them.
template <class Step>
Timing measure_step(const char* workload, const Device& device, int runs, Step&& step,
                    long long& peak_bytes) {
  reset_peak_buffers();
  const Timing t =
      measure(device, runs, step, [&](const Tensor<0>& l) { check_loss(workload, device, l); });
  peak_bytes = memory_stats().peak_bytes;
  return t;
}

}  // namespace

WorkloadResult run_mlp_step(const Device& device, int runs) {
  constexpr std::int64_t kRows = 128, kIn = 784, kHidden = 512, kClasses = 10;
  nn::manual_seed(0);
  nn::Linear l1(kIn, kHidden), l2(kHidden, kHidden), l3(kHidden, kClasses);
  std::vector<nn::AnyParameter> params;
  for (nn::Linear* l : {&l1, &l2, &l3}) {
    l->to(device);
    for (const auto& p : l->parameters()) params.push_back(p);
  }
  optim::AdamW opt(params, {.weight_decay = 0});
  const auto x = Tensor<2>::random({kRows, kIn}, Distribution::uniform(0, 1), device, 1);
  const auto y = Tensor<1>::random({kRows}, Distribution::uniform(0, double(kClasses)), device, 2)
                     .to(DType::i32);
  auto step = [&] {
    // Each hidden layer's ReLU in its product's epilogue (kiln/linear.hpp).
    auto layer = [](const nn::Linear& l, const Tensor<2>& in) {
      return linear(in, l.weight.tensor(), l.bias.tensor(), Activation::relu);
    };
    auto loss = cross_entropy(l3(layer(l2, layer(l1, x))), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return loss;
  };
  WorkloadResult w{"mlp step", "", kRows, kIn, {}, DType::f32, {}};
  w.timing = measure_step("mlp step", device, runs, step, w.step.peak_bytes);
  return w;
}

WorkloadResult run_gpt2_step(const Device& device, int runs, std::optional<DType> autocast) {
  constexpr std::int64_t kBatch = 16, kSeq = 1024;
  const Precision saved = float32_matmul_precision();
  set_float32_matmul_precision(Precision::high);
  const Autocast guard(autocast);
  nn::manual_seed(1337);
  nn::GPT2 model{nn::GPT2Config{}};
  model.to(device);
  optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95});
  const auto tokens = [&](std::uint64_t seed) {
    return Tensor<2>::random({kBatch, kSeq}, Distribution::uniform(0, 50304.0), device, seed)
        .to(DType::i32);
  };
  const Tensor<2> x = tokens(1), y = tokens(2);
  auto step = [&] {
    auto loss = model.loss(x, y);
    loss.backward();
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
    return loss;
  };
  WorkloadResult w{"gpt2 step", autocast ? "" : "high",        kBatch, kSeq,
                   {},          autocast.value_or(DType::f32), {}};
  w.timing = measure_step("gpt2 step", device, std::min(runs, 20), step, w.step.peak_bytes);
  set_float32_matmul_precision(saved);
  // nanoGPT's estimate_mfu: 6 N + 12 L C T flops per token, N without the position embedding.
  const nn::GPT2Config& c = model.config();
  std::int64_t n = -c.block_size * c.n_embd;
  for (const auto& p : model.parameters()) n += p.numel();
  w.step.tokens = kBatch * kSeq;
  w.step.flops =
      static_cast<double>(w.step.tokens) *
      (6.0 * static_cast<double>(n) + 12.0 * static_cast<double>(c.n_layer * c.n_embd * kSeq));
  return w;
}

std::string step_facts_text(const WorkloadResult& w) {
  if (w.step.peak_bytes == 0 && w.step.tokens == 0) return "";
  std::string s = " (";
  if (w.step.tokens > 0) {
    const double per_s = static_cast<double>(w.step.tokens) / w.timing.median_s;
    s += fmt::format("{:.0f} tokens/s, MFU {:.1f} %, ", per_s,
                     100 * w.step.flops / w.timing.median_s / kPeakFlops);
  }
  const double mib = static_cast<double>(w.step.peak_bytes) / (1024.0 * 1024);
  return s + (mib < 1024 ? fmt::format("peak memory {:.1f} MiB)", mib)
                         : fmt::format("peak memory {:.2f} GiB)", mib / 1024));
}

}  // namespace kiln::cli
