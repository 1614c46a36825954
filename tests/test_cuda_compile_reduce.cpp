// Every reduction kernel the CUDA source generator can produce compiles with NVRTC for sm_90:
// every op x dtype x variant x index width, at representative ranks (src/cuda/reduce_source.hpp).
// NVRTC needs no GPU, so this runs on CI. The kernels come batched in a few sources, compiled
// on two threads, to keep the test to seconds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.hpp"
#include "cuda/reduce_source.hpp"
#include "ir/cuda_codegen.hpp"
#include "kiln/error.hpp"

namespace {

using kiln::DType;
using kiln::cuda::ReduceKernelSpec;
using kiln::cuda::ReducePrologueSpec;
using kiln::cuda::ReduceVariant;
using kiln::detail::ReduceOp;
using kiln::ir::Op;
using kiln::ir::Program;

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::max,
                             ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin};
constexpr ReduceVariant kVariants[] = {ReduceVariant::block, ReduceVariant::thread,
                                       ReduceVariant::block_split, ReduceVariant::thread_split};

// sin(x * a) + y: f32 inputs x (the value's own layout) and y (strided: a set of its own).
Program f32_prologue() {
  Program p;
  const auto x = p.input(DType::f32), y = p.input(DType::f32), a = p.scalar(DType::f32);
  p.output(p.binary(Op::add, p.unary(Op::sin, p.binary(Op::mul, x, a)), y));
  return p;
}
// sin(x * a) + y over bf16 inputs (and an f16 one cast to bf16): a half-type value.
Program bf16_prologue() {
  Program p;
  const auto x = p.input(DType::bf16), y = p.input(DType::f16), a = p.scalar(DType::bf16);
  p.output(p.binary(Op::add, p.unary(Op::sin, p.binary(Op::mul, x, a)), p.cast(y, DType::bf16)));
  return p;
}
// i32(x) * k + index: an f32 input, a broadcast i32 input k (a splat) and the element index.
Program i32_prologue() {
  Program p;
  const auto x = p.input(DType::f32), k = p.input(DType::i32);
  p.output(p.binary(Op::add, p.binary(Op::mul, p.cast(x, DType::i32), k), p.index()));
  return p;
}
// where(c, x > col, b): bool inputs c and b, an f32 x, a broadcast column col (its own set).
Program bool_prologue() {
  Program p;
  const auto c = p.input(DType::boolean), x = p.input(DType::f32), col = p.input(DType::f32),
             b = p.scalar(DType::boolean);
  p.output(p.where(c, p.binary(Op::gt, x, col), b));
  return p;
}

TEST(CudaCompileReduce, EveryOpDTypeVariantAndIndexWidth) {
  const auto sources = kiln::cuda::all_reduce_sources_for_tests();
  ASSERT_EQ(sources.size(), 4u);  // one per variant
  std::vector<std::future<std::vector<char>>> cubins;
  for (const auto& s : sources) {
    // Every entry point is defined exactly where the source says.
    for (const auto& k : s.kernels) {
      EXPECT_NE(s.source.find(" " + k + "("), std::string::npos) << s.name << ": " << k;
    }
    cubins.push_back(std::async(
        std::launch::async, [&s] { return kiln::cuda::compile_cubin(s.source, s.name, "sm_90"); }));
  }
  for (std::size_t i = 0; i < cubins.size(); ++i) {
    SCOPED_TRACE(sources[i].name);
    EXPECT_GT(cubins[i].get().size(), 0u);
  }
}

// The run-time form: one kernel per source (plus combine for a split), at a rank the batch
// above does not use.
TEST(CudaCompileReduce, SingleKernelSource) {
  const ReduceKernelSpec spec{
      ReduceOp::argmin, DType::f32, 4, 1, ReduceVariant::thread_split, true};
  const std::string src = kiln::cuda::reduce_source({&spec, 1});
  EXPECT_NE(src.find(kiln::cuda::reduce_kernel_name(spec)), std::string::npos);
  EXPECT_NE(src.find(kiln::cuda::reduce_combine_name(ReduceOp::argmin, DType::f32)),
            std::string::npos);
  EXPECT_GT(kiln::cuda::compile_cubin(src, "single.cu", "sm_90").size(), 0u);
}

