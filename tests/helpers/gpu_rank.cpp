// One rank of a GPU job that `kiln launch -n N` starts, for tests/dist/test_gpu_job.cpp: each rank
// joins the process group on cuda:LOCAL_RANK (NCCL) and checks what the issue asks of it.
// `kiln_gpu_rank MODE [cpu]`, MODE one of:
//   collectives  every collective of every dtype it takes against a float64 host reference: each
//                rank's input is a known function of its rank, so every rank can compute all of
//                them (small integers, exact in bf16 for any sum of up to 8 ranks);
//   ddp          a small MLP trained 4 steps through nn::DataParallel, rank r on rows
//                [8r, 8r + 8) of a global batch; then the replicas must be equal (check_in_sync)
//                and, on rank 0, equal to the same model trained alone on the whole global batch;
//   die          one all-reduce, then the last rank leaves (status 0, so the launcher lets the
//                others go on) and the others' next all-reduce can never finish: the watchdog must
//                end them (status 1) within the group's timeout (5 s).
// Prints "rank R of W: MODE passed" and returns 0, or prints what differed and returns 3.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace {

using kiln::DType;
using kiln::Tensor;
namespace dist = kiln::dist;
namespace nn = kiln::nn;

int failures = 0;

void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) {
    std::printf("%s: %zu values, expected %zu\n", what.c_str(), got.size(), want.size());
    ++failures;
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tol * std::max(1.0, std::abs(want[i]))) {
      std::printf("%s: [%zu] = %g, expected %g\n", what.c_str(), i, got[i], want[i]);
      ++failures;
      return;
    }
  }
}

// Rank q's input: rows x cols small integers.
std::vector<double> input_of(int q, int rows, int cols) {
  std::vector<double> v(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + q * 3) % 11) - 5;
  return v;
}

void check_collectives(kiln::Device dev) {
  const int w = dist::world_size(), r = dist::rank();
  const int rows = 2 * w, cols = 33;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  std::vector<std::vector<double>> inputs;
  for (int q = 0; q < w; ++q) inputs.push_back(input_of(q, rows, cols));
  std::vector<double> sum(n, 0), max(n, -1e300);
  for (const auto& in : inputs)
    for (std::size_t i = 0; i < n; ++i) sum[i] += in[i], max[i] = std::max(max[i], in[i]);
  std::vector<double> avg(n);
  for (std::size_t i = 0; i < n; ++i) avg[i] = sum[i] / w;
  std::vector<double> gathered;
  for (const auto& in : inputs) gathered.insert(gathered.end(), in.begin(), in.end());
  const auto mine = [&](const std::vector<double>& all) {  // rows [2r, 2r + 2)
    return std::vector<double>(all.begin() + 2 * r * cols, all.begin() + (2 * r + 2) * cols);
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    const std::string name = kiln::dtype_name(dt);
    const double tol = dt == DType::bf16 ? 1.0 / 128 : dt == DType::f16 ? 1.0 / 1024 : 1e-6;
    const std::vector<float> own(inputs[r].begin(), inputs[r].end());
    const auto x = Tensor<2>::from_data(own, {rows, cols}, dev).to(dt);
    const auto host = [](const Tensor<2>& t) { return t.to(DType::f32).to_vector<float>(); };
    expect_close(name + " all_reduce sum", host(dist::all_reduce(x)), sum, tol);
    expect_close(name + " all_reduce max", host(dist::all_reduce(x, dist::ReduceOp::max)), max,
                 tol);
    expect_close(name + " broadcast", host(dist::broadcast(x, w - 1)), inputs[w - 1], tol);
    expect_close(name + " all_gather", host(dist::all_gather(x)), gathered, tol);
    expect_close(name + " reduce_scatter sum", host(dist::reduce_scatter(x)), mine(sum), tol);
    if (dt != DType::i32) {
      expect_close(name + " all_reduce avg", host(dist::all_reduce(x, dist::ReduceOp::avg)), avg,
                   tol);
      expect_close(name + " reduce_scatter avg", host(dist::reduce_scatter(x, dist::ReduceOp::avg)),
                   mine(avg), tol);
    }
  }
}

