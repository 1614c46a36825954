// One GPT-2 training step, issue 21's workload: nanoGPT's model (kiln::nn::GPT2, GPT-2 small by
// default), random token batches, the mean cross-entropy, backward through autodiff, gradient
// clipping at 1.0 and AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on rank >= 2 parameters),
// as nanoGPT's train.py steps. Each step ends by reading its loss, as a training loop that logs
// does. Reported: the first step (compiles, tuning, module loads) apart, then min and median
// ms/step over the timed steps, tokens/s at the median, MFU as nanoGPT's estimate_mfu counts it
// (6 N + 12 L H Q T flops per token, N without the position embedding) against a dense bf16 peak
// of 989 TFLOP/s (H100 and H200 SXM), and the peak bytes of kiln's buffers (as
// torch.cuda.max_memory_allocated).
//
//   kiln_gpt2_train [--device cuda|cpu] [--batch 16] [--seq 1024] [--layers 12] [--heads 12]
//                   [--embd 768] [--vocab 50304] [--steps 10] [--precision highest|high|medium]
//                   [--autocast off|bf16|f16] [--ddp off|on]
//
// --autocast runs the steps under kiln::Autocast (f32 master weights), as PyTorch's
// torch.autocast; f16 without a loss scaler (the timing is the same). --ddp on trains through
// kiln::nn::DataParallel, one process per GPU as `kiln launch -n N kiln_gpt2_train --ddp on ...`
// starts them (each on cuda:LOCAL_RANK; on the CPU, a job of one only; batch --batch per rank, its
// own tokens); rank 0 reports, tokens/s counting every rank's. Alone (no launcher) it is a job of
// one: DataParallel's cost.
//
// bench/peers/gpt2_torch.py is the same step in PyTorch (eager and torch.compile).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <kiln/nn/data_parallel.hpp>
#include <kiln/nn/gpt2.hpp>
#include <kiln/optim.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  std::int64_t batch = 16, seq = 1024, vocab = 50304;
  std::int64_t layers = 12, heads = 12, embd = 768;
  int steps = 10;
  kiln::Precision precision = kiln::Precision::high;
  std::optional<kiln::DType> autocast;
  bool ddp = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "kiln_gpt2_train: %s\nusage: kiln_gpt2_train [--device cuda|cpu] [--batch N] "
               "[--seq N] [--layers N] [--heads N] [--embd N] [--vocab N] [--steps N] "
               "[--precision highest|high|medium] [--autocast off|bf16|f16] [--ddp off|on]\n",
               why.c_str());
  std::exit(2);
}

