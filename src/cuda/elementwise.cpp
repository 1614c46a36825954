// Element-wise programs on CUDA: coalesce the operands' layouts, pick the kernel variant,
// generate and compile it once (src/ir/cuda_codegen.cpp, nvrtc_compiler.cpp), launch it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernel_launch.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "ir/cuda_codegen.hpp"
#include "ir/hashed_cache.hpp"

namespace kiln::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Blocks per SM in the grid-stride loop: 8 of 256 threads fill an SM's 2048 thread slots, and
// a few rounds of them keep the memory system busy without a tail of idle SMs.
constexpr unsigned kBlocksPerSm = 16;

// Every operand (inputs, then outputs) over one common iteration space.
struct Geometry {
  Dims shape;
  std::vector<Dims> strides;  // per operand
};

// Drops size-1 dims and merges neighbours that every operand walks as one run, so that most
// calls become rank 0 or 1 whatever the tensors' ranks. Reuses g's vectors (no allocation once
// they have grown).
void coalesce(const Dims& shape, std::span<const TensorImpl* const> ops, Geometry& g) {
  g.shape.clear();
  g.strides.resize(ops.size());
  for (Dims& s : g.strides) s.clear();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !g.shape.empty();
    for (std::size_t k = 0; merge && k < ops.size(); ++k)
      merge = g.strides[k].back() == ops[k]->strides[d] * shape[d];
    if (merge) {
      g.shape.back() *= shape[d];
      for (std::size_t k = 0; k < ops.size(); ++k) g.strides[k].back() = ops[k]->strides[d];
    } else {
      g.shape.push_back(shape[d]);
      for (std::size_t k = 0; k < ops.size(); ++k) g.strides[k].push_back(ops[k]->strides[d]);
    }
  }
}

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

// The largest element offset a strided operand reaches.
std::int64_t reach(const Geometry& g, const Dims& strides) {
  std::int64_t r = 0;
  for (std::size_t d = 0; d < g.shape.size(); ++d) r += (g.shape[d] - 1) * strides[d];
  return r;
}

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
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
  return kernels.insert(hash, {arch, p, l, fn}).kernel;
}

// What one launch builds, kept per thread so that a launch allocates nothing once the vectors
// have grown (this runs for every op, and for every fused group).
struct LaunchScratch {
  std::vector<const TensorImpl*> ops;  // inputs, then outputs
  Geometry geometry;
  ir::CudaLayout layout;
  std::vector<int> strided_ops;
  std::vector<void*> pointers;
  std::vector<float> f32_scalars;
  std::vector<int> int_scalars;
  std::vector<long long> strides;  // the kernel's geometry parameter
  std::vector<void*> args;
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
  const Geometry& g = s.geometry;
  coalesce(shape, s.ops, s.geometry);

  ir::CudaLayout& layout = s.layout;
  layout.rank = static_cast<int>(g.shape.size());
  layout.inputs.clear();
  layout.outputs.clear();
  bool vector_ok = true;
  std::int64_t max_reach = n - 1;
  s.strided_ops.clear();
  for (std::size_t k = 0; k < s.ops.size(); ++k) {
    ir::Access a = access(g, g.strides[k]);
    (k < inputs.size() ? layout.inputs : layout.outputs).push_back(a);
    if (a == ir::Access::strided) {
      s.strided_ops.push_back(static_cast<int>(k));
      max_reach = std::max(max_reach, reach(g, g.strides[k]));
      vector_ok = false;
    } else if (a == ir::Access::contiguous) {
      vector_ok = vector_ok && aligned(s.ops[k]->data(), 4 * dtype_size(s.ops[k]->dtype));
    }
  }
  layout.vectorized = vector_ok && n >= 4;
  layout.wide_index = max_reach > std::numeric_limits<std::int32_t>::max() ||
                      n > std::numeric_limits<std::int32_t>::max();
  cudaKernel_t fn = kernel_for(ctx, program, layout);

  // The argument values, then pointers to each (cudaLaunchKernel's form). The value vectors are
  // sized before any pointer into them is taken.
  s.pointers.clear();
  for (const TensorImpl* t : s.ops) s.pointers.push_back(t->data());
  s.f32_scalars.resize(scalars.size());
  s.int_scalars.resize(scalars.size());
  s.strides.clear();
  if (!s.strided_ops.empty()) {
    s.strides.assign(g.shape.begin(), g.shape.end());
    for (int k : s.strided_ops)
      s.strides.insert(s.strides.end(), g.strides[k].begin(), g.strides[k].end());
  }
  unsigned n32 = static_cast<unsigned>(n);
  unsigned long long n64 = static_cast<unsigned long long>(n);
  s.args.clear();
  for (auto& p : s.pointers) s.args.push_back(&p);
  for (std::size_t i = 0; i < scalars.size(); ++i) {
    if (compute_dtype(program.scalars[i]) == DType::f32) {
      s.f32_scalars[i] = static_cast<float>(scalars[i]);
      s.args.push_back(&s.f32_scalars[i]);
    } else {
      s.int_scalars[i] =
          program.scalars[i] == DType::boolean ? scalars[i] != 0 : static_cast<int>(scalars[i]);
      s.args.push_back(&s.int_scalars[i]);
    }
  }
  if (!s.strides.empty()) s.args.push_back(s.strides.data());
  s.args.push_back(layout.wide_index ? static_cast<void*>(&n64) : static_cast<void*>(&n32));

  const std::int64_t work = layout.vectorized ? (n + 3) / 4 : n;
  const std::int64_t blocks = std::min<std::int64_t>((work + kThreads - 1) / kThreads,
                                                     std::int64_t{ctx.sm_count} * kBlocksPerSm);
  launch(ctx, fn, static_cast<unsigned>(blocks), kThreads, s.args.data());
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
