// Reductions on the CPU: sum, mean, max, min, argmax, argmin over one dim or all elements.
//
// The input may have any strides. Dims are coalesced first, so most inputs become a few dense
// runs. Two loop shapes cover the layouts that matter:
//   rows:    each output reduces one sequence (the dim, or all of x) run by run; the
//            unit-stride case is the fast path (a contiguous last dim, or all of a dense x).
//            Over all of x, argmax/argmin walk x in row-major order (their indices count in
//            it); the others walk memory in address order, so a transposed x reads densely.
//   columns: when the kept innermost dim is dense and the reduced dim is not (x.sum(0) of a
//            matrix), a tile of adjacent outputs is accumulated one input row at a time, so
//            every read is contiguous (sums and means by the kernel table's column_sums, with
//            SIMD, which reads f32 and the half types' memory itself).
// A long reduction is cut into blocks whose boundaries depend only on the sizes, and the
// blocks' partial results are combined in order: results never depend on the thread count.
//
// The values come from x's memory, from a half-type x's memory widened to f32 as they are read
// (reduce_widened), or from an element-wise prologue (the fusion decorator's open group:
// reduce_prologue). In the last two the reduced tensor is contiguous and the loops ask the
// source for the dense run each step reads (a row segment of at most kRowBlock elements, or up
// to kBlock elements of adjacent tile rows), which the conversion or ir::RangeEvaluator (blockwise)
// computes into a per-thread buffer that stays in cache. The loops, their blocks and their
// accumulators are the same as over memory, so a fused reduction equals the unfused one bit for
// bit.
//
// Accuracy: f32 sums and means accumulate in double (8 interleaved accumulators on the fast
// path, per piece of kPiece elements), so the only error that grows with n is double rounding: a
// sum of 16M f32 values is correctly rounded to f32 but for about 1e-9 of the sum of magnitudes.
// Integer sums accumulate in 64 bits and wrap to i32 like NumPy's int32 sum; integer means are
// exact until the final division. max/min/argmax/argmin follow NumPy: a NaN anywhere makes max/min
// NaN and argmax/argmin the index of the first NaN; ties give the first index.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/layout.hpp"
#include "cpu/cpu_evaluator.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce_sources.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

using detail::ReduceOp;
using detail::TensorImpl;

// Elements one task should cover so that scheduling costs are noise.
constexpr std::int64_t kTaskWork = 32768;
// A row longer than this is split into blocks, so that few long rows still use every thread.
constexpr std::int64_t kRowBlock = 32768;
// At most this many (output, block) partial results of the row loop.
constexpr std::int64_t kMaxRowPartials = 4096;
// The column loop: its accumulators per tile (a row of up to 4096 f32 sums is one tile, so that
// a task reads whole rows in address order: tiles of 2048 of a 3072-wide row's columns left the
// hardware prefetcher behind, 0.38 of the copy's speed against 0.67 on a 2-core EPYC), the least
// dense extent worth it, and its row block.
constexpr std::size_t kTileBytes = 32768;
constexpr std::int64_t kMinColumns = 16;
constexpr std::int64_t kColumnBlock = 512;
// At most this many (tile, block) partial results of the column loop.
constexpr std::int64_t kMaxColumnPartials = 256;
// Adjacent tile rows fetched at once from a prologue (a narrow tile would otherwise evaluate
// the program for a few elements at a time).
constexpr std::int64_t kRowsFetch = ir::kBlock;
// Rows at most this long, dense and adjacent, are reduced kShortBlock rows at a time.
constexpr std::int64_t kShortRow = 32;
constexpr std::int64_t kShortBlock = 256;
// A run is reduced in pieces of this many elements (a multiple of Arg's chunk), the size of
// a prologue's blocks.
constexpr std::int64_t kPiece = ir::kBlock;

// ---- layouts ----

