// kiln::Tensor<D>: an immutable n-dimensional array of static rank D on a device.
//
// Copies are cheap and share the buffer (tensors are values: no op writes into a tensor you
// hold). Views (transpose, permute, slice, expand, unsqueeze, squeeze, and reshape of a
// contiguous tensor) share it too. Ops are queued on the tensor's device; reading data
// (to_vector, item) waits for them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/detail/ops.hpp"
#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/shape.hpp"

namespace kiln {

// Tag for reductions that keep the reduced dim as size 1: x.sum(1, kiln::keepdim).
struct KeepDim {};
inline constexpr KeepDim keepdim{};

template <class S>
concept ScalarValue = std::is_arithmetic_v<S>;

namespace detail {
template <ScalarValue S>
Scalar scalar(S s) {
  return Scalar{static_cast<double>(s), std::is_integral_v<S>};
}
template <std::size_t D>
Dims to_dims(const Shape<D>& s) {
  return Dims(s.begin(), s.end());
}
// Throws ShapeError unless h has rank `rank` (the static rank of the Tensor it becomes).
Handle check_rank(Handle h, std::size_t rank);
}  // namespace detail

template <std::size_t D>
class Tensor {
 public:
  static constexpr std::size_t rank = D;

  // Wraps a dynamic-rank handle; throws ShapeError if its rank is not D.
  explicit Tensor(detail::Handle h) : h_(detail::check_rank(std::move(h), D)) {}

  // Creation.
  static Tensor zeros(const Shape<D>& shape, DType dtype = DType::f32,
                      Device device = Device::cpu()) {
    return full(shape, 0, dtype, device);
  }
  static Tensor ones(const Shape<D>& shape, DType dtype = DType::f32,
                     Device device = Device::cpu()) {
    return full(shape, 1, dtype, device);
  }
  template <ScalarValue S>
  static Tensor full(const Shape<D>& shape, S value, DType dtype = DType::f32,
                     Device device = Device::cpu()) {
    return Tensor(detail::full(detail::to_dims(shape), detail::scalar(value), dtype, device));
  }
  // From host data in row-major order; data.size() must equal the shape's element count.
  template <class T>
  static Tensor from_data(std::span<const T> data, const Shape<D>& shape,
                          Device device = Device::cpu()) {
    return Tensor(
        detail::from_data(data.data(), data.size(), dtype_of<T>(), detail::to_dims(shape), device));
  }
  template <class T>
  static Tensor from_data(const std::vector<T>& data, const Shape<D>& shape,
                          Device device = Device::cpu()) {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes(data.begin(), data.end());
      return Tensor(detail::from_data(bytes.data(), bytes.size(), DType::boolean,
                                      detail::to_dims(shape), device));
    } else {
      return from_data(std::span<const T>(data), shape, device);
    }
  }
  // Philox 4x32-10 values: the same seed gives the same numbers on every device and thread count.
  static Tensor random(const Shape<D>& shape, Distribution dist, Device device = Device::cpu(),
                       std::uint64_t seed = 0) {
    return Tensor(detail::random(detail::to_dims(shape), dist, device, seed));
  }

  // Queries.
  Shape<D> shape() const {
    Shape<D> s{};
    std::copy_n(detail::shape(h_).begin(), D, s.begin());
    return s;
  }
  std::int64_t size(int dim) const {
    return detail::shape(h_)[detail::normalize_dim("size", dim, D)];
  }
  std::int64_t numel() const { return detail::numel(h_); }
  DType dtype() const { return detail::dtype(h_); }
  Device device() const { return detail::device(h_); }
  bool is_contiguous() const { return detail::is_contiguous(h_); }
  const detail::Handle& handle() const { return h_; }

