// kiln::Tensor<D>: an immutable n-dimensional array of static rank D on a device.
//
// Copies are cheap and share the buffer (tensors are values: no op writes into a tensor you
// hold). Views (transpose, permute, slice, expand, unsqueeze, squeeze, and reshape of a
// contiguous tensor) share it too. Ops are queued on the tensor's device; reading data
// (to_vector, item) waits for them. docs/ops.md lists every op.
//
// `x += y` rebinds x to the new tensor x + y: the old tensor is untouched, so other copies of x
// (and views of it) keep the old values, unlike PyTorch's in-place ops, which write into the
// storage they share. A default-constructed Tensor is an empty placeholder to assign later; any
// use of it before then throws ValueError ("used before it was assigned").
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <optional>
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
// The error of a placeholder Tensor<rank> given to `op` before it was assigned.
[[noreturn]] inline void unassigned(const char* op, std::size_t rank) {
  throw ValueError(std::string(op) + ": a Tensor<" + std::to_string(rank) +
                   "> used before it was assigned (it was default-constructed or moved from, and "
                   "holds no tensor)");
}
// The data of a braced list as from_data takes it: bool as bytes, double literals as f32 (as
// torch.tensor([1.0, 2.0]) is float32), float and int32_t as they are.
template <class T>
auto list_data(std::initializer_list<T> data) {
  if constexpr (std::is_same_v<T, bool>)
    return std::vector<std::uint8_t>(data.begin(), data.end());
  else if constexpr (std::is_same_v<T, double>)
    return std::vector<float>(data.begin(), data.end());
  else
    return std::span<const T>(data.begin(), data.size());
}
template <class T>
constexpr DType list_dtype() {
  if constexpr (std::is_same_v<T, double>)
    return DType::f32;
  else
    return dtype_of<T>();
}
}  // namespace detail

template <std::size_t D>
struct ValuesIndices;

template <std::size_t D>
class Tensor {
 public:
  static constexpr std::size_t rank = D;

  // An empty placeholder (`Tensor<2> t; if (c) t = a; else t = b;`): every use of it before it
  // is assigned throws ValueError naming the op. Copying and assigning it are fine.
  Tensor() = default;
  // Wraps a dynamic-rank handle; throws ShapeError if its rank is not D.
  explicit Tensor(detail::Handle h) : h_(detail::check_rank(std::move(h), D)) {}

  // False for a placeholder that was never assigned (or a tensor moved from).
  bool defined() const { return h_ != nullptr; }

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
  // From a braced list: Tensor<1>::from_data({1.f, 2.f}, {2}). double literals give f32.
  template <class T>
  static Tensor from_data(std::initializer_list<T> data, const Shape<D>& shape,
                          Device device = Device::cpu()) {
    const auto values = detail::list_data(data);
    return Tensor(detail::from_data(values.data(), values.size(), detail::list_dtype<T>(),
                                    detail::to_dims(shape), device));
  }
  // Philox 4x32-10 values: the same seed gives the same numbers on every device and thread count.
  // A half dtype draws the f32 values and rounds each (as PyTorch's randn in bf16 does).
  static Tensor random(const Shape<D>& shape, Distribution dist, Device device = Device::cpu(),
                       std::uint64_t seed = 0, DType dtype = DType::f32) {
    return Tensor(detail::random(detail::to_dims(shape), dist, device, seed, dtype));
  }

  // Queries.
  Shape<D> shape() const {
    Shape<D> s{};
    std::copy_n(detail::shape(h("shape")).begin(), D, s.begin());
    return s;
  }
  std::int64_t size(int dim) const {
    return detail::shape(h("size"))[detail::normalize_dim("size", dim, D)];
  }
  std::int64_t numel() const { return detail::numel(h("numel")); }
  DType dtype() const { return detail::dtype(h("dtype")); }
  Device device() const { return detail::device(h("device")); }
  bool is_contiguous() const { return detail::is_contiguous(h("is_contiguous")); }
  // The dynamic-rank handle (for kiln's free functions, which name themselves as `op` in the
  // error a placeholder gives).
  const detail::Handle& handle(const char* op = "handle") const { return h(op); }

