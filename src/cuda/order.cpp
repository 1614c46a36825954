// The CUDA backend's order family (Backend::order): kernels/order.cuh, queued on the device's
// stream with no host sync.
//
// sort and topk sort each row padded to P (a power of two) as (key, index) words in a scratch of
// R x P words: one fill, one shared-memory sort of every tile of T = min(P, kOrderTile) words, then
// for each merge size k = 2T .. P the strides j >= T as one global step each and the strides below
// T in shared memory, and one gather of the first K. A [4096, 4096] sort is 1 + 1 + 1 launches;
// a row of 2^24 (randperm(1e7)) 1 + 1 + sum over k of (log2(k / T) + 1) + 1, about 80.
// max/min: one block of up to 256 threads per row; cumsum: one block of up to 1024 per row, or,
// for fewer rows than twice the SMs and rows longer than kScanChunk, one block per chunk of
// kScanChunk in two levels (a [1, 1e7] cumsum is 611 chunks: 611 blocks instead of one).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/order_source.hpp"

namespace kiln::cuda {
namespace {

using detail::OrderOp;
constexpr unsigned kThreads = 256;
// The elements of one chunk of a long row's two-level cumsum (four passes of a 1024-thread block).
constexpr long long kScanChunk = 16384;

cudaKernel_t kernel(Context& ctx, const char* name, DType t) {
  return cached_kernel(order_source(t), "kiln_order.cu", order_kernel_name(name, t), ctx.arch());
}

unsigned blocks_for(Context& ctx, long long threads) {
  const long long want = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<long long>(want, 1, 32LL * std::max(1, ctx.sm_count)));
}

unsigned row_grid(long long rows) {
  return static_cast<unsigned>(std::min<long long>(rows, 1LL << 30));
}

// Threads for a row of n: a power of two from 32 to `most`.
unsigned row_threads(long long n, unsigned most) {
  const auto want = std::bit_ceil(static_cast<unsigned long long>(std::max<long long>(n, 32)));
  return static_cast<unsigned>(std::min<unsigned long long>(want, most));
}

void sort_rows(Context& ctx, const TensorImpl& x, const detail::OrderParams& p,
               const TensorImpl& values, const TensorImpl& indices, long long rows, long long n) {
  const DType t = x.dtype;
  const long long P = static_cast<long long>(std::bit_ceil(static_cast<unsigned long long>(n)));
  const long long T = std::min<long long>(P, kOrderTile);
  const long long K = values.shape.back();
  // R x P 8-byte words, as i32 pairs (the allocator's dtype; only the bytes matter).
  detail::Handle scratch = device_empty(ctx, {rows, P, 2}, DType::i32);
  void* s = scratch->data();
  ctx.make_current();
  KernelArgs args;
  args.pointer(x.data());
  args.pointer(s);
  args.value(rows);
  args.value(n);
  args.value(P);
  args.value(static_cast<int>(p.descending));
  launch(ctx, kernel(ctx, "fill", t), blocks_for(ctx, rows * P), kThreads, args.pointers());
  auto tiles = [&](long long k_first, long long k_last) {
    KernelArgs a;
    a.pointer(s);
    a.value(P);
    a.value(static_cast<int>(T));
    a.value(k_first);
    a.value(k_last);
    launch(ctx, kernel(ctx, "tile", t), row_grid(rows * (P / T)), 1024, a.pointers());
  };
  tiles(2, T);
  for (long long k = 2 * T; k <= P; k <<= 1) {
    for (long long j = k / 2; j >= T; j >>= 1) {
      KernelArgs a;
      a.pointer(s);
      a.value(rows);
      a.value(P);
      a.value(k);
      a.value(j);
      launch(ctx, kernel(ctx, "step", t), blocks_for(ctx, rows * (P / 2)), kThreads, a.pointers());
    }
    tiles(k, k);
  }
  KernelArgs g;
  g.pointer(x.data());
  g.pointer(s);
  g.pointer(values.data());
  g.pointer(indices.data());
  g.value(rows);
  g.value(n);
  g.value(P);
  g.value(K);
  launch(ctx, kernel(ctx, "gather", t), blocks_for(ctx, rows * K), kThreads, g.pointers());
}

// cumsum of few long rows in two levels: every chunk of kScanChunk elements summed by a block of
// its own, the chunk sums of each row scanned (one block per row: f32 sums for the floating
// dtypes, i32 for the others), every chunk scanned again from the sum of those before it.
void long_rows_cumsum(Context& ctx, const TensorImpl& x, const TensorImpl& y, long long rows,
                      long long n, bool reverse) {
  const DType t = x.dtype, acc = is_floating(t) ? DType::f32 : DType::i32;
  const long long chunks = (n + kScanChunk - 1) / kScanChunk;
  detail::Handle sums = device_empty(ctx, {rows, chunks}, acc);
  detail::Handle scanned = device_empty(ctx, {rows, chunks}, acc);
  ctx.make_current();
  KernelArgs a;
  a.pointer(x.data());
  a.pointer(sums->data());
  a.value(rows);
  a.value(n);
  a.value(kScanChunk);
  a.value(static_cast<int>(reverse));
  launch(ctx, kernel(ctx, "chunk_sums", t), row_grid(rows * chunks), 1024, a.pointers());
  KernelArgs b;
  b.pointer(sums->data());
  b.pointer(scanned->data());
  b.value(rows);
  b.value(chunks);
  b.value(0);
  launch(ctx, kernel(ctx, "cumsum", acc), row_grid(rows), row_threads((chunks + 3) / 4, 1024),
         b.pointers());
  KernelArgs c;
  c.pointer(x.data());
  c.pointer(y.data());
  c.pointer(scanned->data());
  c.value(rows);
  c.value(n);
  c.value(kScanChunk);
  c.value(static_cast<int>(reverse));
  launch(ctx, kernel(ctx, "chunk_scan", t), row_grid(rows * chunks), 1024, c.pointers());
}

}  // namespace

void order(Context& ctx, OrderOp op, const TensorImpl& x, const detail::OrderParams& params,
           const TensorImpl& values, const TensorImpl* indices) {
  const long long n = detail::check_order_call(op, x, params, values, indices);
  if (values.numel() == 0) return;
  const long long rows = values.numel() / values.shape.back();
  const DType t = x.dtype;
  if (op == OrderOp::sort || op == OrderOp::topk) {
    sort_rows(ctx, x, params, values, *indices, rows, n);
    return;
  }
  ctx.make_current();
  KernelArgs args;
  args.pointer(x.data());
  args.pointer(values.data());
  if (op == OrderOp::cumsum) {
    if (rows < 2LL * std::max(1, ctx.sm_count) && n > kScanChunk) {
      long_rows_cumsum(ctx, x, values, rows, n, params.reverse);
      return;
    }
    args.value(rows);
    args.value(n);
    args.value(static_cast<int>(params.reverse));
    launch(ctx, kernel(ctx, "cumsum", t), row_grid(rows), row_threads((n + 3) / 4, 1024),
           args.pointers());
    return;
  }
  args.pointer(indices->data());
  args.value(rows);
  args.value(n);
  args.value(static_cast<int>(op == OrderOp::max));
  launch(ctx, kernel(ctx, "extreme", t), row_grid(rows), row_threads(n, 256), args.pointers());
}

}  // namespace kiln::cuda
