// The fusion fuzzer's benchmark twin (issue 19: fusion is never a loss). Generated programs, as
// tests/test_fusion_fuzz.cpp makes them but at sizes where time shows, each timed with fusion on
// and off; the worst ratio fused / unfused is the figure. The fuzzer checks that the two agree;
// this checks that fused is never the slower.
//
// A program is a random DAG over a frame [rows, cols]: inputs dense or broadcast ([rows, 1],
// [1, cols]), unary ops (tanh, sin, abs, sqrt of abs, exp of tanh, scale), binary ops (add, sub,
// mul, maximum), and reductions (sum or max over a dim, kept as a dim of 1) whose results feed
// later ops broadcast. About a third of its intermediates are named (held to the end, so fusion
// must write them), the others dropped after their last use, and the last node is the result.
//
//   kiln_fusion_programs [--device cuda|cpu] [--programs 40] [--seed 1] [--rows N] [--cols N]
//                        [--runs 5] [--batch 3]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../fusion_switch.hpp"
#include "bench_timing.hpp"

namespace {

using kiln::Tensor;

struct Options {
  kiln::Device device = kiln::Device::best();
  int programs = 40, runs = 5, batch = 3;
  std::uint64_t seed = 1;
  std::int64_t rows = 0, cols = 0;  // 0: [4096, 256] on the CPU, [8192, 1024] on CUDA
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") {
      o.device = v == "cpu" ? kiln::Device::cpu() : kiln::Device::cuda(0);
    } else if (k == "--programs") {
      o.programs = std::stoi(v);
    } else if (k == "--seed") {
      o.seed = std::stoull(v);
    } else if (k == "--rows") {
      o.rows = std::stoll(v);
    } else if (k == "--cols") {
      o.cols = std::stoll(v);
    } else if (k == "--runs") {
      o.runs = std::stoi(v);
    } else if (k == "--batch") {
      o.batch = std::stoi(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device cuda|cpu] [--programs N] [--seed N] [--rows N] [--cols N] "
                   "[--runs N] [--batch N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  const bool cuda = o.device.kind() == kiln::Device::Kind::cuda;
  if (o.rows == 0) o.rows = cuda ? 8192 : 4096;
  if (o.cols == 0) o.cols = cuda ? 1024 : 256;
  return o;
}

enum class Kind { input, unary, binary, reduce };
struct Node {
  Kind kind = Kind::input;
  int op = 0;  // input: 0 dense, 1 [rows, 1], 2 [1, cols]; reduce: 0 sum, 1 max
  int a = -1, b = -1, dim = 0;
  bool named = false;
};
constexpr const char* kUnary[] = {"tanh", "sin", "abs", "sqrt(abs)", "exp(tanh)", "x*0.5"};
constexpr const char* kBinary[] = {"+", "-", "*", "maximum"};

std::vector<Node> generate(std::mt19937_64& g) {
  auto uni = [&g](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  std::vector<Node> p;
  const int inputs = uni(1, 3), ops = uni(2, 16);
  for (int i = 0; i < inputs; ++i) p.push_back({Kind::input, uni(0, 5) < 4 ? 0 : uni(1, 2)});
  for (int i = 0; i < ops; ++i) {
    const int n = static_cast<int>(p.size()), r = uni(0, 9);
    if (r < 4) {
      p.push_back({Kind::unary, uni(0, 5), uni(0, n - 1)});
    } else if (r < 8) {
      p.push_back({Kind::binary, uni(0, 3), uni(0, n - 1), uni(0, n - 1)});
    } else {
      p.push_back({Kind::reduce, uni(0, 1), uni(0, n - 1), -1, uni(0, 1)});
    }
    p.back().named = uni(0, 2) == 0;
  }
  p.back().named = true;  // the result
  return p;
}

// The program, one node a line ("%3 = sum(%2, dim 1, keepdim)").
void print_listing(const std::vector<Node>& p) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    const Node& n = p[i];
    std::printf("  %%%zu = ", i);
    switch (n.kind) {
      case Kind::input:
        std::printf("input %s", n.op == 0 ? "[rows, cols]" : n.op == 1 ? "[rows, 1]" : "[1, cols]");
        break;
      case Kind::unary:
        std::printf("%s %%%d", kUnary[n.op], n.a);
        break;
      case Kind::binary:
        std::printf("%%%d %s %%%d", n.a, kBinary[n.op], n.b);
        break;
      case Kind::reduce:
        std::printf("%s(%%%d, dim %d, keepdim)", n.op == 0 ? "sum" : "max", n.a, n.dim);
        break;
    }
    std::printf("%s\n", n.named ? " (named)" : "");
  }
}