using detail::for_each_run;
using detail::Layout;
using detail::Odometer;
using reduce_sources::MemorySource;
using reduce_sources::PrologueSource;
using reduce_sources::WidenedSource;

// ---- the reductions, one policy each: Acc is the running state ----

template <class T>
constexpr bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// T's contribution to a sum: exact in double for float, two's complement in 64 bits for
// integers (so that overflow wraps instead of being undefined).
template <class T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, std::uint64_t>;

template <class T>
SumAcc<T> to_sum(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  }
}

template <class T>
struct SumBase {
  static constexpr bool kOrderFree = true;
  // The kernel table's column_sums adds f32 columns in double as step does.
  static constexpr bool kColumnSums = std::is_same_v<T, float>;
  using In = T;
  using Acc = SumAcc<T>;
  static Acc first(T v, std::int64_t) { return to_sum(v); }
  static void step(Acc& a, T v, std::int64_t) { a += to_sum(v); }
  static void combine(Acc& a, const Acc& b) { a += b; }
  static void run(Acc& a, const T* p, std::int64_t n, std::int64_t s, std::int64_t) {
    if (s != 1) {
      for (std::int64_t i = 0; i < n; ++i) a += to_sum(p[i * s]);
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {
      // Eight independent accumulators: a fixed order the compiler can vectorize.
      double lane[8] = {};
      std::int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(p[i + k]);
      }
      double t =
          ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      for (; i < n; ++i) t += static_cast<double>(p[i]);
      a += t;
    } else {
      Acc t = 0;
      for (std::int64_t i = 0; i < n; ++i) t += to_sum(p[i]);
      a += t;
    }
  }
};

template <class T>
struct Sum : SumBase<T> {
  static constexpr ReduceOp kOp = ReduceOp::sum;
  using Out = std::conditional_t<std::is_floating_point_v<T>, float, std::int32_t>;
  static Out empty() { return Out{}; }
  static Out finish(const SumAcc<T>& a, std::int64_t) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<float>(a);
    } else {
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(a));
    }
  }
};

template <class T>
struct Mean : SumBase<T> {
  static constexpr ReduceOp kOp = ReduceOp::mean;
  using Out = float;
  static Out empty() { return std::numeric_limits<float>::quiet_NaN(); }
  static Out finish(const SumAcc<T>& a, std::int64_t n) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<float>(a / static_cast<double>(n));
    } else {
      return static_cast<float>(static_cast<double>(static_cast<std::int64_t>(a)) /
                                static_cast<double>(n));
    }
  }
};

// Whether v replaces the running extreme e: strictly better (so the first of equal values
// stays), or NaN (which then stays, as nothing compares better than NaN).
template <bool kMax, class T>
bool better(T v, T e) {
  // Both operands computed first, so that loops over columns become vector compare-and-blend.
  const bool nan = is_nan(v);
  if constexpr (kMax) {
    const bool greater = v > e;
    return greater || nan;
  } else {
    const bool less = v < e;
    return less || nan;
  }
}

template <class T, bool kMax>
struct Extreme {
  static constexpr ReduceOp kOp = kMax ? ReduceOp::max : ReduceOp::min;
  static constexpr bool kOrderFree = true;
  static constexpr bool kColumnSums = false;
  using In = T;
  using Out = T;
  struct Acc {
    T v;
  };
  static Acc first(T v, std::int64_t) { return {v}; }
  static void step(Acc& a, T v, std::int64_t) { a.v = better<kMax>(v, a.v) ? v : a.v; }
  static void combine(Acc& a, const Acc& b) { step(a, b.v, 0); }
  static void run(Acc& a, const T* p, std::int64_t n, std::int64_t s, std::int64_t) {
    if (s != 1) {
      for (std::int64_t i = 0; i < n; ++i) step(a, p[i * s], 0);
      return;
    }
    // Eight lanes of plain compare-selects (vector max/min) and a separate NaN flag, instead
    // of one loop-carried branch per element.
    T lane[8];
    bool nan[8] = {};
    std::fill(lane, lane + 8, a.v);
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) {
        const T v = p[i + k];
        nan[k] |= is_nan(v);
        if constexpr (kMax) {
          lane[k] = v > lane[k] ? v : lane[k];
        } else {
          lane[k] = v < lane[k] ? v : lane[k];
        }
      }
    }
    for (int k = 0; k < 8; ++k) {
      if (nan[k]) a.v = std::numeric_limits<T>::quiet_NaN();
      step(a, lane[k], 0);
    }
    for (; i < n; ++i) step(a, p[i], 0);
  }
  static Out empty() { return Out{}; }  // never used: empty max/min is an error
  static Out finish(const Acc& a, std::int64_t) { return a.v; }
};

