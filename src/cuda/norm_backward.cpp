// The CUDA backend's norms' backward (Backend::norm_backward): kernels/norm_backward.cuh, one
// block per row that reads x and g once and writes dx, plus, for the weight's and bias's
// gradients, a second kernel that sums the per-block partials; queued with no host sync.
//
// What it runs: rows a block of at most kMaxThreads threads holds in registers, K loads of V
// elements a thread with K * V <= kMaxHeld (V = 16 bytes of elements where n and the pointers
// allow, else 1): up to 8192 elements a row in every dtype. Longer rows are declined, and autodiff
// composes their gradients from element-wise programs and sums (src/autodiff/rows_node.cpp).
//
// Why a kernel of its own: composed, a GPT-2 layer norm's backward ([16384, 768] f32) ran five
// kernels (two row sums, dx, the two column sums) reading x and g three times, 219 us on the H100
// (2026-12-06); the bytes it must move, x and g read and dx written once, take about 55 us there.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/rows_source.hpp"
#include "embed/cuda/kernels/norm_backward.cuh.hpp"
#include "embed/cuda/kernels/rows.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kMaxHeld = 16;  // five arrays of K * V floats a thread: 80 registers at most
constexpr int kLoads[] = {1, 2, 4, 8, 16};
constexpr int kFinishColumns = 32, kFinishLanes = 16;  // kn::norm_backward_finish's block

// The (V, K) pairs compiled for dtype t: V = 1 and V = the 16-byte width.
template <class F>
void for_each_shape(DType t, F&& f) {
  for (int v : {1, rows_vector(t)})
    for (int k : kLoads)
      if (k * v <= kMaxHeld) f(v, k);
}

// h: dx_half's dtype (t: there is none, and the kernels take a null T*).
std::string source_of(DType t, DType g, DType h) {
  const char *T = ir::cuda_storage_type(t), *G = ir::cuda_storage_type(g);
  const char* H = ir::cuda_storage_type(h);
  std::string s = ir::cuda_prelude() + std::string(embed::cuda_kernels_rows_cuh) +
                  std::string(embed::cuda_kernels_norm_backward_cuh);
  for_each_shape(t, [&](int v, int k) {
    s += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const {2}* x, const {5}* g, "
        "const {2}* w, const float* mean, const float* rstd, {2}* dx, float* part_w, float* "
        "part_b, long long rows, long long n, const {2}* dsum, {6}* dx_half) {{\n"
        "  kn::norm_backward<{2}, {5}, {3}, {4}, {6}>(x, g, w, mean, rstd, dx, part_w, part_b, "
        "rows, n, dsum, dx_half);\n}}\n",
        kMaxThreads, norm_backward_kernel_name(t, g, v, k, h), T, v, k, G, H);
  });
  s += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const float* part_w, const float* "
      "part_b, {2}* dw, {2}* db, long long parts, long long n) {{\n"
      "  kn::norm_backward_finish<{2}>(part_w, part_b, dw, db, parts, n);\n}}\n",
      kFinishColumns * kFinishLanes, norm_backward_kernel_name(t, g, 0, 0, h), T);
  return s;
}

bool aligned(const TensorImpl* t) {
  return !t || reinterpret_cast<std::uintptr_t>(t->data()) % 16 == 0;
}

struct Shape {
  int k = 0;  // 0: no kernel holds the row
  unsigned threads = 0;
};

// The smallest K whose block is at most 256 threads, else the smallest within kMaxThreads.
Shape shape_of(long long loads, int v) {
  for (const long long limit : {256LL, static_cast<long long>(kMaxThreads)}) {
    for (int k : kLoads) {
      if (k * v > kMaxHeld) break;
      const long long threads = ((loads + k - 1) / k + 31) / 32 * 32;
      if (threads <= limit) return {k, static_cast<unsigned>(threads)};
    }
  }
  return {};
}

const TensorImpl* out(const std::optional<detail::Out>& o) { return o ? &**o : nullptr; }
void* data(const TensorImpl* t) { return t ? t->data() : nullptr; }

}  // namespace

std::string norm_backward_kernel_name(DType t, DType g, int v, int k, std::optional<DType> h) {
  std::string types = g == t ? dtype_name(t) : fmt::format("{}_g{}", dtype_name(t), dtype_name(g));
  if (h && *h != t) types += fmt::format("_h{}", dtype_name(*h));
  return k ? fmt::format("kiln_norm_backward_{}_v{}_k{}", types, v, k)
           : fmt::format("kiln_norm_backward_{}_finish", types);
}

