// Shared helpers of the front-end tests: the device parameter, fresh seeds, host data, a
// float64 reference array with NumPy view semantics, and comparisons that name every wrong
// element (index, got, expected).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor_impl.hpp"  // shares_buffer: whether a view kept its source's buffer
#include "kiln/kiln.hpp"

namespace kt {

using kiln::Dims;

// Every device that kiln::devices() reports present: the CPU, and CUDA devices where found.
inline std::vector<kiln::Device> test_devices() {
  std::vector<kiln::Device> out;
  for (const auto& info : kiln::devices()) {
    if (!info.present) continue;
    if (info.name == "cpu") {
      out.push_back(kiln::Device::cpu());
    } else if (info.name.rfind("cuda:", 0) == 0) {
      out.push_back(kiln::Device::cuda(std::stoi(info.name.substr(5))));
    }
  }
  return out;
}

// Test name suffix: "cpu", "cuda0".
inline std::string device_param_name(const ::testing::TestParamInfo<kiln::Device>& info) {
  const auto& d = info.param;
  return d.kind() == kiln::Device::Kind::cpu ? "cpu" : "cuda" + std::to_string(d.index());
}

// A fresh seed per test (KILN_TEST_SEED=N reproduces one), shown on every failure.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("KILN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) ^ rd();
}

// Base fixture: GetParam() is the device; seed() and rng() give fresh random state.
class DeviceTest : public ::testing::TestWithParam<kiln::Device> {
 protected:
  void SetUp() override {
    seed_ = fresh_seed();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__,
        "seed " + std::to_string(seed_) + " (KILN_TEST_SEED=" + std::to_string(seed_) +
            " reruns it)");
  }
  void TearDown() override { trace_.reset(); }
  kiln::Device dev() const { return GetParam(); }
  std::uint64_t seed() const { return seed_; }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

#define KILN_INSTANTIATE_DEVICES(suite)                                             \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::ValuesIn(kt::test_devices()), \
                           kt::device_param_name)

// Restores kiln::config() when it goes out of scope.
struct ConfigGuard {
  kiln::Config saved = kiln::config();
  ~ConfigGuard() { kiln::set_config(saved); }
};

// kiln::set_deterministic(true) for one scope; the mode found is restored (on failure too).
struct DeterministicFor {
  bool saved = kiln::deterministic();
  DeterministicFor() { kiln::set_deterministic(true); }
  ~DeterministicFor() { kiln::set_deterministic(saved); }
};

// Whether two tensors use the same buffer (a view, or a clone, of the other).
template <std::size_t D, std::size_t E>
bool shares_buffer(const kiln::Tensor<D>& a, const kiln::Tensor<E>& b) {
  return a.handle()->buffer == b.handle()->buffer;
}

// ---- host data ----

inline std::vector<float> uniform(std::size_t n, double lo, double hi, std::mt19937_64& g) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