// Every op x variant with a prologue of each value dtype (f32, i32, bool) over inputs of the
// value's layout, splats, and strided and broadcast inputs with sets of their own, at both index
// widths and several ranks: one source per variant, compiled on two threads.
TEST(CudaCompileReduce, PrologueEveryOpAndVariant) {
  const Program pf = f32_prologue(), pi = i32_prologue(), pb = bool_prologue(),
                ph = bf16_prologue();
  std::vector<kiln::cuda::ReducePrologueSource> sources;
  for (ReduceVariant v : kVariants) {
    std::vector<ReducePrologueSpec> specs;
    for (ReduceOp op : kOps) {
      specs.push_back({{op, DType::f32, 2, 1, v, false}, &pf, {0, 1}, 2});
      specs.push_back({{op, DType::i32, 0, 3, v, true}, &pi, {0, -1}, 1});
      specs.push_back({{op, DType::boolean, 1, 2, v, false}, &pb, {0, 2, 1}, 3});
      specs.push_back({{op, DType::bf16, 1, 1, v, false}, &ph, {0, 1}, 2});
    }
    sources.push_back(kiln::cuda::reduce_prologue_source(specs));
    const auto& s = sources.back();
    ASSERT_EQ(s.kernels.size(), specs.size());
    for (const auto& k : s.kernels) EXPECT_NE(s.source.find(" " + k + "("), std::string::npos) << k;
    const bool split = v == ReduceVariant::block_split || v == ReduceVariant::thread_split;
    for (ReduceOp op : kOps) {
      for (DType t : {DType::f32, DType::i32, DType::boolean, DType::bf16}) {
        const std::string combine = fmt::format(" {}(", kiln::cuda::reduce_combine_name(op, t));
        EXPECT_EQ(s.source.find(combine) != std::string::npos, split) << combine;
      }
    }
  }
  std::vector<std::future<std::vector<char>>> cubins;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    cubins.push_back(std::async(std::launch::async, [&sources, i] {
      return kiln::cuda::compile_cubin(sources[i].source, fmt::format("prologue{}.cu", i), "sm_90");
    }));
  }
  for (std::size_t i = 0; i < cubins.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_GT(cubins[i].get().size(), 0u);
  }
}

// The prologue's value is computed by the element-wise kernel's own body function after the
// same prelude (so it rounds the same way), and its inputs are read at their sets' offsets.
TEST(CudaCompileReduce, PrologueUsesTheElementwiseBody) {
  const Program p = f32_prologue();
  for (bool wide : {false, true}) {
    const ReducePrologueSpec spec{
        {ReduceOp::sum, DType::f32, 1, 1, ReduceVariant::block, wide}, &p, {0, 1}, 2};
    const auto src = kiln::cuda::reduce_prologue_source({&spec, 1});
    EXPECT_EQ(src.source.rfind(kiln::ir::cuda_prelude(), 0), 0u);
    EXPECT_NE(src.source.find(kiln::ir::cuda_body(p, "kiln_body0", wide)), std::string::npos);
    EXPECT_NE(src.source.find("in0 + off.v[0]"), std::string::npos);
    EXPECT_NE(src.source.find("in1 + off.v[1]"), std::string::npos);
    EXPECT_NE(src.source.find("kr::Geom<1, 1, 2>"), std::string::npos);
    kiln::ir::CudaLayout l;
    l.rank = 1;
    l.inputs = {kiln::ir::Access::contiguous, kiln::ir::Access::strided};
    l.outputs = {kiln::ir::Access::contiguous};
    l.wide_index = wide;
    EXPECT_NE(kiln::ir::cuda_kernel(p, l).source.find(kiln::ir::cuda_body(p, "kiln_body", wide)),
              std::string::npos);
  }
}

// A spec that does not match its program is refused, naming what is wrong.
TEST(CudaCompileReduce, PrologueSpecErrors) {
  const Program p = f32_prologue();
  Program two = p;
  two.output(0);
  const ReduceKernelSpec r{ReduceOp::max, DType::f32, 0, 1, ReduceVariant::thread, false};
  auto message = [](const ReducePrologueSpec& s) {
    try {
      (void)kiln::cuda::reduce_prologue_source({&s, 1});
    } catch (const kiln::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({r, &p, {0}, 1})
                .find("2 inputs and at least 1 set; it has 1 outputs (the "
                      "first f32), 1 input sets and 1 sets"),
            std::string::npos);
  EXPECT_NE(message({r, &p, {0, 2}, 2}).find("stride set 2 of 2"), std::string::npos);
  EXPECT_NE(message({r, &p, {0, -2}, 2}).find("stride set -2"), std::string::npos);
  EXPECT_NE(message({r, &two, {0, 0}, 1}).find("2 outputs"), std::string::npos);
  ReduceKernelSpec i32 = r;
  i32.dtype = DType::i32;
  EXPECT_NE(message({i32, &p, {0, 0}, 1})
                .find("one i32 output, a stride set (or -1) for each of its 2 inputs and at least "
                      "1 set; it has 1 outputs (the first f32)"),
            std::string::npos);
  EXPECT_NE(message({r, &p, {0, 0}, 0}).find("0 sets"), std::string::npos);
  EXPECT_EQ(message({r, &p, {0, 0}, 1}), "no error");
}

// Names are distinct across everything a kernel is specialised on.
TEST(CudaCompileReduce, KernelNamesAreDistinct) {
  using kiln::cuda::reduce_kernel_name;
  const ReduceKernelSpec a{ReduceOp::sum, DType::i32, 1, 1, ReduceVariant::block, false};
  ReduceKernelSpec b = a;
  b.wide_index = true;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.variant = ReduceVariant::block_split;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.dtype = DType::boolean;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
  b = a;
  b.outer_rank = 2;
  EXPECT_NE(reduce_kernel_name(a), reduce_kernel_name(b));
}

}  // namespace
