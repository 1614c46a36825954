// src/core/layout.hpp: coalescing (one operand, several, a reduction's kept and reduced dims,
// memory order) and the run walker, against a scalar reference that computes each position's
// element offset from its multi-index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/layout.hpp"
#include "core/tensor_impl.hpp"

namespace {

using kiln::Dims;
using kiln::detail::coalesce;
using kiln::detail::for_each_run;
using kiln::detail::JointLayout;
using kiln::detail::Layout;
using kiln::detail::Odometer;

// ---- the reference ----

std::int64_t count(const Dims& shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

// The element offset of row-major position p: its multi-index, digit by digit, times strides.
std::int64_t offset_of(const Dims& shape, const Dims& strides, std::int64_t p) {
  std::int64_t off = 0;
  for (std::size_t d = shape.size(); d-- > 0;) {
    off += (p % shape[d]) * strides[d];
    p /= shape[d];
  }
  return off;
}

// The offsets of every position, in row-major order.
std::vector<std::int64_t> offsets(const Dims& shape, const Dims& strides) {
  std::vector<std::int64_t> out;
  for (std::int64_t p = 0; p < count(shape); ++p) out.push_back(offset_of(shape, strides, p));
  return out;
}

// ---- coalescing: fixed cases ----

void expect_layout(const Layout& l, const Dims& shape, const Dims& strides, std::int64_t numel) {
  EXPECT_EQ(l.shape, shape);
  EXPECT_EQ(l.strides, strides);
  EXPECT_EQ(l.numel, numel);
}

// Dense: every element of one block once, the dims in some order (what a transposed weight is).
TEST(DenseTest, PermutationsOfRowMajorAreDenseAndGapsOrBroadcastsAreNot) {
  EXPECT_TRUE(kiln::detail::dense_strides({2, 3, 4}, {12, 4, 1}));
  EXPECT_TRUE(kiln::detail::dense_strides({4, 3}, {1, 4}));         // a transposed [3, 4]
  EXPECT_TRUE(kiln::detail::dense_strides({3, 2, 4}, {4, 12, 1}));  // dims 0 and 1 swapped
  EXPECT_TRUE(kiln::detail::dense_strides({1, 4, 3}, {99, 1, 4}));  // an extent-1 dim's stride
  EXPECT_TRUE(kiln::detail::dense_strides({0, 5}, {7, 3}));         // empty
  EXPECT_FALSE(kiln::detail::dense_strides({2, 3}, {6, 2}));        // every other element
  EXPECT_FALSE(kiln::detail::dense_strides({2, 3}, {0, 1}));        // broadcast
  EXPECT_FALSE(kiln::detail::dense_strides({2, 3}, {4, 1}));        // a slice of wider rows
}

TEST(CoalesceTest, ContiguousBecomesOneRun) {
  expect_layout(coalesce({2, 3, 4}, {12, 4, 1}), {24}, {1}, 24);
  // Contiguous with another step (every other element of a buffer): still one run.
  expect_layout(coalesce({2, 3}, {6, 2}), {6}, {2}, 6);
}

TEST(CoalesceTest, TransposedStaysApart) {
  expect_layout(coalesce({3, 2}, {1, 3}), {3, 2}, {1, 3}, 6);
  // A permutation whose two inner dims still nest: only those merge.
  expect_layout(coalesce({4, 2, 3}, {1, 12, 4}), {4, 6}, {1, 4}, 24);
}

TEST(CoalesceTest, SlicesAndOffsets) {
  // Rows 1..2 of a [4, 5] matrix (the offset lives in the view, not in the strides): one run.
  expect_layout(coalesce({2, 5}, {5, 1}), {10}, {1}, 10);
  // Columns 1..2: rows apart.
  expect_layout(coalesce({4, 2}, {5, 1}), {4, 2}, {5, 1}, 8);
  // Every other row: apart.
  expect_layout(coalesce({2, 5}, {10, 1}), {2, 5}, {10, 1}, 10);
}

TEST(CoalesceTest, BroadcastDims) {
  // A broadcast row: the stride-0 dim stays apart from the dense one.
  expect_layout(coalesce({3, 4}, {0, 1}), {3, 4}, {0, 1}, 12);
  expect_layout(coalesce({3, 4}, {1, 0}), {3, 4}, {1, 0}, 12);
  // A scalar broadcast to every dim: one run of stride 0.
  expect_layout(coalesce({3, 4, 5}, {0, 0, 0}), {60}, {0}, 60);
}

TEST(CoalesceTest, SizeOneDimsAreDropped) {
  expect_layout(coalesce({1, 5, 1}, {99, 1, 7}), {5}, {1}, 5);
  expect_layout(coalesce({1, 1}, {3, 8}), {}, {}, 1);
  expect_layout(coalesce(Dims{}, Dims{}), {}, {}, 1);
  // A size-1 dim between two that nest does not keep them apart.
  expect_layout(coalesce({2, 1, 3}, {3, 17, 1}), {6}, {1}, 6);
}

TEST(CoalesceTest, EmptyShapes) {
  for (const auto& [shape, strides] : std::vector<std::pair<Dims, Dims>>{
           {{0}, {1}}, {{3, 0, 4}, {0, 4, 1}}, {{2, 0}, {1, 2}}, {{0, 1}, {5, 1}}}) {
    const Layout l = coalesce(shape, strides);
    EXPECT_EQ(l.numel, 0);
    EXPECT_EQ(count(l.shape), 0) << "an empty tensor stays empty";
  }
}

TEST(CoalesceTest, SeveralOperandsMergeOnlyWhereAllDo) {
  const Dims shape = {2, 3, 4}, dense = {12, 4, 1}, row = {0, 0, 1}, col = {0, 1, 0};
  const Dims* two[] = {&dense, &dense};
  JointLayout l = coalesce(shape, two);
  EXPECT_EQ(l.shape, (Dims{24}));
  EXPECT_EQ(l.numel, 24);
  const Dims* with_row[] = {&dense, &row};
  l = coalesce(shape, with_row);
  EXPECT_EQ(l.shape, (Dims{6, 4}));  // the two outer dims nest in both
  EXPECT_EQ(l.strides, (std::vector<Dims>{{4, 1}, {0, 1}}));
  // A column broadcast along dims 0 and 2: its dims 0 and 1 do not nest, nor 1 and 2.
  const Dims* three[] = {&dense, &row, &col};
  l = coalesce(shape, three);
  EXPECT_EQ(l.shape, shape);
  EXPECT_EQ(l.strides, (std::vector<Dims>{dense, row, col}));
  // Into a layout that held more operands and dims: nothing of them stays.
  const Dims transposed = {1, 0};
  const Dims* one[] = {&transposed};
  kiln::detail::coalesce(Dims{3, 4}, std::span<const Dims* const>(one), l);
  EXPECT_EQ(l.shape, (Dims{3, 4}));
  EXPECT_EQ(l.strides, (std::vector<Dims>{{1, 0}}));
  EXPECT_EQ(l.numel, 12);
}

TEST(CoalesceTest, ReductionKeepsTheReducedDimApart) {
  using kiln::detail::reduction_layout;
  // [2, 3, 4] contiguous over dim 1: the kept dims 0 and 2 do not nest.
  auto l = reduction_layout({2, 3, 4}, {12, 4, 1}, 1, true);
  expect_layout(l.kept, {2, 4}, {12, 1}, 8);
  expect_layout(l.red, {3}, {4}, 3);
  // Over the last dim: the kept dims merge, the reduced one is a dense row.
  l = reduction_layout({2, 3, 4}, {12, 4, 1}, 2, true);
  expect_layout(l.kept, {6}, {4}, 6);
  expect_layout(l.red, {4}, {1}, 4);
  // Over a size-1 dim: nothing is reduced but the element itself.
  l = reduction_layout({2, 1, 4}, {4, 4, 1}, 1, true);
  expect_layout(l.kept, {8}, {1}, 8);
  expect_layout(l.red, {}, {}, 1);
  // Over every dim: no kept dims; the transposed input in row-major or in memory order.
  l = reduction_layout({3, 2}, {1, 3}, -1, true);
  expect_layout(l.kept, {}, {}, 1);
  expect_layout(l.red, {3, 2}, {1, 3}, 6);
  l = reduction_layout({3, 2}, {1, 3}, -1, false);
  expect_layout(l.red, {6}, {1}, 6);
  // Memory order puts broadcast dims outermost.
  expect_layout(kiln::detail::memory_order({3, 4}, {1, 0}), {4, 3}, {0, 1}, 12);
  const auto dims = kiln::detail::reduction_dims(4, 2);
  EXPECT_EQ(dims.kept, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(dims.reduced, (std::vector<int>{2}));
  EXPECT_EQ(kiln::detail::reduction_dims(3, -1).reduced, (std::vector<int>{0, 1, 2}));
}

TEST(CoalesceTest, Reach) {
  EXPECT_EQ(kiln::detail::reach(Dims{2, 3}, Dims{3, 1}), 5);
  EXPECT_EQ(kiln::detail::reach(Dims{4, 2}, Dims{0, 7}), 7);
  EXPECT_EQ(kiln::detail::reach(Dims{}, Dims{}), 0);
}

// ---- random layouts ----

// Random strided views: a random extent per dim (1s and the odd 0 included), strides made
// from a contiguous base that is then permuted, stepped, sliced and broadcast at random, so
// that some neighbours nest and others do not.
struct RandomLayouts {
  std::mt19937_64 rng{20261204};

  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }

  Dims shape(int rank, bool allow_empty) {
    Dims s(static_cast<std::size_t>(rank));
    for (auto& e : s) e = pick(0, 9) == 0 ? 1 : pick(allow_empty ? 0 : 1, 5);
    return s;
  }

  Dims strides(const Dims& shape) {
    const std::size_t r = shape.size();
    std::vector<std::size_t> order(r);
    for (std::size_t d = 0; d < r; ++d) order[d] = d;
    if (pick(0, 2) == 0) std::shuffle(order.begin(), order.end(), rng);
    Dims st(r);
    std::int64_t step = pick(0, 3) == 0 ? pick(2, 3) : 1;
    for (std::size_t i = r; i-- > 0;) {
      const std::size_t d = order[i];
      st[d] = step;
      // Sometimes a larger buffer dim than this extent (a slice), so the next dim does not nest.
      step *= std::max<std::int64_t>(1, shape[d]) + (pick(0, 3) == 0 ? pick(1, 2) : 0);
    }
    for (std::size_t d = 0; d < r; ++d)
      if (pick(0, 5) == 0) st[d] = 0;  // broadcast
    return st;
  }
};

TEST(CoalesceTest, RandomLayoutsKeepEveryOffsetAndMergeAllTheyCan) {
  RandomLayouts g;
  for (int trial = 0; trial < 2000; ++trial) {
    const int rank = static_cast<int>(g.pick(0, 6));
    const Dims shape = g.shape(rank, trial % 10 == 0);
    std::vector<Dims> sets;
    for (int k = 0, n = static_cast<int>(g.pick(1, 3)); k < n; ++k)
      sets.push_back(g.strides(shape));
    std::vector<const Dims*> ptrs;
    for (const Dims& s : sets) ptrs.push_back(&s);
    const JointLayout l = coalesce(shape, ptrs);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << " shape " << kiln::format_dims(shape));
    ASSERT_EQ(l.numel, count(shape));
    ASSERT_EQ(l.strides.size(), sets.size());
    ASSERT_LE(l.shape.size(), shape.size());
    if (l.numel == 0) continue;
    for (std::size_t d = 0; d < l.shape.size(); ++d) EXPECT_NE(l.shape[d], 1) << "a size-1 dim";
    for (std::size_t k = 0; k < sets.size(); ++k) {
      ASSERT_EQ(l.strides[k].size(), l.shape.size());
      EXPECT_EQ(offsets(l.shape, l.strides[k]), offsets(shape, sets[k])) << "operand " << k;
      // Also each operand alone: the single-operand form agrees with the reference.
      const Layout one = coalesce(shape, sets[k]);
      EXPECT_EQ(offsets(one.shape, one.strides), offsets(shape, sets[k]));
    }
    // Fully merged: no two neighbours that every operand walks as one run.
    for (std::size_t d = 1; d < l.shape.size(); ++d) {
      bool nest = true;
      for (const Dims& s : l.strides) nest = nest && s[d - 1] == s[d] * l.shape[d];
      EXPECT_FALSE(nest) << "dims " << d - 1 << " and " << d << " could merge";
    }
  }
}

TEST(CoalesceTest, RandomReductionsAddUpToTheOriginalOffsets) {
  RandomLayouts g;
  for (int trial = 0; trial < 1000; ++trial) {
    const int rank = static_cast<int>(g.pick(1, 5));
    const Dims shape = g.shape(rank, false), strides = g.strides(shape);
    const int dim = static_cast<int>(g.pick(-1, rank - 1));
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " dim " << dim);
    for (bool row_major : {true, false}) {
      const auto l = kiln::detail::reduction_layout(shape, strides, dim, row_major);
      ASSERT_EQ(l.kept.numel * l.red.numel, count(shape));
      if (dim < 0) {
        std::vector<std::int64_t> want = offsets(shape, strides),
                                  got = offsets(l.red.shape, l.red.strides);
        if (!row_major) {
          std::sort(want.begin(), want.end());
          std::sort(got.begin(), got.end());
        }
        EXPECT_EQ(got, want);
        continue;
      }
      // Output o, reduced position r: the element whose multi-index is o's kept digits with r
      // at `dim`.
      Dims kept_shape = shape, kept_strides = strides;
      kept_shape.erase(kept_shape.begin() + dim);
      kept_strides.erase(kept_strides.begin() + dim);
      for (std::int64_t o = 0; o < l.kept.numel; ++o) {
        for (std::int64_t r = 0; r < l.red.numel; ++r) {
          const std::int64_t want =
              offset_of(kept_shape, kept_strides, o) + r * strides[static_cast<std::size_t>(dim)];
          ASSERT_EQ(
              offset_of(l.kept.shape, l.kept.strides, o) + offset_of(l.red.shape, l.red.strides, r),
              want);
        }
      }
    }
  }
}