template <class T, bool kMax>
struct Arg {
  static constexpr ReduceOp kOp = kMax ? ReduceOp::argmax : ReduceOp::argmin;
  static constexpr bool kOrderFree = false;  // indices count in x's row-major order
  static constexpr bool kColumnSums = false;
  using In = T;
  using Out = std::int32_t;
  struct Acc {
    T v;
    std::int64_t i;
  };
  static Acc first(T v, std::int64_t j) { return {v, j}; }
  static void step(Acc& a, T v, std::int64_t j) {
    // Both operands computed first: a select, not a branch, in column loops.
    const bool open = !is_nan(a.v), wins = better<kMax>(v, a.v);
    const bool take = open && wins;
    a.v = take ? v : a.v;
    a.i = take ? j : a.i;
  }
  // b comes from later positions than a, so a keeps ties.
  static void combine(Acc& a, const Acc& b) { step(a, b.v, b.i); }
  static void run(Acc& a, const T* p, std::int64_t n, std::int64_t s, std::int64_t j0) {
    if (is_nan(a.v)) return;  // the first NaN is final
    if (s == 1) {
      // Chunks: the extreme of each with the vector loop; only a chunk that beats the running
      // extreme (or holds a NaN) is scanned again for the first index of its extreme.
      constexpr std::int64_t kChunk = 1024;
      using E = Extreme<T, kMax>;
      for (std::int64_t c = 0; c < n; c += kChunk) {
        const std::int64_t len = std::min(kChunk, n - c);
        typename E::Acc e = E::first(p[c], 0);
        E::run(e, p + c + 1, len - 1, 1, 0);
        if (!better<kMax>(e.v, a.v)) continue;
        std::int64_t k = 0;
        if (is_nan(e.v)) {
          while (!is_nan(p[c + k])) ++k;
          a = {e.v, j0 + c + k};
          return;
        }
        while (p[c + k] != e.v) ++k;
        a = {e.v, j0 + c + k};
      }
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = p[i * s];
      if (better<kMax>(v, a.v)) {
        a = {v, j0 + i};
        if (is_nan(v)) return;
      }
    }
  }
  static Out empty() { return 0; }  // never used: empty arg* is an error
  static Out finish(const Acc& a, std::int64_t) { return static_cast<std::int32_t>(a.i); }
};

// ---- the two loops ----

template <class P, class Src>
struct Reduction {
  using T = typename P::In;
  using Acc = typename P::Acc;
  using Out = typename P::Out;

  Src src;
  Layout kept;  // the outputs, in out's (row-major) order
  Layout red;   // the reduced sequence of one output
  Out* out;
  const KernelTable& kernels;  // its short_rows reduces f32 short rows with SIMD

