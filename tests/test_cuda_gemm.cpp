// kiln's own CUDA matmul kernels (src/cuda/matmul/gemm_kernel.cpp): every variant, tile and operand
// load compiles with NVRTC for sm_90 (no GPU needed, so this runs on CI); the tile choice and the
// error paths; and on a GPU, every variant and tile against a float64 reference on fresh random
// data: square, skinny, batched with a broadcast side, transposed / sliced / misaligned views, k =
// 1, k = 0, odd sizes, and more batches than grid.y holds. Outputs are poisoned with NaN first, so
// an element the kernel never writes fails. Without a GPU the device tests skip with the reason
// kiln::devices() gives.
//
// The bound per element is the classic one for a length-k fp32 dot product, doubled as in
// `kiln bench` (tools/kiln/bench.cpp): 2 k 2^-24 sum_p |a_ip c_pj|. tf32x3 drops terms below
// about 3 * 2^-22 |a c| per product (gemm_kernel.cpp), so it is allowed 16 more units of
// 2^-24 sum |a c| (a margin that matters only for short k). Each case prints its worst error in
// units of k 2^-24 sum |a c| (a strict fp32 dot product stays below about 1).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <future>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda/context.hpp"
#include "cuda/matmul/gemm_kernel.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using kiln::cuda::GemmKernelSpec;
using kiln::cuda::GemmLoad;
using kiln::cuda::GemmOperand;
using kiln::cuda::GemmTile;
using kiln::cuda::GemmVariant;
using kiln::detail::TensorImpl;
using kt::Ref;

constexpr GemmVariant kVariants[] = {GemmVariant::fp32, GemmVariant::tf32x3};
constexpr GemmTile kTiles[] = {GemmTile::t128x128, GemmTile::t128x64, GemmTile::t64x64};

// ---- without a GPU ----

// Every variant x tile, with every load of each operand (gemm_source.hpp).
TEST(CudaGemmCompile, EveryVariantTileAndLayout) {
  const auto sources = kiln::cuda::all_gemm_sources_for_tests();
  ASSERT_EQ(sources.size(), 6u);  // variants x tiles
  // Two at a time (the machines that run this have few cores).
  for (std::size_t i = 0; i < sources.size(); i += 2) {
    std::vector<std::future<std::vector<char>>> cubins;
    for (std::size_t j = i; j < std::min(i + 2, sources.size()); ++j) {
      const auto& s = sources[j];
      ASSERT_EQ(s.kernels.size(), 9u) << s.name;  // 5 loads of a, 4 more of c
      for (const auto& k : s.kernels) {
        EXPECT_NE(s.source.find(" " + k + "("), std::string::npos) << s.name << ": " << k;
      }
      cubins.push_back(std::async(std::launch::async, [&s] {
        return kiln::cuda::compile_cubin(s.source, s.name, "sm_90");
      }));
    }
    for (std::size_t j = 0; j < cubins.size(); ++j) {
      SCOPED_TRACE(sources[i + j].name);
      EXPECT_GT(cubins[j].get().size(), 0u);
    }
  }
}

// The run-time form: one kernel per source.
TEST(CudaGemmCompile, SingleKernelSource) {
  const GemmKernelSpec spec{GemmVariant::tf32x3, GemmTile::t128x64,
                            GemmOperand{GemmLoad::strided, false},
                            GemmOperand{GemmLoad::k_unit, true}};
  const std::string name = kiln::cuda::gemm_kernel_name(spec);
  EXPECT_EQ(name, "kiln_gemm_tf32x3_128x64_as_ck4");
  const std::string src = kiln::cuda::gemm_source({&spec, 1});
  EXPECT_NE(src.find(" " + name + "("), std::string::npos);
  // The templates of its variant (src/cuda/kernels/gemm_tf32x3.cuh), not the other's.
  EXPECT_NE(src.find("struct Tf32x3Block"), std::string::npos);
  EXPECT_EQ(src.find("struct Fp32Block"), std::string::npos);
  EXPECT_GT(kiln::cuda::compile_cubin(src, name + ".cu", "sm_90").size(), 0u);
}

