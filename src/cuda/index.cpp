// The CUDA backend's indexing family (Backend::index): kernels/index.cuh, launched on the
// device's stream with no host sync. Bad indices are reported through an error word per device:
// host memory mapped into the device (cudaHostAllocMapped), written by a kernel thread that
// meets one; raise_index_error (at sync and download) reads it and throws IndexError.
//
// scatter_add and index_add: x is copied into the accumulator (out itself for f32 and i32, an f32
// scratch for half types, rounded into out at the end), then either every src element is added
// with an atomic (the default: one pass, order varying between runs) or, under
// kiln::deterministic(), one thread per destination sums its contributions in index order
// (index_add: one warp per run of equal indices, after a stable sort of the indices).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/runtime_config.hpp"
#include "cuda/check.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/index_source.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

using detail::IndexOp;

// Mirrors ki::ErrorWord (kernels/index.cuh).
struct ErrorWord {
  int flag;
  int op;
  long long value, bound;
};

// A device's word: its host address (read at sync) and the device's address of it (the kernels').
struct MappedWord {
  volatile ErrorWord* host = nullptr;
  ErrorWord* device = nullptr;
};

// Made at the first indexing call (create); until then a sync finds nothing to read.
MappedWord error_word(Context& ctx, bool create) {
  static std::mutex mu;
  static std::vector<MappedWord> words;  // by device index; never freed
  std::lock_guard lock(mu);
  if (words.size() <= static_cast<std::size_t>(ctx.index)) words.resize(ctx.index + 1);
  MappedWord& w = words[ctx.index];
  if (!w.host && create) {
    ctx.make_current();
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaHostAlloc(&p, sizeof(ErrorWord), cudaHostAllocMapped));
    std::memset(p, 0, sizeof(ErrorWord));
    void* d = nullptr;
    KILN_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    w.host = static_cast<ErrorWord*>(p);
    w.device = static_cast<ErrorWord*>(d);
  }
  return w;
}

cudaKernel_t kernel(Context& ctx, const std::string& name) {
  return cached_kernel(index_source(), "kiln_index.cu", name, ctx.arch());
}

constexpr unsigned kThreads = 256;

unsigned blocks_for(Context& ctx, long long threads) {
  const long long want = (threads + kThreads - 1) / kThreads;
  // Grid-stride loops: a few waves of blocks cover any size.
  return static_cast<unsigned>(std::clamp<long long>(want, 1, 32LL * std::max(1, ctx.sm_count)));
}

const void* address(const TensorImpl& t) { return t.numel() ? t.data() : nullptr; }

// Checks every index of `index` against the bound N, recording the first bad one in the error
// word (the deterministic paths then read indices by comparison only).
void check_indices(Context& ctx, const TensorImpl& index, long long N, IndexOp op, ErrorWord* err) {
  KernelArgs args;
  args.pointer(index.data());
  args.value(static_cast<long long>(index.numel()));
  args.value(N);
  args.value(static_cast<int>(op));
  args.pointer(err);
  launch(ctx, kernel(ctx, index_check_name()), blocks_for(ctx, index.numel()), kThreads,
         args.pointers());
}

// Deterministic index_add: every index checked; out = x (a copy); the indices sorted stably with
// their positions (the order family's sort); then one warp per run of equal indices adds that
// row's contributions in increasing k (segment_rows). Against a warp per destination row that
// scanned all K indices (an embedding backward of 50304 rows and 16384 ids: 0.8 G index reads),
// this reads each index a few times, src once and only the rows it touches, in out's own dtype
// (no f32 scratch for the half types: a row is summed in f32 registers and rounded once).
void index_add_sorted(Context& ctx, const TensorImpl& x, const TensorImpl& index,
                      const TensorImpl& src, const TensorImpl& out, long long O, long long N,
                      long long K, long long I, ErrorWord* err) {
  check_indices(ctx, index, N, IndexOp::index_add, err);
  if (out.data() != x.data()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data(), x.data(),
                                    static_cast<std::size_t>(out.numel()) * dtype_size(out.dtype),
                                    cudaMemcpyDeviceToDevice, ctx.stream));
  }
  const detail::Handle sorted = device_empty(ctx, {K}, DType::i32);
  const detail::Handle perm = device_empty(ctx, {K}, DType::i32);
  order(ctx, detail::OrderOp::sort, index, detail::OrderParams{}, *sorted, perm.get());
  KernelArgs args;
  args.pointer(sorted->data());
  args.pointer(perm->data());
  args.pointer(address(src));
  args.pointer(out.data());
  for (long long g : {O, N, K, I}) args.value(g);
  // 16-byte words where every row starts on one (out's rows, src's rows).
  const bool vec = I * static_cast<long long>(dtype_size(x.dtype)) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(out.data()) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(address(src)) % 16 == 0;
  launch(ctx,
         kernel(ctx, index_accumulate_name(vec ? "segment_rows_vec" : "segment_rows", x.dtype)),
         blocks_for(ctx, O * K * 32), kThreads, args.pointers());
}

}  // namespace