  // Read-back, converting to T (float, int32_t or bool); waits for the device.
  // OutOfMemoryError when host memory cannot hold the result.
  template <class T = float>
  std::vector<T> to_vector() const {
    const detail::Handle& t = h("to_vector");
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes = host_vector<std::uint8_t>();
      detail::read(t, bytes.data(), DType::boolean);
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out = host_vector<T>();
      detail::read(t, out.data(), dtype_of<T>());
      return out;
    }
  }
  // The single element of a one-element tensor; throws ShapeError otherwise.
  template <class T = float>
  T item() const {
    if (detail::numel(h("item")) != 1)
      throw ShapeError("item: tensor has " + std::to_string(numel()) + " elements, not 1");
    return to_vector<T>()[0];
  }

  // A copy that shares the buffer: as cheap as copying the handle (tensors are immutable).
  Tensor clone() const { return Tensor(h("clone")); }
  Tensor to(Device device) const { return Tensor(detail::to_device(h("to"), device)); }
  Tensor to(DType dtype) const { return Tensor(detail::cast(h("to"), dtype)); }
  // A row-major dense copy, or this tensor if it already is one.
  Tensor contiguous() const { return Tensor(detail::contiguous(h("contiguous"))); }

  // Autodiff (docs/autodiff.md). requires_grad(true) marks a leaf (a tensor no recorded op made)
  // of a floating dtype as needing a gradient: ops on it are recorded, and backward() adds the
  // gradient to grad(). The mark belongs to the tensor's memory, so copies and views of it share
  // it (and their gradients land in one grad). Returns this tensor.
  Tensor requires_grad(bool on) const {
    detail::set_requires_grad(h("requires_grad"), on);
    return *this;
  }
  bool requires_grad() const { return detail::requires_grad(h("requires_grad")); }
  // The gradient backward() accumulated into this leaf (none before the first backward, after
  // zero_grad(), and for a tensor that is not a leaf).
  std::optional<Tensor> grad() const {
    detail::Handle g = detail::grad(h("grad"));
    if (!g) return std::nullopt;
    return Tensor(std::move(g));
  }
  void zero_grad() const { detail::zero_grad(h("zero_grad")); }
  // Replaces this leaf's gradient by g, as PyTorch's `t.grad = g` (data-parallel training sets
  // each parameter's gradient to its all-reduced value). This tensor must be a leaf that needs
  // a gradient (ValueError otherwise), g of its shape (ShapeError), dtype (DTypeError) and
  // device (DeviceError). A g laid out as this tensor is kept as it is, not copied (a slice of a
  // bigger tensor too); a g that needs a gradient itself is detached first. Set through a view of
  // part of a leaf, it replaces that part's gradient only. Later backward passes add to it; no
  // hook runs.
  void set_grad(const Tensor& g) const { detail::set_grad(h("set_grad"), g.h("set_grad")); }
  // Gradients of this one-element tensor (or, with grad_output, of the sum of this tensor times
  // grad_output) with respect to every leaf behind it. retain_graph keeps what the recorded ops
  // saved, so that backward can run through them again.
  void backward(bool retain_graph = false) const {
    detail::backward(h("backward"), nullptr, retain_graph);
  }
  void backward(const Tensor& grad_output, bool retain_graph = false) const {
    detail::backward(h("backward"), grad_output.h("backward"), retain_graph);
  }
  // Runs hook(gradient) each time a backward pass has finished adding to this leaf's gradient,
  // while the rest of that backward goes on (data-parallel training all-reduces from here).
  // The leaf must need a gradient (ValueError otherwise).
  void on_grad_final(std::function<void(const Tensor&)> hook) const {
    detail::on_grad_final(h("on_grad_final"),
                          [hook = std::move(hook)](const detail::Handle& g) { hook(Tensor(g)); });
  }
  // The same values, needing no gradient: a copy (kiln's tensors are values, and the mark
  // belongs to memory).
  Tensor detach() const { return Tensor(detail::detach(h("detach"))); }

  // Element-wise unary ops (float ops promote i32 and bool to f32).
  // One method per unary op of kiln/detail/op_list.hpp: neg, abs, relu, sin, cos, tan, exp, log,
  // sqrt, rsqrt, tanh, sigmoid, gelu (exact, x * Phi(x)). -x is neg().
