// kiln::cpu::reduce against a float64 reference over contiguous, transposed, permuted,
// sliced (offset + step) and broadcast (stride 0) inputs, every op and dtype, each dim and
// all; the blocked, short-row and column loops on large shapes; NaN, ties, empty slices, wrapping
// integer sums, independence from the thread count, the accuracy of a 16M-element sum, and
// the error paths.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "core/simd_targets.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/kernels.hpp"
#include "kiln/half.hpp"
#include "test_support.hpp"

namespace {

using kiln::Dims;
using kiln::DType;
using kiln::detail::ReduceOp;
using kiln::detail::TensorImpl;

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::max,
                             ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin};

// ---- inputs: a host buffer with random values and a strided view of it ----

struct Input {
  kiln::detail::Handle base;
  std::vector<double> values;  // the buffer's elements, in storage order
  TensorImpl view;
};

enum class Values { wide, ties, nans };

// A buffer of `storage` elements of dtype t. f32 wide: uniform in [-1, 1); ties: small
// integers (many equal extremes); nans: wide with ~1% NaN. i32 wide: the whole range (sums
// wrap); ties: [-3, 3]. bool: 0 or 1.
Input make_buffer(std::int64_t storage, DType t, Values kind, std::mt19937_64& g) {
  Input in;
  in.base = kiln::cpu::host_empty({storage}, t);
  in.values.resize(static_cast<std::size_t>(storage));
  std::uniform_real_distribution<float> u(-1, 1);
  std::uniform_int_distribution<std::int32_t> wide(std::numeric_limits<std::int32_t>::min(),
                                                   std::numeric_limits<std::int32_t>::max());
  std::uniform_int_distribution<std::int32_t> small(-3, 3);
  for (std::int64_t i = 0; i < storage; ++i) {
    double v = 0;
    if (t == DType::f32) {
      float f = kind == Values::ties ? static_cast<float>(small(g)) : u(g);
      if (kind == Values::nans && g() % 100 == 0) f = std::nanf("");
      static_cast<float*>(in.base->data())[i] = f;
      v = f;
    } else if (t == DType::i32) {
      std::int32_t x = kind == Values::ties ? small(g) : wide(g);
      static_cast<std::int32_t*>(in.base->data())[i] = x;
      v = x;
    } else {
      std::uint8_t b = g() & 1;
      static_cast<std::uint8_t*>(in.base->data())[i] = b;
      v = b;
    }
    in.values[static_cast<std::size_t>(i)] = v;
  }
  return in;
}

Input make_view(const Dims& shape, const Dims& strides, std::int64_t offset, std::int64_t storage,
                DType t, Values kind, std::mt19937_64& g) {
  Input in = make_buffer(storage, t, kind, g);
  in.view = *in.base;
  in.view.shape = shape;
  in.view.strides = strides;
  in.view.offset = offset;
  return in;
}

// Views of shape [a, b, c] over differently laid out buffers.
struct Layout {
  const char* name;
  Dims strides;
  std::int64_t offset, storage;
};

std::vector<Layout> layouts(std::int64_t a, std::int64_t b, std::int64_t c) {
  return {
      {"contiguous", {b * c, c, 1}, 0, a * b * c},
      {"transposed", {1, a, a * b}, 0, a * b * c},
      {"permuted_inner", {c * b, 1, b}, 0, a * b * c},
      // [a + 1, 2b, c + 3] from [1, 0, 2] with step 2 along dim 1.
      {"sliced_step_rows",
       {2 * b * (c + 3), 2 * (c + 3), 1},
       2 * b * (c + 3) + 2,
       (a + 1) * 2 * b * (c + 3)},
      // [a, b, 2c] from [0, 0, 1] with step 2 along the last dim.
      {"sliced_step_inner", {b * 2 * c, 2 * c, 2}, 1, a * b * 2 * c},
      {"broadcast_middle", {c, 0, 1}, 0, a * c},
      {"broadcast_outer", {0, 1, 0}, 0, b},
  };
}

// ---- the float64 reference ----

struct Expected {
  std::vector<double> value;
  std::vector<double> magnitude;  // sum (mean for mean) of |x| over each slice: the tolerance
};

