// The backend conformance suite's fixture: every chain a device can have (a backend alone or
// under decorators), built explicitly, and the helpers that lay inputs out in memory the way
// the front end does (views over a buffer: strided, offset, broadcast, empty), poison outputs,
// and read results back through the interface (download, which waits for pending work).
//
// Every test in tests/backend/ is a TEST_P of a ChainTest and is instantiated with
// KILN_INSTANTIATE_CHAINS, over chains() = every backend x every decorator stack in stacks().
// A new decorator (autodiff) is therefore one DecoratorSpec and one entry in stacks(), and gets
// the whole suite by construction. Test names read "Conformance/BackendReduce.Errors/fusion_cpu";
// `--gtest_filter='Conformance*'` runs the suite.
//
// The tests call Backend methods directly, never kiln::Tensor: they check what the interface
// (src/backend/backend.hpp) promises, for every caller, not what the front end happens to send.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "dispatch/registry.hpp"
#include "ir/program.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_FUSION
#include "fusion/fusion_backend.hpp"
#endif
#if KILN_WITH_AUTODIFF
#include "autodiff/autodiff_backend.hpp"
#endif
#if KILN_WITH_CUDA
#include "../require_cuda.hpp"
#include "cuda/cuda_backend.hpp"
#endif

namespace kc {

using kiln::Dims;
using kiln::DType;
using kiln::detail::Backend;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;

// ---- the chains ----

// The innermost layer of a chain: a backend.
struct BackendSpec {
  std::string label;                    // in test names: "cpu", "cuda"
  std::function<std::string()> absent;  // why it cannot run here; empty when it can
  std::function<std::unique_ptr<Backend>()> make;
};

// A decorator, which wraps any backend (decorated or not).
struct DecoratorSpec {
  std::string label;  // in test names, and the prefix of the composed name ("fusion<...>")
  std::function<std::string()> absent;
  std::function<std::unique_ptr<Backend>(Backend& inner)> wrap;
};

inline std::string cuda_absent() {
#if KILN_WITH_CUDA
  return kt::cuda_reason();
#else
  return kiln::detail::cuda_absent_reason(0);  // "kiln was built without the CUDA backend ..."
#endif
}

inline std::vector<BackendSpec> backends() {
  return {
      {"cpu", [] { return std::string(); },
       []() -> std::unique_ptr<Backend> { return std::make_unique<kiln::cpu::CpuBackend>(); }},
      {"cuda", cuda_absent,
       []() -> std::unique_ptr<Backend> {
#if KILN_WITH_CUDA
         return std::make_unique<kiln::cuda::CudaBackend>(0);
#else
         return nullptr;                       // (never called: absent() is not empty)
#endif
       }},
  };
}

// Guarded as the registry guards it (src/dispatch/registry.cpp): without KILN_WITH_FUSION the
// fusion chains still appear, and skip saying why.
inline DecoratorSpec fusion() {
  return {
      "fusion",
      [] { return std::string(KILN_WITH_FUSION ? "" : "kiln was built with -DKILN_FUSION=OFF"); },
      [](Backend& inner) -> std::unique_ptr<Backend> {
#if KILN_WITH_FUSION
        return std::make_unique<kiln::fusion::Fusion>(inner);
#else
        (void)inner;
        return nullptr;
#endif
      }};
}

inline DecoratorSpec autodiff() {
  return {"autodiff",
          [] {
            return std::string(KILN_WITH_AUTODIFF ? "" : "kiln was built with -DKILN_AUTODIFF=OFF");
          },
          [](Backend& inner) -> std::unique_ptr<Backend> {
#if KILN_WITH_AUTODIFF
            return std::make_unique<kiln::autodiff::Autodiff>(inner);
#else
            (void)inner;
            return nullptr;
#endif
          }};
}

// THE list of decorator stacks the suite runs over every backend, innermost first ({} is the
// backend alone). These are the chains the registry composes; a new decorator adds its stacks
// here and every test runs on them.
inline std::vector<std::vector<DecoratorSpec>> stacks() {
  return {{}, {fusion()}, {fusion(), autodiff()}};
}

struct ChainSpec {
  BackendSpec backend;
  std::vector<DecoratorSpec> decorators;  // innermost first

