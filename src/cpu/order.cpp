// The CPU's order-and-scan family (Backend::order): max/min with index, sort, topk and cumsum over
// the last dim.
//
// oneTBB splits the rows; a task works one row at a time. Each element becomes an unsigned 32-bit
// key whose unsigned order is the order wanted, as on CUDA (src/cuda/kernels/order.cuh): a float
// (bf16 and f16 through f32) by its bits with every NaN one key above +inf and -0 taken as +0 (they
// compare equal), an i32 with its sign bit flipped, a bool as 0 or 1; descending is the key's
// complement (NaN first, as PyTorch). The key and the index make one 64-bit word, all distinct, so
// std::sort of the words is a stable sort; topk is std::partial_sort of the words. max and min
// scan in the element's type instead (first occurrence; the first NaN wins). Values are
// copied from x by index (bit for bit). cumsum of the floating dtypes accumulates in double and
// rounds each output once; of i32 and bool in 32-bit two's complement.
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/half.hpp"

namespace kiln::cpu {
namespace {

using detail::OrderOp;

float as_float(DType t, const char* p) {
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::bf16:
    case DType::f16: {
      std::uint16_t b;
      std::memcpy(&b, p, 2);
      return t == DType::bf16 ? detail::bf16_bits_to_float(b) : detail::f16_bits_to_float(b);
    }
    default:
      return 0;
  }
}

// The ordered key of element p of dtype t (see the header).
template <DType t>
std::uint32_t ordered_key(const char* p) {
  if constexpr (t == DType::i32) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return u ^ 0x80000000u;
  } else if constexpr (t == DType::boolean) {
    return *p ? 1u : 0u;
  } else {
    float v = as_float(t, p);
    if (v != v) return 0xffffffffu;
    if (v == 0.0f) v = 0.0f;
    const auto u = std::bit_cast<std::uint32_t>(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
}

double number(DType t, const char* p) {
  if (is_floating(t)) return as_float(t, p);
  if (t == DType::boolean) return *p ? 1.0 : 0.0;
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void store_float(DType t, char* p, double v) {
  const auto f = static_cast<float>(v);
  if (t == DType::f32) {
    std::memcpy(p, &f, 4);
  } else {
    const std::uint16_t b =
        t == DType::bf16 ? detail::float_to_bf16_bits(f) : detail::float_to_f16_bits(f);
    std::memcpy(p, &b, 2);
  }
}

void cumsum_row(DType t, const char* x, char* y, std::int64_t n, std::size_t size, bool reverse) {
  const std::int64_t first = reverse ? n - 1 : 0, step = reverse ? -1 : 1;
  if (is_floating(t)) {
    double s = 0;
    for (std::int64_t i = 0, j = first; i < n; ++i, j += step) {
      s += number(t, x + j * size);
      store_float(t, y + j * size, s);
    }
    return;
  }
  std::uint32_t s = 0;  // wraps as two's complement, without signed overflow
  for (std::int64_t i = 0, j = first; i < n; ++i, j += step) {
    s += static_cast<std::uint32_t>(static_cast<std::int32_t>(number(t, x + j * size)));
    const auto v = static_cast<std::int32_t>(s);
    std::memcpy(y + j * 4, &v, 4);
  }
}

// The index of the first largest (smallest) element of the row, or of its first NaN: a plain
// compare-and-keep scan in the element's own type (the words' order, without building them).
template <DType t>
std::uint64_t extreme_index(const char* x, std::int64_t n, bool largest) {
  using V = std::conditional_t<t == DType::i32, std::int32_t, float>;
  auto at = [&](std::int64_t i) -> V {
    if constexpr (t == DType::i32) {
      std::int32_t v;
      std::memcpy(&v, x + i * 4, 4);
      return v;
    } else if constexpr (t == DType::boolean) {
      return x[i] ? 1.0f : 0.0f;
    } else {
      return as_float(t, x + i * static_cast<std::int64_t>(dtype_size(t)));
    }
  };
  V best = at(0);
  std::int64_t where = 0;
  if (best != best) return 0;
  for (std::int64_t i = 1; i < n; ++i) {
    const V v = at(i);
    if (v != v) return static_cast<std::uint64_t>(i);  // (a NaN: floats only)
    if (largest ? v > best : v < best) {
      best = v;
      where = i;
    }
  }
  return static_cast<std::uint64_t>(where);
}

struct Job {
  OrderOp op;
  detail::OrderParams p;
  DType t;
  std::int64_t n, k;  // row length in and out
  std::size_t size;   // bytes per element of x
  std::int64_t rows;
  const char* x;
  char* values;
  std::int32_t* indices;
};

template <DType t>
void run_row(const Job& j, std::int64_t r, std::vector<std::uint64_t>& words) {
  const auto size = static_cast<std::int64_t>(j.size);
  const char* x = j.x + r * j.n * size;
  if (j.op == OrderOp::cumsum) {
    const std::int64_t out_size = is_floating(t) ? size : 4;
    cumsum_row(t, x, j.values + r * j.n * out_size, j.n, j.size, j.p.reverse);
    return;
  }
  const std::uint32_t flip = j.p.descending ? 0xffffffffu : 0u;
  auto word = [&](std::int64_t i) {
    return (static_cast<std::uint64_t>(ordered_key<t>(x + i * size) ^ flip) << 32) |
           static_cast<std::uint32_t>(i);
  };
  char* v = j.values + r * j.k * size;
  std::int32_t* ix = j.indices + r * j.k;
  auto emit = [&](std::int64_t slot, std::uint64_t w) {
    const auto at = static_cast<std::int32_t>(w & 0xffffffffu);
    std::memcpy(v + slot * size, x + at * size, j.size);
    ix[slot] = at;
  };
  if (j.op == OrderOp::max || j.op == OrderOp::min) {
    emit(0, extreme_index<t>(x, j.n, j.op == OrderOp::max));
    return;
  }
  words.resize(static_cast<std::size_t>(j.n));
  for (std::int64_t i = 0; i < j.n; ++i) words[static_cast<std::size_t>(i)] = word(i);
  if (j.op == OrderOp::sort) {
    // One long row (randperm's) sorts across threads; many rows already run in parallel.
    if (j.rows == 1) {
      parallel_sort(words.data(), words.data() + words.size());
    } else {
      std::sort(words.begin(), words.end());
    }
  } else {
    std::partial_sort(words.begin(), words.begin() + j.k, words.end());
  }
  for (std::int64_t i = 0; i < j.k; ++i) emit(i, words[static_cast<std::size_t>(i)]);
}

template <DType t>
void run_rows(const Job& j, std::int64_t begin, std::int64_t end) {
  std::vector<std::uint64_t> words;
  for (std::int64_t r = begin; r < end; ++r) run_row<t>(j, r, words);
}

}  // namespace

void order(OrderOp op, const detail::TensorImpl& x, const detail::OrderParams& params,
           const detail::TensorImpl& values, const detail::TensorImpl* indices) {
  const std::int64_t n = detail::check_order_call(op, x, params, values, indices);
  if (values.numel() == 0) return;
  const Job j{op,
              params,
              x.dtype,
              n,
              values.shape.back(),
              dtype_size(x.dtype),
              values.numel() / values.shape.back(),
              static_cast<const char*>(x.data()),
              static_cast<char*>(values.data()),
              indices ? static_cast<std::int32_t*>(indices->data()) : nullptr};
  const std::int64_t rows = j.rows;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    switch (j.t) {
      case DType::f32:
        return run_rows<DType::f32>(j, begin, end);
      case DType::i32:
        return run_rows<DType::i32>(j, begin, end);
      case DType::boolean:
        return run_rows<DType::boolean>(j, begin, end);
      case DType::bf16:
        return run_rows<DType::bf16>(j, begin, end);
      case DType::f16:
        return run_rows<DType::f16>(j, begin, end);
    }
  });
}

}  // namespace kiln::cpu