std::vector<std::string> norm_backward_kernel_names(DType t, DType g, std::optional<DType> h) {
  std::vector<std::string> names;
  for_each_shape(t,
                 [&](int v, int k) { names.push_back(norm_backward_kernel_name(t, g, v, k, h)); });
  names.push_back(norm_backward_kernel_name(t, g, 0, 0, h));
  return names;
}

const std::string& norm_backward_source(DType t, DType g, std::optional<DType> h) {
  static std::mutex mu;
  static std::map<std::tuple<DType, DType, DType>, std::string> sources;
  const std::lock_guard lock(mu);
  const DType half = h.value_or(t);
  std::string& s = sources[{t, g, half}];
  if (s.empty()) s = source_of(t, g, half);
  return s;
}

bool norm_backward(Context& ctx, detail::RowOp op, const TensorImpl& x, const TensorImpl& g,
                   const TensorImpl* weight, const TensorImpl* mean, const TensorImpl& rstd,
                   const detail::NormGrads& grads) {
  const detail::RowView view =
      detail::check_norm_backward_call(op, x, g, weight, mean, rstd, grads);
  if (view.n == 0) return true;  // no rows either (the check refuses empty rows): nothing to write
  const TensorImpl *dx = out(grads.dx), *dw = out(grads.dw), *db = out(grads.db);
  const TensorImpl* dx_half = out(grads.dx_half);
  const int wide = rows_vector(x.dtype);
  const int v = view.n % wide == 0 && aligned(&x) && aligned(&g) && aligned(weight) &&
                        aligned(dx) && aligned(grads.dsum) && aligned(dx_half)
                    ? wide
                    : 1;
  const Shape shape = shape_of(view.n / v, v);
  if (!shape.k) return false;
  if (!dx && !dw && !db) return true;  // the question alone (Backend::norm_backward)
  // Enough blocks for about 1024 threads an SM: each block's partials are a row of [blocks, n]
  // that the finishing kernel reads, so no more than keep the memory busy. No rows: no block,
  // and the finishing kernel writes zero gradients.
  const long long per_sm = std::max(2LL, 1024LL / shape.threads);
  const auto blocks =
      static_cast<unsigned>(std::min<long long>(view.rows, per_sm * std::max(1, ctx.sm_count)));
  const std::optional<DType> h = dx_half ? std::optional<DType>(dx_half->dtype) : std::nullopt;
  const std::string& source = norm_backward_source(x.dtype, g.dtype, h);
  const std::size_t part_bytes = static_cast<std::size_t>(blocks) * view.n * sizeof(float);
  const auto part_w = dw ? device_alloc(ctx, part_bytes) : nullptr;
  const auto part_b = db ? device_alloc(ctx, part_bytes) : nullptr;
  ctx.make_current();
  if (blocks > 0) {
    KernelArgs args;
    args.pointer(x.data());
    args.pointer(g.data());
    args.pointer(data(weight));
    args.pointer(data(mean));
    args.pointer(rstd.data());
    args.pointer(data(dx));
    args.pointer(part_w ? part_w->data() : nullptr);
    args.pointer(part_b ? part_b->data() : nullptr);
    args.value(static_cast<long long>(view.rows));
    args.value(static_cast<long long>(view.n));
    args.pointer(data(grads.dsum));
    args.pointer(data(dx_half));
    cudaKernel_t kernel =
        cached_kernel(source, "kiln_norm_backward.cu",
                      norm_backward_kernel_name(x.dtype, g.dtype, v, shape.k, h), ctx.arch());
    launch(ctx, kernel, blocks, shape.threads, args.pointers());
  }
  if (!dw && !db) return true;
  cudaKernel_t finish =
      cached_kernel(source, "kiln_norm_backward.cu",
                    norm_backward_kernel_name(x.dtype, g.dtype, 0, 0, h), ctx.arch());
  KernelArgs fargs;
  fargs.pointer(part_w ? part_w->data() : nullptr);
  fargs.pointer(part_b ? part_b->data() : nullptr);
  fargs.pointer(data(dw));
  fargs.pointer(data(db));
  fargs.value(static_cast<long long>(blocks));
  fargs.value(static_cast<long long>(view.n));
  launch(ctx, finish, static_cast<unsigned>((view.n + kFinishColumns - 1) / kFinishColumns),
         kFinishColumns * kFinishLanes, fargs.pointers());
  return true;
}

}  // namespace kiln::cuda