// The expected result of every op (indexed by ReduceOp) over dim (or all when dim < 0).
std::vector<Expected> reference(DType t, const Input& in, int dim) {
  const auto& shape = in.view.shape;
  const auto& strides = in.view.strides;
  const int rank = static_cast<int>(shape.size());
  Dims out_shape = shape;
  for (int d = 0; d < rank; ++d)
    if (dim < 0 || d == dim) out_shape[d] = 1;
  const Dims out_strides = kiln::detail::contiguous_strides(out_shape);
  const std::int64_t outs = kiln::detail::numel(out_shape);
  struct State {
    long double sum = 0;
    std::int64_t isum = 0, n = 0, max_i = 0, min_i = 0, nan_i = -1;
    double max = 0, min = 0, magnitude = 0;
  };
  std::vector<State> st(static_cast<std::size_t>(outs));
  const std::int64_t total = kiln::detail::numel(shape);
  Dims idx(shape.size(), 0);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t off = in.view.offset, o = 0;
    for (int d = 0; d < rank; ++d) {
      off += idx[d] * strides[d];
      if (dim >= 0 && d != dim) o += idx[d] * out_strides[d];
    }
    const std::int64_t pos = dim < 0 ? flat : idx[dim];
    const double v = in.values[static_cast<std::size_t>(off)];
    State& s = st[static_cast<std::size_t>(o)];
    s.sum += v;
    if (t != DType::f32) s.isum += static_cast<std::int64_t>(v);  // integer inputs only
    s.magnitude += std::fabs(v);
    if (std::isnan(v) && s.nan_i < 0) s.nan_i = pos;
    // Strict comparisons: the first of equal values wins.
    if (s.n == 0 || v > s.max) s.max = v, s.max_i = pos;
    if (s.n == 0 || v < s.min) s.min = v, s.min_i = pos;
    ++s.n;
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<Expected> e(6);
  for (const State& s : st) {
    const bool nan = s.nan_i >= 0;
    const double sum = t == DType::f32
                           ? static_cast<double>(s.sum)
                           : static_cast<std::int32_t>(static_cast<std::uint32_t>(s.isum));
    const double mean =
        s.n == 0 ? NAN
        : t == DType::f32
            ? static_cast<double>(s.sum / s.n)
            : static_cast<float>(static_cast<double>(s.isum) / static_cast<double>(s.n));
    const double values[6] = {sum,
                              mean,
                              nan ? NAN : s.max,
                              nan ? NAN : s.min,
                              static_cast<double>(nan ? s.nan_i : s.max_i),
                              static_cast<double>(nan ? s.nan_i : s.min_i)};
    for (ReduceOp op : kOps) {
      Expected& x = e[static_cast<int>(op)];
      x.value.push_back(values[static_cast<int>(op)]);
      x.magnitude.push_back(op == ReduceOp::mean && s.n > 0 ? s.magnitude / s.n : s.magnitude);
    }
  }
  return e;
}

// ---- running and comparing ----

// The kernels the backend reduces with: Highway's when kiln has SIMD.
const kiln::cpu::KernelTable& default_kernels() {
#if KILN_WITH_SIMD
  return kiln::cpu::simd_kernels();
#else
  return kiln::cpu::scalar_kernels();
#endif
}

// Runs op into a poisoned output and returns its values as doubles.
std::vector<double> run(ReduceOp op, const TensorImpl& x, int dim,
                        const kiln::cpu::KernelTable& kernels = default_kernels()) {
  Dims out_shape = x.shape;
  for (std::size_t d = 0; d < out_shape.size(); ++d)
    if (dim < 0 || static_cast<int>(d) == dim) out_shape[d] = 1;
  const DType rt = kiln::detail::reduce_result_dtype(op, x.dtype);
  auto out = kiln::cpu::host_empty(out_shape, rt);
  const std::int64_t n = out->numel();
  std::memset(out->data(), 0x7f, static_cast<std::size_t>(n) * kiln::dtype_size(rt));
  kiln::cpu::reduce(op, x, dim, *out, kernels);
  std::vector<double> got;
  for (std::int64_t i = 0; i < n; ++i) {
    if (rt == DType::f32)
      got.push_back(static_cast<const float*>(out->data())[i]);
    else if (rt == DType::i32)
      got.push_back(static_cast<const std::int32_t*>(out->data())[i]);
    else
      got.push_back(static_cast<const std::uint8_t*>(out->data())[i]);
  }
  return got;
}