  // "cpu", "fusion_cpu", "autodiff_fusion_cuda": a gtest parameter name.
  std::string label() const {
    std::string s = backend.label;
    for (const auto& d : decorators) s = d.label + "_" + s;
    return s;
  }
  // Why this chain cannot be built here (its backend's reason first), or empty.
  std::string absent() const {
    if (auto why = backend.absent(); !why.empty()) return backend.label + ": " + why;
    for (const auto& d : decorators)
      if (auto why = d.absent(); !why.empty()) return d.label + ": " + why;
    return {};
  }
};
inline void PrintTo(const ChainSpec& c, std::ostream* os) { *os << c.label(); }

inline std::vector<ChainSpec> chains() {
  std::vector<ChainSpec> out;
  for (const auto& b : backends())
    for (const auto& s : stacks()) out.push_back({b, s});
  return out;
}

// One built chain: the backend, then each decorator over the one before.
class Chain {
 public:
  explicit Chain(const ChainSpec& spec) {
    layers_.push_back(spec.backend.make());
    for (const auto& d : spec.decorators) layers_.push_back(d.wrap(*layers_.back()));
  }
  ~Chain() {
    while (!layers_.empty()) layers_.pop_back();  // outermost first: each refers to the next
  }
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;

  Backend& outer() const { return *layers_.back(); }
  Backend& layer(std::size_t i) const { return *layers_.at(i); }  // 0: the backend
  std::size_t depth() const { return layers_.size(); }

 private:
  std::vector<std::unique_ptr<Backend>> layers_;
};

// ---- host values and raw storage ----

// Elements as doubles: f32 values are floats, bf16 and f16 values the floats they hold exactly,
// i32 integers, bool 0 or 1.
using Values = std::vector<double>;

// What every output buffer holds before a call, so that an op that writes nothing (or misses
// elements) is caught: a quiet NaN with a payload no kernel makes, an unlikely i32, and a bool
// byte that is neither 0 nor 1. The half types' poisons are signalling NaNs, which no kernel
// stores (a conversion to a half type quiets a NaN).
inline constexpr std::uint32_t kPoisonF32 = 0x7FE5A5A5u;
inline constexpr std::uint32_t kPoisonI32 = 0x5A5A5A5Au;
inline constexpr std::uint8_t kPoisonBool = 0xA5u;
inline constexpr std::uint16_t kPoisonBf16 = 0x7FA5u;
inline constexpr std::uint16_t kPoisonF16 = 0x7DA5u;

inline std::uint32_t poison_bits(DType t) {
  switch (t) {
    case DType::f32:
      return kPoisonF32;
    case DType::i32:
      return kPoisonI32;
    case DType::bf16:
      return kPoisonBf16;
    case DType::f16:
      return kPoisonF16;
    default:
      return kPoisonBool;
  }
}

// n elements of dtype t as stored (f32, i32: 4 bytes; bf16, f16: 2; bool: 1 byte).
struct Raw {
  DType dtype = DType::f32;
  std::vector<unsigned char> bytes;

  std::int64_t size() const {
    return static_cast<std::int64_t>(bytes.size() / kiln::dtype_size(dtype));
  }
  std::uint32_t bits(std::int64_t i) const {
    const std::size_t size = kiln::dtype_size(dtype);
    std::uint32_t u = 0;  // (little-endian, as every machine kiln runs on)
    std::memcpy(&u, &bytes[static_cast<std::size_t>(i) * size], size);
    return u;
  }
  bool poisoned(std::int64_t i) const { return bits(i) == poison_bits(dtype); }
  double value(std::int64_t i) const {
    const std::uint32_t b = bits(i);
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    if (dtype == DType::bf16)
      return static_cast<float>(kiln::bfloat16::from_bits(static_cast<std::uint16_t>(b)));
    if (dtype == DType::f16)
      return static_cast<float>(kiln::float16::from_bits(static_cast<std::uint16_t>(b)));
    if (dtype == DType::i32) return static_cast<std::int32_t>(b);
    return b;  // bool: a byte, checked to be 0 or 1 by matches()
  }
};

inline Raw encode(const Values& v, DType t) {
  Raw r{t, std::vector<unsigned char>(v.size() * kiln::dtype_size(t))};
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(&r.bytes[i * 4], &f, 4);
    } else if (t == DType::i32) {
      const auto x = static_cast<std::int32_t>(v[i]);
      std::memcpy(&r.bytes[i * 4], &x, 4);
    } else if (kiln::is_half(t)) {  // rounded from f32, as a conversion on the device would
      const auto f = static_cast<float>(v[i]);
      const std::uint16_t b = t == DType::bf16 ? kiln::bfloat16(f).bits : kiln::float16(f).bits;
      std::memcpy(&r.bytes[i * 2], &b, 2);
    } else {
      r.bytes[i] = v[i] != 0;
    }
  }
  return r;
}

