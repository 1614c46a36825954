// The interface every backend implements, and decorators (fusion) wrap.
//
// The front end (src/frontend/ops_*.cpp) checks shapes, dtypes and devices, broadcasts by giving
// inputs stride-0 dimensions, asks `supports` whether the device's chain runs the dtypes, allocates
// outputs with `empty`, and then calls one of these. A backend may run the call asynchronously;
// `download` and `sync` wait.
//
// What a backend sees of a tensor: a TensorImpl, a view (shape, element strides, element offset)
// over a buffer. A broadcast dim has stride 0; a transposed or sliced view has the strides and
// offset of its base; an empty tensor (a zero extent) may have no memory. Inputs are
// `const TensorImpl&`; what a call writes is typed apart as `Out` (or `Outs`, below). A decorator
// that records calls instead of running them (fusion) keeps the TensorImpl objects it was given:
// their identity (the address, held by a Handle) is what a later call names, and memory is bound to
// an output's buffer when the recorded work runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor_impl.hpp"
#include "ir/program.hpp"
#include "kiln/detail/ops.hpp"

namespace kiln::detail {

// A tensor a backend call writes. The aliasing rule: an output never shares memory with any
// input of the same call, and no two outputs of a call overlap (elementwise's outputs may be
// disjoint views of one buffer, as cat writes slices). The caller allocated it (empty) and
// nobody reads it before the call has run. The TensorImpl itself (shape, strides, buffer) is
// not changed by the call, only the memory it views, hence the const view inside; the type
// keeps an input from being passed where a call writes, and says which is which at a glance.
class Out {
 public:
  explicit Out(const TensorImpl& t) : t_(&t) {}
  const TensorImpl& operator*() const { return *t_; }
  const TensorImpl* operator->() const { return t_; }

 private:
  const TensorImpl* t_;
};

// The outputs of one element-wise call, in the program's output order (rule as for Out).
struct Outs {
  explicit Outs(std::span<const TensorImpl* const> t) : tensors(t) {}
  std::span<const TensorImpl* const> tensors;
};

// The front end's reduction names the backend op too.
using ReduceOp = Reduction;
const char* reduce_name(ReduceOp op);
// The dtype `op` over an `in` tensor writes: sum keeps a floating dtype (f32, bf16, f16) and
// sums i32/bool to i32, mean keeps a floating dtype and gives f32 for the others, max/min keep
// the dtype, argmax/argmin give i32 indices. Half types accumulate in f32 or wider.
DType reduce_result_dtype(ReduceOp op, DType in);
// Throws (IndexError, ShapeError, DTypeError, ValueError) unless reduce(op, x, dim, out) meets
// Backend::reduce's contract below.
void check_reduce_call(ReduceOp op, const TensorImpl& x, int dim, const TensorImpl& out);
// One parameter of Backend::adamw: its tensors and where their new values go (rule as for Out).
struct AdamWTensors {
  const TensorImpl* param;
  const TensorImpl* grad;
  const TensorImpl* m;  // the moments, or both null at the first step (zero)
  const TensorImpl* v;
  Out new_param, new_m, new_v;
};
// AdamW's hyper-parameters for one Backend::adamw call: bias1 = 1 - beta1^t, bias2 = 1 -
// beta2^t; every gradient is read multiplied by factor and by clip[0] (an f32 scalar on the
// device, or null for 1).
struct AdamWScalars {
  double lr, weight_decay, beta1, beta2, eps, bias1, bias2, factor;
  const TensorImpl* clip;
};
// Throws (DTypeError, ShapeError, ValueError) unless adamw(params, scalars) meets Backend::adamw's
// contract: every tensor f32 and contiguous, grad, m, v and the outputs of param's shape, m and v
// both given or both null, clip (if any) one f32 element.
void check_adamw_call(std::span<const AdamWTensors> params, const AdamWScalars& s);

// Throws (DTypeError, ShapeError, ValueError) unless sum_of_squares(xs, total) meets
// Backend::sum_of_squares's contract: every x f32, bf16 or f16 and contiguous; total a contiguous
// f32 tensor of one element that is none of the xs.
void check_sum_of_squares_call(std::span<const TensorImpl* const> xs, const TensorImpl& total);

// Throws (DTypeError, ShapeError) unless matmul(a, c, out) meets Backend::matmul's contract
// below: operands and output of one floating dtype (which the backend's supports() accepts),
// rank 3, [B, m, k] x [B, k, n] into a contiguous [B, m, n].
void check_matmul_call(const TensorImpl& a, const TensorImpl& c, const TensorImpl& out);

// What Backend::matmul_epilogue (version 10) does to the product in the same pass: the forward of
// a linear layer, out = act(a @ c + bias) (bias [n] added to every row, then the activation), with
// pre_activation, when given, receiving a @ c + bias (what the activation's gradient needs).
// (A bias gradient in the weight gradient's product, cuBLASLt's BGRADB, is not offered: on the
// H100 it made GPT-2's weight-gradient products 6-56 us slower each, about what the column sum it
// saves costs (35 us), and it rules out splitting a product over row ranges; docs/ops.md.)
enum class EpilogueActivation : std::uint8_t {
  none,
  relu,
  gelu_tanh  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), PyTorch's approximate="tanh"
};
struct MatmulEpilogue {
  const TensorImpl* bias = nullptr;  // [n], contiguous, of out's dtype
  EpilogueActivation activation = EpilogueActivation::none;
  std::optional<Out> pre_activation;  // of out's shape and dtype, contiguous; with an activation
};
// Throws (DTypeError, ShapeError, ValueError) unless matmul_epilogue(a, c, e, out) meets its
// contract: matmul's, and the epilogue's tensors as MatmulEpilogue says.
void check_matmul_epilogue_call(const TensorImpl& a, const TensorImpl& c, const MatmulEpilogue& e,
                                const TensorImpl& out);