std::int64_t positive(const std::string& option, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == v.size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  usage(option + " takes a positive integer, not '" + v + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 == argc) usage(a + " needs a value");
    const std::string v = argv[i + 1];
    if (a == "--device") {
      if (v != "cpu" && v != "cuda") usage("--device is cpu or cuda");
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (a == "--precision") {
      if (v == "highest")
        o.precision = kiln::Precision::highest;
      else if (v == "high")
        o.precision = kiln::Precision::high;
      else if (v == "medium")
        o.precision = kiln::Precision::medium;
      else
        usage("--precision is highest, high or medium");
    } else if (a == "--autocast") {
      if (v == "off")
        o.autocast.reset();
      else if (v == "bf16")
        o.autocast = kiln::DType::bf16;
      else if (v == "f16")
        o.autocast = kiln::DType::f16;
      else
        usage("--autocast is off, bf16 or f16");
    } else if (a == "--ddp") {
      if (v != "on" && v != "off") usage("--ddp is off or on");
      o.ddp = v == "on";
    } else if (a == "--batch") {
      o.batch = positive(a, v);
    } else if (a == "--seq") {
      o.seq = positive(a, v);
    } else if (a == "--layers") {
      o.layers = positive(a, v);
    } else if (a == "--heads") {
      o.heads = positive(a, v);
    } else if (a == "--embd") {
      o.embd = positive(a, v);
    } else if (a == "--vocab") {
      o.vocab = positive(a, v);
    } else if (a == "--steps") {
      o.steps = static_cast<int>(positive(a, v));
    } else {
      usage("unknown option " + a);
    }
  }
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.ddp) {
    if (o.device.kind() == kiln::Device::Kind::cuda)
      o.device = kiln::Device::cuda(kiln::dist::launch_env().local_rank);
    kiln::dist::init_process_group(o.device);
  }
  const int rank = o.ddp ? kiln::dist::rank() : 0, ranks = o.ddp ? kiln::dist::world_size() : 1;
  kiln::set_float32_matmul_precision(o.precision);
  const kiln::Autocast autocast(o.autocast);
  const auto start = std::chrono::steady_clock::now();
  kiln::nn::manual_seed(1337);
  kiln::nn::GPT2Config config;
  config.block_size = o.seq;
  config.vocab_size = o.vocab;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  kiln::nn::GPT2 model(config);
  model.to(o.device);
  // (after to(): DataParallel follows the tensors the parameters hold)
  std::unique_ptr<kiln::nn::DataParallel<kiln::nn::GPT2>> ddp;
  if (o.ddp) ddp = std::make_unique<kiln::nn::DataParallel<kiln::nn::GPT2>>(model);
  kiln::optim::AdamW opt(kiln::optim::decay_groups(model, 0.1),
                         {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95});
  std::int64_t params = 0;
  for (const auto& p : model.parameters()) params += p.numel();
  const auto random_tokens = [&](std::uint64_t seed) {
    return Tensor<2>::random({o.batch, o.seq}, kiln::Distribution::uniform(0, double(o.vocab)),
                             o.device, seed)
        .to(kiln::DType::i32);
  };
  const Tensor<2> x = random_tokens(1 + 2 * rank), y = random_tokens(2 + 2 * rank);
  const auto step = [&] {
    if (ddp) ddp->prepare_forward();
    auto loss = model.loss(x, y);
    loss.backward();
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
    return loss.item();
  };
  if (rank == 0)
    std::printf(
        "name = %s, GPT-2 %lld layers, %lld heads, %lld wide, vocab %lld, %lld parameters; "
        "batch %lld x %lld tokens, AdamW, f32 matmul precision %s, autocast %s\n",
        o.device.backend_name().c_str(), static_cast<long long>(o.layers),
        static_cast<long long>(o.heads), static_cast<long long>(o.embd),
        static_cast<long long>(o.vocab), static_cast<long long>(params),
        static_cast<long long>(o.batch), static_cast<long long>(o.seq),
        kiln::precision_name(o.precision), o.autocast ? kiln::dtype_name(*o.autocast) : "off");
  if (o.ddp && rank == 0)
    std::printf("DataParallel over %d ranks (%s), batch %lld x %lld tokens a rank\n", ranks,
                o.device.backend_name().c_str(), static_cast<long long>(o.batch),
                static_cast<long long>(o.seq));
  kiln::reset_peak_buffers();
  const double made = seconds_since(start);
  const auto t0 = std::chrono::steady_clock::now();
  const float first_loss = step();
  const double first = seconds_since(t0);
  std::vector<double> samples;
  float loss = first_loss;
  for (int s = 0; s < o.steps; ++s) {
    const auto s0 = std::chrono::steady_clock::now();
    loss = step();
    samples.push_back(seconds_since(s0));
  }
  std::sort(samples.begin(), samples.end());
  const double median = samples[samples.size() / 2];
  const double tokens_per_s = static_cast<double>(o.batch * o.seq) * ranks / median;
  const double n = static_cast<double>(params - o.seq * o.embd);
  const double flops_per_token = 6 * n + 12.0 * static_cast<double>(o.layers * o.seq * o.embd);
  const double mfu = flops_per_token * tokens_per_s / ranks / 989e12;
  if (o.ddp) kiln::dist::destroy_process_group();
  if (rank != 0) return 0;
  std::printf(
      "model made in %.2f s; first step %.2f s; step min %.2f ms, median %.2f ms "
      "(%d steps): %.0f tokens/s, MFU %.1f %% (of 989 TFLOP/s bf16 a GPU)\n",
      made, first, samples.front() * 1e3, median * 1e3, o.steps, tokens_per_s, mfu * 100);
  std::printf("loss %.4f after the first step, %.4f after %d; peak memory %.2f GiB\n", first_loss,
              loss, o.steps + 1,
              static_cast<double>(kiln::memory_stats().peak_bytes) / (1024.0 * 1024 * 1024));
  return 0;
}