// f32 sums and means: correctly rounded but for a double-accumulation error that is far below
// 1e-12 of the magnitudes; everything else exact.
::testing::AssertionResult agrees(ReduceOp op, DType t, const std::vector<double>& got,
                                  const Expected& want) {
  if (got.size() != want.value.size()) {
    return ::testing::AssertionFailure()
           << got.size() << " outputs, expected " << want.value.size();
  }
  const bool approx = t == DType::f32 && (op == ReduceOp::sum || op == ReduceOp::mean);
  int bad = 0;
  std::ostringstream msg;
  msg << std::setprecision(10);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want.value[i];
    bool ok = std::isnan(w) ? std::isnan(g) : g == w;
    if (!ok && approx && !std::isnan(w) && !std::isnan(g)) {
      ok = std::fabs(g - w) <= kt::float_ulp(w) + 1e-12 * want.magnitude[i];
    }
    if (!ok && ++bad <= 5) msg << "\n  output " << i << ": got " << g << ", expected " << w;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " wrong:" << msg.str();
}

class CpuReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = kt::fresh_seed();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (KILN_TEST_SEED reruns it)");
  }

  // Every op over every dim and all, on `in`, against the reference.
  void check_all(const Input& in, const std::string& what) {
    const DType t = in.view.dtype;
    for (int dim = -1; dim < in.view.rank(); ++dim) {
      const auto want = reference(t, in, dim);
      for (ReduceOp op : kOps) {
        SCOPED_TRACE(what + " " + kiln::dtype_name(t) + " " + kiln::format_dims(in.view.shape) +
                     " " + kiln::detail::reduce_name(op) + " dim " + std::to_string(dim));
        const std::int64_t len = dim < 0 ? in.view.numel() : in.view.shape[dim];
        if (len == 0 && op != ReduceOp::sum && op != ReduceOp::mean) continue;
        EXPECT_TRUE(agrees(op, t, run(op, in.view, dim), want[static_cast<int>(op)]));
      }
    }
  }

  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

TEST_F(CpuReduce, EveryLayoutOpAndDtype) {
  std::uniform_int_distribution<std::int64_t> extent(1, 24);
  for (int round = 0; round < 4; ++round) {
    // Rounds 0 and 1 pin extents of 1 (dropped by coalescing) and >= 16 (the column loop).
    const std::int64_t a = round == 0 ? 1 : extent(rng_);
    const std::int64_t b = extent(rng_);
    const std::int64_t c = round == 1 ? 17 + extent(rng_) : extent(rng_);
    for (const Layout& l : layouts(a, b, c)) {
      for (DType t : {DType::f32, DType::i32, DType::boolean}) {
        for (Values kind : {Values::wide, Values::ties}) {
          Input in = make_view({a, b, c}, l.strides, l.offset, l.storage, t, kind, rng_);
          check_all(in, l.name);
        }
      }
    }
  }
}

TEST_F(CpuReduce, RanksZeroAndOne) {
  for (DType t : {DType::f32, DType::i32, DType::boolean}) {
    check_all(make_view({}, {}, 3, 5, t, Values::wide, rng_), "scalar");
    check_all(make_view({37}, {1}, 0, 37, t, Values::wide, rng_), "vector");
    check_all(make_view({37}, {3}, 2, 113, t, Values::wide, rng_), "strided vector");
    check_all(make_view({9}, {0}, 4, 5, t, Values::wide, rng_), "broadcast vector");
  }
}

// Shapes large enough for the blocked row loop (long rows, few outputs), the column loop with
// several tiles and row blocks, and multi-run all-reductions.
TEST_F(CpuReduce, LargeShapesTakeEveryLoop) {
  struct Case {
    Dims shape;
    bool transpose_last_two;
  };
  for (const Case& c :
       {Case{{3, 100003}, false}, Case{{70001, 20}, false}, Case{{5, 9001, 40}, false},
        Case{{600, 300}, false}, Case{{40, 5000}, true}, Case{{2, 70000, 3}, true},
        Case{{30, 4500}, false}, Case{{1100, 2100}, false}}) {
    const std::int64_t n = kiln::detail::numel(c.shape);
    Dims strides = kiln::detail::contiguous_strides(c.shape);
    Dims shape = c.shape;
    if (c.transpose_last_two) {
      std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
      std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
    }
    for (DType t : {DType::f32, DType::i32}) {
      for (Values kind : {Values::wide, Values::ties}) {
        if (t == DType::i32 && kind == Values::ties) continue;
        check_all(make_view(shape, strides, 0, n, t, kind, rng_),
                  c.transpose_last_two ? "transposed" : "contiguous");
      }
    }
  }
}