// A reduction's element-wise prologue: the value reduced is the single output of `program`,
// computed for every element of `shape` exactly as elementwise() would compute it from `inputs`
// (each of `shape`, broadcast dims with stride 0) and `scalars`. The fusion decorator passes the
// open group's program this way, so the reduced tensor is never written.
struct Prologue {
  const ir::Program& program;
  std::span<const TensorImpl* const> inputs;
  std::span<const double> scalars;
  const Dims& shape;
};

// A memoryless descriptor of the prologue's value: its dtype, shape and contiguous strides.
// Throws unless the program has one output and matches the inputs and scalars.
TensorImpl prologue_value(const Prologue& p);

struct RandomSpec {
  enum class Kind : std::uint8_t { uniform, normal } kind = Kind::uniform;
  double a = 0.0;  // uniform: lo; normal: mean
  double b = 1.0;  // uniform: hi; normal: std
};

// The indexing family, one backend call (Backend::index). With x seen as [O, N, I] around `dim`
// (O the product of the extents before it, I of those after it):
//   gather        index [O, K, I] -> out [O, K, I]: out[o,k,i] = x[o, index[o,k,i], i]
//   index_select  index [K] -> out [O, K, I]: out[o,k,i] = x[o, index[k], i]
//   scatter_add   index, src [O, K, I] -> out [O, N, I]: x, plus src[o,k,i] at
//                 [o, index[o,k,i], i]
//   index_add     index [K], src [O, K, I] -> out [O, N, I]: x, plus src[o,k,i] at
//                 [o, index[k], i]
enum class IndexOp : std::uint8_t { gather, scatter_add, index_select, index_add };
const char* index_op_name(IndexOp op);
inline bool index_op_accumulates(IndexOp op) {
  return op == IndexOp::scatter_add || op == IndexOp::index_add;
}
// Throws (IndexError, ShapeError, DTypeError) unless index(op, x, dim, index, src, out) meets
// Backend::index's contract (src/backend/index_contract.cpp states it in full). It checks shapes
// and dtypes only: the index values are the backend's to check, as it reads them.
void check_index_call(IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
                      const TensorImpl* src, const TensorImpl& out);
// The IndexError an index value outside [0, bound) raises: names the op, the value and the bound.
[[noreturn]] void throw_index_out_of_range(IndexOp op, std::int64_t value, std::int64_t bound);

