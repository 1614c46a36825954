// The arguments of one kernel launch, packed in one place for every generated kernel
// (element-wise, reductions and their combine pass, random).
//
// cudaLaunchKernel takes an array of pointers, one per kernel parameter, each at the bytes of
// that parameter's value. KernelArgs copies each value into storage of its own and hands out that
// array, so a caller neither keeps a local per argument alive nor takes a pointer into a vector
// that may still grow. The parameter lists themselves are the generators' (ir/cuda_codegen.cpp,
// reduce_source.hpp, kernels/random.cuh); a caller adds values in that order.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "kiln/dtype.hpp"

namespace kiln::cuda {

class KernelArgs {
 public:
  // Drops every argument; keeps the storage, so that a thread's launches allocate nothing once
  // it has grown.
  void clear();

  // A value passed by value (a pointer, an integer, a float, a double). Returns its index.
  template <class T>
  std::size_t value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
    const std::size_t i = start(1);
    std::memcpy(&words_[starts_[i]], &v, sizeof v);
    return i;
  }

  // A device address; a slot whose address is known only later (set_pointer) takes nullptr.
  std::size_t pointer(const void* p) { return value(p); }
  void set_pointer(std::size_t index, const void* p);

  // The scalar parameters of an IR program, as the generated kernels declare them
  // (ir::cuda_scalar_type): f32, bf16 and f16 as float, i32 and bool as int (a bool is 0 or 1).
  void scalars(std::span<const DType> types, std::span<const double> values);

  // A struct of int64 values passed by value (a kernel's geometry: extents, strides, sizes).
  void int64_struct(std::span<const long long> fields);

  std::size_t size() const { return starts_.size(); }

  // The pointer array for cudaLaunchKernel, valid until the next change.
  void** pointers();

 private:
  // Appends an argument of `words` zeroed 8-byte words (8-byte aligned, as every parameter type
  // here needs) and returns its index.
  std::size_t start(std::size_t words);

  std::vector<std::uint64_t> words_;  // every argument's bytes
  std::vector<std::size_t> starts_;   // each argument's first word
  std::vector<void*> pointers_;
};

}  // namespace kiln::cuda
