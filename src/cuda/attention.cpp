// The CUDA backend's attention (Backend::attention): cuDNN's fused attention for bf16 and f16
// where it runs the problem (cudnn_attention.hpp), else kernels/attention.cuh, one block of 128
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
#include <string_view>
#include <tuple>
#include <utility>

#include "cuda/cuda_ops.hpp"
#include "cuda/cudnn_attention.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "embed/cuda/kernels/attention.cuh.hpp"
#include "embed/cuda/kernels/attention_backward.cuh.hpp"
#include "ir/cuda_codegen.hpp"
#include "kiln/config.hpp"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps, 16 queries each
constexpr int kQueries = 64;

// An empty operand (Tk == 0, say) may have no memory: nothing of it is read.
const void* address(const TensorImpl& t) { return t.numel() == 0 ? nullptr : t.data(); }

bool aligned16(const TensorImpl& t) {
  if (reinterpret_cast<std::uintptr_t>(address(t)) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.shape[d] > 1 && (t.strides[d] * dtype_size(t.dtype)) % 16 != 0) return false;
  return true;
}

// ka::Strides of a [B, H, T, D] operand.
void strides(KernelArgs& args, const TensorImpl& t) {
  const long long s[] = {t.strides[0], t.strides[1], t.strides[2]};
  args.int64_struct(s);
}

// __launch_bounds__ of a kernel: its threads, and for 16-bit types up to D = 64 the blocks per
// multiprocessor that the register budget is cut for. On the H100 (2026-12-06, bf16 D = 64, B = 16,
// H = 12, T = 1024, causal) 4 forward blocks of at most 128 registers ran 5-6 % faster than the
// compiler's 3 of 147, and 3 key-block (dkv) blocks of at most 168 registers 20 % faster than its
// 2 of 181, with a few bytes spilled; 4 dq blocks of 128 registers 207 us against 230 us for the
// compiler's 3 of 160 (2026-12-07). Larger fragments (D = 128, TF32) keep the compiler's choice.
std::string launch_bounds(DType t, int d, const char* pass) {
  const bool half = t != DType::f32 && d <= 64;
  const int blocks = !half                             ? 0
                     : std::string_view(pass) == "fwd" ? 4
                     : std::string_view(pass) == "dkv" ? 3
                                                       : 4;
  return blocks > 0 ? fmt::format("__launch_bounds__({}, {})", kThreads, blocks)
                    : fmt::format("__launch_bounds__({})", kThreads);
}

}  // namespace

bool attention_kernel_available(DType t, std::int64_t d) {
  return d % 16 == 0 && d >= 16 && d <= 128 &&
         (t != DType::f32 || float32_matmul_precision() != Precision::highest);
}

std::string attention_kernel_name(DType t, int d, const char* pass) {
  return fmt::format("kiln_attention_{}_{}_d{}", pass, dtype_name(t), d);
}

const std::string& attention_source(DType t, int d, bool backward) {
  static std::mutex mu;
  static std::map<std::tuple<DType, int, bool>, std::string> sources;
  const std::lock_guard lock(mu);
  std::string& s = sources[{t, d, backward}];
  if (!s.empty()) return s;
  const char* T = ir::cuda_storage_type(t);
  s = ir::cuda_prelude() + std::string(embed::cuda_kernels_attention_cuh);
  if (!backward) {
    const int bn = t == DType::f32 ? 32 : 64;  // f32 tiles are twice the bytes
    s += fmt::format(
        "extern \"C\" __global__ void {0} {1}(const {2}* q, const {2}* k, "
        "const {2}* v, {2}* o, float* lse, int heads, long long tq, long long tk, ka::Strides sq, "
        "ka::Strides sk, ka::Strides sv, ka::Strides so, float scale2, int causal) {{\n"
        "  ka::forward<{2}, {3}, {4}>(q, k, v, o, lse, heads, tq, tk, sq, sk, sv, so, scale2, "
        "causal);\n}}\n",
        launch_bounds(t, d, "fwd"), attention_kernel_name(t, d, "fwd"), T, d, bn);
    return s;
  }
  s += std::string(embed::cuda_kernels_attention_backward_cuh);
  s += fmt::format(
      "extern \"C\" __global__ void {0} {1}(const {2}* q, const {2}* k, const "
      "{2}* v, const {2}* o, const {2}* dout, const float* lse, {2}* dq, float* delta, int heads, "
      "long long tq, long long tk, ka::Strides sq, ka::Strides sk, ka::Strides sv, ka::Strides "
      "so, ka::Strides sdo, ka::Strides sdq, float scale, int causal) {{\n"
      "  ka::backward_dq<{2}, {3}, 32>(q, k, v, o, dout, lse, dq, delta, heads, tq, tk, sq, sk, "
      "sv, so, sdo, sdq, scale, causal);\n}}\n",
      launch_bounds(t, d, "dq"), attention_kernel_name(t, d, "dq"), T, d);
  s += fmt::format(
      "extern \"C\" __global__ void {0} {1}(const {2}* q, const {2}* k, const "
      "{2}* v, const {2}* dout, const float* lse, const float* delta, {2}* dk, {2}* dv, int heads, "
      "long long tq, long long tk, ka::Strides sq, ka::Strides sk, ka::Strides sv, ka::Strides "
      "sdo, ka::Strides sdk, ka::Strides sdv, float scale, int causal) {{\n"
      "  ka::backward_dkv<{2}, {3}, 32>(q, k, v, dout, lse, delta, dk, dv, heads, tq, tk, sq, sk, "
      "sv, sdo, sdk, sdv, scale, causal);\n}}\n",
      launch_bounds(t, d, "dkv"), attention_kernel_name(t, d, "dkv"), T, d);
  return s;
}