// ---- the walker ----

// The offsets for_each_run visits over [start, end), expanded run by run; positions checked.
std::vector<std::int64_t> walked(const Dims& shape, const Dims& strides, std::int64_t start,
                                 std::int64_t end) {
  std::vector<std::int64_t> out;
  std::int64_t next = start;
  for_each_run(shape, strides, start, end,
               [&](std::int64_t off, std::int64_t n, std::int64_t stride, std::int64_t pos) {
                 EXPECT_EQ(pos, next) << "runs in order, none skipped";
                 EXPECT_GT(n, 0);
                 if (!shape.empty()) {
                   EXPECT_EQ(stride, strides.back());
                 }
                 for (std::int64_t i = 0; i < n; ++i) out.push_back(off + i * stride);
                 next += n;
               });
  return out;
}

TEST(WalkerTest, RunsVisitTheReferenceOffsets) {
  RandomLayouts g;
  for (int trial = 0; trial < 2000; ++trial) {
    const int rank = static_cast<int>(g.pick(0, 6));
    const Dims shape = g.shape(rank, false), strides = g.strides(shape);
    const std::int64_t n = count(shape);
    const std::int64_t start = g.pick(0, n - 1), end = g.pick(start, n);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " shape " << kiln::format_dims(shape)
                                      << " [" << start << ", " << end << ")");
    const std::vector<std::int64_t> all = offsets(shape, strides);
    EXPECT_EQ(walked(shape, strides, start, end),
              std::vector<std::int64_t>(all.begin() + start, all.begin() + end));
  }
}