  // The reduction of positions [begin, end) (non-empty) of the sequence at offset base. A run
  // is taken in pieces of kPiece elements (after the first), each with its own lanes, so that
  // a prologue's values are evaluated a cache-sized piece at a time.
  template <class Reader>
  static Acc reduce_range(Reader& rd, std::int64_t base, const Layout& red, std::int64_t begin,
                          std::int64_t end) {
    Acc a{};
    bool started = false;
    auto take = [&](std::int64_t off, std::int64_t count, std::int64_t stride, std::int64_t pos) {
      while (count > 0) {
        const std::int64_t n = std::min(count, kPiece + (started ? 0 : 1));
        const T* p = rd.at(base + off, n, stride);
        const std::int64_t skip = started ? 0 : 1;
        if (!started) a = P::first(*p, pos), started = true;
        P::run(a, p + skip * stride, n - skip, stride, pos + skip);
        off += n * stride, count -= n, pos += n;
      }
    };
    if (red.shape.size() <= 1) {
      // One run (every dim reduction): skip the run walker, which costs more than a short row.
      const std::int64_t stride = red.strides.empty() ? 0 : red.strides[0];
      take(begin * stride, end - begin, stride, begin);
    } else {
      for_each_run(red.shape, red.strides, begin, end, take);
    }
    return a;
  }

  // Whether the rows are short, dense and adjacent: output o reduces elements [o * len,
  // (o + 1) * len) (x.sum(-1) of a contiguous [m, 8], say).
  bool short_rows() const {
    const std::int64_t len = red.numel;
    return len <= kShortRow && red.shape.size() == 1 && red.strides[0] == 1 &&
           kept.shape.size() == 1 && kept.strides[0] == len;
  }

  // Short rows a block at a time, each row's elements taken in order with P::first and
  // P::step, interleaved across the block's rows: the rows' running states are independent, so
  // the loop over rows vectorizes, where reducing one short row at a time would be a chain of
  // dependent steps and a call per row (4-20x slower than memory for a row of 8). For f32 the
  // SIMD table's short_rows takes the block first (the same steps on a vector of rows per
  // column, where this loop's vectors gather); this loop reduces the rows it leaves.
  void short_rows_loop() const {
    const std::int64_t m = kept.numel, len = red.numel;
    parallel_for(m, std::max<std::int64_t>(1, kTaskWork / len),
                 [&](std::int64_t o0, std::int64_t o1) {
                   auto rd = src.reader();
                   Acc acc[kShortBlock];
                   for (std::int64_t o = o0; o < o1; o += kShortBlock) {
                     const std::int64_t k = std::min(kShortBlock, o1 - o);
                     const T* p = rd.at(o * len, k * len, 1);
                     std::int64_t done = 0;
                     if constexpr (std::is_same_v<T, float>)
                       done = kernels.short_rows(P::kOp, p, k, static_cast<int>(len), out + o);
                     if (done < k) reduce_rows(p + done * len, k - done, len, acc, out + o + done);
                   }
                 });
  }

  // The k short rows of len elements at p into out.
  static void reduce_rows(const T* p, std::int64_t k, std::int64_t len, Acc* acc, Out* out) {
    if constexpr (!P::kOrderFree) {
      arg_rows(p, k, len, out);
    } else {
      for (std::int64_t r = 0; r < k; ++r) acc[r] = P::first(p[r * len], 0);
      for (std::int64_t j = 1; j < len; ++j) {
        for (std::int64_t r = 0; r < k; ++r) P::step(acc[r], p[r * len + j], j);
      }
      for (std::int64_t r = 0; r < k; ++r) out[r] = P::finish(acc[r], len);
    }
  }

  // argmax/argmin of k short rows: Arg::step on values and indices kept in two arrays, which
  // vectorizes where an array of (value, index) pairs does not.
  static void arg_rows(const T* p, std::int64_t k, std::int64_t len, Out* out) {
    T v[kShortBlock];
    std::int32_t at[kShortBlock];
    for (std::int64_t r = 0; r < k; ++r) v[r] = p[r * len], at[r] = 0;
    for (std::int64_t j = 1; j < len; ++j) {
      for (std::int64_t r = 0; r < k; ++r) {
        typename P::Acc a{v[r], at[r]};
        P::step(a, p[r * len + j], j);
        v[r] = a.v, at[r] = static_cast<std::int32_t>(a.i);
      }
    }
    for (std::int64_t r = 0; r < k; ++r) out[r] = at[r];
  }

