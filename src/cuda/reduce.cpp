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

#include "core/coalesce.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
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
  // Offsets, positions (a thread looks 3 steps ahead) and work items (a grid-stride loop steps
  // past the last) all fit in 31 bits, or the kernel indexes in 64.
  p.spec.wide_index =
      std::max({max_reach, p.len + 4 * p.threads, items + p.grid * p.threads}) > kMaxGrid;
  return p;
}

// Launches the plan's kernels. args holds the main kernel's argument pointers with two slots
// for out and the partials at out_slot and out_slot + 1, which this fills.
void launch_plan(Context& ctx, const Kernels& k, const Plan& p, std::vector<void*>& args,
                 std::size_t out_slot, void* out_data) {
  ctx.make_current();
  std::shared_ptr<detail::Buffer> partial;
  const std::int64_t items = p.outputs * p.chunks;
  if (k.combine) {
    partial = device_alloc(
        ctx, static_cast<std::size_t>(items) * reduce_partial_bytes(p.spec.op, p.spec.dtype));
  }
  void* part_data = partial ? partial->data() : nullptr;
  args[out_slot] = &out_data;
  args[out_slot + 1] = &part_data;
  launch(ctx, k.main, static_cast<unsigned>(p.grid), static_cast<unsigned>(p.threads), args.data());
  if (!k.combine) return;
  // One block per output over its chunks; freeing `partial` after this is stream-ordered.
  long long outputs = p.outputs, chunks = p.chunks, len = p.len;
  void* combine_args[] = {&part_data, &out_data, &outputs, &chunks, &len};
  const std::int64_t threads = std::min(kMaxBlock, ceil_div(p.chunks, 32) * 32);
  launch(ctx, k.combine, static_cast<unsigned>(std::min(p.outputs, kMaxGrid)),
         static_cast<unsigned>(threads), combine_args);
}

// Dims `dims` of shape, in order, with size-1 dims dropped and neighbours merged where every
// stride set walks them as one run (as coalesce() does for one set): the same row-major
// sequence of elements in each set.
struct JointLayout {
  Dims shape;
  std::vector<Dims> strides;  // per set
  std::int64_t numel = 1;
};

JointLayout coalesce_jointly(const Dims& shape, const std::vector<Dims>& sets,
                             const std::vector<int>& dims) {
  JointLayout l;
  l.strides.resize(sets.size());
  for (int d : dims) {
    l.numel *= shape[d];
    if (shape[d] == 1) continue;
    bool merge = !l.shape.empty();
    for (std::size_t k = 0; merge && k < sets.size(); ++k)
      merge = l.strides[k].back() == sets[k][d] * shape[d];
    if (merge) {
      l.shape.back() *= shape[d];
      for (std::size_t k = 0; k < sets.size(); ++k) l.strides[k].back() = sets[k][d];
    } else {
      l.shape.push_back(shape[d]);
      for (std::size_t k = 0; k < sets.size(); ++k) l.strides[k].push_back(sets[k][d]);
    }
  }
  return l;
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

  const Plan p = plan_for(ctx, op, x.dtype, kept, red, reach(x));
  const Kernels k = kernels_for(ctx, p.spec);

  // The geometry struct of reduce_source.hpp.
  std::vector<long long> g = {p.outputs, p.len, p.chunks, p.chunk};
  g.insert(g.end(), kept.shape.begin(), kept.shape.end());
  g.insert(g.end(), kept.strides.begin(), kept.strides.end());
  g.insert(g.end(), red.shape.begin(), red.shape.end());
  g.insert(g.end(), red.strides.begin(), red.strides.end());

  const void* x_data = x.data();
  std::vector<void*> args = {&x_data, nullptr, nullptr, g.data()};
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

  std::vector<int> kept_dims, red_dims;
  for (int d = 0; d < v.rank(); ++d) (dim < 0 || d == dim ? red_dims : kept_dims).push_back(d);
  const JointLayout kept = coalesce_jointly(shape, sets, kept_dims);
  JointLayout red = coalesce_jointly(shape, sets, red_dims);
  if (kept.numel == 0) return true;
  if (red.shape.empty() || red.numel == 0) {
    red.shape = {red.numel};
    for (Dims& s : red.strides) s = {0};
  }
  // Declined: a geometry beyond the 4 KB of kernel parameters (hundreds of stride sets).
  const std::size_t geometry =
      4 + (kept.shape.size() + red.shape.size()) * static_cast<std::size_t>(ps.sets + 1);
  if ((geometry + pro.inputs.size() + pro.scalars.size() + 2) * 8 > 4096) return false;

  std::int64_t max_reach = 0;
  for (int k = 0; k < ps.sets; ++k) {
    std::int64_t r = 0;
    for (std::size_t d = 0; d < kept.shape.size(); ++d)
      r += (kept.shape[d] - 1) * kept.strides[k][d];
    for (std::size_t d = 0; d < red.shape.size(); ++d) r += (red.shape[d] - 1) * red.strides[k][d];
    max_reach = std::max(max_reach, r);
  }
  // Set 0's layouts: those reduce() would coalesce from the contiguous value, but for dims
  // the other sets keep apart, which changes no plan (the sizes, the innermost kept stride and
  // the reduced dim's stride are the same).
  const Layout kept0{kept.shape, kept.strides[0], kept.numel};
  const Layout red0{red.shape, red.strides[0], red.numel};
  const Plan p = plan_for(ctx, op, v.dtype, kept0, red0, max_reach);
  ps.reduce = p.spec;
  const Kernels k = prologue_kernels_for(ctx, ps);

  std::vector<long long> g = {p.outputs, p.len, p.chunks, p.chunk};
  auto append = [&g](const Dims& d) { g.insert(g.end(), d.begin(), d.end()); };
  append(kept.shape);
  append(kept.strides[0]);
  append(red.shape);
  append(red.strides[0]);
  for (int s = 1; s < ps.sets; ++s) {
    append(kept.strides[s]);
    append(red.strides[s]);
  }

  // The argument values, then pointers to each; the vectors are sized before any pointer into
  // them is taken.
  std::vector<const void*> in_data;
  for (const TensorImpl* in : pro.inputs) in_data.push_back(empty ? nullptr : in->data());
  std::vector<float> f32(pro.scalars.size());
  std::vector<int> ints(pro.scalars.size());
  std::vector<void*> args;
  for (auto& d : in_data) args.push_back(&d);
  const std::size_t out_slot = args.size();
  args.push_back(nullptr);
  args.push_back(nullptr);
  for (std::size_t i = 0; i < pro.scalars.size(); ++i) {
    if (compute_dtype(pro.program.scalars[i]) == DType::f32) {
      f32[i] = static_cast<float>(pro.scalars[i]);
      args.push_back(&f32[i]);
    } else {
      ints[i] = pro.program.scalars[i] == DType::boolean ? pro.scalars[i] != 0
                                                         : static_cast<int>(pro.scalars[i]);
      args.push_back(&ints[i]);
    }
  }
  args.push_back(g.data());
  launch_plan(ctx, k, p, args, out_slot, out.data());
  return true;
}

}  // namespace kiln::cuda
