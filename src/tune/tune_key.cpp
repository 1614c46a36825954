#include "tune/tune_key.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "kiln/error.hpp"

namespace kiln::tune {

std::int64_t bucket(std::int64_t n) {
  if (n < 0) throw ValueError(fmt::format("tune: negative extent {}", n));
  if (n <= 1) return n;
  if (n > (std::int64_t{1} << 62)) return std::int64_t{1} << 62;  // (no tensor is this large)
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(n)));
}

std::string matmul_key(const MatmulProblem& p) {
  return fmt::format("matmul {} {} {}{} b{} m{} n{} k{}", p.dtype, p.precision, p.op_a, p.op_b,
                     bucket(p.batch), bucket(p.m), bucket(p.n), bucket(p.k));
}

std::optional<MatmulProblem> parse_matmul_key(std::string_view key) {
  char dtype[16], precision[16], ops[3];
  long long batch = 0, m = 0, n = 0, k = 0;
  const std::string text(key);
  if (std::sscanf(text.c_str(), "matmul %15s %15s %2s b%lld m%lld n%lld k%lld", dtype, precision,
                  ops, &batch, &m, &n, &k) != 7 ||
      std::strlen(ops) != 2) {
    return std::nullopt;
  }
  MatmulProblem p{dtype, precision, ops[0], ops[1], batch, m, n, k};
  if (matmul_key(p) != key) return std::nullopt;  // (trailing text, unbucketed extents, ...)
  return p;
}

std::string matmul_shape(const MatmulProblem& p) {
  return fmt::format("{} [{}, {}, {}] x [{}, {}, {}] {}{} {}", p.dtype, p.batch, p.m, p.k, p.batch,
                     p.k, p.n, p.op_a, p.op_b, p.precision);
}

}  // namespace kiln::tune
