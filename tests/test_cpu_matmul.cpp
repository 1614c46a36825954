// kiln::cpu::matmul against a float64 reference: operands contiguous, transposed, row-sliced
// (passed to sgemm with a larger leading dimension), column-sliced and broadcast along k
// (copied), with offsets and broadcast batches; k = 0, m = 0, n = 0; the BLAS thread count for
// small and large products; blas_library(); and the error paths.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/blas_info.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/host_buffer.hpp"
#include "cpu/parallel.hpp"
#include "test_support.hpp"

namespace {

using kiln::Dims;
using kiln::DType;
using kiln::detail::TensorImpl;

// A [B, rows, cols] view over a buffer of random floats, and the buffer as doubles.
struct Operand {
  kiln::detail::Handle base;
  std::vector<double> values;
  TensorImpl view;
  double at(std::int64_t b, std::int64_t r, std::int64_t c) const {
    return values[static_cast<std::size_t>(view.offset + b * view.strides[0] + r * view.strides[1] +
                                           c * view.strides[2])];
  }
};

enum class Layout { contiguous, transposed, row_slice, col_slice, broadcast_batch, broadcast_k };
constexpr Layout kLayouts[] = {Layout::contiguous, Layout::transposed,      Layout::row_slice,
                               Layout::col_slice,  Layout::broadcast_batch, Layout::broadcast_k};

const char* name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::row_slice:
      return "row_slice";
    case Layout::col_slice:
      return "col_slice";
    case Layout::broadcast_batch:
      return "broadcast_batch";
    case Layout::broadcast_k:
      return "broadcast_k";
  }
  return "?";
}

// `k_dim` says which of rows (1) or cols (2) is the contraction dim, for broadcast_k.
Operand make(Layout l, std::int64_t batch, std::int64_t rows, std::int64_t cols, int k_dim,
             std::mt19937_64& g) {
  Dims strides;
  std::int64_t offset = 0, storage = 0;
  switch (l) {
    case Layout::contiguous:
      strides = {rows * cols, cols, 1}, storage = batch * rows * cols;
      break;
    case Layout::transposed:  // a [B, cols, rows] buffer with its last two dims swapped
      strides = {rows * cols, 1, rows}, storage = batch * rows * cols;
      break;
    case Layout::row_slice:  // rows 1, 3, 5, ... of a [B, 2 rows + 1, cols + 2], from col 2
      strides = {(2 * rows + 1) * (cols + 2), 2 * (cols + 2), 1}, offset = (cols + 2) + 2;
      storage = batch * (2 * rows + 1) * (cols + 2);
      break;
    case Layout::col_slice:  // cols 1, 3, 5, ... of a [B, rows, 2 cols]
      strides = {rows * 2 * cols, 2 * cols, 2}, offset = 1, storage = batch * rows * 2 * cols;
      break;
    case Layout::broadcast_batch:
      strides = {0, cols, 1}, storage = rows * cols;
      break;
    case Layout::broadcast_k:  // one value along the contraction dim
      strides = k_dim == 1 ? Dims{cols, 0, 1} : Dims{rows, 1, 0};
      storage = batch * (k_dim == 1 ? cols : rows);
      break;
  }
  Operand o;
  o.base = kiln::cpu::host_empty({std::max<std::int64_t>(storage, 1)}, DType::f32);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::int64_t i = 0; i < std::max<std::int64_t>(storage, 1); ++i) {
    const float f = u(g);
    static_cast<float*>(o.base->data())[i] = f;
    o.values.push_back(f);
  }
  o.view = *o.base;
  o.view.shape = {batch, rows, cols};
  o.view.strides = strides;
  o.view.offset = offset;
  return o;
}

// out = a @ b into a NaN-poisoned output, checked against the float64 product within
// 2 k 2^-24 sum |a||b| (the bound of any summation order, with or without FMA).
::testing::AssertionResult check(const Operand& a, const Operand& b) {
  const std::int64_t batch = a.view.shape[0], m = a.view.shape[1], k = a.view.shape[2],
                     n = b.view.shape[2];
  auto out = kiln::cpu::host_empty({batch, m, n}, DType::f32);
  float* c = static_cast<float*>(out->data());
  std::fill(c, c + batch * m * n, std::nanf(""));
  kiln::cpu::matmul(a.view, b.view, *out);
  int bad = 0;
  std::ostringstream msg;
  for (std::int64_t i = 0; i < batch; ++i) {
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t col = 0; col < n; ++col) {
        double want = 0, mag = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          want += a.at(i, r, j) * b.at(i, j, col);
          mag += std::fabs(a.at(i, r, j) * b.at(i, j, col));
        }
        const double got = c[(i * m + r) * n + col];
        if (std::fabs(got - want) <= 2.0 * static_cast<double>(k) * 0x1p-24 * mag) continue;
        if (++bad <= 5)
          msg << "\n  [" << i << ", " << r << ", " << col << "]: got " << got << ", expected "
              << want;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " wrong of " << batch * m * n << msg.str();
}

class CpuMatmul : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = kt::fresh_seed();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__, "seed " + std::to_string(seed_) + " (KILN_TEST_SEED reruns it)");
  }
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