// The row family, one backend call (Backend::rows): each op maps every row of x along its last dim
// (n elements; R rows, the product of the other extents) to a row of y:
//   softmax      y = exp(x - max) / sum(exp(x - max))
//   log_softmax  y = x - max - log(sum(exp(x - max)))
//   layer_norm   y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) (biased var)
//   rms_norm     y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps)
//   logsumexp    y[r] = max + log(sum(exp(x - max))), one f32 value per row: y has shape
//                x.shape[:-1] (version 8; what a fused cross-entropy needs, never a row of y)
// computed in f32 or wider whatever x's dtype (bf16, f16 load to f32, y is rounded once). A NaN in
// a row makes its softmax row NaN, as does a row of -inf or one holding +inf (as PyTorch); the
// logsumexp of such a row is NaN.
enum class RowOp : std::uint8_t { softmax, log_softmax, layer_norm, rms_norm, logsumexp };
const char* row_op_name(RowOp op);
inline bool row_op_normalises(RowOp op) { return op == RowOp::layer_norm || op == RowOp::rms_norm; }
// logsumexp: y holds one f32 value per row instead of x's shape and dtype.
inline bool row_op_reduces(RowOp op) { return op == RowOp::logsumexp; }
// The norms' parameters: weight (both) and bias (layer_norm), [n] contiguous tensors of x's dtype,
// each optional; eps >= 0. The softmaxes take none of them. residual (version 13, the norms only):
// the norm reads x + residual instead of x and writes that sum too (RowStats::sum), as a pre-norm
// transformer's residual stream needs it: one pass where an add and a norm took two. residual is
// contiguous, of x's shape and dtype or a half type for an f32 x, and x is then contiguous too.
struct RowParams {
  const TensorImpl* weight = nullptr;
  const TensorImpl* bias = nullptr;
  double eps = 0;
  const TensorImpl* residual = nullptr;
};
// What a norm may write besides y, for a backward pass: per-row f32 tensors of shape x.shape[:-1],
// contiguous. mean (layer_norm only) and rstd, each optional; the softmaxes write neither. sum:
// x + residual (x's shape and dtype, contiguous), given exactly when RowParams::residual is.
struct RowStats {
  std::optional<Out> mean, rstd, sum;
};
// The norms' gradients (Backend::norm_backward, version 9), each optional: dx of x's shape and
// dtype, dw and db [n] of x's dtype, all contiguous; dw needs the weight, db is layer_norm's.
// Version 13, for a norm that read x + residual (RowParams::residual): dsum, the gradient of the
// sum it wrote (x's shape and dtype, contiguous), is added to dx; dx_half (x f32, a half type of
// x's shape, contiguous) receives that dx rounded once, the gradient of a half residual. Both
// need dx.
struct NormGrads {
  std::optional<Out> dx, dw, db;
  const TensorImpl* dsum = nullptr;
  std::optional<Out> dx_half;
};
// x as rows: row r's element j sits at x's offset + r * stride + j. rows() reads x through this
// view only, so x's last dim must have stride 1 (any stride when n <= 1) and its other dims must
// collapse into one row stride (a contiguous x, a slice of rows or of columns, a broadcast row);
// row_view answers nullopt for the others (a transposed x), which the front end copies first.
struct RowView {
  std::int64_t rows = 0, n = 0, stride = 0;
};
std::optional<RowView> row_view(const TensorImpl& x);
// Throws (DTypeError, ShapeError, ValueError) unless rows(op, x, params, y, stats) meets
// Backend::rows's contract (src/backend/rows_contract.cpp states it in full); returns x's RowView.
RowView check_rows_call(RowOp op, const TensorImpl& x, const RowParams& params, const TensorImpl& y,
                        const RowStats& stats);
// Throws likewise unless norm_backward(op, x, g, weight, mean, rstd, grads) meets
// Backend::norm_backward's contract (src/backend/rows_contract.cpp states it in full); returns x's
// RowView (stride n: x is contiguous).
RowView check_norm_backward_call(RowOp op, const TensorImpl& x, const TensorImpl& g,
                                 const TensorImpl* weight, const TensorImpl* mean,
                                 const TensorImpl& rstd, const NormGrads& grads);