// Short contiguous rows (a last dim up to 32) are reduced a block of rows at a time: many rows,
// a count that is no multiple of the block, NaNs and ties.
TEST_F(CpuReduce, ShortRowsTakeTheBlockedLoop) {
  for (const std::int64_t w : {1, 2, 3, 4, 8, 31, 32}) {
    const std::int64_t m = 70001;
    for (DType t : {DType::f32, DType::i32, DType::boolean}) {
      for (Values kind : {Values::wide, Values::ties, Values::nans}) {
        if (kind == Values::nans && t != DType::f32) continue;
        check_all(make_view({m, w}, {w, 1}, 0, m * w, t, kind, rng_), "short rows");
      }
    }
  }
}

#if KILN_WITH_SIMD
// Whether the SIMD table's results equal the loop's bit for bit (any NaN for a NaN), naming the
// first that does not (a `what` of the results: row, column).
::testing::AssertionResult same_bits(const std::vector<double>& simd,
                                     const std::vector<double>& loop, const char* what) {
  for (std::size_t i = 0; i < simd.size(); ++i) {
    const bool same = std::isnan(loop[i])
                          ? std::isnan(simd[i])
                          : simd[i] == loop[i] && std::signbit(simd[i]) == std::signbit(loop[i]);
    if (!same)
      return ::testing::AssertionFailure()
             << what << " " << i << ": simd " << simd[i] << ", loop " << loop[i];
  }
  return ::testing::AssertionSuccess();
}

// Rows of 2, 4 and 8 f32 are the SIMD table's (simd_short_rows.cpp) on every target this CPU
// has: the same bits as the scalar table's loop, over signed zeros, infinities, NaNs and ties,
// with a row count that leaves tails in the blocks and vectors.
TEST_F(CpuReduce, SimdShortRowsEqualTheLoopBitForBit) {
  kt::ConfigGuard guard;
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 0.5f};
  std::uniform_int_distribution<int> pick(0, 15);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const std::int64_t w : {2, 4, 8, 5}) {
    const std::int64_t m = 4099;
    Input in = make_view({m, w}, {w, 1}, 0, m * w, DType::f32, Values::wide, rng_);
    float* x = static_cast<float*>(in.base->data());
    for (std::int64_t i = 0; i < m * w; ++i) {
      const int k = pick(rng_);
      x[i] = k < 8 ? specials[k] : u(rng_);
      in.values[static_cast<std::size_t>(i)] = x[i];
    }
    const auto want = reference(DType::f32, in, 1);
    for (const std::string& target : kiln::detail::simd_targets()) {
      kiln::set_config({.simd_target = target});
      for (ReduceOp op : kOps) {
        SCOPED_TRACE(target + " w " + std::to_string(w) + " " + kiln::detail::reduce_name(op));
        const auto simd = run(op, in.view, 1, kiln::cpu::simd_kernels());
        const auto loop = run(op, in.view, 1, kiln::cpu::scalar_kernels());
        ASSERT_TRUE(same_bits(simd, loop, "row"));
        EXPECT_TRUE(agrees(op, DType::f32, simd, want[static_cast<int>(op)]));
      }
    }
  }
}

// reduce_widened's results (f32, a half-type x's values widened) of op over dim, with kernels.
std::vector<double> run_widened(ReduceOp op, const TensorImpl& x, int dim,
                                const kiln::cpu::KernelTable& kernels) {
  Dims out_shape = x.shape;
  out_shape[static_cast<std::size_t>(dim)] = 1;
  auto out = kiln::cpu::host_empty(out_shape, DType::f32);
  float* o = static_cast<float*>(out->data());
  std::fill(o, o + out->numel(), 7.0f);  // poison
  EXPECT_TRUE(kiln::cpu::reduce_widened(op, x, dim, *out, kernels));
  return std::vector<double>(o, o + out->numel());
}