struct Mlp : nn::Module {
  nn::Linear fc1{16, 64}, fc2{64, 8};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor<2> forward(const Tensor<2>& x) const { return fc2(fc1(x).gelu()); }
};

std::vector<float> flat(const nn::AnyParameter& p) {
  return Tensor<1>(kiln::detail::reshape(p.handle(), {-1})).to_vector<float>();
}

void check_ddp(kiln::Device dev) {
  kiln::set_float32_matmul_precision(kiln::Precision::highest);
  const int w = dist::world_size(), r = dist::rank();
  const int per_rank = 8, steps = 4;
  // Every rank initialises differently: the broadcast must make them equal.
  nn::manual_seed(1000 + r);
  Mlp model;
  model.to(dev);
  nn::DataParallel ddp(model, {.bucket_cap_mib = 0.004, .first_bucket_mib = 0.002});
  nn::manual_seed(1000);
  Mlp alone;  // rank 0's initialisation, trained on the whole batch
  alone.to(dev);
  kiln::optim::AdamW opt(model.parameters(), {.lr = 0.01});
  kiln::optim::AdamW opt_alone(alone.parameters(), {.lr = 0.01});
  for (int step = 0; step < steps; ++step) {
    const auto x =
        Tensor<2>::random({w * per_rank, 16}, kiln::Distribution::normal(0, 1), dev, 77 + step);
    const auto y =
        Tensor<2>::random({w * per_rank, 8}, kiln::Distribution::normal(0, 1), dev, 99 + step);
    const auto xr = x.slice(0, r * per_rank, (r + 1) * per_rank);
    const auto yr = y.slice(0, r * per_rank, (r + 1) * per_rank);
    kiln::mse_loss(ddp(xr), yr).backward();
    opt.step();
    opt.zero_grad();
    kiln::mse_loss(alone.forward(x), y).backward();
    opt_alone.step();
    opt_alone.zero_grad();
  }
  ddp.check_in_sync();
  const auto a = model.named_parameters(), b = alone.named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto va = flat(a[i].second), vb = flat(b[i].second);
    expect_close("ddp " + a[i].first + " against one process on the whole batch", va,
                 std::vector<double>(vb.begin(), vb.end()), 1e-4);
  }
}

void die() {
  const int w = dist::world_size(), r = dist::rank();
  const auto x = Tensor<1>::ones({1 << 20}, DType::f32, dist::group_device());
  dist::all_reduce(x).to_vector<float>();
  if (r == w - 1) {
    std::printf("rank %d of %d: leaving without a word\n", r, w);
    std::fflush(stdout);
    std::_Exit(0);
  }
  dist::all_reduce(x).to_vector<float>();  // never returns: the watchdog ends this process
  std::printf("rank %d of %d: the all-reduce finished without its last rank\n", r, w);
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "cpu")) {
    std::fprintf(stderr, "usage: kiln_gpu_rank collectives|ddp|die [cpu]\n");
    return 2;
  }
  const std::string mode = argv[1];
  try {
    // (cpu: a job of one on the CPU, to try this program where no GPU is)
    const kiln::Device dev =
        argc == 3 ? kiln::Device::cpu() : kiln::Device::cuda(dist::launch_env().local_rank);
    dist::init_process_group(dev, {.timeout_seconds = mode == "die" ? 5.0 : 120.0});
    if (mode == "collectives")
      check_collectives(dev);
    else if (mode == "ddp")
      check_ddp(dev);
    else if (mode == "die")
      die();
    else
      throw kiln::ValueError("unknown mode " + mode);
    std::printf("rank %d of %d: %s %s\n", dist::rank(), dist::world_size(), mode.c_str(),
                failures ? "FAILED" : "passed");
    std::fflush(stdout);
    dist::destroy_process_group();
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_gpu_rank: %s\n", e.what());
    return 3;
  }
  return failures ? 3 : 0;
}