TEST(CudaGemmCompile, KernelNamesAreDistinct) {
  std::set<std::string> names;
  std::size_t count = 0;
  for (const auto& s : kiln::cuda::all_gemm_sources_for_tests()) {
    for (const auto& k : s.kernels) names.insert(k), ++count;
  }
  EXPECT_EQ(names.size(), count);
}

// The largest tile that still gives every SM a block, else 64x64.
TEST(CudaGemmTile, DefaultFillsTheSms) {
  using kiln::cuda::default_gemm_tile;
  for (GemmVariant v : kVariants) {
    EXPECT_EQ(default_gemm_tile(v, 1, 4096, 4096, 132), GemmTile::t128x128);
    EXPECT_EQ(default_gemm_tile(v, 1, 2048, 1024, 132), GemmTile::t128x64);   // 128 x 128 gives 128
    EXPECT_EQ(default_gemm_tile(v, 1, 1024, 1024, 132), GemmTile::t64x64);    // 128 x 64 gives 128
    EXPECT_EQ(default_gemm_tile(v, 3, 1024, 1024, 132), GemmTile::t128x128);  // 192 blocks
    EXPECT_EQ(default_gemm_tile(v, 1, 1, 4096, 132), GemmTile::t64x64);
    EXPECT_EQ(default_gemm_tile(v, 1, 1024, 1024, 64), GemmTile::t128x128);
  }
}

// A TensorImpl with no memory: the checks below throw before anything reads it.
TensorImpl fake(kiln::Dims shape, DType dtype = DType::f32) {
  TensorImpl t;
  t.dtype = dtype;
  t.strides = kiln::detail::contiguous_strides(shape);
  t.shape = std::move(shape);
  return t;
}