inline Raw poison(std::int64_t n, DType t) {
  Raw r{t, std::vector<unsigned char>(static_cast<std::size_t>(n) * kiln::dtype_size(t))};
  const std::uint32_t b = poison_bits(t);
  const std::size_t size = kiln::dtype_size(t);
  for (std::int64_t i = 0; i < n; ++i)
    std::memcpy(&r.bytes[static_cast<std::size_t>(i) * size], &b, size);
  return r;
}

// Random values of dtype t: floats uniform in [lo, hi) (rounded to bf16 or f16 for those),
// integers in [lo, hi], bools 0/1.
inline Values random_values(DType t, std::int64_t n, std::mt19937_64& g, double lo = -4,
                            double hi = 4) {
  Values v(static_cast<std::size_t>(n));
  if (t == DType::f32) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = static_cast<float>(d(g));
  } else if (kiln::is_half(t)) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : v) x = kt::round_to_half(d(g), t);
  } else if (t == DType::i32) {
    std::uniform_int_distribution<std::int64_t> d(static_cast<std::int64_t>(lo),
                                                  static_cast<std::int64_t>(hi));
    for (auto& x : v) x = static_cast<double>(d(g));
  } else {
    for (auto& x : v) x = static_cast<double>(g() & 1);
  }
  return v;
}

// ---- layouts: where a tensor of a given shape sits in its buffer ----

struct Placement {
  Dims strides;             // in elements; 0 on broadcast dims
  std::int64_t offset = 0;  // of element 0 in the buffer
  std::int64_t extent = 0;  // elements in the buffer
};

// How the front end may hand a tensor of shape s to a backend: a view over a buffer. Every
// layout is written out here from first principles (not with kiln's view code), so that the
// reference reads the same elements the backend must read.
struct Layout {
  std::string name;
  std::function<Placement(const Dims&)> place;
  bool writable = true;  // no stride-0 dim: usable as an output (two elements share no memory)
};

namespace detail {

inline std::int64_t numel(const Dims& s) {
  std::int64_t n = 1;
  for (auto e : s) n *= e;
  return n;
}

// Strides of a dense buffer in which dims are laid out from the outermost `order[0]` inwards.
inline Dims dense_strides(const Dims& s, const std::vector<int>& order) {
  Dims st(s.size(), 0);
  std::int64_t step = 1;
  for (std::size_t k = order.size(); k-- > 0;) {
    st[static_cast<std::size_t>(order[k])] = step;
    step *= std::max<std::int64_t>(s[static_cast<std::size_t>(order[k])], 1);
  }
  return st;
}

inline std::vector<int> identity_order(std::size_t rank) {
  std::vector<int> o(rank);
  for (std::size_t i = 0; i < rank; ++i) o[i] = static_cast<int>(i);
  return o;
}

// A placement with room for every element the view addresses, and a tail after it (so that an
// op that reads or writes past the view meets other data, not the end of the allocation).
inline Placement placed(const Dims& s, Dims strides, std::int64_t offset) {
  std::int64_t reach = 0;
  if (numel(s) > 0)
    for (std::size_t d = 0; d < s.size(); ++d) reach += (s[d] - 1) * strides[d];
  return {std::move(strides), offset, offset + reach + 1 + 3};
}

}  // namespace detail

