// Reductions on CUDA: sum, mean, max, min, argmax, argmin over one dim or all elements.
//
// The host side: split x's dims into kept (outer) and reduced ones, coalesce each group, pick
// a variant by sizes alone, and launch the generated kernel (src/cuda/reduce_source.cpp):
//   thread:       one thread per output; for short rows, and for a reduced dim that is not
//                 unit-stride while the outputs are (x.sum(0) of a matrix: adjacent threads
//                 read adjacent addresses).
//   block:        one block per output; its threads stride over the row (coalesced reads).
//   *_split:      too few outputs to fill the GPU with a long reduction: each (output, chunk)
//                 gets its own block (or thread, in the column case) writing a partial
//                 accumulator to scratch, and a second kernel combines each output's chunks
//                 in a fixed tree. A full sum over 16M elements uses every SM.
// Chunks, blocks and trees depend only on the sizes and the SM count, and every combine is
// order-independent, so results never depend on timing. Semantics and accuracy are the CPU's
// (the top of src/cpu/reduce.cpp), except that a max/min between +0 and -0 gives +0 / -0
// (kiln::maximum/minimum) where the CPU keeps the one it met first.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/coalesce.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/reduce_source.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

using detail::ReduceOp;

constexpr std::int64_t kMaxBlock = 256;
// Rows this short take a thread each: a block per output would leave most threads idle.
constexpr std::int64_t kShortRow = 32;
// Elements per chunk of a block split (16 or more per thread, so the partials are few) and
// rows per chunk of a thread split.
constexpr std::int64_t kMinBlockChunk = 4096;
constexpr std::int64_t kMinThreadChunk = 64;
// At most this many chunks per output, so that the combine pass stays short.
constexpr std::int64_t kMaxChunks = 4096;
// Resident threads per SM (2048 on every architecture since sm_70) and the thread variants'
// grid-stride cap, as the element-wise kernels (elementwise.cpp).
constexpr std::int64_t kThreadsPerSm = 2048;
constexpr std::int64_t kThreadBlocksPerSm = 16;
constexpr std::int64_t kMaxGrid = std::numeric_limits<std::int32_t>::max();

using detail::coalesce;
using detail::Layout;
using detail::memory_order;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Plan {
  ReduceKernelSpec spec;
  std::int64_t outputs = 0, len = 0, chunks = 1, chunk = 0;
  std::int64_t threads = kMaxBlock;  // per block
  std::int64_t grid = 1;
};

// Variant, chunks and launch shape, from the sizes and the SM count alone.
Plan plan(const Layout& kept, const Layout& red, std::int64_t sm_count) {
  Plan p;
  p.outputs = kept.numel;
  p.len = red.numel;
  p.chunk = p.len;
  const std::int64_t fill_threads = sm_count * kThreadsPerSm;
  const std::int64_t fill_blocks = fill_threads / kMaxBlock;
  const bool column = !kept.shape.empty() && kept.strides.back() == 1 && red.shape.size() == 1 &&
                      red.strides[0] != 1;
  if (p.len <= kShortRow || column) {
    p.spec.variant = ReduceVariant::thread;
    if (column && p.outputs < fill_threads && p.len >= 2 * kMinThreadChunk) {
      p.chunks = std::min({ceil_div(fill_threads, p.outputs), p.len / kMinThreadChunk, kMaxChunks});
    }
  } else {
    p.spec.variant = ReduceVariant::block;
    // Blocks no wider than the row: a row of 40 takes 64 threads, not 256.
    p.threads = std::min(kMaxBlock, ceil_div(p.len, 32) * 32);
    if (p.outputs < fill_blocks && p.len >= 2 * kMinBlockChunk) {
      // Two waves of blocks, so that a slow SM does not leave the others idle at the end.
      p.chunks =
          std::min({ceil_div(2 * fill_blocks, p.outputs), p.len / kMinBlockChunk, kMaxChunks});
    }
  }
  if (p.chunks > 1) {
    // Chunks of whole 1024-element (or 64-row) runs, each non-empty.
    const std::int64_t unit = p.spec.variant == ReduceVariant::block ? 1024 : kMinThreadChunk;
    p.chunk = ceil_div(ceil_div(p.len, p.chunks), unit) * unit;
    p.chunks = ceil_div(p.len, p.chunk);
  }
  if (p.chunks > 1) {
    p.spec.variant = p.spec.variant == ReduceVariant::block ? ReduceVariant::block_split
                                                            : ReduceVariant::thread_split;
  }
  const std::int64_t items = p.outputs * p.chunks;
  if (p.spec.variant == ReduceVariant::block || p.spec.variant == ReduceVariant::block_split) {
    p.grid = std::min(items, kMaxGrid);
  } else {
    p.grid = std::min(ceil_div(items, kMaxBlock), sm_count * kThreadBlocksPerSm);
  }
  return p;
}

