// Random tensors on CUDA: one thread per Philox block of four elements (kernels/random.cuh).
#include <string>

#include "cuda/cuda_ops.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/random_source.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {

void random(Context& ctx, const detail::RandomSpec& spec, std::uint64_t seed,
            const TensorImpl& out) {
  const bool uniform = spec.kind == detail::RandomSpec::Kind::uniform;
  const char* suffix = out.dtype == DType::f32    ? ""
                       : out.dtype == DType::bf16 ? "_bf16"
                       : out.dtype == DType::f16  ? "_f16"
                                                  : nullptr;
  if (suffix == nullptr) {
    throw DTypeError(std::string("random: ") + (uniform ? "uniform" : "normal") +
                     " fills f32, bf16 and f16 tensors, got " + dtype_name(out.dtype));
  }
  unsigned long long n = static_cast<unsigned long long>(out.numel());
  if (n == 0) return;
  const std::string name = std::string(uniform ? "kiln_uniform" : "kiln_normal") + suffix;
  cudaKernel_t k = cached_kernel(random_source(), "kiln_random.cu", name, ctx.arch());
  // (T* out, u64 n, u64 seed, float lo, float hi) or (..., float mean, float std)
  KernelArgs args;
  args.pointer(out.data());
  args.value(n);
  args.value(static_cast<unsigned long long>(seed));
  args.value(static_cast<float>(spec.a));
  args.value(static_cast<float>(spec.b));
  constexpr unsigned kThreads = 256;
  const unsigned long long blocks = ((n + 3) / 4 + kThreads - 1) / kThreads;
  ctx.make_current();
  launch(ctx, k, static_cast<unsigned>(blocks), kThreads, args.pointers());
}

}  // namespace kiln::cuda