inline std::vector<std::int32_t> ints(std::size_t n, int lo, int hi, std::mt19937_64& g) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Finite floats of both signs spread over the whole range (random exponent and mantissa),
// plus the edges: ±0, ±FLT_MIN, subnormals, ±FLT_MAX, and values near multiples of pi/2.
inline std::vector<float> wide_floats(std::size_t n, std::mt19937_64& g) {
  std::uniform_int_distribution<int> e(-149, 127);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::vector<float> v;
  for (std::size_t i = 0; i < n; ++i) {
    float x = static_cast<float>(std::ldexp(m(g), e(g)));
    if (std::isinf(x)) x = std::numeric_limits<float>::max();
    v.push_back(g() & 1 ? -x : x);
  }
  using L = std::numeric_limits<float>;
  for (float x : {0.0f, L::min(), L::denorm_min(), 1e-40f, L::max(), 1.0f, 0.5f, 1.5707964f,
                  3.1415927f, 4.712389f, 100.0f, 88.72f, 89.0f, 1e4f, 39000.0f, 1e6f, 1e30f}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

// ---- float64 reference with NumPy's view semantics ----

inline std::int64_t numel_of(const Dims& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

inline std::string fmt_index(const Dims& idx) { return kiln::format_dims(idx); }

// The multi-index of flat row-major position k in shape s.
inline Dims unflatten(std::int64_t k, const Dims& s) {
  Dims idx(s.size());
  for (std::size_t i = s.size(); i-- > 0;) {
    idx[i] = s[i] == 0 ? 0 : k % s[i];
    k = s[i] == 0 ? 0 : k / s[i];
  }
  return idx;
}

class Ref {
 public:
  Ref(Dims shape, std::vector<double> data)
      : data_(std::make_shared<std::vector<double>>(std::move(data))), shape_(std::move(shape)) {
    strides_.resize(shape_.size());
    std::int64_t step = 1;
    for (std::size_t i = shape_.size(); i-- > 0;) strides_[i] = step, step *= shape_[i];
  }
  template <class T>
  static Ref of(const std::vector<T>& v, Dims shape) {
    return Ref(std::move(shape), std::vector<double>(v.begin(), v.end()));
  }
  static Ref scalar(double x) { return Ref({}, {x}); }

  const Dims& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_of(shape_); }
  double at(const Dims& idx) const {
    std::int64_t off = offset_;
    for (std::size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides_[i];
    return (*data_)[static_cast<std::size_t>(off)];
  }
  double flat(std::int64_t k) const { return at(unflatten(k, shape_)); }
  // The elements in row-major order (an odometer over the strides).
  std::vector<double> values() const {
    std::vector<double> v;
    v.reserve(static_cast<std::size_t>(numel()));
    if (numel() == 0) return v;
    Dims idx(shape_.size(), 0);
    std::int64_t off = offset_;
    for (std::int64_t k = 0; k < numel(); ++k) {
      v.push_back((*data_)[static_cast<std::size_t>(off)]);
      for (std::size_t i = shape_.size(); i-- > 0;) {
        off += strides_[i];
        if (++idx[i] < shape_[i]) break;
        off -= strides_[i] * shape_[i], idx[i] = 0;
      }
    }
    return v;
  }

  // Views, written out independently of kiln's.
  Ref transpose(int a, int b) const {
    Ref r = *this;
    std::swap(r.shape_[a], r.shape_[b]), std::swap(r.strides_[a], r.strides_[b]);
    return r;
  }
  Ref permute(const std::vector<int>& order) const {
    Ref r = *this;
    for (std::size_t i = 0; i < order.size(); ++i)
      r.shape_[i] = shape_[order[i]], r.strides_[i] = strides_[order[i]];
    return r;
  }
  // Python slice semantics: negative indices count from the end, then clamp to [0, size].
  Ref slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const {
    std::int64_t n = shape_[dim];
    auto fix = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
    start = fix(start), stop = fix(stop);
    Ref r = *this;
    r.shape_[dim] = stop > start ? (stop - start + step - 1) / step : 0;
    r.offset_ += start * strides_[dim];
    r.strides_[dim] *= step;
    return r;
  }
  Ref expand(const Dims& to) const {
    Ref r = *this;
    std::size_t lead = to.size() - shape_.size();
    r.shape_ = to;
    r.strides_.assign(to.size(), 0);
    for (std::size_t i = 0; i < shape_.size(); ++i)
      r.strides_[lead + i] = shape_[i] == 1 && to[lead + i] != 1 ? 0 : strides_[i];
    return r;
  }
  Ref unsqueeze(int dim) const {
    Ref r = *this;
    r.shape_.insert(r.shape_.begin() + dim, 1), r.strides_.insert(r.strides_.begin() + dim, 0);
    return r;
  }
  Ref squeeze(int dim) const {
    Ref r = *this;
    r.shape_.erase(r.shape_.begin() + dim), r.strides_.erase(r.strides_.begin() + dim);
    return r;
  }
  Ref reshape(const Dims& to) const { return Ref(to, values()); }

  // Element-wise maps, NumPy broadcasting for two and three operands.
  template <class F>
  Ref map(F f) const {
    auto v = values();
    for (auto& x : v) x = f(x);
    return Ref(shape_, std::move(v));
  }
  static Dims broadcast(Dims a, const Dims& b) {
    if (a.size() < b.size()) a.insert(a.begin(), b.size() - a.size(), 1);
    for (std::size_t i = 0; i < b.size(); ++i) {
      auto& x = a[a.size() - b.size() + i];
      x = x == 1 ? b[i] : x;
    }
    return a;
  }
  template <class F>
  static Ref zip(const Ref& a, const Ref& b, F f) {
    Dims s = broadcast(a.shape_, b.shape_);
    auto va = a.expand(s).values(), v = b.expand(s).values();
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = f(va[k], v[k]);
    return Ref(s, std::move(v));
  }
  template <class F>
  static Ref zip3(const Ref& a, const Ref& b, const Ref& c, F f) {
    Dims s = broadcast(broadcast(a.shape_, b.shape_), c.shape_);
    auto va = a.expand(s).values(), vb = b.expand(s).values(), v = c.expand(s).values();
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = f(va[k], vb[k], v[k]);
    return Ref(s, std::move(v));
  }
  // f(lane) for every lane along dim: the result drops dim, or keeps it as 1.
  template <class F>
  Ref reduce(int dim, bool keepdim, F f) const {
    std::vector<int> order;  // dim last, so that each lane is a run of values()
    for (int i = 0; i < rank(); ++i)
      if (i != dim) order.push_back(i);
    order.push_back(dim);
    const auto all = permute(order).values();
    const auto n = static_cast<std::size_t>(shape_[dim]);
    Dims out = shape_;
    out[dim] = 1;
    std::vector<double> v(static_cast<std::size_t>(numel_of(out)));
    for (std::size_t k = 0; k < v.size(); ++k)
      v[k] = f(std::vector<double>(all.begin() + k * n, all.begin() + (k + 1) * n));
    if (!keepdim) out.erase(out.begin() + dim);
    return Ref(out, std::move(v));
  }

 private:
  std::shared_ptr<const std::vector<double>> data_;
  Dims shape_, strides_;
  std::int64_t offset_ = 0;
};

// ---- comparisons ----

// Every got[i] within tol times the largest |want| plus `slack` of want[i] (a kernel's result
// against a float64 reference, judged on the tensor's scale); a NaN is an element never written
// (outputs start poisoned).
inline void expect_close_to_scale(const char* what, const std::vector<double>& got,
                                  const std::vector<double>& want, double tol, double slack) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " is NaN (not written?)";
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(worst, tol * scale + slack)
      << what << ": largest error " << worst << ", scale " << scale;
}

// Accepted error: within `ulp` float ULPs of the exact value, or `rel` relative, or `abs`.
// Non-finite values must match exactly (NaN for NaN, the same infinity).
struct Tol {
  double ulp = 0, rel = 0, abs = 0;
};
inline constexpr Tol kExact{};
// Transcendental ops: 4 ULP, or 1e-6 relative; below FLT_MIN an absolute FLT_MIN, so that a
// kernel that flushes subnormals passes (docs/accuracy.md).
inline constexpr Tol kMath{4, 1e-6, 1.1754943508222875e-38};

// The spacing of floats at |x| (subnormal spacing below FLT_MIN).
inline double float_ulp(double x) {
  if (x == 0) return std::ldexp(1.0, -149);
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.0, std::max(e - 24, -149));
}

// Whether got is within tol of exact; *ulps gets the error in ULPs.
inline bool close(double got, double exact, Tol tol, double* ulps) {
  *ulps = 0;
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  double rounded = static_cast<float>(exact);
  if (std::isinf(got) || std::isinf(rounded)) return got == rounded;
  double err = std::fabs(got - exact);
  *ulps = err / float_ulp(exact);
  return err == 0 || got == rounded || err <= tol.abs || err <= tol.rel * std::fabs(exact) ||
         *ulps <= tol.ulp;
}

// ---- the half types (bf16, f16) ----

// The spacing of half type t at |x|: 8 significant bits for bf16, 11 for f16 (subnormal
// spacing below the smallest normal, 2^-126 and 2^-14).
inline double half_ulp(double x, kiln::DType t) {
  const int bits = t == kiln::DType::bf16 ? 8 : 11, min_exp = t == kiln::DType::bf16 ? -126 : -14;
  int e = 0;
  std::frexp(x == 0 ? std::ldexp(1.0, min_exp) : x, &e);  // x = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - (bits - 1));
}

// x (converted to float first) rounded to half type t by the host types, which
// tests/core/test_half_conversion.cpp checks over every pattern: what kiln stores for an f32
// value x.
inline double round_to_half(double x, kiln::DType t) {
  const auto f = static_cast<float>(x);
  return t == kiln::DType::bf16 ? static_cast<float>(kiln::bfloat16(f))
                                : static_cast<float>(kiln::float16(f));
}

// The tensor's elements as doubles, read back in its own dtype.
template <std::size_t D>
std::vector<double> host_values(const kiln::Tensor<D>& t) {
  switch (t.dtype()) {
    case kiln::DType::f32:
    case kiln::DType::bf16:  // f32 holds every half value exactly
    case kiln::DType::f16: {
      auto v = t.template to_vector<float>();
      return {v.begin(), v.end()};
    }
    case kiln::DType::i32: {
      auto v = t.template to_vector<std::int32_t>();
      return {v.begin(), v.end()};
    }
    case kiln::DType::boolean: {
      auto v = t.template to_vector<bool>();
      return {v.begin(), v.end()};
    }
  }
  return {};
}

// Every element of t against the reference (same shape); names up to 8 wrong elements.
template <std::size_t D>
::testing::AssertionResult matches(const kiln::Tensor<D>& t, const Ref& ref, Tol tol = kExact) {
  Dims shape(D);
  for (std::size_t i = 0; i < D; ++i) shape[i] = t.shape()[i];
  if (shape != ref.shape()) {
    return ::testing::AssertionFailure() << "shape " << kiln::format_dims(shape) << ", expected "
                                         << kiln::format_dims(ref.shape());
  }
  auto got = host_values(t);
  auto want = ref.values();
  std::ostringstream msg;
  msg << std::setprecision(9);
  std::int64_t bad = 0;
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    double ulps = 0;
    if (close(got[k], want[k], tol, &ulps)) continue;
    worst = std::max(worst, ulps);
    if (++bad <= 8) {
      msg << "\n  at " << fmt_index(unflatten(static_cast<std::int64_t>(k), shape)) << ": got "
          << got[k] << ", expected " << std::setprecision(17) << want[k] << std::setprecision(9)
          << " (" << ulps << " ulp)";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements wrong (" << kiln::dtype_name(t.dtype()) << " "
         << kiln::format_dims(shape) << ", worst " << worst << " ulp; allowed " << tol.ulp
         << " ulp, rel " << tol.rel << ", abs " << tol.abs << "):" << msg.str();
}

// ---- inputs over layouts: every op is run on each of these views ----

// A rank-2 view built from a contiguous tensor of shape `base`, and the same view of the
// reference; every layout but "empty" and "one" gives shape [5, 7].
struct Layout {
  std::string name;
  kiln::Shape<2> base;
  std::function<kiln::Tensor<2>(const kiln::Tensor<2>&)> view;
  std::function<Ref(const Ref&)> ref;
};

inline std::vector<Layout> layouts() {
  using T = kiln::Tensor<2>;
  auto id = [](const auto& x) { return x; };
  return {
      {"contiguous", {5, 7}, id, id},
      {"transposed",
       {7, 5},
       [](const T& x) { return x.transpose(0, 1); },
       [](const Ref& x) { return x.transpose(0, 1); }},
      {"sliced_step2",
       {5, 14},
       [](const T& x) { return x.slice(1, 1, 14, 2); },
       [](const Ref& x) { return x.slice(1, 1, 14, 2); }},
      {"sliced_rows",
       {9, 7},
       [](const T& x) { return x.slice(0, -5, 100); },
       [](const Ref& x) { return x.slice(0, -5, 100); }},
      {"expanded_rows",
       {1, 7},
       [](const T& x) {
         return x.expand(kiln::Shape<2>{5, 7});
       },
       [](const Ref& x) {
         return x.expand({5, 7});
       }},
      {"expanded_cols",
       {5, 1},
       [](const T& x) {
         return x.expand(kiln::Shape<2>{5, 7});
       },
       [](const Ref& x) {
         return x.expand({5, 7});
       }},
      {"slice_of_transpose",
       {16, 5},
       [](const T& x) { return x.transpose(0, 1).slice(1, 2, 16, 2); },
       [](const Ref& x) { return x.transpose(0, 1).slice(1, 2, 16, 2); }},
      {"empty", {0, 3}, id, id},
      {"one", {1, 1}, id, id},
  };
}

struct Input {
  kiln::Tensor<2> t;
  Ref r;
};

// Layout l over host data from gen(n) (a vector of float, int32_t or bool-as-uint8 values).
template <class Gen>
Input make_input(const Layout& l, kiln::Device dev, Gen gen) {
  auto data = gen(static_cast<std::size_t>(l.base[0] * l.base[1]));
  auto base = kiln::Tensor<2>::from_data(data, l.base, dev);
  return {l.view(base), l.ref(Ref::of(data, {l.base[0], l.base[1]}))};
}

}  // namespace kt
