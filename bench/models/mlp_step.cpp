// One training step of an MLP 784-512-512-10 (ReLU, batch 128, cross-entropy), issue 20's
// benchmark: forward, backward through autodiff, and Adam (PyTorch's defaults, bias-corrected)
// written by hand with kiln ops, one whole-tensor expression per parameter, so the fusion
// decorator makes each update one kernel. Reported: the time per step (min and median over
// samples of `batch` steps, each sample ended by reading the loss, as a training loop printing
// its loss does), the loss after the run, and the element-wise kernels per step with fusion on
// beside the element-wise ops it recorded (each of which runs as its own kernel with
// KILN_FUSION=0); matmuls, reductions and row kernels are the same calls either way.
//
//   kiln_mlp_step [--device cuda|cpu] [--runs 20] [--batch 10] [--hidden 512] [--rows 128]
//                 [--autocast off|bf16|f16]
//
// --autocast runs forward under a kiln::Autocast guard (bf16/f16 products, f32 loss; the
// parameters and Adam's state stay f32); the first line printed says which.
//
// bench/peers/torch_mlp_step.py times the same step in PyTorch (eager and torch.compile).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/autocast.hpp>
#include <kiln/autograd.hpp>
#include <kiln/kiln.hpp>
#include <kiln/loss.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int runs = 20, batch = 10;
  std::int64_t hidden = 512, rows = 128;
  std::optional<kiln::DType> autocast;
};

// Adam's state of one parameter and its update, PyTorch's defaults.
template <std::size_t D>
struct Adam {
  Tensor<D> p, m, v;
  void step(int t, float lr = 1e-3f, float b1 = 0.9f, float b2 = 0.999f, float eps = 1e-8f) {
    const Tensor<D> g = *p.grad();
    m = m * b1 + g * (1 - b1);
    v = v * b2 + g * g * (1 - b2);
    const float c1 = 1 - std::pow(b1, static_cast<float>(t));
    const float c2 = 1 - std::pow(b2, static_cast<float>(t));
    p = (p - (m / c1) / ((v / c2).sqrt() + eps) * lr).detach().requires_grad(true);
  }
};

template <std::size_t D>
Adam<D> param(const kiln::Shape<D>& shape, double scale, const kiln::Device& dev,
              std::uint64_t seed) {
  auto p = Tensor<D>::random(shape, kiln::Distribution::uniform(-scale, scale), dev, seed);
  auto z = Tensor<D>::zeros(shape, kiln::DType::f32, dev);
  return {p.requires_grad(true), z, z};
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--device")
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (a == "--runs")
      o.runs = std::stoi(v);
    else if (a == "--batch")
      o.batch = std::stoi(v);
    else if (a == "--hidden")
      o.hidden = std::stoll(v);
    else if (a == "--rows")
      o.rows = std::stoll(v);
    else if (a == "--autocast" && (v == "off" || v == "bf16" || v == "f16"))
      o.autocast = v == "off" ? std::nullopt
                              : std::optional(v == "bf16" ? kiln::DType::bf16 : kiln::DType::f16);
    else {
      std::fprintf(stderr, "kiln_mlp_step: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto& dev = o.device;
  const std::int64_t B = o.rows, H = o.hidden;
  auto x = Tensor<2>::random({B, 784}, kiln::Distribution::uniform(0, 1), dev, 1);
  auto y =
      (Tensor<1>::random({B}, kiln::Distribution::uniform(0, 10), dev, 2)).to(kiln::DType::i32);
  auto w1 = param<2>({784, H}, 1 / std::sqrt(784.0), dev, 3);
  auto b1 = param<1>({H}, 1 / std::sqrt(784.0), dev, 4);
  auto w2 = param<2>({H, H}, 1 / std::sqrt(double(H)), dev, 5);
  auto b2 = param<1>({H}, 1 / std::sqrt(double(H)), dev, 6);
  auto w3 = param<2>({H, 10}, 1 / std::sqrt(double(H)), dev, 7);
  auto b3 = param<1>({10}, 1 / std::sqrt(double(H)), dev, 8);
  int t = 0;
  auto step = [&] {
    Tensor<0> loss;
    {
      // Forward only, as PyTorch's recipe: backward runs in the dtypes forward recorded.
      const kiln::Autocast autocast(o.autocast);
      auto h1 = (kiln::matmul(x, w1.p) + b1.p).relu();
      auto h2 = (kiln::matmul(h1, w2.p) + b2.p).relu();
      loss = kiln::cross_entropy(kiln::matmul(h2, w3.p) + b3.p, y);
    }
    loss.backward();
    ++t;
    w1.step(t), b1.step(t), w2.step(t), b2.step(t), w3.step(t), b3.step(t);
    return loss;
  };

  std::printf("name = %s, MLP 784-%lld-%lld-10, batch %lld, Adam by hand, autocast %s\n",
              dev.backend_name().c_str(), static_cast<long long>(H), static_cast<long long>(H),
              static_cast<long long>(B), o.autocast ? kiln::dtype_name(*o.autocast) : "off");
  const auto t0 = std::chrono::steady_clock::now();
  float first_loss = step().item();
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const kiln::FusionStats before = kiln::fusion_stats();
  std::vector<double> samples;
  float loss = first_loss;
  for (int r = 0; r < o.runs; ++r) {
    const auto s0 = std::chrono::steady_clock::now();
    Tensor<0> l;
    for (int i = 0; i < o.batch; ++i) l = step();
    loss = l.item();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count() /
                      o.batch);
  }
  const kiln::FusionStats after = kiln::fusion_stats();
  const double steps = static_cast<double>(o.runs) * o.batch;
  std::sort(samples.begin(), samples.end());
  std::printf("first step %.2f ms; step min %.3f ms, median %.3f ms (%d samples of %d steps)\n",
              first * 1e3, samples.front() * 1e3, samples[samples.size() / 2] * 1e3, o.runs,
              o.batch);
  std::printf("loss %.4f after the first step, %.4f after %d steps\n", first_loss, loss,
              static_cast<int>(steps) + 1);
  std::printf(
      "element-wise work per step: %.1f fused kernels for %.1f ops recorded "
      "(each its own kernel with KILN_FUSION=0)\n",
      static_cast<double>(after.groups_run - before.groups_run) / steps,
      static_cast<double>(after.ops_recorded - before.ops_recorded) / steps);
  return 0;
}