  // Read-back, converting to T (float, int32_t or bool); waits for the device.
  // OutOfMemoryError when host memory cannot hold the result.
  template <class T = float>
  std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes = host_vector<std::uint8_t>();
      detail::read(h_, bytes.data(), DType::boolean);
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out = host_vector<T>();
      detail::read(h_, out.data(), dtype_of<T>());
      return out;
    }
  }
  // The single element of a one-element tensor; throws ShapeError otherwise.
  template <class T = float>
  T item() const {
    if (numel() != 1)
      throw ShapeError("item: tensor has " + std::to_string(numel()) + " elements, not 1");
    return to_vector<T>()[0];
  }

  // A copy that shares the buffer: as cheap as copying the handle (tensors are immutable).
  Tensor clone() const { return *this; }
  Tensor to(Device device) const { return Tensor(detail::to_device(h_, device)); }
  Tensor to(DType dtype) const { return Tensor(detail::cast(h_, dtype)); }
  // A row-major dense copy, or this tensor if it already is one.
  Tensor contiguous() const { return Tensor(detail::contiguous(h_)); }

  // Element-wise unary ops (float ops promote i32 and bool to f32).
  Tensor neg() const { return un(detail::Unary::neg); }
  Tensor operator-() const { return neg(); }
  Tensor abs() const { return un(detail::Unary::abs); }
  Tensor sin() const { return un(detail::Unary::sin); }
  Tensor cos() const { return un(detail::Unary::cos); }
  Tensor tan() const { return un(detail::Unary::tan); }
  Tensor exp() const { return un(detail::Unary::exp); }
  Tensor log() const { return un(detail::Unary::log); }
  Tensor sqrt() const { return un(detail::Unary::sqrt); }
  Tensor rsqrt() const { return un(detail::Unary::rsqrt); }
  Tensor tanh() const { return un(detail::Unary::tanh); }
  Tensor sigmoid() const { return un(detail::Unary::sigmoid); }
  Tensor relu() const { return un(detail::Unary::relu); }
  Tensor gelu() const { return un(detail::Unary::gelu); }
  Tensor pow(double exponent) const { return Tensor(detail::pow(h_, exponent)); }
  template <ScalarValue L, ScalarValue H>
  Tensor clamp(L lo, H hi) const {
    return Tensor(detail::clamp(h_, detail::scalar(lo), detail::scalar(hi)));
  }

  // Reductions: over all elements (rank 0), over one dim (rank D-1), or keeping it (rank D).
  Tensor<0> sum() const { return all(detail::Reduction::sum); }
  Tensor<0> mean() const { return all(detail::Reduction::mean); }
  Tensor<0> max() const { return all(detail::Reduction::max); }
  Tensor<0> min() const { return all(detail::Reduction::min); }
  Tensor<0> argmax() const { return all(detail::Reduction::argmax); }
  Tensor<0> argmin() const { return all(detail::Reduction::argmin); }
  auto sum(int dim) const { return red(detail::Reduction::sum, dim); }
  auto mean(int dim) const { return red(detail::Reduction::mean, dim); }
  auto max(int dim) const { return red(detail::Reduction::max, dim); }
  auto min(int dim) const { return red(detail::Reduction::min, dim); }
  auto argmax(int dim) const { return red(detail::Reduction::argmax, dim); }
  auto argmin(int dim) const { return red(detail::Reduction::argmin, dim); }
  Tensor sum(int dim, KeepDim) const { return red_keep(detail::Reduction::sum, dim); }
  Tensor mean(int dim, KeepDim) const { return red_keep(detail::Reduction::mean, dim); }
  Tensor max(int dim, KeepDim) const { return red_keep(detail::Reduction::max, dim); }
  Tensor min(int dim, KeepDim) const { return red_keep(detail::Reduction::min, dim); }
  Tensor argmax(int dim, KeepDim) const { return red_keep(detail::Reduction::argmax, dim); }
  Tensor argmin(int dim, KeepDim) const { return red_keep(detail::Reduction::argmin, dim); }
  Tensor softmax(int dim) const { return Tensor(detail::softmax(h_, norm("softmax", dim), false)); }
  Tensor log_softmax(int dim) const {
    return Tensor(detail::softmax(h_, norm("log_softmax", dim), true));
  }

  // Shape ops. Negative dims count from the end.
  template <std::size_t E>
  Tensor<E> reshape(const Shape<E>& shape) const {
    return Tensor<E>(detail::reshape(h_, detail::to_dims(shape)));
  }
  Tensor transpose(int d0, int d1) const {
    return Tensor(detail::transpose(h_, norm("transpose", d0), norm("transpose", d1)));
  }
  Tensor permute(const std::array<int, D>& order) const {
    return Tensor(detail::permute(h_, order));
  }
  Tensor slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const {
    return Tensor(detail::slice(h_, norm("slice", dim), start, stop, step));
  }
  Tensor<D + 1> unsqueeze(int dim) const {
    return Tensor<D + 1>(detail::unsqueeze(h_, detail::normalize_dim("unsqueeze", dim, D + 1)));
  }
  Tensor<D - 1> squeeze(int dim) const requires(D > 0) {
    return Tensor<D - 1>(detail::squeeze(h_, norm("squeeze", dim)));
  }
  template <std::size_t E>
  Tensor<E> expand(const Shape<E>& shape) const requires(E >= D) {
    return Tensor<E>(detail::expand(h_, detail::to_dims(shape)));
  }

 private:
  // numel() elements of host memory for a read-back, or a clear error instead of bad_alloc.
  template <class T>
  std::vector<T> host_vector() const {
    const auto n = static_cast<std::size_t>(numel());
    try {
      return std::vector<T>(n);
    } catch (const std::exception&) {  // std::bad_alloc, or std::length_error past max_size()
      throw OutOfMemoryError("to_vector: cannot allocate " + std::to_string(n) + " x " +
                             std::to_string(sizeof(T)) + " bytes of host memory for a tensor of " +
                             std::to_string(numel()) + " elements");
    }
  }
  Tensor un(detail::Unary op) const { return Tensor(detail::unary(op, h_)); }
  Tensor<0> all(detail::Reduction op) const { return Tensor<0>(detail::reduce_all(op, h_)); }
  auto red(detail::Reduction op, int dim) const requires(D > 0) {
    return Tensor<D - 1>(detail::reduce(op, h_, norm(name(op), dim), false));
  }
  Tensor red_keep(detail::Reduction op, int dim) const {
    return Tensor(detail::reduce(op, h_, norm(name(op), dim), true));
  }
  static const char* name(detail::Reduction op) {
    constexpr const char* names[] = {"sum", "mean", "max", "min", "argmax", "argmin"};
    return names[static_cast<int>(op)];
  }
  static int norm(const char* op, int dim) { return detail::normalize_dim(op, dim, D); }

  detail::Handle h_;
};