// The order-and-scan family, one backend call (Backend::order, version 6): each op maps every row
// of x along its last dim (n elements; R rows, the product of the other extents) to a row of K
// values (and K i32 indices into the row, where the op has them):
//   max, min  K = 1: the largest (smallest) value and the index of its first occurrence; a NaN
//             wins (the first NaN), as argmax does
//   sort      K = n: the row in ascending order (descending: largest first), stable (equal keys
//             keep their input order), NaN last ascending and first descending (as PyTorch);
//             indices say where each value came from
//   topk      K = k <= n: the first k values of sort (descending: the k largest), with indices
//   cumsum    K = n, no indices: the inclusive prefix sum (reverse: the suffix sum, y[j] = sum of
//             x[j..n-1], which is cumsum's gradient); f32, bf16, f16 accumulate in f32 and round
//             each output once; i32 and bool give i32 (wrapping as two's complement)
enum class OrderOp : std::uint8_t { max, min, sort, topk, cumsum };
const char* order_op_name(OrderOp op);
struct OrderParams {
  std::int64_t k = 0;       // topk only
  bool descending = false;  // sort and topk: largest first
  bool reverse = false;     // cumsum: sums from the end of the row
};
// The row length of the outputs (K above) and the dtype of `values`.
std::int64_t order_out_length(OrderOp op, const OrderParams& p, std::int64_t n);
DType order_values_dtype(OrderOp op, DType x);
inline bool order_op_has_indices(OrderOp op) { return op != OrderOp::cumsum; }
// Throws (DTypeError, ShapeError, ValueError) unless order(op, x, params, values, indices) meets
// Backend::order's contract (src/backend/order_contract.cpp states it in full). Returns n, the row
// length.
std::int64_t check_order_call(OrderOp op, const TensorImpl& x, const OrderParams& params,
                              const TensorImpl& values, const TensorImpl* indices);

// Scaled dot-product attention, one backend call (Backend::attention, version 7): for every
// (b, h), with s[i, j] = scale * q[b,h,i,:] . k[b,h,j,:] (and s[i, j] = -inf for j > i when causal:
// the top-left aligned mask of PyTorch's is_causal),
//   o[b,h,i,:]  = sum_j softmax_j(s[i, :]) v[b,h,j,:]
//   lse[b,h,i]  = log sum_j exp(s[i, j])      (natural log; the backward pass recomputes the
//                                               probabilities from it: p = exp(s - lse))
// computed in f32 or wider whatever the dtype (bf16, f16 products may use tensor cores with f32
// accumulation; f32 ones follow float32_matmul_precision, as matmul), o rounded once. The T x T
// scores are never written. Tk == 0 gives o = 0 and lse = -inf.
struct AttentionParams {
  bool causal = false;
  double scale = 1.0;
};
// Throws (DTypeError, ShapeError, ValueError) unless attention(q, k, v, params, o, lse) meets
// Backend::attention's contract (src/backend/attention_contract.cpp states it in full).
void check_attention_call(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                          const AttentionParams& params, const TensorImpl& o,
                          const TensorImpl* lse);
// Throws likewise unless attention_backward(q, k, v, o, dout, lse, params, dq, dk, dv) meets
// Backend::attention_backward's contract: q, k, v, o as attention's; dout o's shape and dtype, a
// unit-stride last dim; lse contiguous f32 [B, H, Tq]; dq, dk, dv of q's, k's and v's shapes and
// q's dtype, each laid out as o may be (version 11: three views of one [B, T, 3, H, D] buffer,
// the gradient of a fused qkv projection), not overlapping one another.
void check_attention_backward_call(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                                   const TensorImpl& o, const TensorImpl& dout,
                                   const TensorImpl& lse, const AttentionParams& params,
                                   const TensorImpl& dq, const TensorImpl& dk,
                                   const TensorImpl& dv);