TEST(CudaGemmErrors, ContractViolationsNameTheOperands) {
  kiln::cuda::Context ctx;  // a CPU-stamped context: never reaches the device here
  ctx.cc_major = 9;
  auto throws = [&](const TensorImpl& a, const TensorImpl& c, const TensorImpl& out,
                    const std::string& part) {
    try {
      kiln::cuda::own_gemm(ctx, GemmVariant::fp32, a, c, out);
      ADD_FAILURE() << "no exception for " << part;
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  throws(fake({4, 5}), fake({1, 5, 6}), fake({1, 4, 6}), "rank 3, got [4, 5]");
  throws(fake({1, 4, 5}), fake({1, 5, 6}, DType::i32), fake({1, 4, 6}), "got i32");
  throws(fake({1, 4, 5}), fake({1, 7, 6}), fake({1, 4, 6}), "[1, 4, 5] @ [1, 7, 6]");
  throws(fake({2, 4, 5}), fake({3, 5, 6}), fake({3, 4, 6}), "[2, 4, 5] @ [3, 5, 6]");
  TensorImpl strided = fake({1, 4, 6});
  strided.strides = {24, 1, 4};
  throws(fake({1, 4, 5}), fake({1, 5, 6}), strided, "not contiguous");
  EXPECT_THROW(kiln::cuda::own_gemm(ctx, GemmVariant::fp32, fake({1, 4, 5}), fake({1, 5, 6}),
                                    fake({1, 4, 6}, DType::boolean)),
               kiln::DTypeError);
}

// What the variants refuse, and an empty output, decided before any memory is touched.
TEST(CudaGemmErrors, RefusalsAndEmptyOutputs) {
  kiln::cuda::Context ctx;
  ctx.cc_major = 7;  // before sm_80: no TF32 mma
  EXPECT_FALSE(kiln::cuda::own_gemm(ctx, GemmVariant::tf32x3, fake({1, 4, 5}), fake({1, 5, 6}),
                                    fake({1, 4, 6})));
  ctx.cc_major = 9;
  EXPECT_TRUE(kiln::cuda::own_gemm(ctx, GemmVariant::fp32, fake({1, 0, 5}), fake({1, 5, 6}),
                                   fake({1, 0, 6})));
  EXPECT_TRUE(kiln::cuda::own_gemm(ctx, GemmVariant::tf32x3, fake({0, 4, 5}), fake({0, 5, 6}),
                                   fake({0, 4, 6})));
}

// ---- on a GPU ----

// How an operand [B, rows, cols] is laid out in memory.
enum class View {
  contiguous,  // row-major
  transposed,  // x.transpose(1, 2) of a [B, cols, rows] tensor: unit row stride
  strided,     // every other column of [B, rows, 2 cols + 1]: no unit stride at all
  misaligned,  // columns 1.. of [B, rows, cols + 1]: unit column stride, odd row stride, offset 1
  transposed_strided,  // every other row of a transpose: unit row stride, column stride 2 rows
  broadcast,           // one [1, rows, cols] matrix expanded over the batch (stride 0)
};
constexpr View kViews[] = {View::contiguous, View::transposed,         View::strided,
                           View::misaligned, View::transposed_strided, View::broadcast};
const char* view_name(View v) {
  switch (v) {
    case View::contiguous:
      return "contiguous";
    case View::transposed:
      return "transposed";
    case View::strided:
      return "strided";
    case View::misaligned:
      return "misaligned";
    case View::transposed_strided:
      return "transposed_strided";
    case View::broadcast:
      return "broadcast";
  }
  return "?";
}

struct Operand {
  Tensor<3> t;
  Ref r;  // the same view of the same data, in float64
};

Operand make_operand(View v, std::int64_t b, std::int64_t rows, std::int64_t cols,
                     std::mt19937_64& g) {
  const Device dev = Device::cuda(0);
  auto make = [&](std::int64_t d0, std::int64_t d1, std::int64_t d2) {
    auto data = kt::uniform(static_cast<std::size_t>(d0 * d1 * d2), -1, 1, g);
    return Operand{Tensor<3>::from_data(data, Shape<3>{d0, d1, d2}, dev),
                   Ref::of(data, {d0, d1, d2})};
  };
  switch (v) {
    case View::contiguous:
      return make(b, rows, cols);
    case View::transposed: {
      auto x = make(b, cols, rows);
      return {x.t.transpose(1, 2), x.r.transpose(1, 2)};
    }
    case View::strided: {
      auto x = make(b, rows, 2 * cols + 1);
      return {x.t.slice(2, 0, 2 * cols, 2), x.r.slice(2, 0, 2 * cols, 2)};
    }
    case View::misaligned: {
      auto x = make(b, rows, cols + 1);
      return {x.t.slice(2, 1, cols + 1), x.r.slice(2, 1, cols + 1)};
    }
    case View::transposed_strided: {
      auto x = make(b, 2 * cols, rows);
      return {x.t.transpose(1, 2).slice(2, 0, 2 * cols, 2),
              x.r.transpose(1, 2).slice(2, 0, 2 * cols, 2)};
    }
    case View::broadcast: {
      auto x = make(1, rows, cols);
      return {x.t.expand(Shape<3>{b, rows, cols}), x.r.expand({b, rows, cols})};
    }
  }
  return make(b, rows, cols);
}

// out = a @ c in float64, and sum_p |a_ip c_pj| per element.
struct Reference {
  std::vector<double> value, magnitude;
};
Reference reference(const Ref& a, const Ref& c) {
  const auto batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = c.shape()[2];
  const auto av = a.values(), cv = c.values();
  Reference r;
  r.value.assign(static_cast<std::size_t>(batch * m * n), 0.0);
  r.magnitude = r.value;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      double* v = &r.value[static_cast<std::size_t>((b * m + i) * n)];
      double* mag = &r.magnitude[static_cast<std::size_t>((b * m + i) * n)];
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = av[static_cast<std::size_t>((b * m + i) * k + p)];
        const double* crow = &cv[static_cast<std::size_t>((b * k + p) * n)];
        for (std::int64_t j = 0; j < n; ++j) {
          v[j] += x * crow[j];
          mag[j] += std::fabs(x * crow[j]);
        }
      }
    }
  }
  return r;
}

