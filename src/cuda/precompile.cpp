#include "cuda/precompile.hpp"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <string>

#include "cuda/matmul/gemm_source.hpp"
#include "cuda/nvrtc_compiler.hpp"
#include "cuda/random_source.hpp"
#include "cuda/reduce_source.hpp"

namespace kiln::cuda {
namespace {

// In the order a program meets them: random weights first, then reductions; the GEMM
// candidates (the longest compiles) are only wanted by a matmul's tuning, which goes on without
// them until they are ready.
void queue_all(const std::string& arch) {
  compile_in_background(random_source(), "kiln_random.cu", arch);

  using detail::ReduceOp;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
    ReduceKernelSpec row;  // along the last dim of a matrix: the row-wise block kernel
    row.op = op;
    row.outer_rank = 1;
    ReduceKernelSpec all;  // every element: one output, split over the GPU
    all.op = op;
    all.variant = ReduceVariant::block_split;
    for (const ReduceKernelSpec& spec : {row, all}) {
      compile_in_background(reduce_source({&spec, 1}), reduce_kernel_name(spec) + ".cu", arch);
    }
  }

  const GemmOperand row_major_a{GemmLoad::k_unit, true};
  for (GemmVariant v : {GemmVariant::fp32, GemmVariant::tf32x3}) {
    for (GemmLoad c : {GemmLoad::outer_unit, GemmLoad::k_unit}) {  // b as stored, b transposed
      const GemmKernelSpec spec{v, GemmTile::t128x128, row_major_a, GemmOperand{c, true}};
      compile_in_background(gemm_source({&spec, 1}), gemm_kernel_name(spec) + ".cu", arch);
    }
  }
}

}  // namespace

void precompile_in_background(Context& ctx) {
  static std::mutex mu;
  static std::set<int> armed;
  {
    std::lock_guard lock(mu);
    if (!armed.insert(ctx.index).second) return;
  }
  before_first_compile([&ctx] {  // (contexts live as long as the process)
    try {
      // The store's rows name the current device: ctx's while queuing, then the caller's again.
      int caller = 0;
      const bool restore = cudaGetDevice(&caller) == cudaSuccess;
      ctx.make_current();
      queue_all(ctx.arch());
      if (restore) cudaSetDevice(caller);
    } catch (...) {
      // Left to each kernel's first use, which compiles it and reports what fails.
    }
  });
}

}  // namespace kiln::cuda