// Collectives between the processes of a job (Backend::collective, version 12; kiln::dist). With
// W ranks, each calling with its own x, of one shape and dtype everywhere:
//   all_reduce      out (x's shape) = x of every rank combined by `reduce` (avg: the sum / W)
//   broadcast       out (x's shape) = rank root's x
//   all_gather      out [W * n, ...] = every rank's x [n, ...] in rank order
//   reduce_scatter  out [n / W, ...] = rows [rank * n / W, (rank + 1) * n / W) of all_reduce(x)
enum class CollectiveOp : std::uint8_t { all_reduce, broadcast, all_gather, reduce_scatter };
enum class CollectiveReduce : std::uint8_t { sum, avg, max };
const char* collective_op_name(CollectiveOp op);
struct CollectiveParams {
  CollectiveOp op = CollectiveOp::all_reduce;
  CollectiveReduce reduce = CollectiveReduce::sum;  // all_reduce, reduce_scatter
  int root = 0;                                     // broadcast
};
// The backend's end of a process group: what Backend::communicator made, which only that backend
// reads. Destroying it releases the transport (NCCL: the communicator).
class Communicator {
 public:
  Communicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The transport, for kiln info and errors ("nccl 2.28.9", "none (one rank)").
  virtual std::string transport() const = 0;

 private:
  int rank_, world_size_;
};
// The shape out must have for x (as CollectiveOp says); throws ShapeError (all_gather and
// reduce_scatter of a rank-0 x, reduce_scatter of rows that W does not divide) or ValueError (a
// root outside [0, W)) naming the op.
Dims collective_out_shape(const CollectiveParams& p, const TensorImpl& x, int world_size);
// Throws (DTypeError, ShapeError, ValueError) unless collective(p, comm, x, out) meets
// Backend::collective's contract: x and out contiguous, of one dtype, out of
// collective_out_shape, not overlapping x; avg and max need a floating dtype or i32 (avg: floating
// only).
void check_collective_call(const CollectiveParams& p, const Communicator& comm, const TensorImpl& x,
                           const TensorImpl& out);

// The interface's version. An implementation states the one it was written for
// (static_assert(kBackendInterfaceVersion == 12)), so a change of contract fails its build.
inline constexpr int kBackendInterfaceVersion = 12;

// The kinds of call `supports` is asked about.
enum class BackendOp : std::uint8_t {
  elementwise,
  reduce,
  matmul,
  random,
  index,
  rows,
  order,
  attention,
  collective
};
const char* backend_op_name(BackendOp op);

// What the CPU and CUDA backends run today (each answers supports() with it until their dtypes
// differ): element-wise work and reductions on every dtype, matmul and random on f32, bf16 and
// f16.
bool supports_common_dtypes(BackendOp op, std::span<const DType> dtypes);

// One fact a backend reports about itself for `kiln doctor` and `kiln info` ("simd target",
// "avx3"), read through the registry's diagnostics.
struct BackendFeature {
  std::string name, value;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // This backend's part of the chain, e.g. "cpu<avx2>" or "fusion<cuda<sm_90>>".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;

  // The bytes of memory the device has (host: RAM and swap; CUDA: the GPU's total). No buffer
  // larger than this can ever be allocated, so the front end refuses one at the op that asks,
  // even where a decorator allocates later.
  virtual std::uint64_t memory_capacity() const = 0;
  // A new contiguous tensor whose contents are unspecified.
  virtual Handle empty(const Dims& shape, DType dtype) = 0;
  // Copies numel * dtype_size bytes from host memory into the contiguous tensor t.
  virtual void upload(const void* src, Out t) = 0;
  // Copies the contiguous tensor t into host memory; waits for pending work on t.
  virtual void download(const TensorImpl& t, void* dst) = 0;