// The largest element offset x reaches.
std::int64_t reach(const TensorImpl& x) {
  std::int64_t r = 0;
  for (int d = 0; d < x.rank(); ++d) r += (x.shape[d] - 1) * x.strides[d];
  return r;
}

struct Kernels {
  cudaKernel_t main = nullptr, combine = nullptr;
};

// Compiled kernels by name (which encodes everything they are specialised on), so that a
// repeated reduction neither generates source nor hashes it.
Kernels kernels_for(const Context& ctx, const ReduceKernelSpec& spec) {
  static std::mutex mu;
  static std::unordered_map<std::string, Kernels> cache;
  const std::string name = reduce_kernel_name(spec);
  std::string key = ctx.arch() + "|" + name;
  {
    std::lock_guard lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const std::string src = reduce_source({&spec, 1});
  Kernels k;
  k.main = cached_kernel(src, name + ".cu", name, ctx.arch());
  if (spec.variant == ReduceVariant::block_split || spec.variant == ReduceVariant::thread_split) {
    k.combine =
        cached_kernel(src, name + ".cu", reduce_combine_name(spec.op, spec.dtype), ctx.arch());
  }
  std::lock_guard lock(mu);
  cache.emplace(std::move(key), k);
  return k;
}

}  // namespace

void reduce(Context& ctx, ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out) {
  detail::check_reduce_call(op, x, dim, out);
  const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  Layout kept, red;
  if (dim < 0) {
    // arg* count indices in x's row-major order; the others may walk memory in any order.
    red = arg ? coalesce(x.shape, x.strides) : memory_order(x.shape, x.strides);
  } else {
    Dims shape = x.shape, strides = x.strides;
    shape.erase(shape.begin() + dim);
    strides.erase(strides.begin() + dim);
    kept = coalesce(shape, strides);
    red = coalesce({x.shape[dim]}, {x.strides[dim]});
  }
  if (kept.numel == 0) return;
  // The kernels take at least one reduced dim: a single element (or none) is a run of stride 0.
  if (red.shape.empty() || red.numel == 0) red = Layout{{red.numel}, {0}, red.numel};

  Plan p = plan(kept, red, std::max(1, ctx.sm_count));
  p.spec.op = op;
  p.spec.dtype = x.dtype;
  p.spec.outer_rank = static_cast<int>(kept.shape.size());
  p.spec.reduced_rank = static_cast<int>(red.shape.size());
  const std::int64_t items = p.outputs * p.chunks;
  // Offsets, positions (a thread looks 3 steps ahead) and work items (a grid-stride loop steps
  // past the last) all fit in 31 bits, or the kernel indexes in 64.
  p.spec.wide_index =
      std::max({reach(x), p.len + 4 * p.threads, items + p.grid * p.threads}) > kMaxGrid;
  const Kernels k = kernels_for(ctx, p.spec);

  // The geometry struct of reduce_source.hpp.
  std::vector<long long> g = {p.outputs, p.len, p.chunks, p.chunk};
  g.insert(g.end(), kept.shape.begin(), kept.shape.end());
  g.insert(g.end(), kept.strides.begin(), kept.strides.end());
  g.insert(g.end(), red.shape.begin(), red.shape.end());
  g.insert(g.end(), red.strides.begin(), red.strides.end());

  ctx.make_current();
  std::shared_ptr<detail::Buffer> partial;
  if (k.combine) {
    partial =
        device_alloc(ctx, static_cast<std::size_t>(items) * reduce_partial_bytes(op, x.dtype));
  }
  const void* x_data = x.data();
  void* out_data = out.data();
  void* part_data = partial ? partial->data() : nullptr;
  void* args[] = {&x_data, &out_data, &part_data, g.data()};
  launch(k.main, static_cast<unsigned>(p.grid), static_cast<unsigned>(p.threads), args, ctx.stream);
  if (!k.combine) return;
  // One block per output over its chunks; freeing `partial` after this is stream-ordered.
  long long outputs = p.outputs, chunks = p.chunks, len = p.len;
  void* combine_args[] = {&part_data, &out_data, &outputs, &chunks, &len};
  const std::int64_t threads = std::min(kMaxBlock, ceil_div(p.chunks, 32) * 32);
  launch(k.combine, static_cast<unsigned>(std::min(p.outputs, kMaxGrid)),
         static_cast<unsigned>(threads), combine_args, ctx.stream);
}

}  // namespace kiln::cuda
