// cuBLASLt algorithms as the tuner and the store see them: a readable name, and a value that
// restores the algorithm in a later process (the same cuBLAS version: the store keys on it).
#pragma once

#include <cublasLt.h>

#include <optional>
#include <string>

namespace kiln::cuda {

// "cublasLt algo 21, tile 128x128 (id 20), stages 8, split-K 1".
std::string algo_name(const cublasLtMatmulAlgo_t& algo);
// "lt:" and the algorithm's bytes in hex; from_value gives nothing for any other text.
std::string algo_value(const cublasLtMatmulAlgo_t& algo);
std::optional<cublasLtMatmulAlgo_t> algo_from_value(const std::string& value);

}  // namespace kiln::cuda
