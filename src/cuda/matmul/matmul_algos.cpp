#include "cuda/matmul/matmul_algos.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace kiln::cuda {
namespace {

template <class T>
T config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  std::size_t written = 0;
  // A config the algorithm lacks leaves v at its default, which is what a name should show.
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written);
  return v;
}

constexpr const char* kPrefix = "lt:";

}  // namespace

std::string algo_name(const cublasLtMatmulAlgo_t& algo) {
  return fmt::format("cublasLt algo {}, tile id {}, stages id {}, split-K {}",
                     config<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     config<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     config<std::int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
}

std::string algo_value(const cublasLtMatmulAlgo_t& algo) {
  unsigned char bytes[sizeof algo];
  std::memcpy(bytes, &algo, sizeof algo);
  std::string v = kPrefix;
  for (unsigned char b : bytes) v += fmt::format("{:02x}", b);
  return v;
}

std::optional<cublasLtMatmulAlgo_t> algo_from_value(const std::string& value) {
  const std::size_t prefix = std::strlen(kPrefix);
  if (value.size() != prefix + 2 * sizeof(cublasLtMatmulAlgo_t) || value.rfind(kPrefix, 0) != 0)
    return std::nullopt;
  unsigned char bytes[sizeof(cublasLtMatmulAlgo_t)];
  for (std::size_t i = 0; i < sizeof bytes; ++i) {
    unsigned v = 0;
    for (char c : value.substr(prefix + 2 * i, 2)) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + static_cast<unsigned>(d);
    }
    bytes[i] = static_cast<unsigned char>(v);
  }
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, bytes, sizeof algo);
  return algo;
}

}  // namespace kiln::cuda
