// Element types carried at run time by every tensor (the list: kiln/detail/dtype_list.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kiln/detail/dtype_list.hpp"
#include "kiln/half.hpp"

namespace kiln {

#define KILN_DTYPE_ENUM(id, name, bytes, host, kind, rank, cuda_storage, cuda_value) id,
enum class DType : std::uint8_t { KILN_DTYPES(KILN_DTYPE_ENUM) };
#undef KILN_DTYPE_ENUM

enum class DTypeKind : std::uint8_t { boolean, integral, floating, half };

namespace detail {
struct DTypeInfo {
  const char* name;
  std::size_t bytes;
  DTypeKind kind;
  int rank;
  const char* cuda_storage;
  const char* cuda_value;
};
#define KILN_DTYPE_INFO(id, name, bytes, host, kind, rank, cuda_storage, cuda_value) \
  DTypeInfo{name, bytes, DTypeKind::kind, rank, cuda_storage, cuda_value},
inline constexpr DTypeInfo kDTypes[] = {KILN_DTYPES(KILN_DTYPE_INFO)};
#undef KILN_DTYPE_INFO
inline constexpr int kNumDTypes = static_cast<int>(sizeof kDTypes / sizeof kDTypes[0]);
// What a value outside the enum (a cast integer) reads as: named "?", so that an error message
// about it never reads past the table.
inline constexpr DTypeInfo kNoDType{"?", 0, DTypeKind::boolean, -1, "?", "?"};
constexpr const DTypeInfo& info(DType t) {
  const int i = static_cast<int>(t);
  return i < kNumDTypes ? kDTypes[i] : kNoDType;
}
}  // namespace detail

constexpr std::size_t dtype_size(DType t) { return detail::info(t).bytes; }
constexpr const char* dtype_name(DType t) { return detail::info(t).name; }
constexpr DTypeKind dtype_kind(DType t) { return detail::info(t).kind; }
// f32, bf16 and f16.
constexpr bool is_floating(DType t) {
  return dtype_kind(t) == DTypeKind::floating || dtype_kind(t) == DTypeKind::half;
}
constexpr bool is_half(DType t) { return dtype_kind(t) == DTypeKind::half; }
// The dtype an op computes a value of dtype t in: f32 for the half types, t otherwise.
constexpr DType compute_dtype(DType t) { return is_half(t) ? DType::f32 : t; }

// The C++ type that stores one element of a dtype (bool is one byte, 0 or 1).
template <class T>
constexpr DType dtype_of() {
#define KILN_DTYPE_OF(id, name, bytes, host, kind, rank, cuda_storage, cuda_value) \
  if constexpr (std::is_same_v<T, host>) return DType::id;
  KILN_DTYPES(KILN_DTYPE_OF)
#undef KILN_DTYPE_OF
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, bool> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, float16>,
                "kiln: element type must be float, int32_t, bool, bfloat16 or float16");
  return DType::f32;
}

// Type promotion for binary ops, as PyTorch: bool < i32 < bf16, f16 < f32; bf16 with f16 is f32.
constexpr DType promote(DType a, DType b) {
  const int ra = detail::info(a).rank, rb = detail::info(b).rank;
  if (a != b && ra == rb) return DType::f32;
  return ra > rb ? a : b;
}

}  // namespace kiln
