// The CUDA C source of the order kernels (max/min with index, sort, topk, cumsum): the element-wise
// prelude, src/cuda/kernels/order.cuh (embedded at build time) and the extern "C" entry points
// generated here, one source per dtype (f32, i32, bool, bf16, f16).
#pragma once

#include <string>
#include <vector>

#include "kiln/dtype.hpp"

namespace kiln::cuda {

// The largest tile of sort words a block holds in shared memory (8 bytes each: 32 KiB).
inline constexpr int kOrderTile = 4096;

// The source of every order kernel of dtype t (compiled once per device and dtype).
const std::string& order_source(DType t);
// Entry points: "fill", "tile", "step", "gather", "extreme", "cumsum", "chunk_sums", "chunk_scan"
// of dtype t ("tile" and
// "step" read no x and are the same in every dtype's source).
std::string order_kernel_name(const char* kernel, DType t);
// Every entry point of dtype t, for the NVRTC compile test.
std::vector<std::string> order_kernel_names(DType t);

}  // namespace kiln::cuda
