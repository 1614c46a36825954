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
// reduce_prologue is the same over the value of an element-wise prologue (the fusion group),
// which the kernel computes where it would have read it (below, and docs/fusion.md).
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

#include "core/layout.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/reduce_source.hpp"
#include "ir/hashed_cache.hpp"
#include "ir/program.hpp"
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

using detail::JointLayout;
using detail::Layout;

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

// Compiled prologue kernels by (arch, program structure, spec, input sets), as kernel_for in
// elementwise.cpp: a bucket holds the entries of one hash, compared in full, and the lookup
// builds no string.
Kernels prologue_kernels_for(const Context& ctx, const ReducePrologueSpec& ps) {
  struct Entry {
    int arch;
    ir::Program program;
    ReduceKernelSpec spec;
    std::vector<int> input_sets;
    int sets;
    Kernels kernels;
  };
  static ir::HashedCache<Entry> cache;
  const int arch = ctx.cc_major * 10 + ctx.cc_minor;
  const ReduceKernelSpec& s = ps.reduce;
  std::uint64_t hash = ps.program->structure_hash() ^ static_cast<std::uint64_t>(arch) << 56;
  ir::hash_mix(hash, static_cast<std::uint64_t>(s.op) << 8 | static_cast<std::uint64_t>(s.dtype));
  ir::hash_mix(hash, static_cast<std::uint64_t>(s.outer_rank) << 16 |
                         static_cast<std::uint64_t>(s.reduced_rank));
  ir::hash_mix(hash, static_cast<std::uint64_t>(s.variant) << 1 | s.wide_index);
  ir::hash_mix(hash, static_cast<std::uint64_t>(ps.sets));
  for (int set : ps.input_sets) ir::hash_mix(hash, static_cast<std::uint64_t>(set + 1));
  const Entry* e = cache.find(hash, [&](const Entry& e) {
    return e.arch == arch && e.spec == s && e.sets == ps.sets && e.input_sets == ps.input_sets &&
           e.program == *ps.program;
  });
  if (e) return e->kernels;
  const ReducePrologueSource src = reduce_prologue_source({&ps, 1});
  const std::string& name = src.kernels[0];
  Kernels k;
  k.main = cached_kernel(src.source, name + ".cu", name, ctx.arch());
  if (s.variant == ReduceVariant::block_split || s.variant == ReduceVariant::thread_split) {
    k.combine =
        cached_kernel(src.source, name + ".cu", reduce_combine_name(s.op, s.dtype), ctx.arch());
  }
  return cache.insert(hash, {arch, *ps.program, s, ps.input_sets, ps.sets, k}).kernels;
}

// The plan and kernel spec of a reduction of `dtype` over kept and red (coalesced, red of rank
// at least 1), whose operands reach `max_reach` elements at most.
Plan plan_for(const Context& ctx, ReduceOp op, DType dtype, const Layout& kept, const Layout& red,
              std::int64_t max_reach) {
  Plan p = plan(kept, red, std::max(1, ctx.sm_count));
  p.spec.op = op;
  p.spec.dtype = dtype;
  p.spec.outer_rank = static_cast<int>(kept.shape.size());
  p.spec.reduced_rank = static_cast<int>(red.shape.size());
  const std::int64_t items = p.outputs * p.chunks;
  // Offsets, positions (a thread looks 7 steps ahead) and work items (a grid-stride loop steps
  // past the last) all fit in 31 bits, or the kernel indexes in 64.
  p.spec.wide_index =
      std::max({max_reach, p.len + 8 * p.threads, items + p.grid * p.threads}) > kMaxGrid;
  return p;
}

// Launches the plan's kernels. args holds the main kernel's arguments with two pointer slots,
// for out and the partials, at out_slot and out_slot + 1, which this fills.
void launch_plan(Context& ctx, const Kernels& k, const Plan& p, KernelArgs& args,
                 std::size_t out_slot, void* out_data) {
  ctx.make_current();
  std::shared_ptr<detail::Buffer> partial;
  const std::int64_t items = p.outputs * p.chunks;
  if (k.combine) {
    partial = device_alloc(
        ctx, static_cast<std::size_t>(items) * reduce_partial_bytes(p.spec.op, p.spec.dtype));
  }
  void* part_data = partial ? partial->data() : nullptr;
  args.set_pointer(out_slot, out_data);
  args.set_pointer(out_slot + 1, part_data);
  launch(ctx, k.main, static_cast<unsigned>(p.grid), static_cast<unsigned>(p.threads),
         args.pointers());
  if (!k.combine) return;
  // One block per output over its chunks; freeing `partial` after this is stream-ordered.
  // (const Acc* partial, Out* out, int64 outputs, int64 chunks, int64 reduced length)
  KernelArgs combine;
  combine.pointer(part_data);
  combine.pointer(out_data);
  combine.value(static_cast<long long>(p.outputs));
  combine.value(static_cast<long long>(p.chunks));
  combine.value(static_cast<long long>(p.len));
  const std::int64_t threads = std::min(kMaxBlock, ceil_div(p.chunks, 32) * 32);
  launch(ctx, k.combine, static_cast<unsigned>(std::min(p.outputs, kMaxGrid)),
         static_cast<unsigned>(threads), combine.pointers());
}

// The geometry struct of reduce_source.hpp: the sizes, the outer extents and set 0's outer
// strides, the reduced extents and set 0's reduced strides, then each further set's outer and
// reduced strides.
std::vector<long long> geometry_struct(const Plan& p, const JointLayout& kept,
                                       const JointLayout& red) {
  std::vector<long long> g = {p.outputs, p.len, p.chunks, p.chunk};
  auto append = [&g](const Dims& d) { g.insert(g.end(), d.begin(), d.end()); };
  append(kept.shape);
  append(kept.strides[0]);
  append(red.shape);
  append(red.strides[0]);
  for (std::size_t s = 1; s < kept.strides.size(); ++s) {
    append(kept.strides[s]);
    append(red.strides[s]);
  }
  return g;
}

