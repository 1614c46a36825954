// The kiln half of issue 21's parity check (bench/peers/gpt2_parity.py writes the other): GPT-2
// small loaded from PyTorch-initialised weights (DIR/weights.safetensors, nanoGPT's names) trains
// on the same batch (DIR/batch.safetensors) with the same step: strict f32, mean cross-entropy,
// clip_grad_norm 1.0, AdamW lr 6e-4, betas 0.9/0.95, weight decay 0.1 on rank >= 2. Its losses,
// the one before any step first, are compared with DIR/torch_losses.txt; the exit status is 1
// when any differs by more than --tolerance (1e-4, the issue's), 2 for bad input.
//
//   kiln_gpt2_parity DIR [--device cuda|cpu] [--tolerance 1e-4]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <kiln/checkpoint.hpp>
#include <kiln/kiln.hpp>
#include <kiln/nn/gpt2.hpp>
#include <kiln/optim.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2 != 0) {
    std::fprintf(stderr, "usage: kiln_gpt2_parity DIR [--device cuda|cpu] [--tolerance T]\n");
    return 2;
  }
  const std::string dir = argv[1];
  kiln::Device device = kiln::Device::best();
  double tolerance = 1e-4;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--device" && (v == "cpu" || v == "cuda")) {
      device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (a == "--tolerance") {
      tolerance = std::stod(v);
    } else {
      std::fprintf(stderr, "kiln_gpt2_parity: bad option %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  std::vector<double> want;
  {
    std::ifstream f(dir + "/torch_losses.txt");
    for (double v; f >> v;) want.push_back(v);
  }
  if (want.size() < 2) {
    std::fprintf(stderr, "kiln_gpt2_parity: %s/torch_losses.txt holds fewer than 2 losses\n",
                 dir.c_str());
    return 2;
  }
  kiln::set_float32_matmul_precision(kiln::Precision::highest);
  const kiln::Checkpoint batch = kiln::load(dir + "/batch.safetensors", device);
  const auto x = batch.get<2>("x"), y = batch.get<2>("y");
  kiln::nn::GPT2Config config;
  config.block_size = x.size(1);
  kiln::nn::GPT2 model(config);
  model.to(device);
  model.load_state_dict(kiln::load(dir + "/weights.safetensors", device));
  kiln::optim::AdamW opt(kiln::optim::decay_groups(model, 0.1),
                         {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95});
  std::vector<double> got;
  for (std::size_t step = 0; step + 1 < want.size(); ++step) {
    auto loss = model.loss(x, y);
    got.push_back(loss.item());
    loss.backward();
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
  }
  {
    const kiln::NoGradGuard no_grad;
    got.push_back(model.loss(x, y).item());
  }
  double worst = 0;
  std::printf("%s, batch %lld x %lld, strict f32\nstep  kiln        torch       |diff|\n",
              device.backend_name().c_str(), static_cast<long long>(x.size(0)),
              static_cast<long long>(x.size(1)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    std::printf("%4zu  %.6f  %.6f  %.2e\n", i, got[i], want[i], d);
  }
  const bool ok = worst <= tolerance;
  std::printf("largest difference %.2e: %s (tolerance %.0e)\n", worst, ok ? "match" : "MISMATCH",
              tolerance);
  return ok ? 0 : 1;
}
