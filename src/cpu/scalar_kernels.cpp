// The scalar kernel table: one plain loop per op over the functions of kernel_math.hpp.
//
// It is what runs when kiln is built or run without SIMD, and the reference that the SIMD table
// is tested against. Loops are templated on which operands are splats so that the inner loop
// has no per-element branch and the compiler may still vectorize the simple ones.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernel_math.hpp"
#include "cpu/kernels.hpp"

namespace kiln::cpu {
namespace {

using i32 = std::int32_t;

// Reads lane i of an operand; a splat reads its one value.
template <class T, bool kSplat>
struct Src {
  const T* p;
  T operator[](std::size_t i) const {
    if constexpr (kSplat) {
      return *p;
    } else {
      return p[i];
    }
  }
};

template <class R, class T, class F>
void map1(Lanes a, void* out, std::size_t n, F f) {
  const T* pa = static_cast<const T*>(a.p);
  R* o = static_cast<R*>(out);
  if (a.splat) {
    std::fill_n(o, n, f(*pa));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) o[i] = f(pa[i]);
}

template <class R, class T, bool kSplatA, bool kSplatB, class F>
void map2_loop(Lanes a, Lanes b, R* o, std::size_t n, F f) {
  const Src<T, kSplatA> sa{static_cast<const T*>(a.p)};
  const Src<T, kSplatB> sb{static_cast<const T*>(b.p)};
  for (std::size_t i = 0; i < n; ++i) o[i] = f(sa[i], sb[i]);
}

template <class R, class T, class F>
void map2(Lanes a, Lanes b, void* out, std::size_t n, F f) {
  R* o = static_cast<R*>(out);
  if (a.splat && b.splat) {
    std::fill_n(o, n, f(*static_cast<const T*>(a.p), *static_cast<const T*>(b.p)));
  } else if (a.splat) {
    map2_loop<R, T, true, false>(a, b, o, n, f);
  } else if (b.splat) {
    map2_loop<R, T, false, true>(a, b, o, n, f);
  } else {
    map2_loop<R, T, false, false>(a, b, o, n, f);
  }
}

void cast(DType in, DType out_t, Lanes a, void* out, std::size_t n) {
  if (in == out_t || (in == DType::boolean && out_t == DType::i32)) {
    // Same bits (bool lanes are already the int32 values 0 and 1). memmove: out may be a.
    if (a.splat) {
      map1<i32, i32>(a, out, n, [](i32 x) { return x; });
    } else {
      std::memmove(out, a.p, n * sizeof(i32));
    }
    return;
  }
  switch (in) {
    case DType::f32:
      if (out_t == DType::i32) return map1<i32, float>(a, out, n, math::f32_to_i32);
      return map1<i32, float>(a, out, n, [](float x) { return i32{x != 0.0f}; });
    case DType::i32:
      if (out_t == DType::f32) {
        return map1<float, i32>(a, out, n, [](i32 x) { return static_cast<float>(x); });
      }
      return map1<i32, i32>(a, out, n, [](i32 x) { return i32{x != 0}; });
    case DType::boolean:  // to f32; to i32 was the copy above
      return map1<float, i32>(a, out, n, [](i32 x) { return x != 0 ? 1.0f : 0.0f; });
    case DType::bf16:
    case DType::f16:
      break;
  }
  throw InternalError("cpu kernels: a half type reaches the kernels as f32");
}

void unary(ir::Op op, DType in, DType out_t, Lanes a, void* out, std::size_t n) {
  check_unary(op, in, out_t);
  if (n == 0) return;  // a and out may then be null
  using ir::Op;
  if (op == Op::cast) return cast(in, out_t, a, out, n);
  if (in == DType::i32) {
    switch (op) {
      case Op::neg:
        return map1<i32, i32>(a, out, n, [](i32 x) { return math::neg(x); });
      case Op::abs:
        return map1<i32, i32>(a, out, n, [](i32 x) { return math::abs(x); });
      default:
        return map1<i32, i32>(a, out, n, [](i32 x) { return math::relu(x); });
    }
  }
  switch (op) {
    case Op::neg:
      return map1<float, float>(a, out, n, [](float x) { return -x; });
    case Op::abs:
      return map1<float, float>(a, out, n, [](float x) { return std::fabs(x); });
    case Op::relu:
      return map1<float, float>(a, out, n, [](float x) { return math::relu(x); });
    case Op::sin:
      return map1<float, float>(a, out, n, math::sin);
    case Op::cos:
      return map1<float, float>(a, out, n, math::cos);
    case Op::tan:
      return map1<float, float>(a, out, n, math::tan);
    case Op::exp:
      return map1<float, float>(a, out, n, math::exp);
    case Op::log:
      return map1<float, float>(a, out, n, math::log);
    case Op::sqrt:
      return map1<float, float>(a, out, n, [](float x) { return std::sqrt(x); });
    case Op::rsqrt:
      return map1<float, float>(a, out, n, math::rsqrt);
    case Op::tanh:
      return map1<float, float>(a, out, n, math::tanh);
    case Op::sigmoid:
      return map1<float, float>(a, out, n, math::sigmoid);
    case Op::gelu:
      return map1<float, float>(a, out, n, math::gelu);
    case Op::silu:
      return map1<float, float>(a, out, n, math::silu);
    case Op::erf:
      return map1<float, float>(a, out, n, math::erf);
      KILN_IR_NOT_UNARY_CASES
      break;
  }
  throw InternalError(std::string("unary kernel: ") + ir::op_name(op) + " is not a unary op");
}

// The six comparisons, writing int32 0/1. Works for f32 (IEEE: NaN compares unequal to
// everything, so only ne is true) and for i32/bool lanes.
template <class T>
void compare(ir::Op op, Lanes a, Lanes b, void* out, std::size_t n) {
  using ir::Op;
  switch (op) {
    case Op::eq:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x == y}; });
    case Op::ne:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x != y}; });
    case Op::lt:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x < y}; });
    case Op::le:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x <= y}; });
    case Op::gt:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x > y}; });
    default:
      return map2<i32, T>(a, b, out, n, [](T x, T y) { return i32{x >= y}; });
  }
}

