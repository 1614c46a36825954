// The functions of a result rounded to a half type (docs/accuracy.md, "Results rounded to a half
// type"): on CUDA, a unary op (or pow) whose value is only stored as bf16 or f16 takes the cheaper
// forms of src/ir/cuda_half_math.cuh. Every bf16 and every f16 bit pattern goes through every
// float unary op, and a grid of pairs through pow, on the CPU and (where a GPU is present) on
// CUDA; each result must be within 0.51 ULP of the half type of the float64 value (a NaN for a
// NaN). The generator's rule (which nodes may take the cheap forms) and the host emulation of the
// reduced sin and cos run everywhere; the CUDA kernels' NVRTC compile is
// tests/test_cuda_compile_elementwise.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ir/cuda_codegen.hpp"
#include "ir/cuda_math.cuh"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;
using kiln::ir::Op;
using kiln::ir::Program;

constexpr DType kHalves[] = {DType::bf16, DType::f16};
// Half a ULP for the rounding, 1% for the f32 function's error.
constexpr double kBound = 0.51;

// The value of each of the 65,536 bit patterns of half type t, as floats.
std::vector<float> every_half(DType t) {
  std::vector<float> v(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    if (t == DType::bf16) {
      v[b] = static_cast<float>(kiln::bfloat16::from_bits(bits));
    } else {
      v[b] = static_cast<float>(kiln::float16::from_bits(bits));
    }
  }
  return v;
}