  void rows() const {
    if (short_rows()) return short_rows_loop();
    const std::int64_t m = kept.numel, len = red.numel;
    std::int64_t blocks = 1;
    if (len > kRowBlock) {
      blocks = std::min((len + kRowBlock - 1) / kRowBlock,
                        std::max<std::int64_t>(1, kMaxRowPartials / m));
    }
    if (blocks == 1) {
      parallel_for(m, std::max<std::int64_t>(1, kTaskWork / len),
                   [&](std::int64_t o0, std::int64_t o1) {
                     auto rd = src.reader();
                     Odometer w(kept.shape, kept.strides, o0);
                     for (std::int64_t o = o0; o < o1; ++o, w.next()) {
                       out[o] = P::finish(reduce_range(rd, w.offset(), red, 0, len), len);
                     }
                   });
      return;
    }
    const std::int64_t block_len = (len + blocks - 1) / blocks;
    std::vector<Acc> partial(static_cast<std::size_t>(m * blocks));
    parallel_for(m * blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
      auto rd = src.reader();
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t o = t / blocks, b = t % blocks;
        const std::int64_t begin = b * block_len, end = std::min(len, begin + block_len);
        if (begin < end)
          partial[t] =
              reduce_range(rd, Odometer(kept.shape, kept.strides, o).offset(), red, begin, end);
      }
    });
    parallel_for(m, std::max<std::int64_t>(1, kTaskWork / blocks),
                 [&](std::int64_t o0, std::int64_t o1) {
                   for (std::int64_t o = o0; o < o1; ++o) {
                     Acc a = partial[o * blocks];
                     for (std::int64_t b = 1; b < blocks && b * block_len < len; ++b)
                       P::combine(a, partial[o * blocks + b]);
                     out[o] = P::finish(a, len);
                   }
                 });
  }

  static constexpr std::int64_t kTile = static_cast<std::int64_t>(kTileBytes / sizeof(Acc));

  // kept's last dim is dense (stride 1) and red is one dim of stride `step`.
  void columns() const {
    const std::int64_t width = kept.shape.back(), len = red.numel;
    const std::int64_t step = red.strides.empty() ? 0 : red.strides[0];
    // The offset of a row of tiles: its position over the kept dims but the last.
    auto row_offset = [this](std::int64_t row) {
      const std::span<const std::int64_t> shape(kept.shape), strides(kept.strides);
      return Odometer(shape.first(shape.size() - 1), strides.first(strides.size() - 1), row)
          .offset();
    };
    const std::int64_t tiles = (width + kTile - 1) / kTile, groups = kept.numel / width * tiles;
    std::int64_t blocks = 1;
    if (len > kColumnBlock) {
      blocks = std::min((len + kColumnBlock - 1) / kColumnBlock,
                        std::max<std::int64_t>(1, kMaxColumnPartials / groups));
    }
    const std::int64_t block_len = (len + blocks - 1) / blocks;
    // Partial results of one (tile, block) task, `tile` apart: a narrow matrix needs no more.
    const std::int64_t tile = std::min(width, kTile);
    std::vector<Acc> partial(blocks > 1 ? static_cast<std::size_t>(groups * blocks * tile) : 0);
    const std::int64_t work = std::min(len, block_len) * tile;
    parallel_for(
        groups * blocks, std::max<std::int64_t>(1, kTaskWork / work),
        [&](std::int64_t t0, std::int64_t t1) {
          Acc acc[kTile];
          auto rd = src.reader();
          for (std::int64_t t = t0; t < t1; ++t) {
            const std::int64_t g = t / blocks, b = t % blocks;
            const std::int64_t row = g / tiles, col0 = (g % tiles) * kTile;
            const std::int64_t cols = std::min(kTile, width - col0);
            const std::int64_t begin = b * block_len, end = std::min(len, begin + block_len);
            if (begin >= end) continue;
            const std::int64_t base = row_offset(row) + col0;
            // Rows of a tile as wide as the step are adjacent: fetched together.
            const std::int64_t fetch =
                step == cols ? std::max<std::int64_t>(1, kRowsFetch / cols) : 1;
            for (std::int64_t l = begin; l < end;) {
              const std::int64_t k = std::min(fetch, end - l);
              if constexpr (P::kColumnSums) {
                if (rd.column_sums(kernels, base + l * step, k, step, cols, l == begin, acc)) {
                  l += k;
                  continue;
                }
              }
              const T* rows = rd.at(base + l * step, (k - 1) * step + cols, 1);
              for (std::int64_t q = 0; q < k; ++q, ++l) {
                const T* r = rows + q * step;
                if (l == begin) {
                  for (std::int64_t j = 0; j < cols; ++j) acc[j] = P::first(r[j], l);
                } else {
                  for (std::int64_t j = 0; j < cols; ++j) P::step(acc[j], r[j], l);
                }
              }
            }
            if (blocks == 1) {
              Out* o = out + row * width + col0;
              for (std::int64_t j = 0; j < cols; ++j) o[j] = P::finish(acc[j], len);
            } else {
              std::copy(acc, acc + cols, partial.begin() + t * tile);
            }
          }
        });
    if (blocks == 1) return;
    parallel_for(groups, 1, [&](std::int64_t g0, std::int64_t g1) {
      for (std::int64_t g = g0; g < g1; ++g) {
        const std::int64_t row = g / tiles, col0 = (g % tiles) * kTile;
        const std::int64_t cols = std::min(kTile, width - col0);
        Out* o = out + row * width + col0;
        for (std::int64_t j = 0; j < cols; ++j) {
          Acc a = partial[(g * blocks) * tile + j];
          for (std::int64_t b = 1; b < blocks && b * block_len < len; ++b) {
            P::combine(a, partial[(g * blocks + b) * tile + j]);
          }
          o[j] = P::finish(a, len);
        }
      }
    });
  }
};

