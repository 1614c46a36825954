// The dynamic-rank op layer behind kiln::Tensor<D>. Tensor<D> checks ranks at compile time
// and forwards here; these functions check everything else (shapes, dtypes, devices, ranges)
// and call the device's backend. Users call Tensor<D>, not these.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kiln/detail/op_list.hpp"
#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"

namespace kiln {

struct Distribution {
  enum class Kind : unsigned char { uniform, normal } kind;
  double a, b;
  // Uniform on [lo, hi).
  static Distribution uniform(double lo = 0.0, double hi = 1.0) { return {Kind::uniform, lo, hi}; }
  static Distribution normal(double mean = 0.0, double std = 1.0) {
    return {Kind::normal, mean, std};
  }
};

namespace detail {

struct TensorImpl;
using Handle = std::shared_ptr<const TensorImpl>;

// The element-wise ops (kiln/detail/op_list.hpp).
#define KILN_OP_ENUMERATOR(name, rule) name,
enum class Unary : unsigned char { KILN_UNARY_OPS(KILN_OP_ENUMERATOR) };
enum class Binary : unsigned char { KILN_BINARY_OPS(KILN_OP_ENUMERATOR) };
#undef KILN_OP_ENUMERATOR
enum class Reduction : unsigned char { sum, mean, max, min, argmax, argmin };

// A scalar operand as the user wrote it: integral scalars keep an i32 tensor i32, floating
// ones promote it to f32 (PyTorch's rule for Python scalars).
struct Scalar {
  double value;
  bool integral;
};

// Queries.
const Dims& shape(const Handle& t);
const Dims& strides(const Handle& t);
DType dtype(const Handle& t);
Device device(const Handle& t);
std::int64_t numel(const Handle& t);
bool is_contiguous(const Handle& t);

// Creation.
Handle full(const Dims& shape, Scalar value, DType dtype, Device device);
Handle arange(double start, double stop, double step, DType dtype, Device device);
Handle from_data(const void* data, std::size_t count, DType dtype, const Dims& shape,
                 Device device);
Handle random(const Dims& shape, const Distribution& dist, Device device, std::uint64_t seed,
              DType dtype = DType::f32);

// Read-back (waits for the device): the elements in row-major order.
void read(const Handle& t, void* dst, DType as);
Handle to_device(const Handle& t, Device device);

// Element-wise.
Handle unary(Unary op, const Handle& x);
Handle binary(Binary op, const Handle& a, const Handle& b);
Handle binary(Binary op, const Handle& a, Scalar b);
Handle binary(Binary op, Scalar a, const Handle& b);
Handle pow(const Handle& x, double exponent);
Handle clamp(const Handle& x, Scalar lo, Scalar hi);
Handle where(const Handle& cond, const Handle& a, const Handle& b);
// where with scalar branches: a scalar takes the dtype a binary op gives it beside the other
// branch (f32 for a floating scalar, else the tensor's, i32 beside bool or another scalar).
Handle where(const Handle& cond, const Handle& a, Scalar b);
Handle where(const Handle& cond, Scalar a, const Handle& b);
Handle where(const Handle& cond, Scalar a, Scalar b);
Handle cast(const Handle& x, DType to);

// Reductions; dim is already normalised (0 <= dim < rank). The result keeps the reduced dim
// as size 1 when keepdim, else drops it; reduce_all gives a rank-0 tensor.
Handle reduce(Reduction op, const Handle& x, int dim, bool keepdim);
Handle reduce_all(Reduction op, const Handle& x);
// AdamW's update of many f32 parameters at once (Backend::adamw, a multi-tensor kernel): for each
// input its new param, m and v, as src/optim/adamw.cpp's expressions compute them. Empty, with
// nothing done, where the device's backend has no such kernel or a tensor is not f32 and
// contiguous: the optimizer then updates each parameter alone.
struct AdamWInput {
  Handle param, grad, m, v;  // m and v null at the first step
};
struct AdamWHyper {
  double lr, weight_decay, beta1, beta2, eps, bias1, bias2, factor;  // bias1 = 1 - beta1^t
  Handle clip;  // a device f32 scalar every gradient is multiplied by, or null
};
struct AdamWOutput {
  Handle param, m, v;
};
std::vector<AdamWOutput> adamw_update(std::span<const AdamWInput> in, const AdamWHyper& h);

// The sum of the squares of every element of every x, f32 (a model's gradient norm, squared):
// one Backend::sum_of_squares call where the backend has it, else one sum per x added at the end.
// The xs share a device and are f32, bf16 or f16; at least one.
Handle sum_of_squares(std::span<const Handle> xs);
Handle softmax(const Handle& x, int dim, bool log);

// Row normalisation over the last dim (kiln/norm.hpp); weight / bias may be null (absent).
// mean and rstd are f32, one per row (shape x.shape[:-1]); mean is null for rms_norm. sum is x +
// residual for the add_ forms (the norm's input), null otherwise.
struct NormResult {
  Handle y, mean, rstd, sum;
};
// y_dtype: y's dtype when not x's (after autocast): a half type for an f32 x, y rounded once.
NormResult layer_norm(const Handle& x, const Handle& weight, const Handle& bias, double eps,
                      std::optional<DType> y_dtype = std::nullopt);
NormResult rms_norm(const Handle& x, const Handle& weight, double eps,
                    std::optional<DType> y_dtype = std::nullopt);
// The norms of x + residual, that sum returned too (kiln/norm.hpp's add_layer_norm).
NormResult add_layer_norm(const Handle& x, const Handle& residual, const Handle& weight,
                          const Handle& bias, double eps, std::optional<DType> y_dtype);
NormResult add_rms_norm(const Handle& x, const Handle& residual, const Handle& weight, double eps,
                        std::optional<DType> y_dtype);

// Shape; dims are already normalised by the caller where noted.
Handle reshape(const Handle& x, const Dims& shape);  // one -1 allowed
Handle transpose(const Handle& x, int d0, int d1);
Handle permute(const Handle& x, std::span<const int> order);
Handle slice(const Handle& x, int dim, std::int64_t start, std::int64_t stop, std::int64_t step);
Handle cat(std::span<const Handle> xs, int dim);
Handle unsqueeze(const Handle& x, int dim);
Handle squeeze(const Handle& x, int dim);
Handle expand(const Handle& x, const Dims& shape);
Handle contiguous(const Handle& x);

// Autodiff (src/frontend/autograd.cpp; docs/autodiff.md).
void set_requires_grad(const Handle& t, bool on);
bool requires_grad(const Handle& t);
Handle grad(const Handle& t);  // null where there is none
void zero_grad(const Handle& t);
// Replaces t's gradient by g (PyTorch's `t.grad = g`): t a leaf that needs a gradient, g of its
// shape, dtype and device. No hook runs.
void set_grad(const Handle& t, const Handle& g);
// grad_output null: ones, for a one-element t.
void backward(const Handle& t, const Handle& grad_output, bool retain_graph);
Handle detach(const Handle& t);
// kiln::grad: d output / d input for each input (zeros where none flows), output one element.
std::vector<Handle> gradients(const Handle& output, std::span<const Handle> inputs,
                              bool retain_graph);
// kiln::checkpoint: region(inputs) with its intermediates recomputed in backward.
Handle checkpoint(const std::function<Handle(const std::vector<Handle>&)>& region,
                  const std::vector<Handle>& inputs);
// Runs hook with t's gradient (seen through t's view) each time a backward pass has finished
// adding to it.
void on_grad_final(const Handle& t, std::function<void(const Handle&)> hook);
bool grad_enabled();
void set_grad_enabled(bool on);
long long live_autodiff_nodes();
// Losses (src/frontend/loss.cpp): cross_entropy from per-row statistics, checked by the caller
// (kiln/loss.hpp), recording one node whose gradient is one element-wise program.
Handle cross_entropy(const Handle& logits, const Handle& targets, int ignore_index,
                     double label_smoothing);
// Views: pieces of `size` along dim (the last one shorter), or of the given sizes.
std::vector<Handle> split(const Handle& x, std::int64_t size, int dim);
std::vector<Handle> split(const Handle& x, std::span<const std::int64_t> sizes, int dim);
std::vector<Handle> chunk(const Handle& x, std::int64_t chunks, int dim);
// dim in [0, rank] of the inputs (the new dim's position).
Handle stack(std::span<const Handle> xs, int dim);
Handle repeat(const Handle& x, std::span<const std::int64_t> times);
Handle pad(const Handle& x, std::span<const std::int64_t> pads, Scalar value);

// Masks: tril (lower) or triu of the last two dims; masked_fill with a bool mask.
Handle triangle(const Handle& x, std::int64_t offset, bool lower);
Handle masked_fill(const Handle& x, const Handle& mask, Scalar value);
Handle matmul(const Handle& a, const Handle& b);

// Indexing (src/frontend/ops_index.cpp), as PyTorch's; dim is already normalised.
Handle gather(const Handle& x, int dim, const Handle& index);
Handle index_select(const Handle& x, int dim, const Handle& index);
Handle scatter_add(const Handle& x, int dim, const Handle& index, const Handle& src);
Handle index_add(const Handle& x, int dim, const Handle& index, const Handle& src);
Handle one_hot(const Handle& index, std::int64_t n, DType dtype);
Handle embedding(const Handle& weight, const Handle& ids);
// x reversed along each of dims (normalised): an index_select per dim.
Handle flip(const Handle& x, std::span<const int> dims);

// Order and scan along a dim (src/frontend/ops_order.cpp); dim is already normalised. Indices are
// i32. max/min's result drops dim unless keepdim; topk gives the k first of the stable sort.
struct ValuesIndices {
  Handle values, indices;
};
ValuesIndices extreme_with_indices(const Handle& x, int dim, bool largest, bool keepdim);
ValuesIndices sort(const Handle& x, int dim, bool descending);
ValuesIndices topk(const Handle& x, std::int64_t k, int dim, bool largest);
Handle cumsum(const Handle& x, int dim);
// A random permutation of [0, n) as i32, the same for a seed on every device; counts (i32) of
// each value of the 1-D i32 ids, of length max(max(ids) + 1, minlength).
Handle randperm(std::int64_t n, std::uint64_t seed, Device device);
Handle bincount(const Handle& ids, std::int64_t minlength);

// Normalises a possibly negative dim against rank (`op` names the op in the IndexError).
int normalize_dim(const char* op, std::int64_t dim, int rank);

}  // namespace detail
}  // namespace kiln
