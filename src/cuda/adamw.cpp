// The CUDA backend's multi-tensor AdamW (Backend::adamw): kernels/adamw.cuh, one launch per
// kernel table of kMaxParts parameters, queued with no host sync.
//
// Why: a GPT-2 step's update was one element-wise kernel per parameter (or per few of one shape):
// about 75 launches and 1.8 ms of device time on the H100 (2026-12-06), the small parameters'
// kernels mostly launch latency.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/cuda_ops.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "embed/cuda/kernels/adamw.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

constexpr std::size_t kParts = 16;  // kadam::kMaxParts
constexpr long long kChunk = 16384;
constexpr unsigned kThreads = 256;

long long address(const TensorImpl* t) {
  return t ? static_cast<long long>(reinterpret_cast<std::uintptr_t>(t->data())) : 0;
}

}  // namespace

const std::string& adamw_source() {
  static const std::string s =
      ir::cuda_prelude() + std::string(embed::cuda_kernels_adamw_cuh) +
      fmt::format(
          "extern \"C\" __global__ void __launch_bounds__({}) kiln_adamw(kadam::Table t, const "
          "float* clip, float factor, float decay, float beta1, float beta2, float step, float "
          "inv_sqrt_bias2, float eps) {{\n"
          "  kadam::adamw(t, clip, {{factor, decay, beta1, beta2, step, inv_sqrt_bias2, eps}});\n"
          "}}\n",
          kThreads);
  return s;
}

bool adamw(Context& ctx, std::span<const detail::AdamWTensors> params,
           const detail::AdamWScalars& s) {
  detail::check_adamw_call(params, s);
  // kadam::Scalars, as the per-parameter expressions round them (src/optim/adamw.cpp).
  const double scalars[] = {s.factor,       1.0 - s.lr * s.weight_decay, s.beta1, s.beta2,
                            s.lr / s.bias1, 1.0 / std::sqrt(s.bias2),    s.eps};
  std::vector<const detail::AdamWTensors*> parts;
  for (const detail::AdamWTensors& p : params)
    if (p.param->numel() > 0) parts.push_back(&p);
  if (parts.empty()) return true;
  cudaKernel_t kernel = cached_kernel(adamw_source(), "kiln_adamw.cu", "kiln_adamw", ctx.arch());
  ctx.make_current();
  for (std::size_t at = 0; at < parts.size(); at += kParts) {
    const std::size_t count = std::min(kParts, parts.size() - at);
    std::vector<long long> table(2 + 9 * kParts, 0);
    table[0] = kChunk;
    table[1] = static_cast<long long>(count);
    long long chunks = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const detail::AdamWTensors& p = *parts[at + i];
      long long* row = &table[2 + 9 * i];
      const TensorImpl* tensors[] = {p.param,       p.grad,    p.m,      p.v,
                                     &*p.new_param, &*p.new_m, &*p.new_v};
      for (int k = 0; k < 7; ++k) row[k] = address(tensors[k]);
      row[7] = p.param->numel();
      row[8] = chunks;
      chunks += (row[7] + kChunk - 1) / kChunk;
    }
    KernelArgs args;
    args.int64_struct(table);
    args.pointer(s.clip ? s.clip->data() : nullptr);
    for (double v : scalars) args.value(static_cast<float>(v));
    launch(ctx, kernel, static_cast<unsigned>(chunks), kThreads, args.pointers());
  }
  return true;
}

}  // namespace kiln::cuda
