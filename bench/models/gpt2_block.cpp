// One GPT-2 small block forward (pre-norm: layer norm, causal self-attention, residual, layer
// norm, GELU MLP, residual). `--ops written` (the default): written with kiln's element-wise,
// reduction and matmul ops only, attention as matmul + mask + softmax + matmul, as a user would
// write it from the basic ops; `--ops module`: kiln::nn::GPT2Block, which runs layer_norm, the
// fused attention and linear with its epilogues (issue 19's ops), under no_grad, and with
// `--autocast bf16` as a bf16 autocast model runs it. It measures what a user's first process
// pays: the first forward of a fresh process (on an empty or a warm store, whichever
// KILN_CACHE_DIR points at), then the steady state.
//
//   kiln_gpt2_block [--device cuda|cpu] [--batch 16] [--seq 1024] [--runs 20]
//                   [--precision high|highest] [--ops written|module] [--autocast none|bf16]
//
// Prints, in kiln bench's form: the process's start to its weights made, the first forward (its
// result synchronised), and min / median of the next runs. bench/peers/torch_gpt2_block.py is
// the same block in PyTorch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <kiln/nn/gpt2.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point process_start = Clock::now();

constexpr std::int64_t kEmbed = 768;  // GPT-2 small
constexpr std::int64_t kHeads = 12;
constexpr std::int64_t kHeadDim = kEmbed / kHeads;
constexpr double kEps = 1e-5;

struct Options {
  kiln::Device device = kiln::Device::best();
  std::int64_t batch = 16, seq = 1024;
  int runs = 20;
  kiln::Precision precision = kiln::Precision::high;
  bool module = false;                  // --ops module
  std::optional<kiln::DType> autocast;  // --autocast bf16
};

struct Weights {
  kiln::Tensor<1> ln1_g, ln1_b, ln2_g, ln2_b, b_qkv, b_proj, b_fc, b_out;
  kiln::Tensor<2> w_qkv, w_proj, w_fc, w_out;
  kiln::Tensor<2> mask;  // [T, T]: 0 on and below the diagonal, -inf above
};

kiln::Tensor<2> normal(std::int64_t rows, std::int64_t cols, kiln::Device d, std::uint64_t seed) {
  return kiln::Tensor<2>::random({rows, cols}, kiln::Distribution::normal(0.0, 0.02), d, seed);
}

Weights make_weights(const Options& o) {
  const auto d = o.device;
  auto zeros = [&](std::int64_t n) { return kiln::Tensor<1>::zeros({n}, kiln::DType::f32, d); };
  auto ones = [&](std::int64_t n) { return kiln::Tensor<1>::ones({n}, kiln::DType::f32, d); };
  Weights w{ones(kEmbed),
            zeros(kEmbed),
            ones(kEmbed),
            zeros(kEmbed),
            zeros(3 * kEmbed),
            zeros(kEmbed),
            zeros(4 * kEmbed),
            zeros(kEmbed),
            normal(kEmbed, 3 * kEmbed, d, 1),
            normal(kEmbed, kEmbed, d, 2),
            normal(kEmbed, 4 * kEmbed, d, 3),
            normal(4 * kEmbed, kEmbed, d, 4),
            {}};
  const auto i = kiln::arange(0, static_cast<double>(o.seq), 1.0, kiln::DType::f32, d);
  w.mask = kiln::where(i.unsqueeze(1) >= i.unsqueeze(0), 0.0f, -INFINITY);
  return w;
}

// x: [N, C] -> layer norm over C with the biased variance, as torch.nn.LayerNorm.
kiln::Tensor<2> layer_norm(const kiln::Tensor<2>& x, const kiln::Tensor<1>& g,
                           const kiln::Tensor<1>& b) {
  const auto mu = x.mean(1, kiln::keepdim);
  const auto xc = x - mu;
  const auto var = (xc * xc).mean(1, kiln::keepdim);
  return xc * (var + kEps).rsqrt() * g + b;
}

// [B*T, C] columns [c0, c0 + C) -> heads [B*H, T, D].
kiln::Tensor<3> heads(const kiln::Tensor<2>& qkv, std::int64_t c0, const Options& o) {
  return qkv.slice(1, c0, c0 + kEmbed)
      .reshape({o.batch, o.seq, kHeads, kHeadDim})
      .permute({0, 2, 1, 3})
      .contiguous()
      .reshape({o.batch * kHeads, o.seq, kHeadDim});
}

