// Tune keys: the problem as the tuner files it, coarse enough that nearby shapes share a choice.
//
// Bucketing rule: an extent n >= 1 goes to the smallest power of two >= n (1 -> 1, 3 -> 4,
// 1000 -> 1024, 1024 -> 1024, 1025 -> 2048); 0 stays 0. So a 1000x1000x1000 and a
// 1024x1024x1024 matmul share one choice, while 1024 and 1025 do not: the kernels that win
// change at powers of two (tile sizes, split-K thresholds), not between them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tune {

std::int64_t bucket(std::int64_t n);

// A matmul out[B, m, n] = a[B, m, k] @ b[B, k, n] as the tuner sees it.
struct MatmulProblem {
  std::string dtype = "f32";
  std::string precision = "highest";  // "highest" or "high"
  char op_a = 'N', op_b = 'N';        // the transposition cuBLASLt applies to kiln's a and b
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  // What the product does in the same pass (Backend::matmul_epilogue): "" for nothing, else the
  // cuBLASLt epilogue's name ("bias", "gelu_aux_bias", ...): the algorithms that apply
  // differ, so the choice does.
  std::string epilogue;
};

// "matmul f32 highest NT b1 m1024 n1024 k1024": dtype, precision, layout and the bucketed
// extents (the batch too), then the epilogue's name where there is one (" bias").
std::string matmul_key(const MatmulProblem& p);
// The problem of a key matmul_key made, with the bucketed extents; nullopt for any other key.
std::optional<MatmulProblem> parse_matmul_key(std::string_view key);
// The exact problem for listings: "f32 [1, 1000, 1030] x [1, 1030, 1024] NT highest".
std::string matmul_shape(const MatmulProblem& p);
// The matmul keys among `keys` next to `key`: the same dtype, precision, layout and batch, and
// m, n and k each at most one power of two away (key itself excluded); nearest first (the
// fewest powers of two apart in all), ties in the order given.
std::vector<std::string> neighbouring_matmul_keys(const std::string& key,
                                                  const std::vector<std::string>& keys);

}  // namespace kiln::tune