inline Layout contiguous() {
  return {"contiguous", [](const Dims& s) {
            auto st = detail::dense_strides(s, detail::identity_order(s.size()));
            return Placement{st, 0, detail::numel(s)};
          }};
}
// The last two dims swapped (a transposed matrix).
inline Layout transposed() {
  return {"transposed", [](const Dims& s) {
            auto o = detail::identity_order(s.size());
            if (o.size() >= 2) std::swap(o[o.size() - 1], o[o.size() - 2]);
            return Placement{detail::dense_strides(s, o), 0, detail::numel(s)};
          }};
}
// Every dim reversed (a general permutation: no dim has stride 1 but the first), starting
// mid-buffer.
inline Layout permuted() {
  return {"permuted_offset", [](const Dims& s) {
            auto o = detail::identity_order(s.size());
            std::reverse(o.begin(), o.end());
            return detail::placed(s, detail::dense_strides(s, o), 5);
          }};
}
// Dense, starting mid-buffer (a slice of rows).
inline Layout offset() {
  return {"offset", [](const Dims& s) {
            return detail::placed(s, detail::dense_strides(s, detail::identity_order(s.size())),
                                  13);
          }};
}
// Every other element of a wider innermost dim, from element 1 on (x[..., 1::2]).
inline Layout sliced() {
  return {"sliced_step2", [](const Dims& s) {
            Dims wide = s;
            if (!wide.empty()) wide.back() = 2 * wide.back() + 1;
            Dims st = detail::dense_strides(wide, detail::identity_order(s.size()));
            if (!st.empty()) st.back() = 2;
            return detail::placed(s, st, 1);
          }};
}
namespace detail {
inline Layout broadcast_outer_from(std::string name, std::int64_t offset) {
  return {std::move(name),
          [offset](const Dims& s) {
            Dims st = dense_strides(s, identity_order(s.size()));
            if (!st.empty()) st.front() = 0;
            return placed(s, st, offset);
          },
          false};
}
}  // namespace detail
// The outermost dim broadcast (stride 0): a row repeated.
inline Layout broadcast_outer() { return detail::broadcast_outer_from("broadcast_outer", 2); }
// The innermost dim broadcast (stride 0): a column repeated.
inline Layout broadcast_inner() {
  return {"broadcast_inner",
          [](const Dims& s) {
            Dims one = s;
            if (!one.empty()) one.back() = 1;
            Dims st = detail::dense_strides(one, detail::identity_order(s.size()));
            if (!st.empty()) st.back() = 0;
            return detail::placed(s, st, 0);
          },
          false};
}
// The first columns of wider rows (x[..., :n] of 4 more columns), from the buffer's start: with
// a row length that is a multiple of 4, CUDA reads and writes it 4 elements at a time.
inline Layout column_slice() {
  return {"column_slice", [](const Dims& s) {
            Dims wide = s;
            if (!wide.empty()) wide.back() += 4;
            return detail::placed(s, detail::dense_strides(wide, detail::identity_order(s.size())),
                                  0);
          }};
}
// The outermost dim broadcast from the buffer's start (a bias over rows, read 4 elements at a
// time by CUDA when its row length is a multiple of 4).
inline Layout broadcast_outer_aligned() {
  return detail::broadcast_outer_from("broadcast_outer_aligned", 0);
}
// One value everywhere (a scalar expanded: every stride 0).
inline Layout splat() {
  return {"splat", [](const Dims& s) { return detail::placed(s, Dims(s.size(), 0), 1); }, false};
}

// Every input layout.
inline std::vector<Layout> input_layouts() {
  return {contiguous(),
          transposed(),
          permuted(),
          offset(),
          sliced(),
          column_slice(),
          broadcast_outer(),
          broadcast_inner(),
          broadcast_outer_aligned(),
          splat()};
}
// Every layout an output may have (no stride-0 dims).
inline std::vector<Layout> output_layouts() {
  return {contiguous(), transposed(), permuted(), offset(), sliced(), column_slice()};
}