// Runs own_gemm into a NaN-poisoned output and returns the output's values.
std::vector<float> run(GemmVariant v, std::optional<GemmTile> tile, const Tensor<3>& a,
                       const Tensor<3>& c) {
  auto& ctx = kiln::cuda::context(0);
  const auto batch = std::max(a.shape()[0], c.shape()[0]);
  auto out = Tensor<3>::full(Shape<3>{batch, a.shape()[1], c.shape()[2]},
                             std::numeric_limits<float>::quiet_NaN(), DType::f32, Device::cuda(0));
  Device::cuda(0).sync();  // every operand exists before the kernel reads it
  const bool ran = kiln::cuda::own_gemm(ctx, v, *a.handle(), *c.handle(), *out.handle(), tile);
  EXPECT_TRUE(ran) << kiln::cuda::gemm_variant_name(v) << " refused the problem";
  cudaError_t e = cudaStreamSynchronize(ctx.stream);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return out.to_vector<float>();
}

// Every element within its bound; on failure the worst one with its reference and bound.
// Prints the worst error in units of k 2^-24 sum |a c|.
void expect_within(const std::vector<float>& got, const Reference& ref, const Shape<3>& shape,
                   std::int64_t k, GemmVariant v, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  const double units = 2.0 * static_cast<double>(k) + (v == GemmVariant::tf32x3 ? 16.0 : 0.0);
  ASSERT_EQ(got.size(), ref.value.size()) << what;
  // The worst element by error / (k u sum|ac|): beyond the bound if any element is (the bound
  // is the same multiple of that scale for every element).
  std::int64_t bad = 0;
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - ref.value[i]);
    const double scale = static_cast<double>(std::max<std::int64_t>(k, 1)) * u * ref.magnitude[i];
    const double ratio =
        !(diff <= 0) ? (scale > 0 && !std::isnan(diff) ? diff / scale : INFINITY) : 0.0;
    if (!(diff <= units * u * ref.magnitude[i])) ++bad;
    if (ratio > worst) worst = ratio, at = i;
  }
  const double worst_seen = worst;
  std::cout << "[ gemm     ] " << what << ": worst error " << worst_seen << " k 2^-24 sum|ac|\n";
  if (bad == 0) return;
  const auto n = shape[2], m = shape[1];
  const auto b = static_cast<std::int64_t>(at) / (m * n), i = static_cast<std::int64_t>(at) / n % m,
             j = static_cast<std::int64_t>(at) % n;
  ADD_FAILURE() << what << ": " << bad << " of " << got.size()
                << " elements beyond the bound; worst [" << b << ", " << i << ", " << j
                << "] = " << std::setprecision(9) << got[at] << ", float64 reference "
                << std::setprecision(17) << ref.value[at] << ", |diff| "
                << std::fabs(got[at] - ref.value[at]) << " > bound "
                << units * u * ref.magnitude[at] << " (" << units << " x 2^-24 x sum|ac| "
                << ref.magnitude[at] << ")";
}

