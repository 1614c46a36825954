// The float math of the CUDA prelude (src/ir/cuda_math.cuh: gelu, sigmoid, silu; rsqrt and erf in
// src/ir/cuda_prelude.cuh) against float64, with the bounds of docs/accuracy.md.
//
// cuda_math.cuh compiles as host C++ too, from IEEE float operations and FMAs alone, so the host
// computes the device's bits: the host test holds that emulation to the bounds (every 4099th
// float and the points where the code switches paths; every float for an op that
// KILN_EXHAUSTIVE names as cuda-gelu, cuda-sigmoid, ...). On a GPU, the device test runs the ops
// through kiln on CUDA over the same floats and checks them bit for bit against the emulation
// (rsqrt against 1 / sqrt in float; erf, CUDA's erff, only against its bound), and prints the
// worst error per op.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ir/cuda_math.cuh"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::Tensor;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Floats between a and b (+0 and -0 the same point); NaN against a number, or an infinity against
// a finite number, is infinitely far (docs/accuracy.md, "How the bounds are measured").
std::int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<std::int64_t>::max();
  }
  if (std::isinf(a) != std::isinf(b)) return std::numeric_limits<std::int64_t>::max();
  auto key = [](float x) {
    const auto u = static_cast<std::int64_t>(bits_of(x) & 0x7fffffffu);
    return bits_of(x) >> 31 ? -u : u;
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

float gelu_ref(float x) {
  if (x < -15.0f) return -0.0f;
  const double xd = x;
  return static_cast<float>(0.5 * xd * std::erfc(-xd * 0.70710678118654752440));
}
float sigmoid_ref(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-double{x}))); }
float silu_ref(float x) { return static_cast<float>(double{x} / (1.0 + std::exp(-double{x}))); }
float rsqrt_ref(float x) { return static_cast<float>(1.0 / std::sqrt(double{x})); }
float erf_ref(float x) { return static_cast<float>(std::erf(double{x})); }
float rsqrt_emulated(float x) { return 1.0f / std::sqrt(x); }

struct MathOp {
  const char* name;
  float (*ref)(float);
  float (*emulated)(float);  // the device's bits on the host; nullptr where it has none (erff)
  std::int64_t bound;        // ULP, docs/accuracy.md
  Tensor<1> (*run)(const Tensor<1>&);
};

const MathOp kOps[] = {
    {"gelu", gelu_ref, kiln::dev::gelu_f, 4, [](const Tensor<1>& t) { return t.gelu(); }},
    {"sigmoid", sigmoid_ref, kiln::dev::sigmoid_f, 2,
     [](const Tensor<1>& t) { return t.sigmoid(); }},
    {"silu", silu_ref, kiln::dev::silu_f, 3, [](const Tensor<1>& t) { return t.silu(); }},
    {"rsqrt", rsqrt_ref, rsqrt_emulated, 1, [](const Tensor<1>& t) { return t.rsqrt(); }},
    {"erf", erf_ref, nullptr, 2, [](const Tensor<1>& t) { return t.erf(); }},
};

bool exhaustive(const char* op) {
  const char* env = std::getenv("KILN_EXHAUSTIVE");
  if (env == nullptr) return false;
  return (std::string(",") + env + ",").find(std::string(",cuda-") + op + ",") != std::string::npos;
}

