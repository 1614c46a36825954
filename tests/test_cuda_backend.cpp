// What is particular to the CUDA backend: discovery and its reasons, checked calls, the
// stream-ordered allocator and its out-of-memory path, the vector/strided/64-bit kernel
// variants, Philox random equal to the CPU's, and matmul precision. The op suite itself runs on
// CUDA through the device-parameterised tests. Without a usable GPU these tests skip with the
// reason kiln::devices() gives.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;

TEST(CudaDiscovery, PresentWithArchOrAbsentWithReason) {
  const auto infos = kiln::devices();
  if (kt::cuda_reason().empty()) {
    auto& ctx = kiln::cuda::context(0);
    const std::string cuda = "cuda<" + ctx.arch() + ">";
    const std::string chain = KILN_WITH_FUSION ? "fusion<" + cuda + ">" : cuda;
    EXPECT_EQ(Device::cuda(0).backend_name(),
              KILN_WITH_AUTODIFF ? "dispatch<autodiff<" + chain + ">>" : "dispatch<" + chain + ">");
    EXPECT_EQ(Device::best(), Device::cuda(0));
    EXPECT_EQ(infos.at(1).name, "cuda:0");
  } else {
    EXPECT_EQ(Device::best(), Device::cpu());
    ASSERT_EQ(infos.size(), 2u);
    EXPECT_FALSE(infos[1].present);
    EXPECT_EQ(infos[1].reason, kt::cuda_reason());
    try {
      Device::cuda(0);
      FAIL() << "Device::cuda(0) did not throw";
    } catch (const kiln::DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(kt::cuda_reason()), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Device::cuda(1000), kiln::DeviceError);
}

// A failing runtime call throws DeviceError with the call's text and CUDA's message (this runs
// without a GPU too: every call then fails).
TEST(CudaCheck, FailedCallNamesTheCallAndTheError) {
  try {
    KILN_CUDA_CHECK(cudaSetDevice(4096));
    FAIL() << "no exception";
  } catch (const kiln::DeviceError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice(4096)"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda"), std::string::npos) << what;
  }
}

// The same seed gives the same tensor as on the CPU, bit for bit (normal values too: kiln's own
// float Box-Muller, src/ir/box_muller.cuh, runs on both).
TEST(CudaRandom, SameStreamAsTheCpu) {
  KILN_REQUIRE_CUDA();
  const std::uint64_t seed = kt::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::int64_t n = (1 << 20) + 3;  // a partial last block
  auto u = kiln::Distribution::uniform(-3, 5);
  auto on_gpu = Tensor<1>::random({n}, u, Device::cuda(0), seed).to_vector<float>();
  auto on_cpu = Tensor<1>::random({n}, u, Device::cpu(), seed).to_vector<float>();
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < n; ++i) differ += std::memcmp(&on_gpu[i], &on_cpu[i], 4) != 0;
  EXPECT_EQ(differ, 0);
  auto g = kiln::Distribution::normal(1, 2);
  on_gpu = Tensor<1>::random({n}, g, Device::cuda(0), seed).to_vector<float>();
  on_cpu = Tensor<1>::random({n}, g, Device::cpu(), seed).to_vector<float>();
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&on_gpu[i], &on_cpu[i], 4), 0)
        << "element " << i << ": " << on_gpu[i] << " on CUDA, " << on_cpu[i] << " on the CPU";
}

// Asking for more than the device has throws OutOfMemoryError naming the bytes asked for and
// free, and the device keeps working. (Under fusion the memory is taken when the recorded
// zeros run: a slice must read them from memory, while a reduction would evaluate the fill
// inside its own kernel and need none.)
TEST(CudaMemory, OutOfMemoryIsAnErrorAndTheDeviceRecovers) {
  KILN_REQUIRE_CUDA();
  auto& ctx = kiln::cuda::context(0);
  // Twice the device's memory: refused at the op, before anything is recorded or allocated.
  const std::int64_t too_many = static_cast<std::int64_t>(ctx.total_memory / 4) * 2;
  try {
    (void)Tensor<1>::zeros({too_many}, DType::f32, Device::cuda(0));
    FAIL() << "no exception";
  } catch (const kiln::OutOfMemoryError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("full: a f32 tensor of shape [" + std::to_string(too_many) + "] needs " +
                        std::to_string(too_many * 4) + " bytes"),
              std::string::npos)
        << what;
  }
  // Within the device's memory but not beside another such tensor: the allocator refuses it
  // when the tensor is given memory (at the op unfused, when its group runs fused).
  const std::int64_t most = static_cast<std::int64_t>(ctx.total_memory / 4) * 6 / 10;
  auto held = Tensor<1>::zeros({most}, DType::f32, Device::cuda(0));
  EXPECT_EQ(held.slice(0, most - 1, most).item<float>(), 0.0f);
  try {
    auto t = Tensor<1>::zeros({most}, DType::f32, Device::cuda(0));
    (void)t.slice(0, 0, 4).to_vector();
    FAIL() << "no exception";
  } catch (const kiln::OutOfMemoryError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("asked for " + std::to_string(most * 4) + " bytes"), std::string::npos)
        << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  held = {};
  auto x = Tensor<1>::full({1000}, 2.0f, DType::f32, Device::cuda(0));
  EXPECT_EQ((x * 3.0f).sum().item<float>(), 6000.0f);
  // The pool would keep the freed 60% reserved for this process, leaving the kiln processes that
  // later tests start too little to create a context.
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  KILN_CUDA_CHECK(cudaMemPoolTrimTo(ctx.pool, 0));
}