// One stride set's layout as a joint one (reduce() reads x alone).
JointLayout joint(Layout l) { return {std::move(l.shape), {std::move(l.strides)}, l.numel}; }

// The kernels take at least one reduced dim: a single element (or none) is a run of stride 0.
void at_least_one_reduced_dim(JointLayout& red) {
  if (!red.shape.empty() && red.numel != 0) return;
  red.shape = {red.numel};
  for (Dims& s : red.strides) s = {0};
}

}  // namespace

void reduce(Context& ctx, ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out) {
  detail::check_reduce_call(op, x, dim, out);
  // arg* count indices in x's row-major order; the others may walk memory in any order.
  const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  detail::ReductionLayout l = detail::reduction_layout(x.shape, x.strides, dim, arg);
  if (l.kept.numel == 0) return;
  const JointLayout kept = joint(std::move(l.kept));
  JointLayout red = joint(std::move(l.red));
  at_least_one_reduced_dim(red);

  const Plan p = plan_for(ctx, op, x.dtype, kept.operand(0), red.operand(0),
                          detail::reach(x.shape, x.strides));
  const Kernels k = kernels_for(ctx, p.spec);

  // (const In* x, Out* out, Acc* partial, Geometry g)
  KernelArgs args;
  args.pointer(x.data());
  args.pointer(nullptr);
  args.pointer(nullptr);
  args.int64_struct(geometry_struct(p, kept, red));
  launch_plan(ctx, k, p, args, 1, out.data());
}

// The value reduced is the prologue's, in its row-major order: the same kept and reduced
// sequences, plan and chunks as reduce() of that value written contiguously (the unfused
// path), so each output meets the same values in the same order and the results agree bit
// for bit. Only the offsets differ: stride set 0 is that contiguous layout (its offset is the
// element index), and each input not of that layout nor a splat reads through a set of its
// own; all dims are coalesced over every set at once.
bool reduce_prologue(Context& ctx, ReduceOp op, const detail::Prologue& pro, int dim,
                     const TensorImpl& out) {
  const TensorImpl v = detail::prologue_value(pro);
  detail::check_reduce_call(op, v, dim, out);
  const Dims& shape = pro.shape;
  const bool empty = v.numel() == 0;
  // Strides with those of size-1 dims zeroed (they never move): equal layouts compare equal.
  auto normalised = [&](const Dims& strides) {
    Dims s = strides;
    for (std::size_t d = 0; d < s.size(); ++d)
      if (shape[d] == 1) s[d] = 0;
    return s;
  };
  std::vector<Dims> sets = {normalised(v.strides)};
  ReducePrologueSpec ps;
  ps.program = &pro.program;
  for (const TensorImpl* in : pro.inputs) {
    // Declined: an input not of the prologue's shape (outside Prologue's contract) and a
    // negative stride (kiln makes none): the kernels' offsets are unsigned.
    if (in->shape != shape) return false;
    if (std::any_of(in->strides.begin(), in->strides.end(), [](auto s) { return s < 0; }))
      return false;
    const Dims s = normalised(in->strides);
    int set = -1;
    if (empty) {
      set = 0;  // never read: no splat is loaded either
    } else if (std::any_of(s.begin(), s.end(), [](auto x) { return x != 0; })) {
      set = static_cast<int>(std::find(sets.begin(), sets.end(), s) - sets.begin());
      if (set == static_cast<int>(sets.size())) sets.push_back(s);
    }
    ps.input_sets.push_back(set);
  }
  ps.sets = static_cast<int>(sets.size());

  std::vector<const Dims*> set_strides;
  for (const Dims& s : sets) set_strides.push_back(&s);
  const detail::ReductionDims dims = detail::reduction_dims(v.rank(), dim);
  const JointLayout kept = detail::coalesce_dims(shape, set_strides, dims.kept);
  JointLayout red = detail::coalesce_dims(shape, set_strides, dims.reduced);
  if (kept.numel == 0) return true;
  at_least_one_reduced_dim(red);
  // Declined: a geometry beyond the 4 KB of kernel parameters (hundreds of stride sets).
  const std::size_t geometry =
      4 + (kept.shape.size() + red.shape.size()) * static_cast<std::size_t>(ps.sets + 1);
  if ((geometry + pro.inputs.size() + pro.scalars.size() + 2) * 8 > 4096) return false;

  std::int64_t max_reach = 0;
  for (int k = 0; k < ps.sets; ++k) {
    max_reach = std::max(max_reach, detail::reach(kept.shape, kept.strides[k]) +
                                        detail::reach(red.shape, red.strides[k]));
  }
  // Set 0's layouts: those reduce() would coalesce from the contiguous value, but for dims
  // the other sets keep apart, which changes no plan (the sizes, the innermost kept stride and
  // the reduced dim's stride are the same).
  const Plan p = plan_for(ctx, op, v.dtype, kept.operand(0), red.operand(0), max_reach);
  ps.reduce = p.spec;
  const Kernels k = prologue_kernels_for(ctx, ps);

  // (const In0* in0, ..., Out* out, Acc* partial, scalars..., Geometry g)
  KernelArgs args;
  for (const TensorImpl* in : pro.inputs) args.pointer(empty ? nullptr : in->data());
  const std::size_t out_slot = args.pointer(nullptr);
  args.pointer(nullptr);
  args.scalars(pro.program.scalars, pro.scalars);
  args.int64_struct(geometry_struct(p, kept, red));
  launch_plan(ctx, k, p, args, out_slot, out.data());
  return true;
}

}  // namespace kiln::cuda