// The floats an op is checked on: every float, or every 4099th bit pattern and the points where
// the code switches paths (and their neighbours), the specials and the subnormals' ends.
std::vector<float> switch_points() {
  std::vector<float> v;
  for (float p :
       {0.0f, 5.0f, 15.0f, 104.0f, 120.0f, 87.0f, 88.0f, 103.9f, 1e-30f, 1.17549435e-38f, 1.4e-45f,
        3.4e38f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (float q : {p, std::nextafter(p, 0.0f), std::nextafter(p, 1e38f)}) {
      v.push_back(q);
      v.push_back(-q);
    }
  }
  return v;
}

// Calls check(first, count, bits_step) for chunks of the swept bit patterns, in parallel on the
// host; the switch points come first.
struct Sweep {
  std::uint64_t step;
  static constexpr std::uint64_t kChunk = std::uint64_t{1} << 24;
  std::vector<float> chunk(std::uint64_t first) const {
    std::vector<float> x;
    if (first == 0) x = switch_points();
    for (std::uint64_t b = first; b < (std::uint64_t{1} << 32) && b < first + kChunk * step;
         b += step)
      x.push_back(from_bits(static_cast<std::uint32_t>(b)));
    return x;
  }
  std::uint64_t chunks() const {
    return ((std::uint64_t{1} << 32) + kChunk * step - 1) / (kChunk * step);
  }
};

// The worst error of got against op's reference over x, in parallel; failures reported up to 5.
struct Worst {
  std::int64_t ulp = 0;
  float at = 0;
  std::int64_t failures = 0, mismatches = 0;
};

void check(const MathOp& op, const std::vector<float>& x, const std::vector<float>& got,
           bool want_emulated_bits, Worst& w) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::mutex m;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Worst local;
      for (std::size_t i = t; i < x.size(); i += threads) {
        const float want = op.ref(x[i]);
        std::int64_t d = ulp_distance(got[i], want);
        if (want == 0.0f && got[i] == 0.0f && std::signbit(want) != std::signbit(got[i]))
          d = std::numeric_limits<std::int64_t>::max();
        if (d > local.ulp) local.ulp = d, local.at = x[i];
        if (d > op.bound && ++local.failures <= 5) {
          std::lock_guard<std::mutex> g(m);
          ADD_FAILURE() << op.name << "(" << x[i] << " = 0x" << std::hex << bits_of(x[i])
                        << std::dec << ") = " << got[i] << ", reference " << want << ", " << d
                        << " ULP > " << op.bound;
        }
        if (want_emulated_bits) {
          const float e = op.emulated(x[i]);
          if (bits_of(e) != bits_of(got[i]) && !(std::isnan(e) && std::isnan(got[i])) &&
              ++local.mismatches <= 5) {
            std::lock_guard<std::mutex> g(m);
            ADD_FAILURE() << op.name << "(" << x[i] << " = 0x" << std::hex << bits_of(x[i])
                          << std::dec << ") = " << got[i] << " on CUDA, " << e << " emulated";
          }
        }
      }
      std::lock_guard<std::mutex> g(m);
      if (local.ulp > w.ulp) w.ulp = local.ulp, w.at = local.at;
      w.failures += local.failures;
      w.mismatches += local.mismatches;
    });
  }
  for (auto& th : pool) th.join();
}

TEST(CudaMath, HostEmulationWithinBounds) {
  for (const MathOp& op : kOps) {
    if (op.emulated == nullptr) continue;
    const Sweep s{exhaustive(op.name) ? 1u : 4099u};
    Worst w;
    for (std::uint64_t c = 0; c < s.chunks() && w.failures == 0; ++c) {
      const std::vector<float> x = s.chunk(c * Sweep::kChunk * s.step);
      std::vector<float> got(x.size());
      std::transform(x.begin(), x.end(), got.begin(), op.emulated);
      check(op, x, got, false, w);
    }
    std::printf("[ measured ] %s emulated on the host, %s: worst %lld ULP at %a\n", op.name,
                s.step == 1 ? "every float" : "every 4099th float", static_cast<long long>(w.ulp),
                w.at);
  }
}

TEST(CudaMath, DeviceMatchesEmulationAndBounds) {
  KILN_REQUIRE_CUDA();
  for (const MathOp& op : kOps) {
    const Sweep s{exhaustive(op.name) ? 1u : 4099u};
    Worst w;
    for (std::uint64_t c = 0; c < s.chunks() && w.failures + w.mismatches == 0; ++c) {
      const std::vector<float> x = s.chunk(c * Sweep::kChunk * s.step);
      const auto t =
          Tensor<1>::from_data(x, {static_cast<std::int64_t>(x.size())}, Device::cuda(0));
      const std::vector<float> got = op.run(t).to_vector<float>();
      check(op, x, got, op.emulated != nullptr, w);
    }
    std::printf("[ measured ] cuda %s, %s: worst %lld ULP at %a\n", op.name,
                s.step == 1 ? "every float" : "every 4099th float", static_cast<long long>(w.ulp),
                w.at);
  }
}

}  // namespace