// Column sums (x.sum(0) of a matrix, a dim of rows of columns) are the SIMD table's column_sums
// (simd_columns.cpp) on every target this CPU has, over f32 memory and over bf16 and f16 memory
// read directly: the same bits as the scalar table's loop over signed zeros, infinities and NaNs;
// widths that leave vector tails, and one wider than the loop's 4096-column tile; row counts of
// one, under one block and over several; a middle dim reduced.
TEST_F(CpuReduce, SimdColumnSumsEqualTheLoopBitForBit) {
  kt::ConfigGuard guard;
  const float specials[] = {0.0f, -0.0f, 1e30f, -1.0f, INFINITY, -INFINITY, NAN, 0.5f};
  std::uniform_int_distribution<int> pick(0, 31);
  std::uniform_real_distribution<float> u(-1, 1);
  const Dims shapes[] = {{1, 37}, {3, 16}, {700, 21}, {2049, 771}, {5, 4099}, {4, 1300, 19}};
  for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (const Dims& shape : shapes) {
      const std::int64_t n = kiln::detail::numel(shape);
      const std::int64_t rows = shape[shape.size() - 2], width = shape.back();
      Input in = make_view(shape, kiln::detail::contiguous_strides(shape), 0, n, DType::f32,
                           Values::wide, rng_);
      float* x = static_cast<float*>(in.base->data());
      auto half = kiln::cpu::host_empty(shape, t == DType::f32 ? DType::bf16 : t);
      auto* bits = static_cast<std::uint16_t*>(half->data());
      for (std::int64_t i = 0; i < n; ++i) {
        // Specials in the first two rows and the last only, so that most sums stay finite.
        const std::int64_t row = i / width % rows;
        const int k = row < 2 || row == rows - 1 ? pick(rng_) : 8;
        x[i] = k < 8 ? specials[k] : u(rng_);
        if (t != DType::f32) {  // x holds the half value, widened: the reference's
          bits[i] = t == DType::bf16 ? kiln::detail::float_to_bf16_bits(x[i])
                                     : kiln::detail::float_to_f16_bits(x[i]);
          x[i] = t == DType::bf16 ? kiln::detail::bf16_bits_to_float(bits[i])
                                  : kiln::detail::f16_bits_to_float(bits[i]);
        }
        in.values[static_cast<std::size_t>(i)] = x[i];
      }
      const int dim = static_cast<int>(shape.size()) - 2;
      const auto want = reference(DType::f32, in, dim);
      for (const std::string& target : kiln::detail::simd_targets()) {
        kiln::set_config({.simd_target = target});
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
          SCOPED_TRACE(target + " " + kiln::dtype_name(t) + " " + kiln::format_dims(shape) + " " +
                       kiln::detail::reduce_name(op));
          const auto simd = t == DType::f32
                                ? run(op, in.view, dim, kiln::cpu::simd_kernels())
                                : run_widened(op, *half, dim, kiln::cpu::simd_kernels());
          const auto loop = t == DType::f32
                                ? run(op, in.view, dim, kiln::cpu::scalar_kernels())
                                : run_widened(op, *half, dim, kiln::cpu::scalar_kernels());
          ASSERT_TRUE(same_bits(simd, loop, "column"));
          EXPECT_TRUE(agrees(op, DType::f32, simd, want[static_cast<int>(op)]));
        }
      }
    }
  }
}
#endif

TEST_F(CpuReduce, NaNPropagatesLikeNumPy) {
  for (const Layout& l : layouts(6, 50, 33)) {
    check_all(
        make_view({6, 50, 33}, l.strides, l.offset, l.storage, DType::f32, Values::nans, rng_),
        l.name);
  }
  check_all(make_view({3, 100003}, {100003, 1}, 0, 300009, DType::f32, Values::nans, rng_),
            "long rows");
  check_all(make_view({9001, 40}, {40, 1}, 0, 360040, DType::f32, Values::nans, rng_), "columns");
  // Hand-made: the first NaN's index, max/min NaN, infinities compare normally.
  auto x = kiln::cpu::host_empty({6}, DType::f32);
  const float v[6] = {1, -INFINITY, NAN, INFINITY, NAN, 2};
  std::memcpy(x->data(), v, sizeof v);
  EXPECT_TRUE(std::isnan(run(ReduceOp::max, *x, -1)[0]));
  EXPECT_TRUE(std::isnan(run(ReduceOp::min, *x, 0)[0]));
  EXPECT_TRUE(std::isnan(run(ReduceOp::sum, *x, 0)[0]));
  EXPECT_EQ(run(ReduceOp::argmax, *x, 0)[0], 2);
  EXPECT_EQ(run(ReduceOp::argmin, *x, -1)[0], 2);
  const float w[4] = {-INFINITY, 3, INFINITY, INFINITY};
  auto y = kiln::cpu::host_empty({4}, DType::f32);
  std::memcpy(y->data(), w, sizeof w);
  EXPECT_EQ(run(ReduceOp::max, *y, 0)[0], INFINITY);
  EXPECT_EQ(run(ReduceOp::argmax, *y, 0)[0], 2);
  EXPECT_EQ(run(ReduceOp::argmin, *y, 0)[0], 0);
  EXPECT_TRUE(std::isnan(run(ReduceOp::sum, *y, 0)[0]));  // -inf + inf
}

