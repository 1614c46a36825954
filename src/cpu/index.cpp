// The CPU's indexing family (Backend::index): gather, index_select, scatter_add, index_add.
//
// Copies (gather, index_select) split the [O, K] rows of the result across oneTBB's threads;
// index_select copies whole rows of I elements (memcpy). scatter_add splits the destination
// instead, by (o, a block of i): each task owns out[o, :, i0:i1] and walks k in increasing order;
// index_add gives each row of out to one task: x's row, plus the src rows indices name for it in
// increasing k. Every destination sums its contributions in index order whatever the threads:
// the CPU is deterministic always. Half types accumulate in f32 and round once;
// i32 sums wrap as two's complement. Every index is checked before anything is written, so a bad
// one raises at once and leaves out unwritten.
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"
#include "kiln/half.hpp"

namespace kiln::cpu {
namespace {

using detail::IndexOp;

struct Geometry {
  std::int64_t outer = 1, n = 0, k = 0, inner = 1;
};

Geometry geometry(const detail::TensorImpl& x, int dim, std::int64_t k) {
  Geometry g;
  for (int d = 0; d < dim; ++d) g.outer *= x.shape[d];
  for (int d = dim + 1; d < x.rank(); ++d) g.inner *= x.shape[d];
  g.n = x.shape[dim];
  g.k = k;
  return g;
}

void check_values(IndexOp op, const std::int32_t* idx, std::int64_t count, std::int64_t bound) {
  for (std::int64_t j = 0; j < count; ++j)
    if (idx[j] < 0 || idx[j] >= bound) detail::throw_index_out_of_range(op, idx[j], bound);
}

// Copies of `size`-byte elements.
void copy_rows(IndexOp op, const Geometry& g, const std::int32_t* idx, const char* x, char* out,
               std::size_t size) {
  const std::size_t row = static_cast<std::size_t>(g.inner) * size;
  const std::int64_t rows = g.outer * g.k;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / static_cast<std::int64_t>(row + 1));
  parallel_for(rows, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t o = r / g.k, kk = r % g.k;
      char* dst = out + static_cast<std::size_t>(r) * row;
      if (op == IndexOp::index_select) {
        const char* from = x + static_cast<std::size_t>(o * g.n + idx[kk]) * row;
        std::memcpy(dst, from, row);
        continue;
      }
      const std::int32_t* ix = idx + r * g.inner;
      for (std::int64_t i = 0; i < g.inner; ++i) {
        const std::size_t at = static_cast<std::size_t>((o * g.n + ix[i]) * g.inner + i);
        std::memcpy(dst + i * size, x + at * size, size);
      }
    }
  });
}

float to_acc(float v) { return v; }
float to_acc(bfloat16 v) { return static_cast<float>(v); }
float to_acc(float16 v) { return static_cast<float>(v); }
std::uint32_t to_acc(std::int32_t v) { return static_cast<std::uint32_t>(v); }
void from_acc(float a, bfloat16& o) { o = bfloat16(a); }
void from_acc(float a, float16& o) { o = float16(a); }
void from_acc(std::uint32_t a, std::int32_t& o) { o = static_cast<std::int32_t>(a); }
void from_acc(float a, float& o) { o = a; }
template <class T>
constexpr bool is_half_type = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// scatter_add: tasks own (o, a block of features) and walk k in increasing order.
template <class T>
void scatter_into(const Geometry& g, const std::int32_t* idx, const T* x, const T* src, T* out) {
  using Acc = decltype(to_acc(T()));
  const std::int64_t total = g.outer * g.n * g.inner;
  // f32 sums in out itself; the others in a copy of their accumulator type, rounded at the end.
  constexpr bool in_place = std::is_same_v<T, Acc>;
  std::vector<Acc> scratch(in_place ? 0 : static_cast<std::size_t>(total));
  Acc* acc = nullptr;
  if constexpr (in_place) {
    acc = out;
  } else {
    acc = scratch.data();
  }
  parallel_for(total, 16384, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) acc[j] = to_acc(x[j]);
  });
  // Tasks own (o, block of inner): disjoint destinations, each summed in k order.
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (g.inner + kBlock - 1) / kBlock;
  parallel_for(g.outer * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t o = t / blocks, i0 = t % blocks * kBlock;
      const std::int64_t i1 = std::min(g.inner, i0 + kBlock);
      for (std::int64_t kk = 0; kk < g.k; ++kk) {
        const std::int64_t srow = (o * g.k + kk) * g.inner;
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t n = idx[srow + i];
          acc[(o * g.n + n) * g.inner + i] += to_acc(src[srow + i]);
        }
      }
    }
  });
  if constexpr (!in_place) {
    parallel_for(total, 16384, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t j = begin; j < end; ++j) from_acc(acc[j], out[j]);
    });
  }
}

