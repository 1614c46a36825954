#include "tune/tune_key.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string_view>
#include <utility>

#include "kiln/error.hpp"

namespace kiln::tune {

std::int64_t bucket(std::int64_t n) {
  if (n < 0) throw ValueError(fmt::format("tune: negative extent {}", n));
  if (n <= 1) return n;
  if (n > (std::int64_t{1} << 62)) return std::int64_t{1} << 62;  // (no tensor is this large)
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(n)));
}

namespace {

// The epilogues cuda/matmul/matmul.cpp names in its keys.
constexpr const char* kEpilogues[] = {"bias", "relu_bias", "gelu_bias", "gelu_aux_bias",
                                      "relu", "gelu",      "gelu_aux"};

bool known_epilogue(std::string_view name) {
  return name.empty() ||
         std::find(std::begin(kEpilogues), std::end(kEpilogues), name) != std::end(kEpilogues);
}

}  // namespace

std::string matmul_key(const MatmulProblem& p) {
  return fmt::format("matmul {} {} {}{} b{} m{} n{} k{}{}{}", p.dtype, p.precision, p.op_a, p.op_b,
                     bucket(p.batch), bucket(p.m), bucket(p.n), bucket(p.k),
                     p.epilogue.empty() ? "" : " ", p.epilogue);
}

std::optional<MatmulProblem> parse_matmul_key(std::string_view key) {
  char dtype[16], precision[16], ops[3], epilogue[24] = "";
  long long batch = 0, m = 0, n = 0, k = 0;
  const std::string text(key);
  const int read = std::sscanf(text.c_str(), "matmul %15s %15s %2s b%lld m%lld n%lld k%lld %23s",
                               dtype, precision, ops, &batch, &m, &n, &k, epilogue);
  if (read < 7 || std::strlen(ops) != 2 || !known_epilogue(epilogue)) return std::nullopt;
  MatmulProblem p{dtype, precision, ops[0], ops[1], batch, m, n, k, epilogue};
  if (matmul_key(p) != key) return std::nullopt;  // (trailing text, unbucketed extents, ...)
  return p;
}

std::string matmul_shape(const MatmulProblem& p) {
  return fmt::format("{} [{}, {}, {}] x [{}, {}, {}] {}{} {}", p.dtype, p.batch, p.m, p.k, p.batch,
                     p.k, p.n, p.op_a, p.op_b, p.precision);
}

std::vector<std::string> neighbouring_matmul_keys(const std::string& key,
                                                  const std::vector<std::string>& keys) {
  const auto here = parse_matmul_key(key);
  if (!here) return {};
  auto steps = [](std::int64_t x, std::int64_t y) {  // powers of two between two buckets
    int d = 0;
    for (; x < y && d < 64; x *= 2) ++d;
    for (; y < x && d < 64; y *= 2) ++d;
    return d;
  };
  std::vector<std::pair<int, std::string>> near;
  for (const std::string& k : keys) {
    const auto p = parse_matmul_key(k);
    if (!p || k == key || p->dtype != here->dtype || p->precision != here->precision ||
        p->op_a != here->op_a || p->op_b != here->op_b || p->batch != here->batch ||
        p->epilogue != here->epilogue)
      continue;
    const int dm = steps(p->m, here->m), dn = steps(p->n, here->n), dk = steps(p->k, here->k);
    if (dm <= 1 && dn <= 1 && dk <= 1) near.emplace_back(dm + dn + dk, k);
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (auto& [distance, k] : near) out.push_back(std::move(k));
  return out;
}

}  // namespace kiln::tune
