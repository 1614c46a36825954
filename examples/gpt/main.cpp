// A byte-level GPT trained with kiln on a text every Debian system has (the GNU GPL, version 3,
// from base-files): the shape of a language-model training program with kiln::nn::GPT2 and
// kiln::optim. The first 90% of the bytes train it (random windows, AdamW, warmup + cosine
// schedule, gradient clipping), the last 10% validate it. It prints a line every --log-every
// steps (train and validation loss, tokens/s, ETA), then a sample continuing --prompt, and exits
// 1 when the final validation loss is not below --max-val-loss (2 for a bad option).
//
//   gpt [--device cpu|cuda] [--steps 2000] [--batch 32] [--lr 4e-3] [--log-every 100] [--seed 0]
//       [--max-val-loss 5.545] [--text PATH] [--prompt TEXT] [--temperature 0.8] [--top-k 20]
//       [--sample-bytes 200]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <kiln/nn/gpt2.hpp>
#include <kiln/optim.hpp>
#include <string>

#include "corpus.hpp"
#include "options.hpp"
#include "rng.hpp"
#include "sample.hpp"

namespace {

namespace nn = kiln::nn;
namespace optim = kiln::optim;

// Small enough that CI's 2 CPU cores train it in about a minute, large enough to learn English
// words and the license's phrases from 32 KB: ~0.2 M parameters.
nn::GPT2Config model_config() {
  return {.block_size = 64, .vocab_size = 256, .n_layer = 2, .n_head = 4, .n_embd = 64};
}

// Mean next-byte loss over the validation windows, forward only, in eval mode.
float validation_loss(nn::GPT2& model, const Windows& val) {
  model.eval();
  kiln::NoGradGuard no_grad;
  const float loss = model.loss(val.x, val.y).item();
  model.train();
  return loss;
}

// What a byte of the sample prints as: control bytes other than newline and tab as \xNN, so an
// undertrained model cannot write terminal escapes into a CI log; the rest as they are (UTF-8).
std::string printable(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::int64_t parameter_count(const nn::Module& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

int run(const Options& o) {
  const kiln::Device device = o.device.empty()     ? kiln::Device::best()
                              : o.device == "cuda" ? kiln::Device::cuda()
                                                   : kiln::Device::cpu();
  const nn::GPT2Config config = model_config();
  const Corpus corpus(o.text, config.block_size);
  const Windows val = corpus.validation(device);
  nn::manual_seed(o.seed);
  nn::GPT2 model(config);
  model.to(device);
  std::printf(
      "%s: %zu train, %zu validation bytes; GPT-2 %lld layers, %lld heads, %lld wide, "
      "block %lld: %lld parameters on %s (%s)\n",
      o.text.c_str(), corpus.train_bytes(), corpus.val_bytes(),
      static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
      static_cast<long long>(config.n_embd), static_cast<long long>(config.block_size),
      static_cast<long long>(parameter_count(model)), device.str().c_str(),
      device.backend_name().c_str());
  std::printf("step %5d/%lld  val %.4f (ln 256 = %.4f: a uniform guess)\n", 0,
              static_cast<long long>(o.steps), validation_loss(model, val), std::log(256.0));
  std::fflush(stdout);

  // Weight decay on the matrices and embeddings only (decay_groups), as nanoGPT; beta2 0.99 as
  // its small character-level config, where a step sees few tokens and the second-moment
  // estimate should forget faster than 0.999 lets it.
  optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = o.lr, .beta2 = 0.99});
  const optim::WarmupCosine schedule{o.lr, o.lr / 10, o.steps / 20, o.steps};
  SplitMix64 rng(o.seed);
  const std::int64_t tokens_per_step = o.batch * config.block_size;

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto since = start;
  const auto zero = kiln::Tensor<0>::zeros({}, kiln::DType::f32, device);
  kiln::Tensor<0> loss_sum = zero;
  std::int64_t logged = 0;  // steps since the last line
  float val_loss = 0;
  for (std::int64_t step = 1; step <= o.steps; ++step) {
    const Windows batch = corpus.train_batch(o.batch, rng, device);
    const auto loss = model.loss(batch.x, batch.y);
    loss.backward();
    opt.set_lr(schedule(step - 1));  // the schedule counts steps from 0
    opt.clip_grad_norm(1.0);
    opt.step();
    opt.zero_grad();
    // Summed on the device: reading each step's loss would wait for it, stalling a GPU.
    loss_sum = loss_sum + loss.detach();
    ++logged;
    if (step % o.log_every == 0 || step == o.steps) {
      const float train_loss = loss_sum.item() / static_cast<float>(logged);
      const auto trained = clock::now();
      val_loss = validation_loss(model, val);
      const auto now = clock::now();
      const double secs = std::chrono::duration<double>(trained - since).count();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      std::printf("step %5lld/%lld  train %.4f  val %.4f  %7.0f tokens/s  ETA %.0f s\n",
                  static_cast<long long>(step), static_cast<long long>(o.steps), train_loss,
                  val_loss, static_cast<double>(logged * tokens_per_step) / secs,
                  elapsed / static_cast<double>(step) * static_cast<double>(o.steps - step));
      std::fflush(stdout);
      since = now;  // the validation pass is kept out of tokens/s, which measures training
      loss_sum = zero;
      logged = 0;
    }
  }
  const double train_seconds = std::chrono::duration<double>(clock::now() - start).count();

  std::printf("\nsample (temperature %.2f, top-k %lld):\n%s\n\n", o.sample.temperature,
              static_cast<long long>(o.sample.top_k),
              printable(generate(model, o.prompt, o.sample, rng, device)).c_str());
  std::printf("validation loss %.4f after %lld steps in %.1f s\n", val_loss,
              static_cast<long long>(o.steps), train_seconds);
  if (!(val_loss < o.max_val_loss)) {
    std::printf("not below the required %.4f\n", o.max_val_loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    if (o.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gpt: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
}