  // Runs the program for every element of the outputs' common shape. Every input has that
  // shape (broadcast dims have stride 0); outputs may be strided views (cat writes slices).
  virtual void elementwise(const ir::Program& program, std::span<const TensorImpl* const> inputs,
                           std::span<const double> scalars, Outs outputs) = 0;
  // Reduces x over `dim` (or over all elements when dim < 0) into out, which has x's shape
  // with that dim set to 1 (all dims 1 when dim < 0), contiguous. arg* write i32 indices.
  virtual void reduce(ReduceOp op, const TensorImpl& x, int dim, Out out) = 0;
  // reduce() of the prologue's value, which is evaluated inside the reduction and never stored.
  // Returns false, having done nothing, where this backend cannot do that for these layouts;
  // the caller then materialises the value and calls reduce(). Errors as reduce().
  virtual bool reduce_prologue(ReduceOp, const Prologue&, int, Out) { return false; }
  // total = the sum over every x of the squares of its elements, in f32 whatever their dtypes, in
  // an order that does not depend on timing (version 9; a model's gradient norm, for clipping):
  // one pass over them all, where reduce() takes a call, and a launch or two, per tensor. Returns
  // false, writing nothing, where this backend has no such kernel (the default), and the caller
  // composes it from reduce() and element-wise calls. Neither syncs nor reads back.
  virtual bool sum_of_squares(std::span<const TensorImpl* const> xs, Out total) {
    (void)xs, (void)total;
    return false;
  }
  // AdamW's update of many parameters at once, out of place (version 9; a multi-tensor optimizer
  // step): for each, with g = grad * factor * clip,
  //   m' = beta1 m + (1 - beta1) g,  v' = beta2 v + (1 - beta2) g^2,
  //   p' = p (1 - lr weight_decay) - lr / bias1 * m' / (sqrt(v') / sqrt(bias2) + eps)
  // in f32, written to new_m, new_v and new_param. Returns false, writing nothing, where this
  // backend has no such kernel (the default): the optimizer then updates each parameter with
  // element-wise calls. A call with no parameters does nothing and answers that question.
  virtual bool adamw(std::span<const AdamWTensors> params, const AdamWScalars& scalars) {
    (void)params, (void)scalars;
    return false;
  }
  // out[b] = a[b] @ c[b] for a [B, m, k], c [B, k, n], out [B, m, n] contiguous; a and c may
  // have any strides (stride 0 on a broadcast batch).
  virtual void matmul(const TensorImpl& a, const TensorImpl& c, Out out) = 0;
  // matmul() with an epilogue in the same pass (see MatmulEpilogue; version 10): a linear layer's
  // bias and activation. Returns false, writing nothing, where this backend has no kernel for the
  // call (the default), and the caller composes it from matmul() and element-wise calls. Neither
  // syncs nor reads back.
  virtual bool matmul_epilogue(const TensorImpl& a, const TensorImpl& c, const MatmulEpilogue& e,
                               Out out) {
    (void)a, (void)c, (void)e, (void)out;
    return false;
  }
  // Fills the contiguous tensor out from the Philox 4x32-10 stream of `seed` (src/core/philox.hpp);
  // a half-type out holds the f32 values of the same seed, each rounded once.
  virtual void random(const RandomSpec& spec, std::uint64_t seed, Out out) = 0;
  // The IndexOp family (see IndexOp): every tensor contiguous, index i32, src for scatter_add and
  // index_add only (nullptr otherwise), out never aliasing the others. An index value outside
  // [0, N) reads and writes nothing out of bounds and raises throw_index_out_of_range's error:
  // at once where the backend runs calls synchronously (CPU), at the next sync or download where
  // it queues them (CUDA). scatter_add and index_add accumulate half types in f32 and round once;
  // under kiln::deterministic() their sums run in a fixed order (index order per destination).
  virtual void index(IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
                     const TensorImpl* src, Out out) = 0;
  // The RowOp family (see RowOp) over x's last dim (version 5; logsumexp version 8): x f32, bf16 or
  // f16, of rank >= 1, read through its RowView (row_view); y contiguous, of x's shape and dtype
  // (the norms of an f32 x: or bf16 or f16, rounded once; logsumexp: f32, of shape
  // x.shape[:-1]); params and stats as
  // their types say. Rows of 0 elements are refused by the norms (no mean) and give an empty y for
  // the softmaxes. The call neither syncs nor reads back.
  virtual void rows(RowOp op, const TensorImpl& x, const RowParams& params, Out y,
                    const RowStats& stats) = 0;
  // The gradients of layer_norm or rms_norm (version 9) from x (contiguous, as rows() read it),
  // g, the gradient of y (x's shape and dtype, or bf16 or f16 for an f32 x: autocast's gradient
  // as a half-type product left it; contiguous), the weight the forward read (or
  // none: 1) and the stats it wrote (mean for layer_norm only, rstd; f32 [rows] contiguous):
  //   xhat = (x - mean) rstd (rms_norm: x rstd), dxhat = g weight,
  //   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))  (rms_norm: no mean(dxhat) term)
  //   dw = sum over rows of g xhat, db = sum over rows of g
  // computed in f32 whatever x's dtype. Returns false, writing nothing, where this backend has no
  // kernel for the call (the default), and the caller (autodiff) composes the gradients from
  // element-wise programs and sums. With no gradient asked for it runs nothing and answers that
  // question (so the caller allocates only for a backend that has the kernel). Neither syncs nor
  // reads back.
  virtual bool norm_backward(RowOp op, const TensorImpl& x, const TensorImpl& g,
                             const TensorImpl* weight, const TensorImpl* mean,
                             const TensorImpl& rstd, const NormGrads& grads) {
    (void)op, (void)x, (void)g, (void)weight, (void)mean, (void)rstd, (void)grads;
    return false;
  }
  // The OrderOp family (see OrderOp) over x's last dim (version 6): x contiguous, of rank >= 1, of
  // a dtype supports(order) accepts; values contiguous, x's shape with the last extent K, of
  // order_values_dtype; indices likewise but i32, given exactly when the op has them. Rows of 0
  // elements give empty outputs (max and min refuse them: no value). The call neither syncs nor
  // reads back.
  virtual void order(OrderOp op, const TensorImpl& x, const OrderParams& params, Out values,
                     std::optional<Out> indices) = 0;