#define KILN_UNARY_METHOD(name, rule) \
  Tensor name() const { return un(detail::Unary::name, #name); }
  KILN_UNARY_OPS(KILN_UNARY_METHOD)
#undef KILN_UNARY_METHOD
  Tensor operator-() const { return neg(); }
  Tensor pow(double exponent) const { return Tensor(detail::pow(h("pow"), exponent)); }
  template <ScalarValue L, ScalarValue H>
  Tensor clamp(L lo, H hi) const {
    return Tensor(detail::clamp(h("clamp"), detail::scalar(lo), detail::scalar(hi)));
  }

  // Compound assignment rebinds: `x += y` is `x = x + y`. Other copies and views of the old x
  // are unaffected (PyTorch's x += y writes into x's storage instead). As in NumPy and
  // PyTorch, the result keeps x's rank, shape and dtype: y broadcasts to x, never x to y (a
  // larger rank of y does not compile, a larger shape is a ShapeError), and a result of another
  // dtype (i32 /= 2 gives f32) is a DTypeError; write x = x / 2 for those.
#define KILN_COMPOUND(sym, op)                                                                    \
  template <std::size_t E>                                                                        \
  requires(E <= D) Tensor& operator sym##=(const Tensor<E>& y) {                                  \
    return rebind(#sym "=", detail::binary(detail::Binary::op, h(#sym "="), y.handle(#sym "="))); \
  }                                                                                               \
  template <ScalarValue S>                                                                        \
  Tensor& operator sym##=(S y) {                                                                  \
    return rebind(#sym "=", detail::binary(detail::Binary::op, h(#sym "="), detail::scalar(y)));  \
  }
  KILN_COMPOUND(+, add)
  KILN_COMPOUND(-, sub)
  KILN_COMPOUND(*, mul)
  KILN_COMPOUND(/, div)
#undef KILN_COMPOUND

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
  // max / min over dim with the index of the first occurrence (a NaN wins), one pass: as
  // torch.max(x, dim) (x.max(dim) above gives the values alone).
  ValuesIndices<D - 1> max_with_indices(int dim) const requires(D > 0) {
    return extreme<D - 1>("max", dim, true, false);
  }
  ValuesIndices<D - 1> min_with_indices(int dim) const requires(D > 0) {
    return extreme<D - 1>("min", dim, false, false);
  }
  ValuesIndices<D> max_with_indices(int dim, KeepDim) const requires(D > 0) {
    return extreme<D>("max", dim, true, true);
  }
  ValuesIndices<D> min_with_indices(int dim, KeepDim) const requires(D > 0) {
    return extreme<D>("min", dim, false, true);
  }
  // Order along a dim (docs/ops.md): a stable sort (equal values keep their order; NaN last
  // ascending, first descending), its i32 indices, the k largest (smallest) in sort's order, and
  // the inclusive prefix sum (half types accumulate in f32; i32 and bool give i32).
  ValuesIndices<D> sort(int dim = -1, bool descending = false) const requires(D > 0) {
    return pair<D>(detail::sort(h("sort"), norm("sort", dim), descending));
  }
  Tensor<D> argsort(int dim = -1, bool descending = false) const requires(D > 0) {
    return Tensor<D>(detail::sort(h("argsort"), norm("argsort", dim), descending).indices);
  }
  // sorted = false is accepted and still returns them sorted.
  ValuesIndices<D> topk(std::int64_t k, int dim = -1, bool largest = true, bool sorted = true) const
      requires(D > 0) {
    (void)sorted;
    return pair<D>(detail::topk(h("topk"), k, norm("topk", dim), largest));
  }
  Tensor cumsum(int dim) const requires(D > 0) {
    return Tensor(detail::cumsum(h("cumsum"), norm("cumsum", dim)));
  }
  Tensor softmax(int dim) const {
    return Tensor(detail::softmax(h("softmax"), norm("softmax", dim), false));
  }
  Tensor log_softmax(int dim) const {
    return Tensor(detail::softmax(h("log_softmax"), norm("log_softmax", dim), true));
  }

  // Shape ops. Negative dims count from the end. reshape and expand take a Shape<E> or a braced
  // list, whose length is the new rank: x.reshape({2, -1}) is a Tensor<2>.
  template <std::size_t E>
  Tensor<E> reshape(const Shape<E>& shape) const {
    return Tensor<E>(detail::reshape(h("reshape"), detail::to_dims(shape)));
  }
  template <std::size_t E>
  Tensor<E> reshape(const std::int64_t (&shape)[E]) const {
    return reshape(std::to_array(shape));
  }
  Tensor transpose(int d0, int d1) const {
    return Tensor(detail::transpose(h("transpose"), norm("transpose", d0), norm("transpose", d1)));
  }
  Tensor permute(const std::array<int, D>& order) const {
    return Tensor(detail::permute(h("permute"), order));
  }
  Tensor slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const {
    return Tensor(detail::slice(h("slice"), norm("slice", dim), start, stop, step));
  }
  Tensor<D + 1> unsqueeze(int dim) const {
    return Tensor<D + 1>(
        detail::unsqueeze(h("unsqueeze"), detail::normalize_dim("unsqueeze", dim, D + 1)));
  }
  Tensor<D - 1> squeeze(int dim) const requires(D > 0) {
    return Tensor<D - 1>(detail::squeeze(h("squeeze"), norm("squeeze", dim)));
  }
  template <std::size_t E>
  Tensor<E> expand(const Shape<E>& shape) const requires(E >= D) {
    return Tensor<E>(detail::expand(h("expand"), detail::to_dims(shape)));
  }
  template <std::size_t E>
  Tensor<E> expand(const std::int64_t (&shape)[E]) const requires(E >= D) {
    return expand(std::to_array(shape));
  }
  // Views along dim, as torch.split and torch.chunk: pieces of `size` (the last one shorter), of
  // the given sizes (which must add up to the dim's extent), or `chunks` pieces of
  // ceil(size(dim) / chunks) (so fewer than `chunks` when they do not divide: 5 in 4 gives 2, 2,
  // 1). An empty dim gives one empty piece. x.split({2}) is split(2), as a one-element braced
  // list converts to an integer first; write split(std::vector<std::int64_t>{2}) for a section.
  std::vector<Tensor> split(std::int64_t size, int dim = 0) const requires(D > 0) {
    return pieces(detail::split(h("split"), size, norm("split", dim)));
  }
  std::vector<Tensor> split(const std::vector<std::int64_t>& sizes, int dim = 0) const
      requires(D > 0) {
    return pieces(detail::split(h("split"), sizes, norm("split", dim)));
  }
  std::vector<Tensor> chunk(std::int64_t chunks, int dim = 0) const requires(D > 0) {
    return pieces(detail::chunk(h("chunk"), chunks, norm("chunk", dim)));
  }
  // As torch.Tensor.repeat: x tiled times[i] times along dim i; more counts than dims prepend
  // dims of size 1 (x.repeat(2, 1, 1) of a Tensor<2> is a Tensor<3>). One dense copy (an
  // element-wise copy of a stride-0 view: it records and fuses), never a view.
  template <std::integral... I>
  Tensor<sizeof...(I)> repeat(I... times) const requires(sizeof...(I) >= D) {
    const std::int64_t counts[] = {0, static_cast<std::int64_t>(times)...};
    return Tensor<sizeof...(I)>(
        detail::repeat(h("repeat"), std::span<const std::int64_t>(counts + 1, sizeof...(I))));
  }
  // As torch.flip: the elements reversed along each of `dims` (negative dims count from the
  // end; a dim named twice is an error). A copy: an index_select per flipped dim, so it closes
  // the open fusion group (kiln's views have no negative strides).
  Tensor flip(std::initializer_list<int> dims) const {
    std::vector<int> d;
    for (int x : dims) d.push_back(norm("flip", x));
    return Tensor(detail::flip(h("flip"), d));
  }
  // Masks. tril/triu (as torch.tril, torch.triu) keep the elements of the last two dims on and
  // below (above) diagonal `offset` (0 the main one, > 0 above it, < 0 below) and zero the rest.
  // masked_fill (as torch.Tensor.masked_fill): `value` where the bool mask is true, x elsewhere;
  // the mask broadcasts to x's shape, never x to the mask (a mask of larger rank does not
  // compile), and `value` takes x's dtype as `full` converts it. Each is one element-wise
  // program (a where): it records and fuses.
  Tensor tril(std::int64_t offset = 0) const requires(D >= 2) {
    return Tensor(detail::triangle(h("tril"), offset, true));
  }
  Tensor triu(std::int64_t offset = 0) const requires(D >= 2) {
    return Tensor(detail::triangle(h("triu"), offset, false));
  }
  template <std::size_t E, ScalarValue S>
  Tensor masked_fill(const Tensor<E>& mask, S value) const requires(E <= D) {
    return Tensor(
        detail::masked_fill(h("masked_fill"), mask.handle("masked_fill"), detail::scalar(value)));
  }

  // Indexing, as PyTorch's (docs/ops.md): indices are i32 in [0, size of dim) (negative ones are
  // out of range, as in torch.gather and torch.index_select); a bad one raises IndexError naming
  // the op, the index and the bound (on CUDA at the next sync or read). Each reads and writes
  // memory: it closes the open fusion group. scatter_add and index_add return a new tensor.
  Tensor gather(int dim, const Tensor<D>& index) const requires(D > 0) {
    return Tensor(detail::gather(h("gather"), norm("gather", dim), index.handle("gather")));
  }
  Tensor index_select(int dim, const Tensor<1>& index) const requires(D > 0) {
    return Tensor(detail::index_select(h("index_select"), norm("index_select", dim),
                                       index.handle("index_select")));
  }
  Tensor scatter_add(int dim, const Tensor<D>& index, const Tensor<D>& src) const requires(D > 0) {
    return Tensor(detail::scatter_add(h("scatter_add"), norm("scatter_add", dim),
                                      index.handle("scatter_add"), src.handle("scatter_add")));
  }
  Tensor index_add(int dim, const Tensor<1>& index, const Tensor<D>& src) const requires(D > 0) {
    return Tensor(detail::index_add(h("index_add"), norm("index_add", dim),
                                    index.handle("index_add"), src.handle("index_add")));
  }

 private:
  static std::vector<Tensor> pieces(const std::vector<detail::Handle>& hs) {
    return std::vector<Tensor>(hs.begin(), hs.end());
  }
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
  // The handle, or the placeholder's error naming `op`.
  const detail::Handle& h(const char* op) const {
    if (!h_) detail::unassigned(op, D);
    return h_;
  }
  // Compound assignment: rebinds to r, which must keep this tensor's shape and dtype.
  Tensor& rebind(const char* op, detail::Handle r) {
    if (detail::shape(r) != detail::shape(h_)) {
      throw ShapeError(std::string(op) + ": the result has shape " + format_dims(detail::shape(r)) +
                       " but the left side " + format_dims(detail::shape(h_)) + "; x " + op +
                       " y keeps x's shape (broadcast y to x, or write x = x " + op[0] + " y)");
    }
    if (detail::dtype(r) != detail::dtype(h_)) {
      throw DTypeError(std::string(op) + ": the result is " + dtype_name(detail::dtype(r)) +
                       " but the left side " + dtype_name(detail::dtype(h_)) + "; x " + op +
                       " y keeps x's dtype (write x = x " + op[0] + " y, or cast x first)");
    }
    h_ = std::move(r);
    return *this;
  }
  Tensor un(detail::Unary op, const char* name) const { return Tensor(detail::unary(op, h(name))); }
  Tensor<0> all(detail::Reduction op) const {
    return Tensor<0>(detail::reduce_all(op, h(name(op))));
  }
  auto red(detail::Reduction op, int dim) const requires(D > 0) {
    return Tensor<D - 1>(detail::reduce(op, h(name(op)), norm(name(op), dim), false));
  }
  Tensor red_keep(detail::Reduction op, int dim) const {
    return Tensor(detail::reduce(op, h(name(op)), norm(name(op), dim), true));
  }
  static const char* name(detail::Reduction op) {
    constexpr const char* names[] = {"sum", "mean", "max", "min", "argmax", "argmin"};
    return names[static_cast<int>(op)];
  }
  static int norm(const char* op, int dim) { return detail::normalize_dim(op, dim, D); }
  template <std::size_t E>
  static ValuesIndices<E> pair(const detail::ValuesIndices& r) {
    return {Tensor<E>(r.values), Tensor<E>(r.indices)};
  }
  template <std::size_t E>
  ValuesIndices<E> extreme(const char* op, int dim, bool largest, bool keepdim) const {
    return pair<E>(detail::extreme_with_indices(h(op), norm(op, dim), largest, keepdim));
  }

  detail::Handle h_;
};

// The values and i32 indices of sort, topk and max/min_with_indices (torch's (values, indices)).
template <std::size_t D>
struct ValuesIndices {
  Tensor<D> values;
  Tensor<D> indices;
};

// A random permutation of 0..n-1 (i32) from the Philox stream of `seed`: the same on every device.
inline Tensor<1> randperm(std::int64_t n, std::uint64_t seed, Device device = Device::cpu()) {
  return Tensor<1>(detail::randperm(n, seed, device));
}
// How often each value of the 1-D i32 ids (all >= 0) occurs: i32 counts of length
// max(max(ids) + 1, minlength), as torch.bincount without weights.
inline Tensor<1> bincount(const Tensor<1>& ids, std::int64_t minlength = 0) {
  return Tensor<1>(detail::bincount(ids.handle("bincount"), minlength));
}

// 1-D ranges, as NumPy's arange: start, start + step, ... below stop (above it for step < 0).
inline Tensor<1> arange(double start, double stop, double step = 1.0, DType dtype = DType::f32,
                        Device device = Device::cpu()) {
  return Tensor<1>(detail::arange(start, stop, step, dtype, device));
}

// Binary ops broadcast as NumPy; the result has the larger rank.
#define KILN_BINARY(fn, op)                                                                 \
  template <std::size_t D, std::size_t E>                                                   \
  Tensor<std::max(D, E)> fn(const Tensor<D>& a, const Tensor<E>& b) {                       \
    return Tensor<std::max(D, E)>(                                                          \
        detail::binary(detail::Binary::op, a.handle(#op), b.handle(#op)));                  \
  }                                                                                         \
  template <std::size_t D, ScalarValue S>                                                   \
  Tensor<D> fn(const Tensor<D>& a, S b) {                                                   \
    return Tensor<D>(detail::binary(detail::Binary::op, a.handle(#op), detail::scalar(b))); \
  }                                                                                         \
  template <std::size_t D, ScalarValue S>                                                   \
  Tensor<D> fn(S a, const Tensor<D>& b) {                                                   \
    return Tensor<D>(detail::binary(detail::Binary::op, detail::scalar(a), b.handle(#op))); \
  }
KILN_BINARY(operator+, add)
KILN_BINARY(operator-, sub)
KILN_BINARY(operator*, mul)
KILN_BINARY(operator/, div)
KILN_BINARY(minimum, minimum)
KILN_BINARY(maximum, maximum)
// x^y element-wise (as torch.pow of two tensors); computes in f32 (or a half type), as div.
KILN_BINARY(pow, pow)
// Comparisons give bool tensors.
KILN_BINARY(operator==, eq)
KILN_BINARY(operator!=, ne)
KILN_BINARY(operator<, lt)
KILN_BINARY(operator<=, le)
KILN_BINARY(operator>, gt)
KILN_BINARY(operator>=, ge)
#undef KILN_BINARY

// cond ? a : b element-wise, broadcasting all three; cond must be bool. Either branch, or both,
// may be a scalar, whose dtype follows the binary ops' rule: where(c, i32, 0.5f) is f32,
// where(c, i32, 0) i32, where(c, 1, 0) i32, where(c, 1.0, 0) f32. With two scalar branches the
// result has cond's shape.
template <std::size_t C, std::size_t D, std::size_t E>
Tensor<std::max({C, D, E})> where(const Tensor<C>& cond, const Tensor<D>& a, const Tensor<E>& b) {
  return Tensor<std::max({C, D, E})>(
      detail::where(cond.handle("where"), a.handle("where"), b.handle("where")));
}
template <std::size_t C, std::size_t D, ScalarValue S>
Tensor<std::max(C, D)> where(const Tensor<C>& cond, const Tensor<D>& a, S b) {
  return Tensor<std::max(C, D)>(
      detail::where(cond.handle("where"), a.handle("where"), detail::scalar(b)));
}
template <std::size_t C, ScalarValue S, std::size_t E>
Tensor<std::max(C, E)> where(const Tensor<C>& cond, S a, const Tensor<E>& b) {
  return Tensor<std::max(C, E)>(
      detail::where(cond.handle("where"), detail::scalar(a), b.handle("where")));
}
template <std::size_t C, ScalarValue S, ScalarValue T>
Tensor<C> where(const Tensor<C>& cond, S a, T b) {
  return Tensor<C>(detail::where(cond.handle("where"), detail::scalar(a), detail::scalar(b)));
}

// Matrix product: rank 2 x rank 2, or batched rank 3 (a rank-2 side or a batch of 1 broadcasts).
template <std::size_t D, std::size_t E>
requires((D == 2 || D == 3) &&
         (E == 2 || E == 3)) Tensor<std::max(D, E)> matmul(const Tensor<D>& a, const Tensor<E>& b) {
  return Tensor<std::max(D, E)>(detail::matmul(a.handle("matmul"), b.handle("matmul")));
}

namespace detail {
template <std::size_t D>
Tensor<D> cat_tensors(std::span<const Tensor<D>> xs, int dim) {
  std::vector<Handle> hs;
  hs.reserve(xs.size());
  for (const auto& x : xs) hs.push_back(x.handle("cat"));
  return Tensor<D>(cat(hs, normalize_dim("cat", dim, D)));
}
}  // namespace detail

// Concatenation along dim; every other extent must agree. kiln::cat({a, b}, 0) deduces D.
template <std::size_t D>
Tensor<D> cat(const std::vector<Tensor<D>>& xs, int dim) {
  return detail::cat_tensors(std::span<const Tensor<D>>(xs), dim);
}
template <std::size_t D>
Tensor<D> cat(std::initializer_list<Tensor<D>> xs, int dim) {
  return detail::cat_tensors(std::span<const Tensor<D>>(xs.begin(), xs.size()), dim);
}

namespace detail {
template <std::size_t D>
Tensor<D + 1> stack_tensors(std::span<const Tensor<D>> xs, int dim) {
  std::vector<Handle> hs;
  hs.reserve(xs.size());
  for (const auto& x : xs) hs.push_back(x.handle("stack"));
  return Tensor<D + 1>(stack(hs, normalize_dim("stack", dim, D + 1)));
}
}  // namespace detail

// As torch.stack: the tensors (one shape, one dtype, one device) along a new dim at `dim`, in
// [-(D+1), D]. Each is unsqueezed (a view), then cat copies them: eager under fusion, as cat.
template <std::size_t D>
Tensor<D + 1> stack(const std::vector<Tensor<D>>& xs, int dim = 0) {
  return detail::stack_tensors(std::span<const Tensor<D>>(xs), dim);
}
template <std::size_t D>
Tensor<D + 1> stack(std::initializer_list<Tensor<D>> xs, int dim = 0) {
  return detail::stack_tensors(std::span<const Tensor<D>>(xs.begin(), xs.size()), dim);
}

// Constant padding, as torch.nn.functional.pad(x, pads, value=value): `pads` holds (before,
// after) pairs, the first pair for the last dim, the next for the one before it, at most one
// pair per dim; a negative pad crops. `value` takes x's dtype as `full` converts it. A copy that
// writes slices of its result: eager under fusion, as cat. (F.pad's other modes, reflect,
// replicate and circular, are not here.)
template <std::size_t D, ScalarValue S = int>
Tensor<D> pad(const Tensor<D>& x, const std::vector<std::int64_t>& pads, S value = 0) {
  return Tensor<D>(detail::pad(x.handle("pad"), pads, detail::scalar(value)));
}

// As torch.nn.functional.one_hot: index (i32, any shape) -> index.shape + [n], 1 at each index's
// position and 0 elsewhere, in `dtype` (i32 by default). An index outside [0, n) raises
// IndexError. A scatter_add of ones into zeros (exact in every dtype).
template <std::size_t D>
Tensor<D + 1> one_hot(const Tensor<D>& index, std::int64_t n, DType dtype = DType::i32) {
  return Tensor<D + 1>(detail::one_hot(index.handle("one_hot"), n, dtype));
}
// As torch.nn.functional.embedding: the rows of weight [V, C] at ids (i32, any shape) ->
// ids.shape + [C]. index_select of the flattened ids (one warp per row on CUDA).
template <std::size_t D>
Tensor<D + 1> embedding(const Tensor<2>& weight, const Tensor<D>& ids) {
  return Tensor<D + 1>(detail::embedding(weight.handle("embedding"), ids.handle("embedding")));
}

// From host data, the rank deduced from the braced shape: kiln::from_data({1.f, 2.f}, {2}) is a
// Tensor<1>, kiln::from_data(values, {2, 3}) a Tensor<2> (Tensor<D>::from_data says more).
template <class T, std::size_t E>
Tensor<E> from_data(std::initializer_list<T> data, const std::int64_t (&shape)[E],
                    Device device = Device::cpu()) {
  return Tensor<E>::from_data(data, std::to_array(shape), device);
}
template <class T, std::size_t E>
Tensor<E> from_data(const std::vector<T>& data, const std::int64_t (&shape)[E],
                    Device device = Device::cpu()) {
  return Tensor<E>::from_data(data, std::to_array(shape), device);
}

}  // namespace kiln