TEST_F(CpuMatmul, EveryLayoutPair) {
  std::uniform_int_distribution<std::int64_t> extent(1, 45), batches(1, 3);
  for (int round = 0; round < 3; ++round) {
    // Round 0 pins extents of 1, where a dim's stride is never used.
    const std::int64_t batch = batches(rng_), m = round == 0 ? 1 : extent(rng_), k = extent(rng_),
                       n = round == 0 ? 1 : extent(rng_);
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        SCOPED_TRACE(testing::Message()
                     << "[" << batch << ", " << m << ", " << k << "] " << name(la) << " x ["
                     << batch << ", " << k << ", " << n << "] " << name(lb));
        EXPECT_TRUE(check(make(la, batch, m, k, 2, rng_), make(lb, batch, k, n, 1, rng_)));
      }
    }
  }
}

TEST_F(CpuMatmul, KOfOneAndVectors) {
  for (Layout l : kLayouts) {
    SCOPED_TRACE(name(l));
    EXPECT_TRUE(check(make(l, 2, 7, 1, 2, rng_), make(l, 2, 1, 9, 1, rng_)));     // outer product
    EXPECT_TRUE(check(make(l, 1, 1, 33, 2, rng_), make(l, 1, 33, 1, 1, rng_)));   // dot
    EXPECT_TRUE(check(make(l, 3, 20, 33, 2, rng_), make(l, 3, 33, 1, 1, rng_)));  // matvec
  }
}

TEST_F(CpuMatmul, EmptyExtents) {
  // k = 0: every output is an empty sum, 0 (the poison must go).
  Operand a = make(Layout::contiguous, 2, 3, 0, 2, rng_),
          b = make(Layout::contiguous, 2, 0, 4, 1, rng_);
  auto out = kiln::cpu::host_empty({2, 3, 4}, DType::f32);
  std::fill_n(static_cast<float*>(out->data()), 24, std::nanf(""));
  kiln::cpu::matmul(a.view, b.view, *out);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(static_cast<float*>(out->data())[i], 0.0f) << i;
  // m = 0, n = 0, B = 0: nothing to write, no BLAS call.
  for (auto [batch, m, n] : {std::tuple{2, 0, 4}, std::tuple{2, 3, 0}, std::tuple{0, 3, 4}}) {
    Operand x = make(Layout::contiguous, batch, m, 5, 2, rng_);
    Operand y = make(Layout::contiguous, batch, 5, n, 1, rng_);
    auto o = kiln::cpu::host_empty({batch, m, n}, DType::f32);
    EXPECT_NO_THROW(kiln::cpu::matmul(x.view, y.view, *o));
  }
}

// Products of at least 2^18 multiply-adds use kiln's thread count, smaller ones one thread.
TEST_F(CpuMatmul, BlasThreadsFollowKiln) {
  kt::ConfigGuard guard;
  EXPECT_FALSE(kiln::cpu::blas_library().empty());
  for (int threads : {2, 1, 3}) {
    kiln::set_config({.threads = threads});
    EXPECT_TRUE(check(make(Layout::transposed, 1, 70, 80, 2, rng_),
                      make(Layout::row_slice, 1, 80, 90, 1, rng_)));  // 504000 >= 2^18
    // thread_count() is the set count, or 1 when threads are compiled out.
    EXPECT_EQ(kiln::cpu::thread_count(), KILN_WITH_THREADS ? threads : 1);
    EXPECT_EQ(kiln::cpu::blas_threads(), kiln::cpu::thread_count());
    EXPECT_TRUE(check(make(Layout::contiguous, 2, 30, 30, 2, rng_),
                      make(Layout::contiguous, 2, 30, 30, 1, rng_)));
    EXPECT_EQ(kiln::cpu::blas_threads(), 1);
  }
}

TEST_F(CpuMatmul, LargeBroadcastBatch) {
  EXPECT_TRUE(check(make(Layout::broadcast_batch, 3, 130, 257, 2, rng_),
                    make(Layout::transposed, 3, 257, 129, 1, rng_)));
}

TEST_F(CpuMatmul, Errors) {
  Operand a = make(Layout::contiguous, 1, 2, 3, 2, rng_),
          b = make(Layout::contiguous, 1, 3, 4, 1, rng_);
  auto out = kiln::cpu::host_empty({1, 2, 4}, DType::f32);
  TensorImpl ai = a.view;
  ai.dtype = DType::i32;
  try {
    kiln::cpu::matmul(ai, b.view, *out);
    ADD_FAILURE() << "i32 matmul did not throw";
  } catch (const kiln::DTypeError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul: needs operands and output of one floating dtype, got i32 x f32 into f32");
  }
  auto bool_out = kiln::cpu::host_empty({1, 2, 4}, DType::boolean);
  EXPECT_THROW(kiln::cpu::matmul(a.view, b.view, *bool_out), kiln::DTypeError);
  auto wrong = kiln::cpu::host_empty({1, 2, 5}, DType::f32);
  EXPECT_THROW(kiln::cpu::matmul(a.view, b.view, *wrong), kiln::ShapeError);
  EXPECT_THROW(kiln::cpu::matmul(a.view, a.view, *out), kiln::ShapeError);
}

}  // namespace