TEST(WalkerTest, RankZeroIsOneRunOfStrideZero) {
  // A rank-0 layout stands for one element repeated (a splat read for a whole block).
  EXPECT_EQ(walked({}, {}, 3, 7), (std::vector<std::int64_t>{0, 0, 0, 0}));
  EXPECT_TRUE(walked({}, {}, 5, 5).empty());
  EXPECT_TRUE(walked({2, 3}, {3, 1}, 4, 4).empty());
}

TEST(WalkerTest, OdometerStepsThroughTheReferenceOffsets) {
  RandomLayouts g;
  for (int trial = 0; trial < 1000; ++trial) {
    const int rank = static_cast<int>(g.pick(0, 6));
    const Dims shape = g.shape(rank, false), strides = g.strides(shape);
    const std::int64_t n = count(shape), start = g.pick(0, n - 1);
    Odometer o(shape, strides, start);
    for (std::int64_t p = start; p < n; ++p, o.next())
      ASSERT_EQ(o.offset(), offset_of(shape, strides, p)) << "trial " << trial << " position " << p;
    EXPECT_EQ(o.offset(), 0) << "past the last position it wraps to the first";
  }
}

TEST(WalkerTest, RanksBeyondTheInlineIndex) {
  // 18 dims of extent 2 whose strides never nest: the multi-index lives on the heap.
  Dims shape(18, 2), strides(18);
  std::int64_t step = 1;
  for (std::size_t d = 18; d-- > 0;) strides[d] = step, step *= 3;
  const std::vector<std::int64_t> all = offsets(shape, strides);
  EXPECT_EQ(walked(shape, strides, 0, count(shape)), all);
  EXPECT_EQ(walked(shape, strides, 1001, 70000),
            std::vector<std::int64_t>(all.begin() + 1001, all.begin() + 70000));
  Odometer a(shape, strides, 12345);
  Odometer b = a;  // a copy steps on its own index
  b.next();
  EXPECT_EQ(a.offset(), all[12345]);
  EXPECT_EQ(b.offset(), all[12346]);
  EXPECT_EQ(coalesce(shape, strides).shape.size(), 18u);
}

}  // namespace