// The loop shape of a reduction of a (shape, strides) tensor.
struct Loops {
  Layout kept, red;
  bool columns = false;
};

Loops loops_for(const Dims& shape, const Dims& strides, int dim, bool order_free) {
  Loops l;
  auto [kept, red] = detail::reduction_layout(shape, strides, dim, !order_free);
  l.kept = std::move(kept);
  l.red = std::move(red);
  if (dim < 0) return l;
  l.columns = !l.kept.shape.empty() && l.kept.strides.back() == 1 &&
              l.kept.shape.back() >= kMinColumns && !l.red.shape.empty() && l.red.strides[0] != 1;
  return l;
}

template <class P, class Src>
void run_reduction(const Src& src, const Loops& l, void* out, const KernelTable& kernels) {
  Reduction<P, Src> r{src, l.kept, l.red, static_cast<typename P::Out*>(out), kernels};
  if (r.kept.numel == 0) return;
  if (r.red.numel == 0) {
    std::fill(r.out, r.out + r.kept.numel, P::empty());
    return;
  }
  if (l.columns) {
    r.columns();
  } else {
    r.rows();
  }
}

template <class T, template <class> class Src, class Arg0>
Src<T> make_source(const Arg0& a) {
  if constexpr (std::is_same_v<Src<T>, MemorySource<T>>) {
    return Src<T>(a);
  } else if constexpr (std::is_same_v<Src<T>, PrologueSource<T>>) {
    return Src<T>{a.first, a.second};
  } else {
    return a;
  }
}