// argmax/argmin scan long contiguous rows in chunks: an extreme repeated in a later chunk, or
// a NaN far from the start, must still give the first index.
TEST_F(CpuReduce, ArgKeepsTheFirstIndexAcrossChunks) {
  const std::int64_t n = 9000;
  std::uniform_int_distribution<std::int64_t> pos(1100, n - 1);
  for (int round = 0; round < 20; ++round) {
    Input in = make_view({n}, {1}, 0, n, DType::f32, Values::wide, rng_);
    float* p = static_cast<float*>(in.base->data());
    const std::int64_t first = pos(rng_), second = std::min(n - 1, first + 1 + round * 300);
    p[first] = p[second] = 5;
    p[n - 1 - first] = p[n - 1 - std::min(n - 1, first + round)] = -5;
    EXPECT_EQ(run(ReduceOp::argmax, in.view, 0)[0], static_cast<double>(first));
    EXPECT_EQ(run(ReduceOp::argmin, in.view, -1)[0],
              static_cast<double>(std::min(n - 1 - first, n - 1 - std::min(n - 1, first + round))));
    const std::int64_t nan_at = pos(rng_);
    p[nan_at] = std::nanf("");
    if (round % 2) p[std::min(n - 1, nan_at + 7)] = std::nanf("");
    EXPECT_EQ(run(ReduceOp::argmax, in.view, 0)[0], static_cast<double>(nan_at));
    EXPECT_EQ(run(ReduceOp::argmin, in.view, 0)[0], static_cast<double>(nan_at));
    EXPECT_TRUE(std::isnan(run(ReduceOp::max, in.view, 0)[0]));
  }
}

TEST_F(CpuReduce, IntegerSumsWrapAndMeansAreExact) {
  auto x = kiln::cpu::host_empty({2, 3}, DType::i32);
  const std::int32_t v[6] = {INT32_MAX, 1, 0, INT32_MIN, -1, 5};
  std::memcpy(x->data(), v, sizeof v);
  EXPECT_EQ(run(ReduceOp::sum, *x, 1), (std::vector<double>{INT32_MIN, INT32_MIN + 4}));
  EXPECT_EQ(run(ReduceOp::sum, *x, 0), (std::vector<double>{-1, 0, 5}));
  EXPECT_EQ(run(ReduceOp::mean, *x, 1),
            (std::vector<double>{static_cast<float>((INT32_MAX + 1.0) / 3),
                                 static_cast<float>((INT32_MIN + 4.0) / 3)}));
}

TEST_F(CpuReduce, EmptySlices) {
  // [3, 0]: sum gives 0, mean NaN, the others have no identity.
  Input in = make_view({3, 0}, {0, 1}, 0, 1, DType::f32, Values::wide, rng_);
  EXPECT_EQ(run(ReduceOp::sum, in.view, 1), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(run(ReduceOp::sum, in.view, -1), (std::vector<double>{0}));
  for (double m : run(ReduceOp::mean, in.view, 1)) EXPECT_TRUE(std::isnan(m));
  Input ints = make_view({0}, {1}, 0, 1, DType::i32, Values::wide, rng_);
  EXPECT_EQ(run(ReduceOp::sum, ints.view, 0), (std::vector<double>{0}));
  EXPECT_TRUE(std::isnan(run(ReduceOp::mean, ints.view, 0)[0]));
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin}) {
    const std::string name = kiln::detail::reduce_name(op);
    for (int dim : {1, -1}) {
      try {
        run(op, in.view, dim);
        ADD_FAILURE() << name << " of an empty slice did not throw";
      } catch (const kiln::ValueError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(name + ":", 0), 0u) << e.what();
      }
    }
    // Reducing dim 0 of [3, 0] leaves no outputs: nothing to do, no error (NumPy agrees).
    EXPECT_TRUE(run(op, in.view, 0).empty());
  }
}