// index_add: each row of out is x's row plus, where indices name it, its src rows in increasing
// k (a stable counting sort of the indices lists them), in one pass over the rows: every
// destination sums in index order, as scatter_into's do, without converting all of x into an
// accumulator or walking every k per block of features. A half-type row is summed in f32 by the
// table's half_row_sum, one pass over x's row and its src rows, and rounded once. Tasks own rows,
// so the result does not depend on the threads.
template <class T>
void add_rows(const Geometry& g, const std::int32_t* idx, const T* x, const T* src, T* out, DType t,
              const KernelTable& kernels) {
  std::vector<std::int64_t> start(static_cast<std::size_t>(g.n + 1), 0);
  for (std::int64_t k = 0; k < g.k; ++k) ++start[static_cast<std::size_t>(idx[k] + 1)];
  for (std::int64_t n = 0; n < g.n; ++n) start[n + 1] += start[n];
  std::vector<std::int32_t> order(static_cast<std::size_t>(g.k));
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  for (std::int64_t k = 0; k < g.k; ++k) order[fill[idx[k]]++] = static_cast<std::int32_t>(k);
  const auto size = static_cast<std::size_t>(g.inner);
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, g.inner));
  parallel_for(g.outer * g.n, grain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<const std::uint16_t*> rows;  // a half-type destination row's src rows
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t o = r / g.n, n = r % g.n;
      const T* from = x + r * g.inner;
      T* dst = out + r * g.inner;
      if (start[n] == start[n + 1]) {
        std::memcpy(dst, from, size * sizeof(T));
        continue;
      }
      auto terms = [&](auto add_row) {
        for (std::int64_t q = start[n]; q < start[n + 1]; ++q)
          add_row(src + (o * g.k + order[static_cast<std::size_t>(q)]) * g.inner);
      };
      if constexpr (is_half_type<T>) {
        const auto bits = [](const T* p) { return reinterpret_cast<const std::uint16_t*>(p); };
        rows.clear();
        terms([&](const T* row) { rows.push_back(bits(row)); });
        kernels.half_row_sum(t, bits(from), rows.data(), rows.size(),
                             reinterpret_cast<std::uint16_t*>(dst), size);
      } else {
        std::memcpy(dst, from, size * sizeof(T));
        terms([&](const T* row) {
          for (std::size_t i = 0; i < size; ++i) from_acc(to_acc(dst[i]) + to_acc(row[i]), dst[i]);
        });
      }
    }
  });
}

// The address of t's element 0, or nullptr for an empty tensor (which may have no buffer).
template <class T>
T* at(const detail::TensorImpl& t) {
  return t.numel() ? static_cast<T*>(t.data()) : nullptr;
}

}  // namespace

void index(IndexOp op, const detail::TensorImpl& x, int dim, const detail::TensorImpl& index,
           const detail::TensorImpl* src, const detail::TensorImpl& out,
           const KernelTable& kernels) {
  detail::check_index_call(op, x, dim, index, src, out);
  const bool per_row = op == IndexOp::index_select || op == IndexOp::index_add;
  const Geometry g = geometry(x, dim, per_row ? index.shape[0] : index.shape[dim]);
  const auto* idx = at<const std::int32_t>(index);
  if (index.numel() > 0) check_values(op, idx, index.numel(), g.n);
  if (out.numel() == 0) return;
  if (!detail::index_op_accumulates(op)) {
    copy_rows(op, g, idx, at<const char>(x), at<char>(out), dtype_size(x.dtype));
    return;
  }
  if (op == IndexOp::index_add) {
    switch (x.dtype) {
      case DType::f32:
        return add_rows<float>(g, idx, at<const float>(x), at<const float>(*src), at<float>(out),
                               x.dtype, kernels);
      case DType::i32:
        return add_rows<std::int32_t>(g, idx, at<const std::int32_t>(x),
                                      at<const std::int32_t>(*src), at<std::int32_t>(out), x.dtype,
                                      kernels);
      case DType::bf16:
        return add_rows<bfloat16>(g, idx, at<const bfloat16>(x), at<const bfloat16>(*src),
                                  at<bfloat16>(out), x.dtype, kernels);
      case DType::f16:
        return add_rows<float16>(g, idx, at<const float16>(x), at<const float16>(*src),
                                 at<float16>(out), x.dtype, kernels);
      case DType::boolean:
        break;  // refused by check_index_call
    }
    return;
  }
  switch (x.dtype) {
    case DType::f32:
      return scatter_into<float>(g, idx, at<const float>(x), at<const float>(*src), at<float>(out));
    case DType::i32:
      return scatter_into<std::int32_t>(g, idx, at<const std::int32_t>(x),
                                        at<const std::int32_t>(*src), at<std::int32_t>(out));
    case DType::bf16:
      return scatter_into<bfloat16>(g, idx, at<const bfloat16>(x), at<const bfloat16>(*src),
                                    at<bfloat16>(out));
    case DType::f16:
      return scatter_into<float16>(g, idx, at<const float16>(x), at<const float16>(*src),
                                   at<float16>(out));
    case DType::boolean:
      break;  // refused by check_index_call
  }
}

}  // namespace kiln::cpu
