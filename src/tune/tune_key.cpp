#include "tune/tune_key.hpp"

#include <fmt/format.h>

#include <bit>

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

std::string matmul_shape(const MatmulProblem& p) {
  return fmt::format("{} [{}, {}, {}] x [{}, {}, {}] {}{} {}", p.dtype, p.batch, p.m, p.k, p.batch,
                     p.k, p.n, p.op_a, p.op_b, p.precision);
}

}  // namespace kiln::tune
