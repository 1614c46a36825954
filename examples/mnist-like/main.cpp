// An MLP trained with kiln on scikit-learn's digits (8x8 images of 0-9): the shape of a training
// program with kiln::nn and kiln::optim. 80% of the 1797 samples train it (AdamW, warmup + cosine
// schedule, gradient clipping), 20% test it; it prints a line every --log-every steps (loss,
// samples/s, ETA) and exits 1 when the test accuracy is below --min-accuracy.
//
//   mnist-like [--epochs 40] [--batch 64] [--hidden 128] [--lr 1e-2] [--log-every 50]
//              [--min-accuracy 0.96] [--seed 0] [--data digits.csv.gz]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <kiln/nn.hpp>
#include <kiln/optim.hpp>
#include <numeric>
#include <string>

#include "digits.hpp"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;

struct Mlp : nn::Module {
  nn::Linear fc1, fc2;
  nn::Dropout drop{0.1};
  explicit Mlp(std::int64_t hidden) : fc1(64, hidden), fc2(hidden, 10) {
    register_module("fc1", fc1);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor<2> forward(const Tensor<2>& x) const { return fc2(drop(fc1(x).relu())); }
};

struct Args {
  int epochs = 40, batch = 64, hidden = 128, log_every = 50;
  double lr = 1e-2, min_accuracy = 0.96;
  std::uint64_t seed = 0;
  std::string data = kDigitsPath;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--epochs")
      a.epochs = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoi(v);
    else if (k == "--hidden")
      a.hidden = std::stoi(v);
    else if (k == "--log-every")
      a.log_every = std::stoi(v);
    else if (k == "--lr")
      a.lr = std::stod(v);
    else if (k == "--min-accuracy")
      a.min_accuracy = std::stod(v);
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else if (k == "--data")
      a.data = v;
    else
      throw std::runtime_error("unknown option " + k);
  }
  if (argc % 2 == 0)
    throw std::runtime_error(std::string("option ") + argv[argc - 1] + " needs a value");
  return a;
}

// A permutation of 0..n-1 from `seed` (Fisher-Yates on SplitMix64: the same on every platform).
std::vector<std::int32_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (std::size_t i = n; i > 1; --i) {
    std::uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    std::swap(p[i - 1], p[(z ^ (z >> 31)) % i]);
  }
  return p;
}

int run(const Args& a) {
  const Digits digits = load_digits(a.data);
  const kiln::Device device = kiln::Device::best();
  const auto n = static_cast<std::int64_t>(digits.size());
  const auto X = Tensor<2>::from_data(digits.pixels, {n, 64}, device);
  const auto Y = Tensor<1>::from_data(digits.labels, {n}, device);
  const auto order = permutation(digits.size(), a.seed);
  const std::size_t n_test = digits.size() / 5, n_train = digits.size() - n_test;
  const std::vector<std::int32_t> train(order.begin(), order.begin() + n_train),
      test(order.begin() + n_train, order.end());
  std::printf("digits: %zu train, %zu test samples on %s (%s)\n", n_train, n_test,
              device.str().c_str(), device.backend_name().c_str());

  nn::manual_seed(a.seed);
  Mlp model(a.hidden);
  model.to(device);
  kiln::optim::AdamW opt(kiln::optim::decay_groups(model, 1e-2), {.lr = a.lr});
  const std::int64_t steps_per_epoch = (n_train + a.batch - 1) / a.batch;
  const std::int64_t total = steps_per_epoch * a.epochs;
  const kiln::optim::WarmupCosine schedule{a.lr, a.lr / 10, total / 20, total};

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto since = start;
  std::int64_t step = 0, samples = 0;
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    const auto shuffled = permutation(n_train, a.seed + 1 + epoch);
    for (std::size_t first = 0; first < n_train; first += a.batch) {
      std::vector<std::int32_t> rows;
      for (std::size_t i = first; i < std::min(n_train, first + a.batch); ++i)
        rows.push_back(train[shuffled[i]]);
      const auto idx = Tensor<1>::from_data(rows, {std::int64_t(rows.size())}, device);
      const auto loss =
          kiln::cross_entropy(model.forward(X.index_select(0, idx)), Y.index_select(0, idx));
      loss.backward();
      opt.set_lr(schedule(step));
      opt.clip_grad_norm(1.0);
      opt.step();
      opt.zero_grad();
      ++step;
      samples += static_cast<std::int64_t>(rows.size());
      if (step % a.log_every == 0 || step == total) {
        const float value = loss.item();  // the one host sync per logged step
        const auto now = clock::now();
        const double secs = std::chrono::duration<double>(now - since).count();
        const double elapsed = std::chrono::duration<double>(now - start).count();
        std::printf("step %5lld/%lld  epoch %3d  loss %.4f  %8.0f samples/s  ETA %.1f s\n",
                    static_cast<long long>(step), static_cast<long long>(total), epoch + 1, value,
                    samples / secs, elapsed / step * (total - step));
        std::fflush(stdout);
        since = now;
        samples = 0;
      }
    }
  }

  model.eval();
  kiln::NoGradGuard no_grad;
  const auto idx = Tensor<1>::from_data(test, {std::int64_t(test.size())}, device);
  const auto predicted = model.forward(X.index_select(0, idx)).argmax(1);
  const auto correct = (predicted == Y.index_select(0, idx)).to(kiln::DType::i32).sum();
  const auto right = correct.item<std::int32_t>();
  const double accuracy = double(right) / double(test.size());
  std::printf("test accuracy %.4f (%d/%zu) after %lld steps in %.1f s\n", accuracy, right,
              test.size(), static_cast<long long>(step),
              std::chrono::duration<double>(clock::now() - start).count());
  if (accuracy < a.min_accuracy) {
    std::printf("below the required %.2f\n", a.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-like: %s\n", e.what());
    return 2;
  }
}
