// The element-wise IR on the CPU evaluator: programs the front end does not build today
// (several outputs, long chains that reuse block slots, mixed dtypes, strided outputs),
// against a float64 reference, on both kernel tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cpu/cpu_evaluator.hpp"
#include "cpu/host_buffer.hpp"
#include "test_support.hpp"

namespace {

using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

std::vector<const kiln::cpu::KernelTable*> tables() {
  std::vector<const kiln::cpu::KernelTable*> t{&kiln::cpu::scalar_kernels()};
#if KILN_WITH_SIMD
  t.push_back(&kiln::cpu::simd_kernels());
#endif
  return t;
}

Handle filled(const kiln::Dims& shape, std::mt19937_64& rng) {
  Handle t = kiln::cpu::host_empty(shape, DType::f32);
  auto* p = static_cast<float*>(t->data());
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = u(rng);
  return t;
}

void poison(const TensorImpl& t) { std::memset(t.buffer->data(), 0x7f, t.buffer->bytes()); }

class CpuEvaluator : public ::testing::TestWithParam<const kiln::cpu::KernelTable*> {
 protected:
  void SetUp() override {
    seed_ = kt::fresh_seed();
    rng_.seed(seed_);
  }
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// y = sin(x) * 0.5 + x; z = y > 0; w = where(z, y, -x): three outputs of one program.
TEST_P(CpuEvaluator, SeveralOutputsOfOneProgram) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::int64_t n = 3 * kiln::ir::kBlock + 17;  // several blocks and a tail
  Handle x = filled({n}, rng_);
  Program p;
  auto in = p.input(DType::f32);
  auto y = p.binary(Op::add, p.binary(Op::mul, p.unary(Op::sin, in), p.scalar(DType::f32)), in);
  auto z = p.binary(Op::gt, y, p.scalar(DType::f32));
  auto w = p.where(z, y, p.unary(Op::neg, in));
  p.output(y);
  p.output(z);
  p.output(w);
  Handle oy = kiln::cpu::host_empty({n}, DType::f32),
         oz = kiln::cpu::host_empty({n}, DType::boolean),
         ow = kiln::cpu::host_empty({n}, DType::f32);
  for (const auto& t : {oy, oz, ow}) poison(*t);
  const TensorImpl* ins[] = {x.get()};
  const TensorImpl* outs[] = {oy.get(), oz.get(), ow.get()};
  double scalars[] = {0.5, 0.0};
  kiln::ir::evaluate_cpu(p, ins, scalars, outs, *GetParam());
  auto* px = static_cast<const float*>(x->data());
  for (std::int64_t i = 0; i < n; ++i) {
    double ry = float(float(std::sin(double(px[i])) * 0.5f) + px[i]);
    float gy = static_cast<const float*>(oy->data())[i];
    ASSERT_NEAR(gy, ry, 4e-7 * (1 + std::fabs(ry))) << "y at " << i;
    bool gz = static_cast<const std::uint8_t*>(oz->data())[i];
    ASSERT_EQ(gz, gy > 0) << "z at " << i;
    float gw = static_cast<const float*>(ow->data())[i];
    ASSERT_EQ(gw, gz ? gy : -px[i]) << "w at " << i;
  }
}

// 40 chained ops need only a few block slots; the result must not change with the reuse.
TEST_P(CpuEvaluator, LongChainReusesSlots) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::int64_t n = 2 * kiln::ir::kBlock + 5;
  Handle x = filled({n}, rng_);
  Program p;
  auto in = p.input(DType::f32);
  auto v = in;
  for (int i = 0; i < 20; ++i) {
    v = p.binary(Op::add, p.binary(Op::mul, v, p.scalar(DType::f32)), in);  // v = v*s + x
  }
  p.output(v);
  std::vector<double> scalars(20);
  for (int i = 0; i < 20; ++i) scalars[i] = 0.5 + 0.01 * i;
  Handle out = kiln::cpu::host_empty({n}, DType::f32);
  poison(*out);
  const TensorImpl* ins[] = {x.get()};
  const TensorImpl* outs[] = {out.get()};
  kiln::ir::evaluate_cpu(p, ins, scalars, outs, *GetParam());
  auto* px = static_cast<const float*>(x->data());
  for (std::int64_t i = 0; i < n; ++i) {
    float r = px[i];
    for (int k = 0; k < 20; ++k) r = r * static_cast<float>(scalars[k]) + px[i];
    ASSERT_EQ(static_cast<const float*>(out->data())[i], r) << "at " << i;
  }
}

