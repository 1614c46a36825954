// The CUDA backend's attention (Backend::attention): kernels/attention.cuh, one block of 128
// threads per 64 queries of one (b, h), queued on the device's stream with no host sync.
//
// What it runs: head dims D that are multiples of 16 up to 128 (one kernel per dtype and D,
// compiled on first use), tensor cores from sm_80 on, operands it can read 16 bytes at a time
// (16-byte aligned rows and strides: the heads of a contiguous [B, T, 3, H, D] projection are).
// f32 products run as TF32 when float32_matmul_precision allows it (high, and medium, where TF32
// is the more accurate of its two choices); strict f32 is declined, as are the others, and the
// front end composes those from matmul and softmax.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/cuda_ops.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "embed/cuda/kernels/attention.cuh.hpp"
#include "ir/cuda_codegen.hpp"
#include "kiln/config.hpp"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps, 16 queries each
constexpr int kQueries = 64;

bool aligned16(const TensorImpl& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.shape[d] > 1 && (t.strides[d] * dtype_size(t.dtype)) % 16 != 0) return false;
  return true;
}

}  // namespace

bool attention_kernel_available(DType t, std::int64_t d) {
  return d % 16 == 0 && d >= 16 && d <= 128 &&
         (t != DType::f32 || float32_matmul_precision() != Precision::highest);
}

std::string attention_kernel_name(DType t, int d) {
  return fmt::format("kiln_attention_fwd_{}_d{}", dtype_name(t), d);
}

const std::string& attention_source(DType t, int d) {
  static std::mutex mu;
  static std::map<std::pair<DType, int>, std::string> sources;
  const std::lock_guard lock(mu);
  std::string& s = sources[{t, d}];
  if (s.empty()) {
    const char* T = ir::cuda_storage_type(t);
    const int bn = t == DType::f32 ? 32 : 64;  // f32 tiles are twice the bytes
    s = ir::cuda_prelude() + std::string(embed::cuda_kernels_attention_cuh) +
        fmt::format(
            "extern \"C\" __global__ void __launch_bounds__({}) {}(const {}* q, const {}* k, "
            "const {}* v, {}* o, float* lse, int heads, long long tq, long long tk, long long "
            "sq0, long long sq1, long long sq2, long long sk0, long long sk1, long long sk2, "
            "long long sv0, long long sv1, long long sv2, float scale2, int causal) {{\n"
            "  ka::forward<{}, {}, {}>(q, k, v, o, lse, heads, tq, tk, sq0, sq1, sq2, sk0, sk1, "
            "sk2, sv0, sv1, sv2, scale2, causal);\n}}\n",
            kThreads, attention_kernel_name(t, d), T, T, T, T, T, d, bn);
  }
  return s;
}

bool attention(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
               const detail::AttentionParams& params, const TensorImpl& o, const TensorImpl* lse) {
  detail::check_attention_call(q, k, v, params, o, lse);
  const std::int64_t b = q.shape[0], h = q.shape[1], tq = q.shape[2], tk = k.shape[2],
                     d = q.shape[3];
  if (!attention_kernel_available(q.dtype, d) || ctx.cc_major < 8) return false;
  if (b * h * tq == 0) return true;  // nothing to write
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o)) return false;
  const std::int64_t blocks = (tq + kQueries - 1) / kQueries * b * h;
  if (blocks >= (1LL << 31) || h >= (1LL << 31)) return false;
  const auto dd = static_cast<int>(d);
  cudaKernel_t kernel = cached_kernel(attention_source(q.dtype, dd), "kiln_attention.cu",
                                      attention_kernel_name(q.dtype, dd), ctx.arch());
  ctx.make_current();
  KernelArgs args;
  args.pointer(q.data());
  args.pointer(k.data());
  args.pointer(v.data());
  args.pointer(o.data());
  args.pointer(lse ? lse->data() : nullptr);
  args.value(static_cast<int>(h));
  args.value(static_cast<long long>(tq));
  args.value(static_cast<long long>(tk));
  for (const TensorImpl* t : {&q, &k, &v})
    for (int i = 0; i < 3; ++i) args.value(static_cast<long long>(t->strides[i]));
  args.value(static_cast<float>(params.scale * 1.4426950408889634));  // scale * log2(e)
  args.value(static_cast<int>(params.causal));
  launch(ctx, kernel, static_cast<unsigned>(blocks), kThreads, args.pointers());
  return true;
}

}  // namespace kiln::cuda