Tensor<2> unary(int op, const Tensor<2>& x) {
  switch (op) {
    case 0:
      return x.tanh();
    case 1:
      return x.sin();
    case 2:
      return x.abs();
    case 3:
      return x.abs().sqrt();
    case 4:
      return x.tanh().exp();
    default:
      return x * 0.5f;
  }
}

Tensor<2> binary(int op, const Tensor<2>& x, const Tensor<2>& y) {
  switch (op) {
    case 0:
      return x + y;
    case 1:
      return x - y;
    case 2:
      return x * y;
    default:
      return kiln::maximum(x, y);
  }
}

// Runs p once: every handle goes after its last use unless the node is named; the named ones are
// returned (held until the caller drops them).
std::vector<Tensor<2>> run(const std::vector<Node>& p, const std::vector<Tensor<2>>& inputs) {
  std::vector<int> last(p.size(), -1);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i].a >= 0) last[static_cast<std::size_t>(p[i].a)] = static_cast<int>(i);
    if (p[i].b >= 0) last[static_cast<std::size_t>(p[i].b)] = static_cast<int>(i);
  }
  std::vector<std::optional<Tensor<2>>> v(p.size());
  std::vector<Tensor<2>> named;
  std::size_t next_input = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const Node& n = p[i];
    switch (n.kind) {
      case Kind::input:
        v[i] = inputs[next_input++];
        break;
      case Kind::unary:
        v[i] = unary(n.op, *v[static_cast<std::size_t>(n.a)]);
        break;
      case Kind::binary:
        v[i] = binary(n.op, *v[static_cast<std::size_t>(n.a)], *v[static_cast<std::size_t>(n.b)]);
        break;
      case Kind::reduce: {
        const Tensor<2>& x = *v[static_cast<std::size_t>(n.a)];
        v[i] = n.op == 0 ? x.sum(n.dim, kiln::keepdim) : x.max(n.dim, kiln::keepdim);
        break;
      }
    }
    if (n.named) named.push_back(*v[i]);
    for (const int arg : {n.a, n.b})
      if (arg >= 0 && last[static_cast<std::size_t>(arg)] == static_cast<int>(i))
        v[static_cast<std::size_t>(arg)].reset();
  }
  return named;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto sync = [&] { o.device.sync(); };
  std::printf(
      "name = %s, %d programs over [%lld, %lld] f32 from seed %llu, min over %d runs of "
      "the mean of %d calls\n",
      o.device.backend_name().c_str(), o.programs, static_cast<long long>(o.rows),
      static_cast<long long>(o.cols), static_cast<unsigned long long>(o.seed), o.runs, o.batch);
  std::printf("program  ops  named  reductions  fused us  unfused us  fused/unfused\n");
  double worst = 0, product = 1;
  int worst_at = -1;
  std::vector<Node> worst_program;
  for (int k = 0; k < o.programs; ++k) {
    std::mt19937_64 g(o.seed + static_cast<std::uint64_t>(k));
    const std::vector<Node> p = generate(g);
    std::vector<Tensor<2>> inputs;
    int ops = 0, named = 0, reductions = 0;
    for (const Node& n : p) {
      if (n.kind == Kind::input) {
        const std::int64_t r = n.op == 2 ? 1 : o.rows, c = n.op == 1 ? 1 : o.cols;
        inputs.push_back(Tensor<2>::random({r, c}, kiln::Distribution::uniform(-2, 2), o.device,
                                           o.seed * 1000 + inputs.size()));
        continue;
      }
      ++ops;
      named += n.named;
      reductions += n.kind == Kind::reduce;
    }
    sync();
    double t[2] = {0, 0};
    for (const bool fused : {true, false}) {
      kiln_bench::FusionSwitch on(fused);
      std::vector<Tensor<2>> held;
      t[fused ? 0 : 1] = kiln_bench::seconds_per_call(
          o.runs, o.batch, [&] { held = run(p, inputs); }, sync);
    }
    const double ratio = t[0] / t[1];
    product *= ratio;
    if (ratio > worst) worst = ratio, worst_at = k, worst_program = p;
    std::printf("%7d  %3d  %5d  %10d  %8.1f  %10.1f  %13.2f\n", k, ops, named, reductions,
                t[0] * 1e6, t[1] * 1e6, ratio);
    std::fflush(stdout);
  }
  std::printf("worst fused/unfused %.2f (program %d), geometric mean %.2f\n", worst, worst_at,
              std::pow(product, 1.0 / o.programs));
  if (worst_at >= 0) {
    std::printf("program %d:\n", worst_at);
    print_listing(worst_program);
  }
  return 0;
}
