// The CUDA C source of the row kernels (softmax, log_softmax, layer_norm, rms_norm): the
// element-wise prelude, src/cuda/kernels/rows.cuh (embedded at build time) and the extern "C"
// entry points generated here, one source per dtype (f32, bf16, f16).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.hpp"

namespace kiln::cuda {

// The register counts (loads of V elements a thread) the fit kernels are built for, and the most
// values a thread holds (K * V): 8 x 16-byte half loads (64 values) spill under the 64 registers a
// 1024-thread block allows, so no kernel holds more than 32.
inline constexpr int kRowRegisterCounts[] = {1, 2, 4, 8};
inline constexpr int kRowMaxHeld = 32;

// The source of every row kernel of x's dtype t writing y of dtype y: t, or (the norms alone) a
// half type for an f32 t. Compiled once per device and pair. With r, the dtype of a residual
// added to x (t, or a half type for an f32 t): the norms that add it ("addnorm") alone.
const std::string& rows_source(DType t, DType y, std::optional<DType> r = std::nullopt);
// Entry points: `family` "softmax" (softmax and log_softmax), "norm" (layer_norm and rms_norm)
// or "addnorm" (the norms of x + a residual of dtype r); V the elements of one load (1, or 16
// bytes' worth); k the loads a thread holds in registers (kRowRegisterCounts), or 0 for the
// streaming kernel of rows that do not fit; y the dtype of y (absent: t).
std::string rows_kernel_name(const char* family, DType t, int v, int k,
                             std::optional<DType> y = std::nullopt,
                             std::optional<DType> r = std::nullopt);
// The vector width of dtype t: the elements of a 16-byte load.
inline int rows_vector(DType t) { return static_cast<int>(16 / dtype_size(t)); }
// Every entry point of rows_source(t, y, r), for the NVRTC compile test.
std::vector<std::string> rows_kernel_names(DType t, DType y, std::optional<DType> r = std::nullopt);

}  // namespace kiln::cuda