// A transposed input and a strided output (every other column of a wider buffer).
TEST_P(CpuEvaluator, StridedInputAndOutput) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const std::int64_t r = 67, c = 129;
  Handle x = filled({c, r}, rng_);
  TensorImpl xt = *x;  // [r, c] view of a [c, r] buffer
  xt.shape = {r, c};
  xt.strides = {1, r};
  Handle wide = kiln::cpu::host_empty({r, 2 * c}, DType::i32);
  poison(*wide);
  TensorImpl out = *wide;
  out.shape = {r, c};
  out.strides = {2 * c, 2};
  Program p;
  p.output(p.cast(p.binary(Op::mul, p.input(DType::f32), p.scalar(DType::f32)), DType::i32));
  const TensorImpl* ins[] = {&xt};
  const TensorImpl* outs[] = {&out};
  double scalars[] = {1000.0};
  kiln::ir::evaluate_cpu(p, ins, scalars, outs, *GetParam());
  auto* px = static_cast<const float*>(x->data());
  auto* pw = static_cast<const std::int32_t*>(wide->data());
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) {
      auto want = static_cast<std::int32_t>(px[j * r + i] * 1000.0f);
      ASSERT_EQ(pw[i * 2 * c + 2 * j], want) << "at " << i << ", " << j;
      ASSERT_EQ(pw[i * 2 * c + 2 * j + 1], 0x7f7f7f7f)
          << "wrote outside the view at " << i << ", " << j;
    }
  }
}

// Short innermost dims that do not coalesce (x[:, None] - c[None] of [a, b, c]): broadcast,
// dense-tile and transposed operands read a tile of the two innermost dims at a time, tiles
// cut by the evaluator's blocks at both ends, ranks 2 to 4, and a rank-3 output that is dense.
TEST_P(CpuEvaluator, ShortInnermostDimsOfBroadcastOperands) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::uniform_int_distribution<std::int64_t> small(1, 15), mid(1, 9);
  for (int round = 0; round < 12; ++round) {
    const std::int64_t c = small(rng_), b = mid(rng_);
    const std::int64_t a = 2 * kiln::ir::kBlock / (b * c) + 3 + round;
    const bool rank4 = round % 3 == 2, rank2 = round % 3 == 1;
    // x: [a, 1, c] broadcast over b; y: [1, b, c] broadcast over a, transposed every other round.
    Handle x = filled({a, c}, rng_), y = filled({c, b}, rng_);
    TensorImpl xv = *x, yv = *y;
    kiln::Dims shape = {a, b, c};
    xv.shape = shape;
    xv.strides = {c, 0, 1};
    yv.shape = shape;
    yv.strides = round % 2 ? kiln::Dims{0, 1, b} : kiln::Dims{0, c, 1};
    if (rank2) {  // [b, c] only: one tile, no outer dims
      shape = {b, c};
      xv.shape = yv.shape = shape;
      xv.strides = {0, 1};
      yv.strides = round % 2 ? kiln::Dims{1, b} : kiln::Dims{c, 1};
    }
    if (rank4) {  // [2, a, b, c]: the outer odometer has two dims
      shape.insert(shape.begin(), 2);
      xv.shape = yv.shape = shape;
      xv.strides.insert(xv.strides.begin(), 0);
      yv.strides.insert(yv.strides.begin(), 0);
    }
    Handle out = kiln::cpu::host_empty(shape, DType::f32);
    poison(*out);
    Program p;
    const auto in_x = p.input(DType::f32);
    const auto in_y = p.input(DType::f32);
    p.output(p.binary(Op::sub, in_x, in_y));
    const TensorImpl* ins[] = {&xv, &yv};
    const TensorImpl* outs[] = {out.get()};
    kiln::ir::evaluate_cpu(p, ins, {}, outs, *GetParam());
    auto* px = static_cast<const float*>(x->data());
    auto* py = static_cast<const float*>(y->data());
    auto* po = static_cast<const float*>(out->data());
    const std::int64_t n = out->numel();
    std::vector<std::int64_t> idx(shape.size());
    for (std::int64_t e = 0; e < n; ++e) {
      std::int64_t rest = e, ox = 0, oy = 0;
      for (std::size_t d = shape.size(); d-- > 0;) {
        const std::int64_t i = rest % shape[d];
        rest /= shape[d];
        ox += i * xv.strides[d];
        oy += i * yv.strides[d];
      }
      ASSERT_EQ(po[e], px[ox] - py[oy]) << "element " << e << " of " << kiln::format_dims(shape);
    }
  }
}

TEST_P(CpuEvaluator, MismatchedCallThrows) {
  Program p;
  p.output(p.input(DType::f32));
  Handle out = kiln::cpu::host_empty({4}, DType::f32);
  const TensorImpl* outs[] = {out.get()};
  EXPECT_THROW(kiln::ir::evaluate_cpu(p, {}, {}, outs, *GetParam()), kiln::Error);
}

INSTANTIATE_TEST_SUITE_P(Tables, CpuEvaluator, ::testing::ValuesIn(tables()),
                         [](const auto& info) { return std::string(info.param->target()); });

}  // namespace