  // Scaled dot-product attention (see AttentionParams; version 7): q [B, H, Tq, D], k and v
  // [B, H, Tk, D] of one floating dtype, each with a unit-stride last dim and any non-negative
  // strides on the others (the heads of a fused qkv projection are read in place); o of q's
  // shape and dtype, a unit-stride last dim, no broadcast dim (version 11: the front end passes a
  // transposed view of [B, Tq, H, D] memory, so that merging the heads back costs no copy); lse,
  // when given, contiguous f32 [B, H, Tq]. Returns false, writing
  // nothing, when this backend has no kernel for the shape (a head dim it does not handle), so
  // that the caller composes the attention from other calls instead. Neither syncs nor reads back.
  virtual bool attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                         const AttentionParams& params, Out o, std::optional<Out> lse) = 0;
  // attention's gradients from its output o, the gradient dout of o and the lse the forward wrote:
  // with P = exp(s - lse) (0 where masked) and delta_i = sum_d dout[i, d] o[i, d],
  //   dv = P^T dout,  dS = P (dout v^T - delta),  dq = scale dS k,  dk = scale dS^T q.
  // dq, dk and dv may be strided views (version 11; check_attention_backward_call). Returns false,
  // writing nothing, where this backend has no kernel for the call (the default) or the layout,
  // and the caller (autodiff) asks again with contiguous gradients or composes them.
  virtual bool attention_backward(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                                  const TensorImpl& o, const TensorImpl& dout,
                                  const TensorImpl& lse, const AttentionParams& params, Out dq,
                                  Out dk, Out dv) {
    (void)q, (void)k, (void)v, (void)o, (void)dout, (void)lse, (void)params, (void)dq, (void)dk,
        (void)dv;
    return false;
  }

  // Collectives (version 12). communicator_id() makes, on rank 0, the bytes every rank passes to
  // communicator() (NCCL: its unique id; empty where none is needed); communicator() joins the
  // group of world_size ranks as `rank`, waiting for all of them for at most timeout_s seconds.
  // Both throw DistError where this backend has no transport for the group (the default: none;
  // the CPU backend: a group of one only). collective() queues the op on the device's stream
  // without waiting for it (CollectiveOp says what it computes; check_collective_call its
  // contract).
  virtual std::vector<std::byte> communicator_id();
  virtual std::unique_ptr<Communicator> communicator(std::span<const std::byte> id, int rank,
                                                     int world_size, double timeout_s);
  virtual void collective(const CollectiveParams& p, Communicator& comm, const TensorImpl& x,
                          Out out);

  // Waits for every op queued on this device.
  virtual void sync() = 0;
  // Runs what this layer has recorded and not run yet (nothing, for a backend that runs each
  // call); decorators pass it on.
  virtual void flush() {}

  // Whether this backend runs `op` with operands of these dtypes (elementwise: every dtype the
  // program reads or writes; reduce: the input's; matmul: a's and b's; random: the output's;
  // index: x's, the data dtype; rows: x's; order: x's; attention: q's).
  // The front end asks it instead of knowing each backend's dtypes.
  virtual bool supports(BackendOp op, std::span<const DType> dtypes) const = 0;
  // This layer's facts (a decorator's own, not its inner's).
  virtual std::vector<BackendFeature> features() const { return {}; }
};