// Freed buffers are reused in stream order: a loop that allocates and drops a large tensor per
// step stays within a few of them.
TEST(CudaMemory, FreedMemoryIsReused) {
  KILN_REQUIRE_CUDA();
  auto x = Tensor<2>::ones({2048, 2048}, DType::f32, Device::cuda(0));
  Device::cuda(0).sync();
  // This process's pool, not the device's free memory: the suite runs in shards that share the
  // GPU (bench/h200_call.sh), and another shard's allocations made a device-wide count fail.
  const cudaMemPool_t pool = kiln::cuda::context(0).pool;
  std::uint64_t reserved_before = 0, reserved_after = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved_before),
            cudaSuccess);
  for (int i = 0; i < 200; ++i) x = x * 1.0f + 0.0f;
  Device::cuda(0).sync();
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved_after),
            cudaSuccess);
  EXPECT_LT(static_cast<double>(reserved_after) - static_cast<double>(reserved_before),
            64.0 * (1 << 20));
  EXPECT_EQ(x.sum().item<float>(), 2048.0f * 2048.0f);
}

// A freed block is kept for the next request of its exact size, newest first, within
// kKeptBlocks and kKeptBytes; a block over kKeptBytes goes straight back to the pool.
TEST(CudaMemory, FreedBlocksAreKeptForTheirSizeWithinTheLimits) {
  KILN_REQUIRE_CUDA();
  kiln::cuda::Context& ctx = kiln::cuda::context(0);
  constexpr std::size_t kOdd = 12345 * 4;  // a size no other test asks for
  std::vector<std::shared_ptr<kiln::detail::Buffer>> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(kiln::cuda::device_alloc(ctx, kOdd));
  void* const last = blocks.back()->data();
  for (auto& b : blocks) b.reset();  // freed in order: the last one is the newest kept
  const kiln::cuda::KeptMemory held = kiln::cuda::kept_memory(ctx);
  EXPECT_LE(held.blocks, kiln::cuda::kKeptBlocks);
  EXPECT_LE(held.bytes, kiln::cuda::kKeptBytes);
  EXPECT_GE(held.blocks, 1u);
  const auto again = kiln::cuda::device_alloc(ctx, kOdd);
  EXPECT_EQ(again->data(), last) << "the newest kept block of the size";
  EXPECT_EQ(kiln::cuda::kept_memory(ctx).blocks, held.blocks - 1);

  const kiln::cuda::KeptMemory before = kiln::cuda::kept_memory(ctx);
  kiln::cuda::device_alloc(ctx, kiln::cuda::kKeptBytes + 4096).reset();
  EXPECT_EQ(kiln::cuda::kept_memory(ctx).bytes, before.bytes) << "too large to keep";
}

// Unaligned (a slice starting at element 1), broadcast and strided operands take the general
// kernel; results equal the CPU's exactly for exact ops.
TEST(CudaElementwise, VectorAndGeneralPathsAgree) {
  KILN_REQUIRE_CUDA();
  std::mt19937_64 rng(kt::fresh_seed());
  auto v = kt::uniform(4099 * 3, -4, 4, rng);
  auto run = [&](Device d) {
    auto x = Tensor<2>::from_data(v, {3, 4099}, d);
    auto sliced = x.slice(1, 1, 4099);                            // unaligned rows
    auto t = x.transpose(0, 1);                                   // strided
    auto row = x.slice(0, 0, 1).expand(kiln::Shape<2>{3, 4099});  // broadcast
    std::vector<float> a = (sliced * 2.0f - 1.0f).to_vector();
    std::vector<float> b = (t + t).to_vector();
    std::vector<float> c = kiln::maximum(x, row).to_vector();
    std::vector<float> all = a;
    all.insert(all.end(), b.begin(), b.end());
    all.insert(all.end(), c.begin(), c.end());
    return all;
  };
  EXPECT_EQ(run(Device::cuda(0)), run(Device::cpu()));
}