TEST_F(CpuReduce, Errors) {
  Input in = make_view({4, 5}, {5, 1}, 0, 20, DType::f32, Values::wide, rng_);
  auto wrong_dtype = kiln::cpu::host_empty({4, 1}, DType::i32);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::sum, in.view, 1, *wrong_dtype, default_kernels()),
               kiln::DTypeError);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::max, in.view, 1, *wrong_dtype, default_kernels()),
               kiln::DTypeError);
  auto f32_out = kiln::cpu::host_empty({4, 1}, DType::f32);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::argmax, in.view, 1, *f32_out, default_kernels()),
               kiln::DTypeError);
  auto wrong_shape = kiln::cpu::host_empty({1, 5}, DType::f32);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::sum, in.view, 1, *wrong_shape, default_kernels()),
               kiln::ShapeError);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::sum, in.view, 2, *f32_out, default_kernels()),
               kiln::IndexError);
  Input ints = make_view({4, 5}, {5, 1}, 0, 20, DType::i32, Values::wide, rng_);
  EXPECT_THROW(kiln::cpu::reduce(ReduceOp::sum, ints.view, 1, *f32_out, default_kernels()),
               kiln::DTypeError);
}

TEST_F(CpuReduce, SameForEveryThreadCount) {
  kt::ConfigGuard guard;
  struct Case {
    Dims shape;
    int dim;
  };
  for (const Case& c : {Case{{1 << 22}, -1}, Case{{3, 1 << 20}, 1}, Case{{1 << 16, 48}, 0},
                        Case{{2048, 2048}, 1}}) {
    const std::int64_t n = kiln::detail::numel(c.shape);
    Input in = make_view(c.shape, kiln::detail::contiguous_strides(c.shape), 0, n, DType::f32,
                         Values::wide, rng_);
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(kiln::format_dims(c.shape) + " " + kiln::detail::reduce_name(op));
      kiln::set_config({.threads = 1});
      const auto one = run(op, in.view, c.dim);
      for (int threads : {2, 5}) {
        kiln::set_config({.threads = threads});
        const auto many = run(op, in.view, c.dim);
        ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(double)), 0)
            << threads << " threads";
      }
    }
  }
}

// A sum of 16M f32 values against a long double reference: values in [0, 1) (no cancellation)
// and in [-1, 1) (the sum is ~sqrt(n), so accumulation error would show at once).
TEST_F(CpuReduce, SixteenMillionElementSum) {
  const std::int64_t n = std::int64_t{1} << 24;
  auto x = kiln::cpu::host_empty({n}, DType::f32);
  float* p = static_cast<float*>(x->data());
  for (double lo : {0.0, -1.0}) {
    std::uniform_real_distribution<float> u(static_cast<float>(lo), 1.0f);
    long double exact = 0;
    for (std::int64_t i = 0; i < n; ++i) exact += (p[i] = u(rng_));
    const double got = run(ReduceOp::sum, *x, -1)[0];
    const double rel =
        std::fabs(got - static_cast<double>(exact)) / std::fabs(static_cast<double>(exact));
    std::cout << "[ measured ] sum of 2^24 uniform(" << lo << ", 1) f32: relative error " << rel
              << " (f32 rounding of the result alone: up to 6e-8)\n";
    RecordProperty(lo == 0 ? "sum16M_rel_error_positive" : "sum16M_rel_error_signed",
                   std::to_string(rel));
    EXPECT_LE(std::fabs(got - static_cast<double>(exact)),
              kt::float_ulp(static_cast<double>(exact)));
    const double mean = run(ReduceOp::mean, *x, 0)[0];
    EXPECT_LE(std::fabs(mean - static_cast<double>(exact / n)),
              kt::float_ulp(static_cast<double>(exact / n)));
  }
}

}  // namespace
