// Every element-wise kernel the CUDA code generator can produce compiles with NVRTC for sm_90.
// NVRTC needs no GPU, so this runs on CI: a generator change that breaks any op, dtype or
// layout fails here rather than on the GPU machine.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.hpp"
#include "cuda/random_source.hpp"
#include "ir/cuda_codegen.hpp"
#include "ir/derivative.hpp"
#include "kiln/error.hpp"

namespace {

using kiln::DType;
using kiln::ir::Access;
using kiln::ir::Op;
using kiln::ir::Program;

const Op kFloatUnary[] = {Op::neg,  Op::abs,     Op::relu, Op::sin,  Op::cos,
                          Op::tan,  Op::exp,     Op::log,  Op::sqrt, Op::rsqrt,
                          Op::tanh, Op::sigmoid, Op::gelu, Op::silu, Op::erf};
const Op kIntUnary[] = {Op::neg, Op::abs, Op::relu};
const Op kFloatBinary[] = {Op::add, Op::sub, Op::mul, Op::div, Op::pow, Op::minimum, Op::maximum};
const Op kIntBinary[] = {Op::add, Op::sub, Op::mul, Op::minimum, Op::maximum};
const Op kComparisons[] = {Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge};
const DType kDTypes[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};

// One program that applies every op kiln implements on dtype t to two inputs and a scalar of t,
// with where, the index leaf and casts to every other dtype; every result is an output.
Program every_op(DType t) {
  Program p;
  auto x = p.input(t), y = p.input(t), s = p.scalar(t), c = p.input(DType::boolean);
  auto out = [&](std::int32_t n) { p.output(n); };
  if (kiln::is_floating(t)) {
    for (Op op : kFloatUnary) out(p.unary(op, x));
    for (Op op : kFloatBinary) out(p.binary(op, x, s));
  } else if (t == DType::i32) {
    for (Op op : kIntUnary) out(p.unary(op, x));
    for (Op op : kIntBinary) out(p.binary(op, s, y));
  }
  for (Op op : kComparisons) out(p.binary(op, x, y));
  out(p.where(c, x, y));
  for (DType to : kDTypes) out(p.cast(x, to));
  out(p.cast(p.index(), t));
  return p;
}

kiln::ir::CudaLayout layout_for(const Program& p, bool vectorized, bool wide, Access in_access,
                                int rank) {
  kiln::ir::CudaLayout l;
  l.rank = rank;
  l.vectorized = vectorized;
  l.wide_index = wide;
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    l.inputs.push_back(i == 1 ? Access::splat : in_access);
  for (std::size_t o = 0; o < p.outputs.size(); ++o)
    l.outputs.push_back(o == 0 && in_access == Access::strided ? Access::strided
                                                               : Access::contiguous);
  return l;
}

// A vectorized layout over rows: input 0 also per row (row_splat), output 0 strided by rows.
kiln::ir::CudaLayout rows_of_4(kiln::ir::CudaLayout l) {
  l.inputs[0] = Access::row_splat;
  l.outputs[0] = Access::row_strided;
  return l;
}

TEST(CudaCompile, EveryElementwiseOpDTypeAndLayout) {
  for (DType t : kDTypes) {
    SCOPED_TRACE(kiln::dtype_name(t));
    Program p = every_op(t);
    const kiln::ir::CudaLayout layouts[] = {
        layout_for(p, true, false, Access::contiguous, 1),              // the fast path
        layout_for(p, false, false, Access::strided, 3),                // strided and broadcast
        layout_for(p, false, true, Access::strided, 2),                 // past 2^31 elements
        rows_of_4(layout_for(p, true, false, Access::row_strided, 2)),  // broadcast rows
        rows_of_4(layout_for(p, true, true, Access::row_strided, 3)),
    };
    for (const auto& l : layouts) {
      SCOPED_TRACE(l.tag());
      auto k = kiln::ir::cuda_kernel(p, l);
      auto cubin = kiln::cuda::compile_cubin(k.source, "test_" + l.tag() + ".cu", "sm_90");
      EXPECT_GT(cubin.size(), 0u);
    }
  }
}

// The gradient program of every float op (autodiff runs it as an element-wise call like any
// other): seeded on every output, for every input.
TEST(CudaCompile, GradientOfEveryFloatOp) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(kiln::dtype_name(t));
    const Program p = every_op(t);
    std::array<bool, 128> all;
    all.fill(true);
    ASSERT_LE(p.outputs.size(), all.size());
    const kiln::ir::Gradient g = kiln::ir::gradient(p, std::span(all).first(p.outputs.size()),
                                                    std::span(all).first(p.inputs.size()));
    ASSERT_EQ(g.inputs, (std::vector<int>{0, 1}));  // x and y; the bool condition gets none
    const auto l = layout_for(g.program, true, false, Access::contiguous, 1);
    auto k = kiln::ir::cuda_kernel(g.program, l);
    EXPECT_GT(kiln::cuda::compile_cubin(k.source, "test_gradient.cu", "sm_90").size(), 0u);
  }
}

TEST(CudaCompile, RandomKernels) {
  auto cubin = kiln::cuda::compile_cubin(kiln::cuda::random_source(), "kiln_random.cu", "sm_90");
  EXPECT_GT(cubin.size(), 0u);
}

// A compile error names the source and carries NVRTC's log, with the offending line.
TEST(CudaCompile, FailureReportsSourceNameAndLog) {
  try {
    kiln::cuda::compile_cubin("extern \"C\" __global__ void k() { undeclared_thing(); }",
                              "broken_kernel.cu", "sm_90");
    FAIL() << "no exception";
  } catch (const kiln::DeviceError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("broken_kernel.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_thing"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90"), std::string::npos) << what;
  }
}

}  // namespace

// The strided kernels' division by multiplication (ir::cuda_divider), as the kernel computes it,
// against integer division: every divisor up to 4096, powers of two and their neighbours, and
// large ones, each with the quotient's edges (0, e - 1, e, e + 1, 2^31 - 1) and random indices.
TEST(CudaDivider, MatchesIntegerDivisionBelow2To31) {
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t e = 1; e <= 4096; ++e) divisors.push_back(e);
  for (int b = 12; b <= 31; ++b)
    for (std::int64_t d : {-1, 0, 1})
      divisors.push_back(static_cast<std::uint32_t>((1LL << b) + d));
  for (std::uint32_t e : {50304u, 65537u, 1000003u, 0x7fffffffu}) divisors.push_back(e);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto random_index = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 33);  // below 2^31
  };
  for (std::uint32_t e : divisors) {
    const std::uint64_t packed = kiln::ir::cuda_divider(e);
    const auto magic = static_cast<std::uint32_t>(packed);
    const auto shift = static_cast<int>(packed >> 32);
    std::vector<std::uint32_t> ns = {0, e - 1, e, e + 1, 0x7fffffffu};
    for (int i = 0; i < 64; ++i) ns.push_back(random_index());
    for (std::uint32_t n : ns) {
      if (n > 0x7fffffffu) continue;
      const auto hi = static_cast<std::uint32_t>((std::uint64_t{n} * magic) >> 32);  // __umulhi
      const auto q = static_cast<std::uint32_t>((std::uint64_t{hi} + n) >> shift);
      ASSERT_EQ(q, n / e) << "n = " << n << ", e = " << e;
    }
  }
  EXPECT_THROW(kiln::ir::cuda_divider(0), kiln::InternalError);
}
