// preload_matmul (src/cuda/matmul/matmul.cpp, cublaslt_state.hpp): a stored cuBLASLt choice is run
// once on scratch memory that is then freed; values that are no algorithm and problems past the
// scratch limit are left alone; the device stays usable and later products stay right.
// Without a GPU these skip with the reason cuda::absent_reason gives.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/context.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/matmul/cublaslt_state.hpp"
#include "cuda/matmul/matmul_algos.hpp"
#include "require_cuda.hpp"
#include "test_support.hpp"

#if KILN_WITH_AUTOTUNE
namespace {

namespace cuda = kiln::cuda;
using kiln::tune::MatmulProblem;

// The heuristic's first algorithm for an f32 n x n x n product, strict fp32: what the tuner
// would have stored for that problem.
cublasLtMatmulAlgo_t heuristic_first(const cuda::LtState& lt, std::uint64_t n) {
  cuda::MatmulDesc desc;
  cuda::Layout layout;
  cuda::Preference pref;
  EXPECT_EQ(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout.h, CUDA_R_32F, n, n, n), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref.h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(
      cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &cuda::kWorkspaceBytes, sizeof(cuda::kWorkspaceBytes)),
      CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt.handle, desc.h, layout.h, layout.h, layout.h,
                                           layout.h, pref.h, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  return result.algo;
}

TEST(CudaMatmulPreload, RunsAStoredChoiceOnScratchAndLeavesTheRestAlone) {
  KILN_REQUIRE_CUDA();
  cuda::Context& ctx = cuda::context(0);
  const cuda::LtState& lt = cuda::lt_state(ctx);
  const std::string value = cuda::algo_value(heuristic_first(lt, 64));
  const long long buffers = kiln::memory_stats().live_buffers;

  for (const MatmulProblem& p : {MatmulProblem{"f32", "highest", 'N', 'N', 1, 64, 64, 64, ""},
                                 MatmulProblem{"f32", "highest", 'T', 'N', 2, 64, 64, 64, ""}}) {
    EXPECT_NO_THROW(cuda::preload_matmul(ctx, lt, p, value)) << p.op_a << p.op_b;
  }
  const MatmulProblem small{"f32", "highest", 'N', 'N', 1, 64, 64, 64, ""};
  for (const char* other : {"own:fp32", "lt:zz", ""})
    EXPECT_NO_THROW(cuda::preload_matmul(ctx, lt, small, other)) << other;
  // Past the scratch limit nothing is allocated (else this would be an OutOfMemoryError).
  const MatmulProblem huge{"f32", "highest", 'N', 'N', 1, 1 << 20, 1 << 20, 1 << 20, ""};
  EXPECT_NO_THROW(cuda::preload_matmul(ctx, lt, huge, value));

  ASSERT_EQ(cudaStreamSynchronize(ctx.stream), cudaSuccess);
  EXPECT_EQ(kiln::memory_stats().live_buffers, buffers) << "the scratch was not freed";

  // A product of the preloaded shape afterwards, against float64.
  const auto dev = kiln::Device::cuda(0);
  const std::uint64_t seed = kt::fresh_seed();
  const auto a = kiln::Tensor<2>::random({64, 64}, kiln::Distribution::uniform(-1, 1), dev, seed);
  const auto b =
      kiln::Tensor<2>::random({64, 64}, kiln::Distribution::uniform(-1, 1), dev, seed + 1);
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>(),
                           got = kiln::matmul(a, b).to_vector<float>();
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double want = 0, mag = 0;
      for (int q = 0; q < 64; ++q) {
        want += double(x[i * 64 + q]) * y[q * 64 + j];
        mag += std::abs(double(x[i * 64 + q]) * y[q * 64 + j]);
      }
      ASSERT_LE(std::abs(got[i * 64 + j] - want), 2 * 64 * std::ldexp(mag, -24) + 1e-30)
          << "element " << i << ", " << j << " (seed " << seed << ")";
    }
}

}  // namespace
#endif
