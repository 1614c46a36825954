// Element types carried at run time by every tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kiln {

enum class DType : std::uint8_t { f32, i32, boolean };

constexpr std::size_t dtype_size(DType t) { return t == DType::boolean ? 1 : 4; }

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::i32:
      return "i32";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

// The C++ type that stores one element of a dtype (bool is one byte, 0 or 1).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::boolean;
  else
    static_assert(!sizeof(T), "kiln: element type must be float, int32_t or bool");
}

// Type promotion for binary ops, as PyTorch: bool < i32 < f32.
constexpr DType promote(DType a, DType b) {
  auto rank = [](DType t) { return t == DType::boolean ? 0 : t == DType::i32 ? 1 : 2; };
  return rank(a) > rank(b) ? a : b;
}

}  // namespace kiln