// The buffer positions of a view's elements, in row-major order.
inline std::vector<std::int64_t> positions(const Dims& shape, const Dims& strides,
                                           std::int64_t offset) {
  const std::int64_t n = detail::numel(shape);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  if (n <= 0) return out;
  Dims idx(shape.size(), 0);
  std::int64_t off = offset;
  for (std::int64_t k = 0; k < n; ++k) {
    out.push_back(off);
    for (std::size_t d = shape.size(); d-- > 0;) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

// A tensor of the chain in a buffer of its own, with the host copy of that buffer.
struct Operand {
  Handle buffer;    // the contiguous 1-D tensor that owns the memory
  TensorImpl view;  // what the call sees: shape, strides and offset over buffer's memory
  Values host;      // the buffer's contents as uploaded (NaN where poisoned)

  const Dims& shape() const { return view.shape; }
  std::vector<std::int64_t> where() const {
    return positions(view.shape, view.strides, view.offset);
  }
  // The view's elements in row-major order, from the host copy.
  Values values() const {
    Values v;
    for (auto p : where()) v.push_back(host[static_cast<std::size_t>(p)]);
    return v;
  }
};

// ---- comparisons ----

inline std::string show(const Raw& got, std::int64_t k) {
  std::ostringstream s;
  s << std::setprecision(9);
  if (got.poisoned(k)) return "never written (still the poison)";
  if (got.dtype == DType::boolean && got.bits(k) > 1) {
    s << "byte " << got.bits(k) << ", not a bool";
    return s.str();
  }
  s << got.value(k);
  return s.str();
}

// Whether a half-type result got (of dtype t) is within `ulps` ULPs of t at exact, plus an
// absolute `slack`: |got - exact| <= ulps * half_ulp(exact) + slack. NaN matches only NaN; where
// exact rounds to an infinity, or got is one, they must be equal. With ulps = 0 and no slack, got
// must be exact rounded to t (round to nearest even): the bound of a cast, or of an op whose
// f32 result the test computes exactly.
inline bool half_close(double got, double exact, DType t, double ulps, double slack) {
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  const double rounded = kt::round_to_half(exact, t);
  if (got == rounded) return true;
  if (std::isinf(got) || std::isinf(rounded)) return false;
  return std::fabs(got - exact) <= ulps * kt::half_ulp(exact, t) + slack;
}

// Every element of got (row-major, of `shape`) against want: exactly for i32 and bool, within
// tol for f32 (kt::close: NaN only for NaN), or within slack[k] (an absolute allowance that
// tests with an error bound per element pass, such as matmul's). For bf16 and f16, tol.ulp
// counts ULPs of the half type and the slack adds to it (half_close). Names up to 8 wrong
// elements, and says which were never written.
inline ::testing::AssertionResult matches(const Raw& got, const Dims& shape, const Values& want,
                                          kt::Tol tol = kt::kExact, const Values* slack = nullptr) {
  if (got.size() != static_cast<std::int64_t>(want.size())) {
    return ::testing::AssertionFailure()
           << got.size() << " elements read, " << want.size() << " expected";
  }
  std::ostringstream msg;
  std::int64_t bad = 0, unwritten = 0;
  for (std::int64_t k = 0; k < got.size(); ++k) {
    const double w = want[static_cast<std::size_t>(k)];
    bool ok = false;
    if (got.poisoned(k)) {
      ++unwritten;
    } else if (got.dtype == DType::boolean && got.bits(k) > 1) {
      ok = false;
    } else if (kiln::is_half(got.dtype)) {
      ok = half_close(got.value(k), w, got.dtype, tol.ulp,
                      slack ? (*slack)[static_cast<std::size_t>(k)] : 0.0);
    } else if (got.dtype != DType::f32) {
      ok = got.value(k) == w;
    } else {
      double ulps = 0;
      const double g = got.value(k);
      ok = kt::close(g, w, tol, &ulps) ||
           (slack && std::isfinite(w) && std::fabs(g - w) <= (*slack)[static_cast<std::size_t>(k)]);
    }
    if (ok) continue;
    if (++bad <= 8) {
      msg << "\n  at " << kiln::format_dims(kt::unflatten(k, shape)) << ": got " << show(got, k)
          << ", expected " << std::setprecision(17) << w;
      if (kiln::is_half(got.dtype))
        msg << " (rounds to " << std::setprecision(9) << kt::round_to_half(w, got.dtype) << ")";
      if (slack) msg << " (allowed error " << std::setprecision(3) << (*slack)[k] << ")";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements wrong (" << kiln::dtype_name(got.dtype) << " "
         << kiln::format_dims(shape) << ", " << unwritten << " never written; allowed " << tol.ulp
         << " ulp, rel " << tol.rel << ", abs " << tol.abs << "):" << msg.str();
}

// ---- the fixture ----

class ChainTest : public ::testing::TestWithParam<ChainSpec> {
 protected:
  void SetUp() override {
    if (auto why = GetParam().absent(); !why.empty()) GTEST_SKIP() << why;
    seed_ = kt::fresh_seed();
    rng_.seed(seed_);
    chain_ = std::make_unique<Chain>(GetParam());
    trace_ = std::make_unique<::testing::ScopedTrace>(
        __FILE__, __LINE__,
        "chain " + be().name() + ", seed " + std::to_string(seed_) +
            " (KILN_TEST_SEED=" + std::to_string(seed_) + " reruns it)");
  }
  void TearDown() override {
    trace_.reset();
    chain_.reset();
  }

  Backend& be() const { return chain_->outer(); }
  const Chain& chain() const { return *chain_; }
  std::mt19937_64& rng() { return rng_; }

  // A tensor of shape s and dtype t laid out as l, its whole buffer (inside the view and out)
  // filled from gen(n) (n values) and uploaded.
  Operand input(const Dims& s, DType t, const Layout& l,
                const std::function<Values(std::int64_t)>& gen) {
    const Placement p = l.place(s);
    return placed(s, t, p, gen(p.extent));
  }
  Operand input(const Dims& s, DType t, const Layout& l = contiguous(), double lo = -4,
                double hi = 4) {
    return input(s, t, l, [&](std::int64_t n) { return random_values(t, n, rng_, lo, hi); });
  }
  // An output of shape s laid out as l, its whole buffer poisoned.
  Operand output(const Dims& s, DType t, const Layout& l = contiguous()) {
    const Placement p = l.place(s);
    return placed(s, t, p, Values(static_cast<std::size_t>(p.extent), NAN), true);
  }

  // The contiguous tensor t as stored, read through the chain's download (which waits).
  Raw read(const TensorImpl& t) {
    Raw r{t.dtype, std::vector<unsigned char>(static_cast<std::size_t>(t.numel()) *
                                              kiln::dtype_size(t.dtype))};
    if (r.bytes.empty()) r.bytes.reserve(1);
    be().download(t, r.bytes.data());
    return r;
  }
  // The view's elements in row-major order, from a read of its whole buffer.
  Raw read(const Operand& o) {
    const Raw all = read(*o.buffer);
    Raw r{all.dtype, {}};
    const std::size_t size = kiln::dtype_size(all.dtype);
    for (auto p : o.where()) {
      const auto* b = &all.bytes[static_cast<std::size_t>(p) * size];
      r.bytes.insert(r.bytes.end(), b, b + size);
    }
    return r;
  }
  // Whether every element of o's buffer outside its view still holds the poison.
  ::testing::AssertionResult untouched_outside(const Operand& o) {
    const Raw all = read(*o.buffer);
    std::vector<bool> inside(static_cast<std::size_t>(all.size()), false);
    for (auto p : o.where()) inside[static_cast<std::size_t>(p)] = true;
    for (std::int64_t i = 0; i < all.size(); ++i) {
      if (!inside[static_cast<std::size_t>(i)] && !all.poisoned(i)) {
        return ::testing::AssertionFailure()
               << "buffer element " << i << " outside the view " << kiln::format_dims(o.shape())
               << " (strides " << kiln::format_dims(o.view.strides) << ", offset " << o.view.offset
               << ") was written: " << show(all, i);
      }
    }
    return ::testing::AssertionSuccess();
  }

  // One elementwise() call, with the operand lists written inline.
  void elementwise(const kiln::ir::Program& p, const std::vector<const TensorImpl*>& in,
                   const std::vector<double>& scalars, const std::vector<const TensorImpl*>& out) {
    be().elementwise(p, in, scalars, kiln::detail::Outs(out));
  }

  // Leaves freed blocks of n elements of dtype t, poisoned, in the allocator below the chain,
  // so that a tensor whose memory is bound later (a fusion decorator's pending result) most
  // likely gets poisoned memory too. Best effort: allocators promise nothing about reuse; the
  // random inputs and float64 references catch an unwritten result anyway unless the memory
  // happens to hold the right values.
  void poison_allocator(std::int64_t n, DType t) {
    std::vector<Handle> held;
    for (int i = 0; i < 4; ++i) {
      held.push_back(be().empty({n}, t));
      be().upload(poison(n, t).bytes.data(), kiln::detail::Out(*held.back()));
    }
    be().sync();
  }

 private:
  Operand placed(const Dims& s, DType t, const Placement& p, Values host, bool poisoned = false) {
    Operand o;
    o.buffer = be().empty({p.extent}, t);
    const Raw bytes = poisoned ? poison(p.extent, t) : encode(host, t);
    be().upload(bytes.bytes.data(), kiln::detail::Out(*o.buffer));
    o.view = *o.buffer;
    o.view.shape = s;
    o.view.strides = p.strides;
    o.view.offset = p.offset;
    o.host = std::move(host);
    return o;
  }

  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<Chain> chain_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

inline std::string chain_param_name(const ::testing::TestParamInfo<ChainSpec>& info) {
  return info.param.label();
}

}  // namespace kc

#define KILN_INSTANTIATE_CHAINS(suite)                                            \
  INSTANTIATE_TEST_SUITE_P(Conformance, suite, ::testing::ValuesIn(kc::chains()), \
                           kc::chain_param_name)
