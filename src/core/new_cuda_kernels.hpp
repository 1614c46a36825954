// CUDA code that has compiled with NVRTC in CI but has not yet run on a GPU (it was written in a
// session that was lent none) runs only when asked: KILN_CUDA_NEW_KERNELS=1 in the environment
// (read at each use, so a test can set it). Until then the CUDA backend takes the path that has run
// before. What it gates today (2026-12-05): the attention kernels (src/cuda/attention.cpp), the
// cheaper forms of values rounded to a half type (src/ir/cuda_codegen.cpp) and random written in
// bf16/f16 (the CUDA backend's supports). The GPU suite runs with it set (bench/h200_call.sh
// tests); once it has passed them, the gated code becomes the default and this gate goes away.
#pragma once

namespace kiln::detail {

bool new_cuda_kernels();

}  // namespace kiln::detail