// One problem, every variant (and every tile when all_tiles): a [B, m, k] in view va,
// c [B, k, n] in view vc.
void check_problem(std::mt19937_64& g, std::int64_t batch, std::int64_t m, std::int64_t n,
                   std::int64_t k, View va, View vc, bool all_tiles) {
  const Operand a = make_operand(va, batch, m, k, g), c = make_operand(vc, batch, k, n, g);
  const Reference ref = reference(a.r, c.r);
  const Shape<3> shape{batch, m, n};
  for (GemmVariant v : kVariants) {
    std::vector<std::optional<GemmTile>> tiles = {std::nullopt};
    if (all_tiles) tiles.assign(std::begin(kTiles), std::end(kTiles));
    std::vector<float> first;
    for (const auto& t : tiles) {
      const std::string what = fmt::format("{} tile {} [{}, {}, {}] ({}) @ [{}, {}, {}] ({})",
                                           kiln::cuda::gemm_variant_name(v),
                                           t ? kiln::cuda::gemm_tile_name(*t) : "default", batch, m,
                                           k, view_name(va), batch, k, n, view_name(vc));
      SCOPED_TRACE(what);
      const auto got = run(v, t, a.t, c.t);
      expect_within(got, ref, shape, k, v, what);
      // fp32 is one fused chain in k order per element: every tile gives the same values.
      if (v == GemmVariant::fp32 && !first.empty()) {
        std::size_t differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i) differ += !(got[i] == first[i]);
        EXPECT_EQ(differ, 0u) << "fp32 values depend on the tile";
      }
      if (first.empty()) first = got;
    }
  }
}

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kt::cuda_reason().empty()) GTEST_SKIP() << "cuda: " << kt::cuda_reason();
    seed_ = kt::fresh_seed();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (KILN_TEST_SEED reruns it)");
    kiln::Config cfg = kiln::config();
    cfg.fusion = false;  // eager: every operand is a real buffer when own_gemm reads it
    kiln::set_config(cfg);
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  kt::ConfigGuard config_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

TEST_F(CudaGemm, Square1024EveryTile) {
  check_problem(rng(), 1, 1024, 1024, 1024, View::contiguous, View::contiguous, true);
}

TEST_F(CudaGemm, Skinny) {
  check_problem(rng(), 1, 1, 4096, 1000, View::contiguous, View::contiguous, true);
  check_problem(rng(), 1, 4097, 3, 17, View::contiguous, View::contiguous, true);
  check_problem(rng(), 1, 4096, 1, 1000, View::transposed, View::contiguous, false);
}

TEST_F(CudaGemm, BatchedWithABroadcastSide) {
  check_problem(rng(), 3, 200, 136, 96, View::contiguous, View::broadcast, true);
  check_problem(rng(), 3, 77, 45, 130, View::broadcast, View::contiguous, false);
  check_problem(rng(), 3, 64, 64, 64, View::broadcast, View::broadcast, false);
}

// Every view of a against every view of c, at a shape where the float4 paths apply and at one
// where none does.
TEST_F(CudaGemm, TransposedStridedAndMisalignedViews) {
  for (View va : kViews) {
    for (View vc : kViews) {
      check_problem(rng(), 2, 128, 64, 96, va, vc, false);
      check_problem(rng(), 2, 67, 45, 39, va, vc, false);
    }
  }
}

TEST_F(CudaGemm, KOneAndKZero) {
  for (View va : {View::contiguous, View::transposed, View::strided}) {
    for (View vc : {View::contiguous, View::transposed, View::misaligned}) {
      check_problem(rng(), 1, 130, 129, 1, va, vc, false);
    }
  }
  for (GemmVariant v : kVariants) {  // k = 0: a sum of no products, every element +0
    auto a = Tensor<3>::zeros(Shape<3>{2, 5, 0}, DType::f32, Device::cuda(0));
    auto c = Tensor<3>::zeros(Shape<3>{2, 0, 7}, DType::f32, Device::cuda(0));
    const auto got = run(v, std::nullopt, a, c);
    ASSERT_EQ(got.size(), 70u);
    for (float x : got) ASSERT_EQ(x, 0.0f) << kiln::cuda::gemm_variant_name(v);
  }
}

TEST_F(CudaGemm, OddSizes) {
  std::uniform_int_distribution<std::int64_t> size(1, 130), batch(1, 3);
  std::uniform_int_distribution<int> view(0, 5);
  for (int trial = 0; trial < 24; ++trial) {
    check_problem(rng(), batch(rng()), size(rng()), size(rng()), size(rng()), kViews[view(rng())],
                  kViews[view(rng())], trial % 4 == 0);
  }
}

// More batches than grid.y's 65535: each block loops over batch indices.
TEST_F(CudaGemm, BatchBeyondGridY) {
  check_problem(rng(), 70000, 3, 2, 5, View::contiguous, View::transposed, false);
}

}  // namespace