void raise_index_error(Context& ctx) {
  volatile ErrorWord* w = error_word(ctx, false).host;
  if (!w || !w->flag) return;
  const int op = w->op;
  const long long value = w->value, bound = w->bound;
  w->flag = 0;
  detail::throw_index_out_of_range(static_cast<IndexOp>(op), value, bound);
}

void index(Context& ctx, IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
           const TensorImpl* src, const TensorImpl& out) {
  detail::check_index_call(op, x, dim, index, src, out);
  const bool per_row = op == IndexOp::index_select || op == IndexOp::index_add;
  long long O = 1, I = 1;
  for (int d = 0; d < dim; ++d) O *= x.shape[d];
  for (int d = dim + 1; d < x.rank(); ++d) I *= x.shape[d];
  const long long N = x.shape[dim], K = per_row ? index.shape[0] : index.shape[dim];
  if (out.numel() == 0) return;
  ErrorWord* err = error_word(ctx, true).device;
  const int op_code = static_cast<int>(op);
  ctx.make_current();
  KernelArgs args;

  if (!detail::index_op_accumulates(op)) {
    const std::size_t size = dtype_size(x.dtype);
    const std::size_t row = static_cast<std::size_t>(I) * size;
    const bool vec = per_row && row % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(x.data()) % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(out.data()) % 16 == 0;
    if (per_row) {  // one warp per row, 16-byte vectors where the row allows
      const std::size_t v = vec ? 16 : size;
      args.pointer(x.data());
      args.pointer(index.data());
      args.pointer(out.data());
      for (long long g : {O, N, K, static_cast<long long>(row / v)}) args.value(g);
      args.value(op_code);
      args.pointer(err);
      launch(ctx, kernel(ctx, index_rows_name(v)), blocks_for(ctx, O * K * 32), kThreads,
             args.pointers());
      return;
    }
    args.pointer(x.data());
    args.pointer(index.data());
    args.pointer(out.data());
    for (long long g : {O, N, K, I}) args.value(g);
    args.value(static_cast<int>(per_row));
    args.value(op_code);
    args.pointer(err);
    launch(ctx, kernel(ctx, index_gather_name(size)), blocks_for(ctx, out.numel()), kThreads,
           args.pointers());
    return;
  }

  if (per_row && kiln::deterministic() && index.numel() > 0) {
    index_add_sorted(ctx, x, index, *src, out, O, N, K, I, err);
    return;
  }
  // The accumulator: out itself (f32, i32) or an f32 scratch (half types).
  const bool half = is_half(x.dtype);
  detail::Handle scratch = half ? device_empty(ctx, out.shape, DType::f32) : nullptr;
  void* acc = half ? scratch->data() : out.data();
  const long long n = out.numel();
  args.pointer(x.data());
  args.pointer(acc);
  args.value(n);
  launch(ctx, kernel(ctx, index_accumulate_name("init", x.dtype)), blocks_for(ctx, n), kThreads,
         args.pointers());
  if (index.numel() > 0) {
    args.clear();
    if (kiln::deterministic()) {
      check_indices(ctx, index, N, op, err);
      args.pointer(index.data());
      args.pointer(address(*src));
      args.pointer(acc);
      for (long long g : {O, N, K, I}) args.value(g);
      args.value(0);  // scatter_add (index_add took index_add_sorted): a thread per element
      launch(ctx, kernel(ctx, index_accumulate_name("owner", x.dtype)), blocks_for(ctx, n),
             kThreads, args.pointers());
    } else {
      args.pointer(index.data());
      args.pointer(address(*src));
      args.pointer(acc);
      for (long long g : {O, N, K, I}) args.value(g);
      args.value(static_cast<int>(per_row));
      args.value(op_code);
      args.pointer(err);
      launch(ctx, kernel(ctx, index_accumulate_name("atomic", x.dtype)),
             blocks_for(ctx, src->numel()), kThreads, args.pointers());
    }
  }
  if (half) {
    args.clear();
    args.pointer(acc);
    args.pointer(out.data());
    args.value(n);
    launch(ctx, kernel(ctx, index_accumulate_name("finish", x.dtype)), blocks_for(ctx, n), kThreads,
           args.pointers());
  }
}

}  // namespace kiln::cuda