bool attention(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
               const detail::AttentionParams& params, const TensorImpl& o, const TensorImpl* lse) {
  detail::check_attention_call(q, k, v, params, o, lse);
  if (cudnn_attention(ctx, q, k, v, params, o, lse)) return true;
  const std::int64_t b = q.shape[0], h = q.shape[1], tq = q.shape[2], tk = k.shape[2],
                     d = q.shape[3];
  if (!attention_kernel_available(q.dtype, d) || ctx.cc_major < 8) return false;
  if (b * h * tq == 0) return true;  // nothing to write
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o)) return false;
  const std::int64_t blocks = (tq + kQueries - 1) / kQueries * b * h;
  if (blocks >= (1LL << 31) || h >= (1LL << 31)) return false;
  const auto dd = static_cast<int>(d);
  cudaKernel_t kernel = cached_kernel(attention_source(q.dtype, dd, false), "kiln_attention.cu",
                                      attention_kernel_name(q.dtype, dd, "fwd"), ctx.arch());
  ctx.make_current();
  KernelArgs args;
  args.pointer(address(q));
  args.pointer(address(k));
  args.pointer(address(v));
  args.pointer(o.data());
  args.pointer(lse ? lse->data() : nullptr);
  args.value(static_cast<int>(h));
  args.value(static_cast<long long>(tq));
  args.value(static_cast<long long>(tk));
  for (const TensorImpl* t : {&q, &k, &v, &o}) strides(args, *t);
  args.value(static_cast<float>(params.scale * 1.4426950408889634));  // scale * log2(e)
  args.value(static_cast<int>(params.causal));
  launch(ctx, kernel, static_cast<unsigned>(blocks), kThreads, args.pointers());
  return true;
}

bool attention_backward(Context& ctx, const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                        const TensorImpl& o, const TensorImpl& dout, const TensorImpl& lse,
                        const detail::AttentionParams& params, const TensorImpl& dq,
                        const TensorImpl& dk, const TensorImpl& dv) {
  detail::check_attention_backward_call(q, k, v, o, dout, lse, params, dq, dk, dv);
  if (cudnn_attention_backward(ctx, q, k, v, o, dout, lse, params, dq, dk, dv)) return true;
  const std::int64_t b = q.shape[0], h = q.shape[1], tq = q.shape[2], tk = k.shape[2],
                     d = q.shape[3];
  if (!attention_kernel_available(q.dtype, d) || ctx.cc_major < 8) return false;
  if (q.dtype == DType::f32 && d > 64) return false;
  if (b * h * (tq + tk) == 0) return true;  // nothing to write
  for (const TensorImpl* t : {&q, &k, &v, &dout, &dq, &dk, &dv})
    if (!aligned16(*t)) return false;
  const std::int64_t q_blocks = (tq + kQueries - 1) / kQueries * b * h,
                     k_blocks = (tk + kQueries - 1) / kQueries * b * h;
  if (q_blocks >= (1LL << 31) || k_blocks >= (1LL << 31) || h >= (1LL << 31)) return false;
  const auto dd = static_cast<int>(d);
  const std::string& source = attention_source(q.dtype, dd, true);
  cudaKernel_t dq_kernel = cached_kernel(source, "kiln_attention_backward.cu",
                                         attention_kernel_name(q.dtype, dd, "dq"), ctx.arch());
  cudaKernel_t dkv_kernel = cached_kernel(source, "kiln_attention_backward.cu",
                                          attention_kernel_name(q.dtype, dd, "dkv"), ctx.arch());
  // delta (f32 [B, H, Tq]): written by the dq kernel, read by the dkv kernel queued after it; the
  // buffer goes back to the pool in stream order when this call drops it.
  const auto delta = device_alloc(
      ctx, static_cast<std::size_t>(std::max<std::int64_t>(b * h * tq, 1)) * sizeof(float));
  ctx.make_current();
  const float scale = static_cast<float>(params.scale);
  if (q_blocks > 0) {
    KernelArgs args;
    for (const TensorImpl* t : {&q, &k, &v, &o, &dout}) args.pointer(address(*t));
    args.pointer(address(lse));
    args.pointer(address(dq));
    args.pointer(delta->data());
    args.value(static_cast<int>(h));
    args.value(static_cast<long long>(tq));
    args.value(static_cast<long long>(tk));
    for (const TensorImpl* t : {&q, &k, &v, &o, &dout, &dq}) strides(args, *t);
    args.value(scale);
    args.value(static_cast<int>(params.causal));
    launch(ctx, dq_kernel, static_cast<unsigned>(q_blocks), kThreads, args.pointers());
  }
  if (k_blocks > 0) {
    KernelArgs args;
    for (const TensorImpl* t : {&q, &k, &v, &dout}) args.pointer(address(*t));
    args.pointer(address(lse));
    args.pointer(delta->data());
    args.pointer(address(dk));
    args.pointer(address(dv));
    args.value(static_cast<int>(h));
    args.value(static_cast<long long>(tq));
    args.value(static_cast<long long>(tk));
    for (const TensorImpl* t : {&q, &k, &v, &dout, &dk, &dv}) strides(args, *t);
    args.value(scale);
    args.value(static_cast<int>(params.causal));
    launch(ctx, dkv_kernel, static_cast<unsigned>(k_blocks), kThreads, args.pointers());
  }
  return true;
}

}  // namespace kiln::cuda