void binary(ir::Op op, DType in, Lanes a, Lanes b, void* out, std::size_t n) {
  check_binary(op, in);
  if (n == 0) return;
  using ir::Op;
  if (kernel_is_comparison(op)) {
    if (in == DType::f32) return compare<float>(op, a, b, out, n);
    return compare<i32>(op, a, b, out, n);
  }
  if (in == DType::i32) {
    switch (op) {
      case Op::add:
        return map2<i32, i32>(a, b, out, n, math::add);
      case Op::sub:
        return map2<i32, i32>(a, b, out, n, math::sub);
      case Op::mul:
        return map2<i32, i32>(a, b, out, n, math::mul);
      case Op::minimum:
        return map2<i32, i32>(a, b, out, n, [](i32 x, i32 y) { return std::min(x, y); });
      default:
        return map2<i32, i32>(a, b, out, n, [](i32 x, i32 y) { return std::max(x, y); });
    }
  }
  switch (op) {
    case Op::add:
      return map2<float, float>(a, b, out, n, [](float x, float y) { return x + y; });
    case Op::sub:
      return map2<float, float>(a, b, out, n, [](float x, float y) { return x - y; });
    case Op::mul:
      return map2<float, float>(a, b, out, n, [](float x, float y) { return x * y; });
    case Op::div:
      return map2<float, float>(a, b, out, n, [](float x, float y) { return x / y; });
    case Op::pow:
      return map2<float, float>(a, b, out, n, math::pow);
    case Op::minimum:
      return map2<float, float>(a, b, out, n, math::minimum);
    default:
      return map2<float, float>(a, b, out, n, math::maximum);
  }
}

template <bool kSplatC, bool kSplatA, bool kSplatB>
void where_loop(Lanes cond, Lanes a, Lanes b, i32* o, std::size_t n) {
  const Src<i32, kSplatC> sc{static_cast<const i32*>(cond.p)};
  const Src<i32, kSplatA> sa{static_cast<const i32*>(a.p)};
  const Src<i32, kSplatB> sb{static_cast<const i32*>(b.p)};
  for (std::size_t i = 0; i < n; ++i) o[i] = sc[i] != 0 ? sa[i] : sb[i];
}

// All three dtypes are 32-bit lanes, so where moves int32 bit patterns whatever t is.
void where(DType t, Lanes cond, Lanes a, Lanes b, void* out, std::size_t n) {
  check_where(t);
  if (n == 0) return;
  i32* o = static_cast<i32*>(out);
  if (cond.splat) {
    const Lanes& chosen = *static_cast<const i32*>(cond.p) != 0 ? a : b;
    return cast(DType::i32, DType::i32, chosen, out, n);  // a copy or a fill
  }
  if (a.splat && b.splat) return where_loop<false, true, true>(cond, a, b, o, n);
  if (a.splat) return where_loop<false, true, false>(cond, a, b, o, n);
  if (b.splat) return where_loop<false, false, true>(cond, a, b, o, n);
  where_loop<false, false, false>(cond, a, b, o, n);
}

void half_to_f32(DType t, const std::uint16_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = t == DType::bf16 ? kiln::detail::bf16_bits_to_float(in[i])
                              : kiln::detail::f16_bits_to_float(in[i]);
}

void f32_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = t == DType::bf16 ? kiln::detail::float_to_bf16_bits(in[i])
                              : kiln::detail::float_to_f16_bits(in[i]);
}

void half_row_sum(DType t, const std::uint16_t* x, const std::uint16_t* const* terms,
                  std::size_t count, std::uint16_t* out, std::size_t n) {
  const bool bf16 = t == DType::bf16;
  auto widen = [bf16](std::uint16_t h) {
    return bf16 ? kiln::detail::bf16_bits_to_float(h) : kiln::detail::f16_bits_to_float(h);
  };
  for (std::size_t i = 0; i < n; ++i) {
    float acc = widen(x[i]);
    for (std::size_t q = 0; q < count; ++q) acc += widen(terms[q][i]);
    out[i] = bf16 ? kiln::detail::float_to_bf16_bits(acc) : kiln::detail::float_to_f16_bits(acc);
  }
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{[] { return "scalar"; }, unary, binary, where, half_to_f32,
                                 f32_to_half, half_row_sum,
                                 // Short rows: reduce.cpp's own loop reduces every row.
                                 [](kiln::detail::Reduction, const float*, std::int64_t, int,
                                    void*) -> std::int64_t { return 0; },
                                 // Column sums: reduce.cpp's column loop.
                                 [](DType, const void*, std::int64_t, std::int64_t, std::int64_t,
                                    bool, double*) { return false; }};
  return table;
}

}  // namespace kiln::cpu