// The policy for op over elements of type T, run.
template <class T, template <class> class Src, class Arg0>
void dispatch(ReduceOp op, const Arg0& a, const Dims& shape, const Dims& strides, int dim,
              void* out, const KernelTable& kernels) {
  const Src<T> src = make_source<T, Src>(a);
  const bool order_free = op != ReduceOp::argmax && op != ReduceOp::argmin;
  const Loops l = loops_for(shape, strides, dim, order_free);
  switch (op) {
    case ReduceOp::sum:
      return run_reduction<Sum<T>>(src, l, out, kernels);
    case ReduceOp::mean:
      return run_reduction<Mean<T>>(src, l, out, kernels);
    case ReduceOp::max:
      return run_reduction<Extreme<T, true>>(src, l, out, kernels);
    case ReduceOp::min:
      return run_reduction<Extreme<T, false>>(src, l, out, kernels);
    case ReduceOp::argmax:
      return run_reduction<Arg<T, true>>(src, l, out, kernels);
    case ReduceOp::argmin:
      return run_reduction<Arg<T, false>>(src, l, out, kernels);
  }
}

// Calls dispatch with the element type of dtype t.
template <template <class> class Src, class Arg0>
void dispatch_dtype(DType t, ReduceOp op, const Arg0& a, const Dims& shape, const Dims& strides,
                    int dim, void* out, const KernelTable& kernels) {
  switch (t) {
    case DType::f32:
      return dispatch<float, Src>(op, a, shape, strides, dim, out, kernels);
    case DType::i32:
      return dispatch<std::int32_t, Src>(op, a, shape, strides, dim, out, kernels);
    case DType::boolean:
      return dispatch<bool, Src>(op, a, shape, strides, dim, out, kernels);
    case DType::bf16:
    case DType::f16:
      break;  // reduce_half reduces the values widened to f32
  }
  throw InternalError(std::string("cpu reduce: no kernel reads ") + dtype_name(t));
}

// Whether the loops read a contiguous tensor in dense runs: in every shape but one, a reduced dim
// that is neither the innermost nor wide enough for the column loop, whose rows interleave.
bool reads_dense_runs(const Dims& shape, int dim) {
  const Loops l = loops_for(shape, detail::contiguous_strides(shape), dim, true);
  return dim < 0 || l.columns || l.red.shape.empty() || l.red.strides[0] == 1;
}

}  // namespace

void reduce(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out,
            const KernelTable& kernels) {
  detail::check_reduce_call(op, x, dim, out);
  dispatch_dtype<MemorySource>(x.dtype, op, x.data(), x.shape, x.strides, dim, out.data(), kernels);
}

bool reduce_widened(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out,
                    const KernelTable& kernels) {
  // A view's runs may have strides (argmax over all of a transposed x walks it row-major): the
  // reader would widen the memory between their elements too.
  if (!x.is_contiguous() || !reads_dense_runs(x.shape, dim)) return false;
  const WidenedSource<float> source{static_cast<const std::uint16_t*>(x.data()), x.dtype, kernels};
  dispatch<float, WidenedSource>(op, source, x.shape, x.strides, dim, out.data(), kernels);
  return true;
}

bool reduce_prologue(ReduceOp op, const detail::Prologue& p, int dim, const TensorImpl& out,
                     const KernelTable& kernels) {
  const TensorImpl v = detail::prologue_value(p);
  detail::check_reduce_call(op, v, dim, out);
  if (!reads_dense_runs(v.shape, dim)) return false;
  if (v.numel() == 0) {
    dispatch_dtype<MemorySource>(v.dtype, op, static_cast<const void*>(nullptr), v.shape, v.strides,
                                 dim, out.data(), kernels);
    return true;
  }
  const ir::RangeEvaluator eval(p.program, p.inputs, p.scalars, p.shape, kernels);
  const std::pair<const ir::RangeEvaluator&, std::int64_t> source{eval, v.numel()};
  dispatch_dtype<PrologueSource>(v.dtype, op, source, v.shape, v.strides, dim, out.data(), kernels);
  return true;
}

}  // namespace kiln::cpu