// x: [B*T, C] -> the block's output, [B*T, C].
kiln::Tensor<2> block(const kiln::Tensor<2>& x, const Weights& w, const Options& o) {
  const auto qkv = kiln::matmul(layer_norm(x, w.ln1_g, w.ln1_b), w.w_qkv) + w.b_qkv;
  const auto q = heads(qkv, 0, o), k = heads(qkv, kEmbed, o), v = heads(qkv, 2 * kEmbed, o);
  const auto scores =
      kiln::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(double(kHeadDim))) + w.mask;
  const auto y = kiln::matmul(scores.softmax(2), v)
                     .reshape({o.batch, kHeads, o.seq, kHeadDim})
                     .permute({0, 2, 1, 3})
                     .contiguous()
                     .reshape({o.batch * o.seq, kEmbed});
  const auto x1 = x + (kiln::matmul(y, w.w_proj) + w.b_proj);
  const auto h = (kiln::matmul(layer_norm(x1, w.ln2_g, w.ln2_b), w.w_fc) + w.b_fc).gelu();
  return x1 + (kiln::matmul(h, w.w_out) + w.b_out);
}

std::string fmt(double s) {
  char b[32];
  if (s >= 1e-3)
    std::snprintf(b, sizeof b, "%.2fms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%.2fus", s * 1e6);
  return b;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!v) throw std::invalid_argument(a + " needs a value");
    if (a == "--device")
      o.device = std::strcmp(v, "cpu") == 0 ? kiln::Device::cpu() : kiln::Device::cuda(0);
    else if (a == "--batch")
      o.batch = std::stoll(v);
    else if (a == "--seq")
      o.seq = std::stoll(v);
    else if (a == "--runs")
      o.runs = std::stoi(v);
    else if (a == "--precision") {
      if (std::strcmp(v, "high") != 0 && std::strcmp(v, "highest") != 0)
        throw std::invalid_argument("--precision: high or highest");
      o.precision = std::strcmp(v, "high") == 0 ? kiln::Precision::high : kiln::Precision::highest;
    } else if (a == "--ops") {
      if (std::strcmp(v, "written") != 0 && std::strcmp(v, "module") != 0)
        throw std::invalid_argument("--ops: written or module");
      o.module = std::strcmp(v, "module") == 0;
    } else if (a == "--autocast") {
      if (std::strcmp(v, "none") != 0 && std::strcmp(v, "bf16") != 0)
        throw std::invalid_argument("--autocast: none or bf16");
      if (std::strcmp(v, "bf16") == 0) o.autocast = kiln::DType::bf16;
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  if (o.batch < 1 || o.seq < 1 || o.runs < 0)
    throw std::invalid_argument("--batch and --seq must be positive, --runs not negative");
  if (o.autocast && !o.module) throw std::invalid_argument("--autocast bf16 needs --ops module");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  kiln::set_float32_matmul_precision(o.precision);
  const Weights w = o.module ? Weights{} : make_weights(o);
  std::optional<kiln::nn::GPT2Block> module;  // (nanoGPT's initialisation; its weights are f32)
  if (o.module) {
    kiln::nn::GPT2Config config;
    config.block_size = o.seq;
    module.emplace(config);
    module->to(o.device);
  }
  const auto x =
      kiln::Tensor<2>::random({o.batch * o.seq, kEmbed}, kiln::Distribution::normal(), o.device, 5);
  o.device.sync();
  const double setup = seconds_since(process_start);
  std::printf("name = %s, gpt2 block B=%lld T=%lld %s, %s\n", o.device.backend_name().c_str(),
              static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              o.autocast                             ? "bf16 autocast"
              : o.precision == kiln::Precision::high ? "tf32"
                                                     : "strict fp32",
              o.module ? "nn::GPT2Block (layer_norm, fused attention, linear epilogues)"
                       : "written with basic ops");
  std::printf("process start to weights made: %s\n", fmt(setup).c_str());

  auto forward = [&] {
    const auto t = Clock::now();
    if (o.module) {
      const kiln::NoGradGuard no_grad;
      const kiln::Autocast cast(o.autocast);
      const auto y = (*module)(x.reshape({o.batch, o.seq, kEmbed}));
      o.device.sync();
    } else {
      const auto y = block(x, w, o);
      o.device.sync();  // runs every queued op, y's included
    }
    return seconds_since(t);
  };
  const double first = forward();
  std::vector<double> rest;
  for (int i = 0; i < o.runs; ++i) rest.push_back(forward());
  std::sort(rest.begin(), rest.end());
  std::printf("gpt2 block forward: first %s (process start to result %s)", fmt(first).c_str(),
              fmt(setup + first).c_str());
  if (!rest.empty())
    std::printf(", next %zu min %s median %s", rest.size(), fmt(rest.front()).c_str(),
                fmt(rest[rest.size() / 2]).c_str());
  std::printf("\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_gpt2_block: %s\n", e.what());
  return 1;
}