// Past 2^31 elements the kernels index in 64 bits (17 GB of device memory).
TEST(CudaElementwise, MoreThanTwoToThe31Elements) {
  KILN_REQUIRE_CUDA();
  const std::int64_t n = (std::int64_t{1} << 31) + 9;
  auto x = Tensor<1>::full({n}, 1.5f, DType::f32, Device::cuda(0));
  auto y = x * 2.0f;
  for (float v : y.slice(0, n - 5, n).to_vector<float>()) EXPECT_EQ(v, 3.0f);
  EXPECT_EQ(y.sum().item<float>(), static_cast<float>(3.0 * static_cast<double>(n)));
}

// Precision::high runs TF32 tensor cores: visibly less exact than highest, within its bound.
TEST(CudaMatmul, PrecisionHighIsTf32WithinItsBound) {
  KILN_REQUIRE_CUDA();
  std::mt19937_64 rng(kt::fresh_seed());
  const std::int64_t m = 256, k = 512, n = 128;
  auto av = kt::uniform(m * k, -1, 1, rng), bv = kt::uniform(k * n, -1, 1, rng);
  auto a = Tensor<2>::from_data(av, {m, k}, Device::cuda(0));
  auto b = Tensor<2>::from_data(bv, {k, n}, Device::cuda(0));
  auto max_rel_error = [&](kiln::Precision p) {
    kiln::set_float32_matmul_precision(p);
    auto c = kiln::matmul(a, b).to_vector<float>();
    kiln::set_float32_matmul_precision(kiln::Precision::highest);
    double worst = 0;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          exact += double(av[i * k + q]) * bv[q * n + j];
          mag += std::fabs(double(av[i * k + q]) * bv[q * n + j]);
        }
        worst = std::max(worst, std::fabs(c[i * n + j] - exact) / mag);
      }
    }
    return worst;
  };
  const double highest = max_rel_error(kiln::Precision::highest);
  const double high = max_rel_error(kiln::Precision::high);
  EXPECT_LT(highest, 1e-6);
  EXPECT_LT(high, 2.0 * std::ldexp(1.0, -11));
  EXPECT_GT(high, 4 * highest) << "Precision::high did not use TF32";
}

}  // namespace

// The CUDA prelude's short path for sin and cos (|x| <= pi/4, src/ir/cuda_codegen.cpp) within
// 1 ULP of the float64 value (docs/accuracy.md: 0.69 / 0.55 measured) over every 61st float of
// [2^-12, pi/4] and its negatives, plus the ends; KILN_EXHAUSTIVE=cuda-sin takes every float.
TEST(CudaElementwise, SinAndCosShortPathWithinOneUlp) {
  KILN_REQUIRE_CUDA();
  const char* ex = std::getenv("KILN_EXHAUSTIVE");
  const std::uint32_t step = ex && std::string(ex).find("cuda-sin") != std::string::npos ? 1 : 61;
  const float lo = 0x1p-12f, hi = 0.785398185f;
  std::uint32_t b_lo, b_hi;
  std::memcpy(&b_lo, &lo, 4);
  std::memcpy(&b_hi, &hi, 4);
  const std::uint64_t per_chunk = 1u << 23;  // bit patterns per upload (each with its negative)
  auto ulp_error = [](float got, double want) {
    int e = 0;
    std::frexp(want, &e);
    return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, e - 24);
  };
  double worst_sin = 0, worst_cos = 0;
  for (std::uint64_t start = b_lo; start <= b_hi; start += per_chunk * step) {
    std::vector<float> x;
    for (std::uint64_t b = start; b <= b_hi && b < start + per_chunk * step; b += step) {
      const auto bits = static_cast<std::uint32_t>(b);
      float v;
      std::memcpy(&v, &bits, 4);
      x.push_back(v);
      x.push_back(-v);
    }
    if (start == b_lo) x.push_back(hi);
    const auto t = Tensor<1>::from_data(x, {static_cast<std::int64_t>(x.size())}, Device::cuda(0));
    const std::vector<float> s = t.sin().to_vector<float>(), c = t.cos().to_vector<float>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double es = ulp_error(s[i], std::sin(static_cast<double>(x[i])));
      const double ec = ulp_error(c[i], std::cos(static_cast<double>(x[i])));
      ASSERT_LE(es, 1.0) << "sin(" << x[i] << ") = " << s[i];
      ASSERT_LE(ec, 1.0) << "cos(" << x[i] << ") = " << c[i];
      worst_sin = std::max(worst_sin, es);
      worst_cos = std::max(worst_cos, ec);
    }
  }
  std::printf("[ measured ] CUDA short path: sin within %.3f ULP, cos within %.3f ULP\n", worst_sin,
              worst_cos);
}
