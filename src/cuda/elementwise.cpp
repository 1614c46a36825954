// Element-wise programs on CUDA: coalesce the operands' layouts, pick the kernel variant,
// generate and compile it once (src/ir/cuda_codegen.cpp, nvrtc_compiler.cpp), launch it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/layout.hpp"
#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_args.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/kernel_profile.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "ir/cuda_codegen.hpp"
#include "ir/hashed_cache.hpp"

namespace kiln::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Blocks per SM in the grid-stride loop: 8 of 256 threads fill an SM's 2048 thread slots, and
// a few rounds of them keep the memory system busy without a tail of idle SMs.
constexpr unsigned kBlocksPerSm = 16;

// Every operand (inputs, then outputs) over one coalesced iteration space (core/layout.hpp):
// most calls become rank 0 or 1 whatever the tensors' ranks.
using Geometry = detail::JointLayout;

ir::Access access(const Geometry& g, const Dims& strides) {
  bool splat = true, contiguous = true;
  std::int64_t expect = 1;
  for (std::size_t d = strides.size(); d-- > 0;) {
    splat = splat && strides[d] == 0;
    contiguous = contiguous && strides[d] == expect;
    expect *= g.shape[d];
  }
  if (splat) return g.shape.empty() ? ir::Access::contiguous : ir::Access::splat;
  return contiguous ? ir::Access::contiguous : ir::Access::strided;
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// "elementwise bf16 <- f32: mul add gelu": the program's output and input dtypes and its ops, the
// name KILN_LOG=profile gives its kernel.
std::string profile_name(const ir::Program& p) {
  std::string s = "elementwise";
  for (std::int32_t o : p.outputs) s += std::string(" ") + dtype_name(p.dtype(o));
  s += " <-";
  for (DType t : p.inputs) s += std::string(" ") + dtype_name(t);
  s += ":";
  for (const ir::Node& n : p.nodes)
    if (n.op > ir::Op::index) s += std::string(" ") + ir::op_name(n.op);
  return s;
}

// Compiled kernels by (arch, program structure, layout), so that a repeated op neither
// generates source nor hashes it (ir/hashed_cache.hpp).
cudaKernel_t kernel_for(const Context& ctx, const ir::Program& p, const ir::CudaLayout& l) {
  struct Entry {
    int arch;
    ir::Program program;
    ir::CudaLayout layout;
    cudaKernel_t kernel;
  };
  static ir::HashedCache<Entry> kernels;
  const int arch = ctx.cc_major * 10 + ctx.cc_minor;
  std::uint64_t hash = p.structure_hash() ^ static_cast<std::uint64_t>(arch) << 56;
  ir::hash_mix(hash, static_cast<std::uint64_t>(l.rank) << 2 | l.vectorized << 1 | l.wide_index);
  for (ir::Access a : l.inputs) ir::hash_mix(hash, static_cast<std::uint64_t>(a));
  for (ir::Access a : l.outputs) ir::hash_mix(hash, static_cast<std::uint64_t>(a) + 8);
  const Entry* e = kernels.find(
      hash, [&](const Entry& e) { return e.arch == arch && e.layout == l && e.program == p; });
  if (e) return e->kernel;
  ir::CudaKernel k = ir::cuda_kernel(p, l);
  cudaKernel_t fn =
      cached_kernel(k.source, "kiln_elementwise_" + l.tag() + ".cu", k.name, ctx.arch());
  if (profiling()) name_kernel(fn, profile_name(p));
  return kernels.insert(hash, {arch, p, l, fn}).kernel;
}

// What one launch builds, kept per thread so that a launch allocates nothing once the vectors
// have grown (this runs for every op, and for every fused group).
struct LaunchScratch {
  std::vector<const TensorImpl*> ops;  // inputs, then outputs
  std::vector<const Dims*> op_strides;
  Geometry geometry;
  ir::CudaLayout layout;
  std::vector<int> strided_ops;
  std::vector<long long> strides;  // the kernel's geometry parameter
  KernelArgs args;
};

}  // namespace

