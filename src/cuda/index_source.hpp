// The CUDA C source of the indexing kernels: the element-wise prelude, src/cuda/kernels/index.cuh
// (embedded at build time) and the extern "C" entry points generated here.
#pragma once

#include <string>
#include <vector>

#include "kiln/dtype.hpp"

namespace kiln::cuda {

// The one source of every indexing kernel (compiled once per device, all entry points in it).
const std::string& index_source();
// Entry points: copies by element size (1, 2, 4 bytes) or by 16-byte vector (rows of
// index_select), and the accumulation kernels by data dtype (f32, i32, bf16, f16).
std::string index_gather_name(std::size_t element_size);
std::string index_rows_name(std::size_t vector_size);  // 1, 2, 4 or 16
std::string index_accumulate_name(const char* stage,
                                  DType t);  // init, finish, atomic, owner, segment_rows(_vec)
inline const char* index_check_name() { return "kiln_index_check"; }
// Every entry point's name, for the NVRTC compile test.
std::vector<std::string> index_kernel_names();

}  // namespace kiln::cuda
