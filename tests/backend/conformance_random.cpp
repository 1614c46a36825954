// Backend::random on every chain: element i of the contiguous output is element i of the Philox
// 4x32-10 stream of the seed (src/core/philox.hpp: bit for bit, normal values included), counted
// from the output's first element even when it starts mid-buffer; partial Philox blocks; empty
// outputs; and the dtypes it fills (f32, and bf16 and f16 holding the f32 values rounded once).
//
// The reference is the element-at-a-time mapping (philox::uniform_at, dev::normal_at), which
// tests/test_cpu_random.cpp checks against Random123's known answers and the mapping written out.
#include "chains.hpp"
#include "core/philox.hpp"
#include "ir/box_muller.cuh"

namespace {

using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::RandomSpec;

class BackendRandom : public kc::ChainTest {
 protected:
  // The first n elements of the stream of `seed` for spec, and the tolerance they are held to.
  static Values stream(const RandomSpec& spec, std::uint64_t seed, std::int64_t n, kt::Tol& tol) {
    Values v;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::uint64_t>(i);
      v.push_back(spec.kind == RandomSpec::Kind::uniform
                      ? kiln::philox::uniform_at(seed, u, static_cast<float>(spec.a),
                                                 static_cast<float>(spec.b))
                      : kiln::dev::normal_at(seed, u, static_cast<float>(spec.a),
                                             static_cast<float>(spec.b)));
    }
    tol = kt::kExact;
    return v;
  }
};
KILN_INSTANTIATE_CHAINS(BackendRandom);

TEST_P(BackendRandom, FollowsThePhiloxStream) {
  const RandomSpec specs[] = {{RandomSpec::Kind::uniform, 0, 1},
                              {RandomSpec::Kind::uniform, -3, 5.5},
                              {RandomSpec::Kind::normal, 0, 1},
                              {RandomSpec::Kind::normal, 2.5, 0.25}};
  for (const RandomSpec& spec : specs) {
    SCOPED_TRACE(std::string(spec.kind == RandomSpec::Kind::uniform ? "uniform" : "normal") + "(" +
                 std::to_string(spec.a) + ", " + std::to_string(spec.b) + ")");
    // Sizes around Philox's 4-element blocks, one past a CPU task, and rank 3.
    for (const Dims& shape : {Dims{1}, Dims{3}, Dims{4}, Dims{5}, Dims{16385}, Dims{3, 5, 7}}) {
      for (const Layout& l : {kc::contiguous(), kc::offset()}) {
        // A half type holds the f32 value rounded once (tolerance 0: exactly its rounding).
        for (DType t : {DType::f32, DType::bf16, DType::f16}) {
          SCOPED_TRACE(kiln::format_dims(shape) + " " + l.name + " " + kiln::dtype_name(t));
          const std::uint64_t seed = rng()();
          kt::Tol tol;
          const Values want = stream(spec, seed, kc::detail::numel(shape), tol);
          Operand out = output(shape, t, l);
          be().random(spec, seed, kiln::detail::Out(out.view));
          EXPECT_TRUE(kc::matches(read(out), shape, want, tol));
          EXPECT_TRUE(untouched_outside(out));
          // A fresh output from empty() (a fusion decorator gives it memory at this call).
          Handle fresh = be().empty(shape, t);
          be().random(spec, seed, kiln::detail::Out(*fresh));
          EXPECT_TRUE(kc::matches(read(*fresh), shape, want, tol));
        }
      }
    }
  }
}

// The seed's 64 bits all count: seeds that differ in the high word give other values.
TEST_P(BackendRandom, EverySeedBitCounts) {
  const RandomSpec spec{RandomSpec::Kind::uniform, 0, 1};
  const std::uint64_t seed = rng()();
  for (const std::uint64_t s : {seed, seed ^ (std::uint64_t{1} << 63), seed ^ 1}) {
    kt::Tol tol;
    const Values want = stream(spec, s, 64, tol);
    Operand out = output({64}, DType::f32);
    be().random(spec, s, kiln::detail::Out(out.view));
    EXPECT_TRUE(kc::matches(read(out), {64}, want, tol)) << "seed " << s;
  }
}

// An empty output: nothing written, nothing thrown.
TEST_P(BackendRandom, EmptyOutput) {
  for (const Dims& shape : {Dims{0}, Dims{3, 0}}) {
    Operand out = output(shape, DType::f32, kc::offset());
    be().random({RandomSpec::Kind::normal, 0, 1}, rng()(), kiln::detail::Out(out.view));
    EXPECT_TRUE(untouched_outside(out));
  }
}

// random fills the floating dtypes only: i32 or bool is a DTypeError (both backends, as their
// supports() answers).
TEST_P(BackendRandom, FillsOnlyFloatingDTypes) {
  EXPECT_TRUE(be().supports(kiln::detail::BackendOp::random, std::vector{DType::bf16, DType::f16}));
  for (DType t : {DType::i32, DType::boolean}) {
    for (auto kind : {RandomSpec::Kind::uniform, RandomSpec::Kind::normal}) {
      Operand out = output({9}, t);
      EXPECT_THROW(be().random({kind, 0, 1}, 7, kiln::detail::Out(out.view)), kiln::DTypeError)
          << kiln::dtype_name(t);
    }
  }
}

}  // namespace
