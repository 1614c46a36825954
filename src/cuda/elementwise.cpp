// Element-wise programs on CUDA: coalesce the operands' layouts, pick the kernel variant,
// generate and compile it once (src/ir/cuda_codegen.cpp, nvrtc_compiler.cpp), launch it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_ops.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "ir/cuda_codegen.hpp"

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
// calls become rank 0 or 1 whatever the tensors' ranks.
Geometry coalesce(const Dims& shape, const std::vector<const TensorImpl*>& ops) {
  Geometry g;
  g.strides.resize(ops.size());
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
  return g;
}

ir::Access access(const Geometry& g, const Dims& strides) {
  if (std::all_of(strides.begin(), strides.end(), [](std::int64_t s) { return s == 0; }))
    return g.shape.empty() ? ir::Access::contiguous : ir::Access::splat;
  if (strides == detail::contiguous_strides(g.shape)) return ir::Access::contiguous;
  return ir::Access::strided;
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

// Compiled kernels by (program structure, layout), so that a repeated op neither generates
// source nor hashes it.
cudaKernel_t kernel_for(const Context& ctx, const ir::Program& p, const ir::CudaLayout& l) {
  static std::mutex mu;
  static std::unordered_map<std::string, cudaKernel_t> kernels;
  std::string key = ctx.arch() + "|" + l.tag() + "|" + p.signature();
  {
    std::lock_guard lock(mu);
    auto it = kernels.find(key);
    if (it != kernels.end()) return it->second;
  }
  ir::CudaKernel k = ir::cuda_kernel(p, l);
  cudaKernel_t fn =
      cached_kernel(k.source, "kiln_elementwise_" + l.tag() + ".cu", k.name, ctx.arch());
  std::lock_guard lock(mu);
  kernels.emplace(std::move(key), fn);
  return fn;
}

}  // namespace

void elementwise(Context& ctx, const ir::Program& program,
                 std::span<const TensorImpl* const> inputs, std::span<const double> scalars,
                 std::span<const TensorImpl* const> outputs) {
  const Dims& shape = outputs[0]->shape;
  const std::int64_t n = detail::numel(shape);
  if (n == 0) return;
  std::vector<const TensorImpl*> ops(inputs.begin(), inputs.end());
  ops.insert(ops.end(), outputs.begin(), outputs.end());
  const Geometry g = coalesce(shape, ops);

  ir::CudaLayout layout;
  layout.rank = static_cast<int>(g.shape.size());
  bool vector_ok = true;
  std::int64_t max_reach = n - 1;
  std::vector<int> strided_ops;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    ir::Access a = access(g, g.strides[k]);
    (k < inputs.size() ? layout.inputs : layout.outputs).push_back(a);
    if (a == ir::Access::strided) {
      strided_ops.push_back(static_cast<int>(k));
      max_reach = std::max(max_reach, reach(g, g.strides[k]));
      vector_ok = false;
    } else if (a == ir::Access::contiguous) {
      vector_ok = vector_ok && aligned(ops[k]->data(), 4 * dtype_size(ops[k]->dtype));
    }
  }
  layout.vectorized = vector_ok && n >= 4;
  layout.wide_index = max_reach > std::numeric_limits<std::int32_t>::max() ||
                      n > std::numeric_limits<std::int32_t>::max();
  cudaKernel_t fn = kernel_for(ctx, program, layout);

  // The argument values, then pointers to each (cudaLaunchKernel's form).
  std::vector<void*> pointers;
  for (const TensorImpl* t : ops) pointers.push_back(t->data());
  std::vector<float> f32_scalars(scalars.size());
  std::vector<int> int_scalars(scalars.size());
  std::vector<long long> geometry;
  if (!strided_ops.empty()) {
    geometry.assign(g.shape.begin(), g.shape.end());
    for (int k : strided_ops)
      geometry.insert(geometry.end(), g.strides[k].begin(), g.strides[k].end());
  }
  unsigned n32 = static_cast<unsigned>(n);
  unsigned long long n64 = static_cast<unsigned long long>(n);
  std::vector<void*> args;
  for (auto& p : pointers) args.push_back(&p);
  for (std::size_t s = 0; s < scalars.size(); ++s) {
    if (program.scalars[s] == DType::f32) {
      f32_scalars[s] = static_cast<float>(scalars[s]);
      args.push_back(&f32_scalars[s]);
    } else {
      int_scalars[s] =
          program.scalars[s] == DType::boolean ? scalars[s] != 0 : static_cast<int>(scalars[s]);
      args.push_back(&int_scalars[s]);
    }
  }
  if (!geometry.empty()) args.push_back(geometry.data());
  args.push_back(layout.wide_index ? static_cast<void*>(&n64) : static_cast<void*>(&n32));

  const std::int64_t work = layout.vectorized ? (n + 3) / 4 : n;
  const std::int64_t blocks = std::min<std::int64_t>((work + kThreads - 1) / kThreads,
                                                     std::int64_t{ctx.sm_count} * kBlocksPerSm);
  ctx.make_current();
  launch(fn, static_cast<unsigned>(blocks), kThreads, args.data(), ctx.stream);
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