// 1-D ranges, as NumPy's arange: start, start + step, ... below stop (above it for step < 0).
inline Tensor<1> arange(double start, double stop, double step = 1.0, DType dtype = DType::f32,
                        Device device = Device::cpu()) {
  return Tensor<1>(detail::arange(start, stop, step, dtype, device));
}

// Binary ops broadcast as NumPy; the result has the larger rank.
#define KILN_BINARY(fn, op)                                                                    \
  template <std::size_t D, std::size_t E>                                                      \
  Tensor<std::max(D, E)> fn(const Tensor<D>& a, const Tensor<E>& b) {                          \
    return Tensor<std::max(D, E)>(detail::binary(detail::Binary::op, a.handle(), b.handle())); \
  }                                                                                            \
  template <std::size_t D, ScalarValue S>                                                      \
  Tensor<D> fn(const Tensor<D>& a, S b) {                                                      \
    return Tensor<D>(detail::binary(detail::Binary::op, a.handle(), detail::scalar(b)));       \
  }                                                                                            \
  template <std::size_t D, ScalarValue S>                                                      \
  Tensor<D> fn(S a, const Tensor<D>& b) {                                                      \
    return Tensor<D>(detail::binary(detail::Binary::op, detail::scalar(a), b.handle()));       \
  }
KILN_BINARY(operator+, add)
KILN_BINARY(operator-, sub)
KILN_BINARY(operator*, mul)
KILN_BINARY(operator/, div)
KILN_BINARY(minimum, minimum)
KILN_BINARY(maximum, maximum)
// Comparisons give bool tensors.
KILN_BINARY(operator==, eq)
KILN_BINARY(operator!=, ne)
KILN_BINARY(operator<, lt)
KILN_BINARY(operator<=, le)
KILN_BINARY(operator>, gt)
KILN_BINARY(operator>=, ge)
#undef KILN_BINARY

// cond ? a : b element-wise, broadcasting all three; cond must be bool.
template <std::size_t C, std::size_t D, std::size_t E>
Tensor<std::max({C, D, E})> where(const Tensor<C>& cond, const Tensor<D>& a, const Tensor<E>& b) {
  return Tensor<std::max({C, D, E})>(detail::where(cond.handle(), a.handle(), b.handle()));
}

// Matrix product: rank 2 x rank 2, or batched rank 3 (a rank-2 side or a batch of 1 broadcasts).
template <std::size_t D, std::size_t E>
requires((D == 2 || D == 3) &&
         (E == 2 || E == 3)) Tensor<std::max(D, E)> matmul(const Tensor<D>& a, const Tensor<E>& b) {
  return Tensor<std::max(D, E)>(detail::matmul(a.handle(), b.handle()));
}

// Concatenation along dim; every other extent must agree.
template <std::size_t D>
Tensor<D> cat(const std::vector<Tensor<D>>& xs, int dim) {
  std::vector<detail::Handle> hs;
  hs.reserve(xs.size());
  for (const auto& x : xs) hs.push_back(x.handle());
  return Tensor<D>(detail::cat(hs, detail::normalize_dim("cat", dim, D)));
}

}  // namespace kiln
