// The CPU's order-and-scan family (Backend::order): max/min with index, sort, topk and cumsum over
// the last dim.
//
// oneTBB splits the rows; a task works one row at a time. Every dtype's element is read as a
// double key (f32, bf16, f16, i32 and bool all convert exactly), so one comparison serves them all,
// and values are copied from x by their index (bit for bit: -0.0 stays -0.0). The order is
// PyTorch's: NaN after every number ascending and before every number descending, equal keys in
// index order. sort is std::stable_sort of the row's indices; topk is std::partial_sort with the
// index as the tie-break, which makes the order total, so its k first are stable sort's. cumsum of
// the floating dtypes accumulates in double and rounds each output once; of i32 and bool in 32-bit
// two's complement.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/half.hpp"

namespace kiln::cpu {
namespace {

using detail::OrderOp;

double key(DType t, const char* p) {
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
    case DType::i32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::boolean:
      return *p ? 1.0 : 0.0;
  }
  return 0;
}

// a goes before b (PyTorch's order: NaN largest).
bool before(double a, double b, bool descending) {
  if (descending) return a > b || (std::isnan(a) && !std::isnan(b));
  return a < b || (!std::isnan(a) && std::isnan(b));
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
      s += key(t, x + j * size);
      store_float(t, y + j * size, s);
    }
    return;
  }
  std::uint32_t s = 0;  // wraps as two's complement, without signed overflow
  for (std::int64_t i = 0, j = first; i < n; ++i, j += step) {
    s += static_cast<std::uint32_t>(static_cast<std::int32_t>(key(t, x + j * size)));
    const auto v = static_cast<std::int32_t>(s);
    std::memcpy(y + j * 4, &v, 4);
  }
}

struct Job {
  OrderOp op;
  detail::OrderParams p;
  DType t;
  std::int64_t n, k;  // row length in and out
  std::size_t size;   // bytes per element of x
  const char* x;
  char* values;
  std::int32_t* indices;
};

void run_row(const Job& j, std::int64_t r, std::vector<double>& keys,
             std::vector<std::int32_t>& idx) {
  const char* x = j.x + r * j.n * static_cast<std::int64_t>(j.size);
  if (j.op == OrderOp::cumsum) {
    const std::size_t out_size = is_floating(j.t) ? j.size : 4;
    cumsum_row(j.t, x, j.values + r * j.n * static_cast<std::int64_t>(out_size), j.n, j.size,
               j.p.reverse);
    return;
  }
  keys.resize(static_cast<std::size_t>(j.n));
  for (std::int64_t i = 0; i < j.n; ++i) keys[i] = key(j.t, x + i * j.size);
  char* v = j.values + r * j.k * static_cast<std::int64_t>(j.size);
  std::int32_t* ix = j.indices + r * j.k;
  if (j.op == OrderOp::max || j.op == OrderOp::min) {
    const bool largest = j.op == OrderOp::max;
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < j.n && !std::isnan(keys[best]); ++i)
      if (std::isnan(keys[i]) || before(keys[i], keys[best], largest)) best = i;
    std::memcpy(v, x + best * j.size, j.size);
    ix[0] = static_cast<std::int32_t>(best);
    return;
  }
  idx.resize(static_cast<std::size_t>(j.n));
  std::iota(idx.begin(), idx.end(), 0);
  const bool desc = j.p.descending;
  if (j.op == OrderOp::sort) {
    std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
      return before(keys[a], keys[b], desc);
    });
  } else {
    std::partial_sort(idx.begin(), idx.begin() + j.k, idx.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        if (before(keys[a], keys[b], desc)) return true;
                        return !before(keys[b], keys[a], desc) && a < b;
                      });
  }
  for (std::int64_t i = 0; i < j.k; ++i) {
    std::memcpy(v + i * j.size, x + static_cast<std::int64_t>(idx[i]) * j.size, j.size);
    ix[i] = idx[i];
  }
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
              static_cast<const char*>(x.data()),
              static_cast<char*>(values.data()),
              indices ? static_cast<std::int32_t*>(indices->data()) : nullptr};
  const std::int64_t rows = values.numel() / j.k;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> keys;
    std::vector<std::int32_t> idx;
    for (std::int64_t r = begin; r < end; ++r) run_row(j, r, keys, idx);
  });
}

}  // namespace kiln::cpu