void elementwise(Context& ctx, const ir::Program& program,
                 std::span<const TensorImpl* const> inputs, std::span<const double> scalars,
                 std::span<const TensorImpl* const> outputs) {
  const Dims& shape = outputs[0]->shape;
  const std::int64_t n = detail::numel(shape);
  if (n == 0) return;
  ctx.make_current();  // (also the device a kernel compiled below is stored for)
  thread_local LaunchScratch s;
  s.ops.assign(inputs.begin(), inputs.end());
  s.ops.insert(s.ops.end(), outputs.begin(), outputs.end());
  s.op_strides.clear();
  for (const TensorImpl* t : s.ops) s.op_strides.push_back(&t->strides);
  const Geometry& g = s.geometry;
  detail::coalesce(shape, s.op_strides, s.geometry);

  ir::CudaLayout& layout = s.layout;
  layout.rank = static_cast<int>(g.shape.size());
  layout.inputs.clear();
  layout.outputs.clear();
  // Vectorized (4 elements a step) when every operand allows it: contiguous and aligned, a
  // splat, or strided with the innermost dim contiguous (aligned, outer strides multiples of 4)
  // or broadcast (an input), the innermost extent a multiple of 4 (a bias over rows, a per-row
  // statistic over its row).
  const bool rows_of_4 = !g.shape.empty() && g.shape.back() % 4 == 0;
  bool vector_ok = n >= 4;
  std::int64_t max_reach = n - 1;
  s.strided_ops.clear();
  for (std::size_t k = 0; k < s.ops.size(); ++k) {
    ir::Access a = access(g, g.strides[k]);
    (k < inputs.size() ? layout.inputs : layout.outputs).push_back(a);
    const bool aligned4 = aligned(s.ops[k]->data(), 4 * dtype_size(s.ops[k]->dtype));
    if (a == ir::Access::strided) {
      s.strided_ops.push_back(static_cast<int>(k));
      max_reach = std::max(max_reach, detail::reach(g.shape, g.strides[k]));
      const Dims& st = g.strides[k];
      const bool outer_by_4 =
          std::all_of(st.begin(), st.end() - 1, [](auto x) { return x % 4 == 0; });
      vector_ok =
          vector_ok && rows_of_4 &&
          ((st.back() == 1 && outer_by_4 && aligned4) || (st.back() == 0 && k < inputs.size()));
    } else if (a == ir::Access::contiguous) {
      vector_ok = vector_ok && aligned4;
    }
  }
  layout.vectorized = vector_ok;
  if (vector_ok) {
    for (int k : s.strided_ops) {
      ir::Access& a = k < static_cast<int>(inputs.size())
                          ? layout.inputs[static_cast<std::size_t>(k)]
                          : layout.outputs[static_cast<std::size_t>(k) - inputs.size()];
      a = g.strides[static_cast<std::size_t>(k)].back() == 1 ? ir::Access::row_strided
                                                             : ir::Access::row_splat;
    }
  }
  layout.wide_index = max_reach > std::numeric_limits<std::int32_t>::max() ||
                      n > std::numeric_limits<std::int32_t>::max();
  cudaKernel_t fn = kernel_for(ctx, program, layout);

  // The kernel's parameters (ir/cuda_codegen.cpp): each operand's data, the scalars, the
  // geometry (the extents, each strided operand's strides, the extents' dividers) if any operand
  // is strided, and the element count in the index width.
  KernelArgs& args = s.args;
  args.clear();
  for (const TensorImpl* t : s.ops) args.pointer(t->data());
  args.scalars(program.scalars, scalars);
  if (!s.strided_ops.empty()) {
    s.strides.assign(g.shape.begin(), g.shape.end());
    for (int k : s.strided_ops)
      s.strides.insert(s.strides.end(), g.strides[k].begin(), g.strides[k].end());
    if (!layout.wide_index)
      for (std::int64_t e : g.shape)
        s.strides.push_back(
            static_cast<long long>(ir::cuda_divider(static_cast<std::uint32_t>(e))));
    args.int64_struct(s.strides);
  }
  if (layout.wide_index)
    args.value(static_cast<unsigned long long>(n));
  else
    args.value(static_cast<unsigned>(n));

  const std::int64_t work = layout.vectorized ? (n + 3) / 4 : n;
  const std::int64_t blocks = std::min<std::int64_t>((work + kThreads - 1) / kThreads,
                                                     std::int64_t{ctx.sm_count} * kBlocksPerSm);
  launch(ctx, fn, static_cast<unsigned>(blocks), kThreads, args.pointers());
}

detail::Handle contiguous(Context& ctx, const detail::Handle& x) {
  if (x->is_contiguous()) return x;
  ir::Program p;
  p.output(p.input(x->dtype));
  detail::Handle out = device_empty(ctx, x->shape, x->dtype);
  const TensorImpl* in[] = {x.get()};
  const TensorImpl* outs[] = {out.get()};
  elementwise(ctx, p, in, {}, outs);
  return out;
}

}  // namespace kiln::cuda