double gelu_ref(double x) { return x < -40 ? -0.0 : 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

struct UnaryCase {
  const char* name;
  Tensor<1> (Tensor<1>::*op)() const;
  double (*ref)(double);
};

const UnaryCase kUnary[] = {
    {"neg", &Tensor<1>::neg, [](double x) { return -x; }},
    {"abs", &Tensor<1>::abs, [](double x) { return std::fabs(x); }},
    {"relu", &Tensor<1>::relu, [](double x) { return x > 0 || std::isnan(x) ? x : 0.0; }},
    {"sin", &Tensor<1>::sin, [](double x) { return std::sin(x); }},
    {"cos", &Tensor<1>::cos, [](double x) { return std::cos(x); }},
    {"tan", &Tensor<1>::tan, [](double x) { return std::tan(x); }},
    {"exp", &Tensor<1>::exp, [](double x) { return std::exp(x); }},
    {"log", &Tensor<1>::log, [](double x) { return std::log(x); }},
    {"sqrt", &Tensor<1>::sqrt, [](double x) { return std::sqrt(x); }},
    {"rsqrt", &Tensor<1>::rsqrt, [](double x) { return 1 / std::sqrt(x); }},
    {"tanh", &Tensor<1>::tanh, [](double x) { return std::tanh(x); }},
    {"sigmoid", &Tensor<1>::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
    {"gelu", &Tensor<1>::gelu, gelu_ref},
    {"silu", &Tensor<1>::silu, [](double x) { return x / (1 + std::exp(-x)); }},
    {"erf", &Tensor<1>::erf, [](double x) { return std::erf(x); }},
};

// Whether got is within kBound ULPs of half type t of exact, or is exact's rounding (a NaN for a
// NaN; an infinite rounding must be matched exactly). As kc::half_close of the conformance suite.
bool half_close(double got, double exact, DType t) {
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  const double rounded = kt::round_to_half(exact, t);
  if (got == rounded) return true;
  if (std::isinf(got) || std::isinf(rounded)) return false;
  return std::fabs(got - exact) <= kBound * kt::half_ulp(exact, t);
}

// Counts the results off the bound, prints the first few and the worst error in half ULPs.
struct Tally {
  const char* what;
  DType t;
  int bad = 0;
  double worst = 0;
  void check(double got, double exact, const std::string& args) {
    if (std::isfinite(got) && std::isfinite(exact)) {
      const double e = std::fabs(got - exact) / kt::half_ulp(exact, t);
      if (e > worst && !std::isinf(kt::round_to_half(exact, t))) worst = e;
    }
    if (half_close(got, exact, t)) return;
    if (++bad <= 5) {
      ADD_FAILURE() << what << " " << kiln::dtype_name(t) << "(" << args << ") = " << got
                    << ", exact " << exact << " (rounds to " << kt::round_to_half(exact, t) << ")";
    }
  }
  ~Tally() {
    std::printf("[ measured ] %s %s: worst %.4f ULP of the half type%s\n", what,
                kiln::dtype_name(t), worst, bad ? " (FAILED)" : "");
  }
};

std::string show(double x) {
  char s[64];
  std::snprintf(s, sizeof s, "%.9g", x);
  return s;
}

// Every op of kUnary on every pattern of each half type, all in one fused group where fusion is
// on (one kernel per dtype on CUDA: each op's result is an output, so each takes its cheap form).
void every_half_input(Device d) {
  for (DType t : kHalves) {
    const std::vector<float> v = every_half(t);
    const auto x = Tensor<1>::from_data(v, {65536}, d).to(t);
    std::vector<Tensor<1>> results;
    for (const UnaryCase& c : kUnary) results.push_back((x.*c.op)());
    for (std::size_t k = 0; k < std::size(kUnary); ++k) {
      ASSERT_EQ(results[k].dtype(), t);
      const std::vector<float> got = results[k].to(DType::f32).to_vector<float>();
      Tally tally{kUnary[k].name, t};
      for (std::size_t i = 0; i < v.size(); ++i)
        tally.check(got[i], kUnary[k].ref(v[i]), show(v[i]));
    }
  }
}

// pow over bases of every kind (every 61st pattern: zeros, subnormals, negatives, 1, inf, NaN)
// by exponents of every kind (integers, halves, and values whose results span the half type).
void pow_grid(Device d) {
  for (DType t : kHalves) {
    const std::vector<float> all = every_half(t);
    std::vector<float> bases,
        exponents = {0,  -0.0f, 1,      -1,    2,   -2,  3,     0.5f,     -0.5f,     1.5f, 7,
                     -7, 0.1f,  -0.37f, 12.5f, -30, 100, 1e-3f, INFINITY, -INFINITY, NAN};
    for (std::size_t b = 0; b < all.size(); b += 61) bases.push_back(all[b]);
    bases.push_back(1.0f);
    // A run of the type's values: 0.5 to 8 for bf16, 1.75 to 2.5 for f16.
    for (std::size_t b = 0x3f00; b < 0x4100; b += 7) exponents.push_back(all[b]);
    std::vector<float> xs, ys;
    for (float b : bases)
      for (float e : exponents) {
        xs.push_back(b);
        ys.push_back(static_cast<float>(kt::round_to_half(e, t)));
      }
    const auto n = static_cast<std::int64_t>(xs.size());
    const auto x = Tensor<1>::from_data(xs, {n}, d).to(t),
               y = Tensor<1>::from_data(ys, {n}, d).to(t);
    const std::vector<float> got = kiln::pow(x, y).to(DType::f32).to_vector<float>();
    Tally tally{"pow", t};
    for (std::size_t i = 0; i < xs.size(); ++i)
      tally.check(got[i], std::pow(double{xs[i]}, double{ys[i]}), show(xs[i]) + ", " + show(ys[i]));
  }
}

TEST(HalfFunctions, EveryHalfInputOnCpu) {
  every_half_input(Device::cpu());
  pow_grid(Device::cpu());
}

// Run on the GPU machine: the generated kernels with the cheap forms (passed on the H100,
// 2026-12-06).
TEST(HalfFunctions, EveryHalfInputOnCuda) {
  KILN_REQUIRE_CUDA();
  every_half_input(Device::cuda(0));
  pow_grid(Device::cuda(0));
}

// The generator's rule: a node takes the cheap form only where its value is rounded to a half
// type before anything reads it.
TEST(HalfFunctions, CheapFormsOnlyForValuesRoundedToAHalfType) {
  const auto body = [](const Program& p) { return kiln::ir::cuda_body(p, "b", false); };
  for (DType t : kHalves) {
    SCOPED_TRACE(kiln::dtype_name(t));
    Program stored;  // sin(x), stored
    stored.output(stored.unary(Op::sin, stored.input(t)));
    EXPECT_NE(body(stored).find("kiln::sin_to_half("), std::string::npos) << body(stored);

    Program cast;  // sin(x) read only through casts, which round it first
    const auto s = cast.unary(Op::sin, cast.input(t));
    cast.output(cast.cast(s, DType::f32));
    cast.output(cast.cast(s, DType::i32));
    EXPECT_NE(body(cast).find("kiln::sin_to_half("), std::string::npos) << body(cast);

    Program fused;  // sin(x) stored and read in f32 by a product: the accurate form
    const auto f = fused.unary(Op::sin, fused.input(t));
    fused.output(f);
    fused.output(fused.binary(Op::mul, f, f));
    EXPECT_EQ(body(fused).find("_to_half"), std::string::npos) << body(fused);

    Program p;  // pow of two halves, stored
    p.output(p.binary(Op::pow, p.input(t), p.input(t)));
    EXPECT_NE(body(p).find("kiln::pow_to_half("), std::string::npos) << body(p);
  }
  Program f32;  // f32 results keep the accurate functions, even when cast to a half type
  const auto s = f32.unary(Op::gelu, f32.input(DType::f32));
  f32.output(f32.cast(s, DType::bf16));
  EXPECT_EQ(body(f32).find("_to_half"), std::string::npos) << body(f32);
}

// The reduced sin and cos (kiln::dev::sin_cos_reduced, the cheap form for |x| in [2^-12, 39000])
// as host C++ gives the device's bits: every half input of that range within the bound, and the
// f32 error over every 257th float of it (what a fused intermediate may pass).
TEST(HalfFunctions, ReducedSinCosEmulatedOnHost) {
  const auto in_range = [](float x) { return std::fabs(x) >= 0x1p-12f && std::fabs(x) <= 39000; };
  for (DType t : kHalves) {
    Tally sin_t{"sin (reduced, host)", t}, cos_t{"cos (reduced, host)", t};
    for (float x : every_half(t)) {
      if (!in_range(x)) continue;
      sin_t.check(kt::round_to_half(kiln::dev::sin_cos_reduced(x, 0), t), std::sin(double{x}),
                  show(x));
      cos_t.check(kt::round_to_half(kiln::dev::sin_cos_reduced(x, 1), t), std::cos(double{x}),
                  show(x));
    }
  }
  double worst[2] = {0, 0};
  for (std::uint64_t b = 0; b < (1ull << 32); b += 257) {
    float x;
    const auto bits = static_cast<std::uint32_t>(b);
    std::memcpy(&x, &bits, 4);
    if (!in_range(x)) continue;
    for (unsigned c = 0; c < 2; ++c) {
      const double exact = c ? std::cos(double{x}) : std::sin(double{x});
      const double e = std::fabs(kiln::dev::sin_cos_reduced(x, c) - exact) / kt::float_ulp(exact);
      if (e > worst[c]) worst[c] = e;
    }
  }
  std::printf(
      "[ measured ] reduced sin, cos over every 257th float of [2^-12, 39000]: worst %.2f, "
      "%.2f ULP of float\n",
      worst[0], worst[1]);
  EXPECT_LE(worst[0], 4.0);
  EXPECT_LE(worst[1], 4.0);
}

}  // namespace