// The base of every decorator: forwards each call to the backend below it, so a decorator
// overrides only what it changes, and is named "<tag><inner's name>".
class Decorator : public Backend {
 public:
  Decorator(const char* tag, Backend& inner) : tag_(tag), inner_(inner) {}
  Backend& inner() const { return inner_; }

  std::string name() const override { return std::string(tag_) + "<" + inner_.name() + ">"; }
  Device device() const override { return inner_.device(); }
  std::uint64_t memory_capacity() const override { return inner_.memory_capacity(); }
  Handle empty(const Dims& shape, DType dtype) override { return inner_.empty(shape, dtype); }
  void upload(const void* src, Out t) override { inner_.upload(src, t); }
  void download(const TensorImpl& t, void* dst) override { inner_.download(t, dst); }
  void elementwise(const ir::Program& program, std::span<const TensorImpl* const> inputs,
                   std::span<const double> scalars, Outs outputs) override {
    inner_.elementwise(program, inputs, scalars, outputs);
  }
  void reduce(ReduceOp op, const TensorImpl& x, int dim, Out out) override {
    inner_.reduce(op, x, dim, out);
  }
  bool reduce_prologue(ReduceOp op, const Prologue& p, int dim, Out out) override {
    return inner_.reduce_prologue(op, p, dim, out);
  }
  bool adamw(std::span<const AdamWTensors> params, const AdamWScalars& scalars) override {
    return inner_.adamw(params, scalars);
  }
  bool sum_of_squares(std::span<const TensorImpl* const> xs, Out total) override {
    return inner_.sum_of_squares(xs, total);
  }
  void matmul(const TensorImpl& a, const TensorImpl& c, Out out) override {
    inner_.matmul(a, c, out);
  }
  bool matmul_epilogue(const TensorImpl& a, const TensorImpl& c, const MatmulEpilogue& e,
                       Out out) override {
    return inner_.matmul_epilogue(a, c, e, out);
  }
  void random(const RandomSpec& spec, std::uint64_t seed, Out out) override {
    inner_.random(spec, seed, out);
  }
  void index(IndexOp op, const TensorImpl& x, int dim, const TensorImpl& index,
             const TensorImpl* src, Out out) override {
    inner_.index(op, x, dim, index, src, out);
  }
  void rows(RowOp op, const TensorImpl& x, const RowParams& params, Out y,
            const RowStats& stats) override {
    inner_.rows(op, x, params, y, stats);
  }
  bool norm_backward(RowOp op, const TensorImpl& x, const TensorImpl& g, const TensorImpl* weight,
                     const TensorImpl* mean, const TensorImpl& rstd,
                     const NormGrads& grads) override {
    return inner_.norm_backward(op, x, g, weight, mean, rstd, grads);
  }
  void order(OrderOp op, const TensorImpl& x, const OrderParams& params, Out values,
             std::optional<Out> indices) override {
    inner_.order(op, x, params, values, indices);
  }
  bool attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                 const AttentionParams& params, Out o, std::optional<Out> lse) override {
    return inner_.attention(q, k, v, params, o, lse);
  }
  bool attention_backward(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                          const TensorImpl& o, const TensorImpl& dout, const TensorImpl& lse,
                          const AttentionParams& params, Out dq, Out dk, Out dv) override {
    return inner_.attention_backward(q, k, v, o, dout, lse, params, dq, dk, dv);
  }
  std::vector<std::byte> communicator_id() override { return inner_.communicator_id(); }
  std::unique_ptr<Communicator> communicator(std::span<const std::byte> id, int rank,
                                             int world_size, double timeout_s) override {
    return inner_.communicator(id, rank, world_size, timeout_s);
  }
  void collective(const CollectiveParams& p, Communicator& comm, const TensorImpl& x,
                  Out out) override {
    inner_.collective(p, comm, x, out);
  }
  void sync() override { inner_.sync(); }
  void flush() override { inner_.flush(); }
  bool supports(BackendOp op, std::span<const DType> dtypes) const override {
    return inner_.supports(op, dtypes);
  }

 private:
  const char* tag_;
  Backend& inner_;
};

}  // namespace kiln::detail
