#include "fusion/fusion_backend.hpp"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/recycled.hpp"
#include "fusion/fusion_stats.hpp"
#include "fusion/plan_cache.hpp"
#include "kiln/error.hpp"

namespace kiln::fusion {
namespace {

// Whether the call writes fresh results of its own shape, element for element: only then can
// they be recorded (cat writes slices of one existing tensor).
bool fresh_outputs(std::span<const detail::TensorImpl* const> outputs) {
  for (const detail::TensorImpl* t : outputs) {
    const PendingBuffer* p = unbound(*t);
    if (!p || p->node >= 0 || t->offset != 0 || !t->is_contiguous() || t->numel() != p->numel())
      return false;
  }
  return true;
}

// The header counts the ops listed under it (ops_of), and the recorded ops the plan left out.
void trace(const Device& device, const Group& g, const Plan& plan, bool hit) {
  if (!detail::log_enabled("fusion")) return;
  const int dropped = ops_of(g.program) - ops_of(plan.program);
  detail::log_line(
      "fusion",
      fmt::format(
          "{}: group of {} ops over {} -> {} inputs, {} scalars, {} outputs, plan {}{}\n{}",
          device.str(), ops_of(plan.program), format_dims(g.shape), plan.program.inputs.size(),
          plan.program.scalars.size(), plan.program.outputs.size(), hit ? "cached" : "new",
          dropped > 0 ? fmt::format("; {} more recorded ops not needed by its outputs", dropped)
                      : std::string(),
          ir::describe(plan.program)));
}

void trace_unread(const Device& device, const Group& g) {
  if (!detail::log_enabled("fusion")) return;
  detail::log_line("fusion", fmt::format("{}: group of {} recorded ops over {} closed with no "
                                         "result left to write: nothing runs",
                                         device.str(), ops_of(g.program), format_dims(g.shape)));
}

// After its group has run, a pending result either has memory or was lost with a group that
// failed (an out-of-memory error, say); using it then is an error, never a read of nothing.
void require_memory(const detail::TensorImpl& t) {
  if (t.numel() > 0 && unbound(t)) {  // (an empty tensor needs none: ops skip it)
    throw Error(
        "fusion: this tensor was never computed: the recorded ops that make it failed when "
        "they ran (see that error)");
  }
}

void trace_reduction(const Device& device, detail::ReduceOp op, int dim, const Group& g,
                     const Plan& plan, bool hit) {
  if (!detail::log_enabled("fusion")) return;
  detail::log_line(
      "fusion",
      fmt::format("{}: {} over {} of {} with a prologue of {} ops from the open group -> {} "
                  "inputs, {} scalars, plan {}\n{}",
                  device.str(), detail::reduce_name(op),
                  dim >= 0 ? fmt::format("dim {}", dim) : std::string("all"), format_dims(g.shape),
                  ops_of(plan.program), plan.program.inputs.size(), plan.program.scalars.size(),
                  hit ? "cached" : "new", ir::describe(plan.program)));
}

// Reduces x, a pending result of the open group g, with g's program (cut down to what x
// needs) evaluated inside the reduction: x is not written for it. The group stays open, so x
// and its other results are written when it closes only if a handle to them is still alive
// then. False, with nothing done, where the backend cannot take this prologue.
bool reduce_with_prologue(detail::Backend& inner, Group& g, detail::ReduceOp op,
                          const detail::TensorImpl& x, int dim, detail::Out out) {
  g.program.output(unbound(x)->node);
  struct Output {  // x's node is the program's one output for the plan lookup only
    ir::Program& p;
    ~Output() { p.outputs.pop_back(); }
  } output{g.program};
  const PlanLookup found = plan_for(g.program);
  const Plan& plan = *found.plan;
  std::vector<const detail::TensorImpl*> in;
  for (auto slot : plan.input_slots) in.push_back(&g.inputs[slot]);
  std::vector<double> scalars;
  for (auto slot : plan.scalar_slots) scalars.push_back(g.scalars[slot]);
  if (!inner.reduce_prologue(op, {plan.program, in, scalars, x.shape}, dim, out)) return false;
  trace_reduction(inner.device(), op, dim, g, plan, found.hit);
  count_reduction(plan, found.hit, in);
  return true;
}

// Marks every node that `root` is computed from (root included) in `in`.
void mark_subtree(const ir::Program& p, std::int32_t root, std::vector<bool>& in) {
  in[static_cast<std::size_t>(root)] = true;
  for (std::int32_t i = root; i >= 0; --i) {  // (operands come before the nodes that read them)
    if (!in[static_cast<std::size_t>(i)]) continue;
    const ir::Node& n = p.nodes[static_cast<std::size_t>(i)];
    const int operands = ir::arity(n.op);
    if (operands > 0) in[static_cast<std::size_t>(n.a)] = true;
    if (operands > 1) in[static_cast<std::size_t>(n.b)] = true;
    if (operands > 2) in[static_cast<std::size_t>(n.c)] = true;
  }
}

// The bytes of t's elements in memory (a broadcast dim's once).
std::size_t stored_bytes(const detail::TensorImpl& t) {
  std::size_t n = dtype_size(t.dtype);
  for (std::size_t d = 0; d < t.shape.size(); ++d)
    if (t.strides[d] != 0) n *= static_cast<std::size_t>(t.shape[d]);
  return n;
}

// Whether an op costs the CPU more than reading its result back from memory would: the
// transcendental functions (and pow), against a few SIMD instructions for the others.
bool dear_on_cpu(ir::Op op) {
  switch (op) {
    case ir::Op::sin:
    case ir::Op::cos:
    case ir::Op::tan:
    case ir::Op::exp:
    case ir::Op::log:
    case ir::Op::tanh:
    case ir::Op::sigmoid:
    case ir::Op::gelu:
    case ir::Op::silu:
    case ir::Op::erf:
    case ir::Op::pow:
      return true;
    default:
      return false;
  }
}

// Whether x, a pending result of the open group g, is better reduced with g's program as its
// prologue (x's subtree computed again inside the reduction, x never written) than with g closed
// first (x written, then reduced from memory). Where x's subtree holds another result of g that a
// handle still holds (a named intermediate: `d` in `auto d = a - b; auto r = (d * d).sum(1);`),
// g will likely write it when it closes, so the prologue does its work a second time. On the
// CPU that work is dear where it gathers (an input broadcast or strided over g's shape: issue
// 19's [1e6, 8, 2] program ran 1.6x slower fused than unfused) or calls a transcendental
// function (the fuzzer's benchmark twin: exp and tanh computed twice, 1.7x), so such a subtree
// closes g; a dense, arithmetic one (softmax's `x * k`, still named inside the composition) is
// recomputed. On CUDA the work is nearly free beside memory: the prologue runs when the inputs it
// reads are no more bytes than writing x and reading it back. (x itself is held by the caller
// now, named or not, so it does not count: a named x that the group writes too is computed twice.)
bool prologue_pays(const Group& g, const detail::TensorImpl& x, Device::Kind device) {
  const std::int32_t root = unbound(x)->node;
  const std::size_t nodes = g.program.nodes.size();
  std::vector<bool> in_x(nodes, false), twice(nodes, false);
  mark_subtree(g.program, root, in_x);
  bool named = false;
  for (const PendingOutput& o : g.outputs) {
    if (o.node == root || !in_x[static_cast<std::size_t>(o.node)] || o.buffer.expired()) continue;
    mark_subtree(g.program, o.node, twice);
    named = true;
  }
  if (!named) return true;  // nothing is computed twice: the prologue only saves bytes
  std::size_t input_bytes = 0;
  bool dear_twice = false;
  for (std::size_t i = 0; i < nodes; ++i) {
    const ir::Node& n = g.program.nodes[i];
    if (!in_x[i]) continue;
    if (twice[i] && dear_on_cpu(n.op)) dear_twice = true;
    if (n.op != ir::Op::input) continue;
    const detail::TensorImpl& t = g.inputs[static_cast<std::size_t>(n.a)];
    input_bytes += stored_bytes(t);
    if (twice[i] && (t.shape != g.shape || !t.is_contiguous())) dear_twice = true;
  }
  if (device == Device::Kind::cpu) return !dear_twice;
  return input_bytes <= 2 * static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype);
}

// The tensor in memory that g is computed from as cast(it) to f32, seen with g's shape, where g
// is a pending result of the open group whose node is a cast of one of its inputs: a contiguous
// half-type tensor of g's elements, x being f32. nullopt otherwise.
std::optional<detail::TensorImpl> cast_source(const Group& group, const detail::TensorImpl& g,
                                              const detail::TensorImpl& x) {
  if (x.dtype != DType::f32 || !group.reads_in_registers(g)) return std::nullopt;
  const PendingBuffer* p = unbound(g);
  if (p->numel() != g.numel()) return std::nullopt;  // g is all of its buffer
  const ir::Node& node = group.program.nodes[static_cast<std::size_t>(p->node)];
  if (node.op != ir::Op::cast) return std::nullopt;
  const ir::Node& in = group.program.nodes[static_cast<std::size_t>(node.a)];
  if (in.op != ir::Op::input) return std::nullopt;
  detail::TensorImpl s = group.inputs[static_cast<std::size_t>(in.a)];
  if (!is_half(s.dtype) || !s.is_contiguous() || s.numel() != g.numel()) return std::nullopt;
  s.shape = g.shape;
  s.strides = g.strides;
  return s;
}

}  // namespace

detail::Handle Fusion::empty(const Dims& shape, DType dtype) {
  auto t = detail::make_recycled<detail::TensorImpl>();
  t->buffer = detail::make_recycled<PendingBuffer>(detail::numel(shape), dtype);
  t->device = inner().device();
  t->dtype = dtype;
  t->shape = shape;
  t->strides = detail::contiguous_strides(shape);
  return t;
}

void Fusion::bind(const detail::TensorImpl& t) {
  if (PendingBuffer* p = unbound(t)) p->bind(inner().empty({p->numel()}, p->dtype())->buffer);
}

void Fusion::upload(const void* src, detail::Out out) {
  bind(*out);
  inner().upload(src, out);
}

void Fusion::random(const detail::RandomSpec& spec, std::uint64_t seed, detail::Out out) {
  bind(*out);
  inner().random(spec, seed, out);
}

void Fusion::download(const detail::TensorImpl& t, void* dst) {
  flush();
  require_memory(t);
  inner().download(t, dst);
}

void Fusion::sync() {
  flush();
  inner().sync();
}

void Fusion::reduce(detail::ReduceOp op, const detail::TensorImpl& x, int dim, detail::Out out) {
  {
    std::lock_guard lock(mu_);
    if (group_.reads_in_registers(x) && x.shape == group_.shape &&
        prologue_pays(group_, x, inner().device().kind())) {
      bind(*out);
      if (reduce_with_prologue(inner(), group_, op, x, dim, out)) return;
    }
    flush_locked();
  }
  require_memory(x);
  bind(*out);
  inner().reduce(op, x, dim, out);
}

void Fusion::matmul(const detail::TensorImpl& a, const detail::TensorImpl& b, detail::Out out) {
  flush();
  require_memory(a);
  require_memory(b);
  bind(*out);
  inner().matmul(a, b, out);
}

bool Fusion::matmul_epilogue(const detail::TensorImpl& a, const detail::TensorImpl& b,
                             const detail::MatmulEpilogue& e, detail::Out out) {
  flush();
  require_memory(a);
  require_memory(b);
  if (e.bias) require_memory(*e.bias);
  bind(*out);
  if (e.pre_activation) bind(**e.pre_activation);
  return inner().matmul_epilogue(a, b, e, out);
}

void Fusion::index(detail::IndexOp op, const detail::TensorImpl& x, int dim,
                   const detail::TensorImpl& index, const detail::TensorImpl* src,
                   detail::Out out) {
  flush();
  require_memory(x);
  require_memory(index);
  if (src) require_memory(*src);
  bind(*out);
  inner().index(op, x, dim, index, src, out);
}

bool Fusion::adamw(std::span<const detail::AdamWTensors> params,
                   const detail::AdamWScalars& scalars) {
  if (params.empty()) return inner().adamw(params, scalars);  // the question alone: no flush
  flush();
  if (scalars.clip) require_memory(*scalars.clip);
  for (const detail::AdamWTensors& p : params) {
    for (const detail::TensorImpl* t : {p.param, p.grad, p.m, p.v})
      if (t) require_memory(*t);
    for (const detail::Out& o : {p.new_param, p.new_m, p.new_v}) bind(*o);
  }
  return inner().adamw(params, scalars);
}

bool Fusion::sum_of_squares(std::span<const detail::TensorImpl* const> xs, detail::Out total) {
  flush();
  for (const detail::TensorImpl* x : xs) require_memory(*x);
  bind(*total);
  return inner().sum_of_squares(xs, total);
}

void Fusion::collective(const detail::CollectiveParams& p, detail::Communicator& comm,
                        const detail::TensorImpl& x, detail::Out out) {
  flush();
  require_memory(x);
  bind(*out);
  inner().collective(p, comm, x, out);
}

void Fusion::rows(detail::RowOp op, const detail::TensorImpl& x, const detail::RowParams& params,
                  detail::Out y, const detail::RowStats& stats) {
  flush();
  require_memory(x);
  if (params.weight) require_memory(*params.weight);
  if (params.bias) require_memory(*params.bias);
  if (params.residual) require_memory(*params.residual);
  bind(*y);
  if (stats.mean) bind(**stats.mean);
  if (stats.rstd) bind(**stats.rstd);
  if (stats.sum) bind(**stats.sum);
  inner().rows(op, x, params, y, stats);
}

bool Fusion::attention(const detail::TensorImpl& q, const detail::TensorImpl& k,
                       const detail::TensorImpl& v, const detail::AttentionParams& params,
                       detail::Out o, std::optional<detail::Out> lse) {
  flush();
  require_memory(q);
  require_memory(k);
  require_memory(v);
  bind(*o);
  if (lse) bind(**lse);
  return inner().attention(q, k, v, params, o, lse);
}

bool Fusion::attention_backward(const detail::TensorImpl& q, const detail::TensorImpl& k,
                                const detail::TensorImpl& v, const detail::TensorImpl& o,
                                const detail::TensorImpl& dout, const detail::TensorImpl& lse,
                                const detail::AttentionParams& params, detail::Out dq,
                                detail::Out dk, detail::Out dv) {
  flush();
  for (const detail::TensorImpl* t : {&q, &k, &v, &o, &dout, &lse}) require_memory(*t);
  bind(*dq);
  bind(*dk);
  bind(*dv);
  return inner().attention_backward(q, k, v, o, dout, lse, params, dq, dk, dv);
}

bool Fusion::norm_backward(detail::RowOp op, const detail::TensorImpl& x,
                           const detail::TensorImpl& g, const detail::TensorImpl* weight,
                           const detail::TensorImpl* mean, const detail::TensorImpl& rstd,
                           const detail::NormGrads& grads) {
  // The question whether the kernel exists reads no memory: nothing is flushed for it.
  if (!grads.dx && !grads.dw && !grads.db)
    return inner().norm_backward(op, x, g, weight, mean, rstd, grads);
  {
    // g pending as an f32 cast of a half tensor in memory (autocast's gradient of an f32 norm's
    // output: a bf16 product's, cast up): the kernel reads the half tensor instead, and the group
    // stays open, so the f32 g is written only if a handle to it is still alive when it closes.
    // (Only where the other inputs are in memory already: any pending one needs the flush.)
    std::lock_guard lock(mu_);
    const std::optional<detail::TensorImpl> source = cast_source(group_, g, x);
    const auto in_memory = [](const detail::TensorImpl* t) { return !t || !unbound(*t); };
    if (source && in_memory(&x) && in_memory(weight) && in_memory(mean) && in_memory(&rstd) &&
        in_memory(grads.dsum)) {
      for (const std::optional<detail::Out>& o : {grads.dx, grads.dw, grads.db, grads.dx_half})
        if (o) bind(**o);
      if (inner().norm_backward(op, x, *source, weight, mean, rstd, grads)) return true;
    }
    flush_locked();
  }
  for (const detail::TensorImpl* t : {&x, &g, weight, mean, &rstd, grads.dsum})
    if (t) require_memory(*t);
  for (const std::optional<detail::Out>& o : {grads.dx, grads.dw, grads.db, grads.dx_half})
    if (o) bind(**o);
  return inner().norm_backward(op, x, g, weight, mean, rstd, grads);
}

void Fusion::order(detail::OrderOp op, const detail::TensorImpl& x,
                   const detail::OrderParams& params, detail::Out values,
                   std::optional<detail::Out> indices) {
  flush();
  require_memory(x);
  bind(*values);
  if (indices) bind(**indices);
  inner().order(op, x, params, values, indices);
}

void Fusion::elementwise(const ir::Program& program,
                         std::span<const detail::TensorImpl* const> inputs,
                         std::span<const double> scalars, detail::Outs outs) {
  std::lock_guard lock(mu_);
  const std::span<const detail::TensorImpl* const> outputs = outs.tensors;
  const Dims& shape = outputs[0]->shape;
  if (!fresh_outputs(outputs) || outputs[0]->numel() == 0 || inputs.size() > kMaxCallInputs) {
    flush_locked();
    for (const detail::TensorImpl* t : inputs) require_memory(*t);
    for (const detail::TensorImpl* t : outputs) bind(*t);
    inner().elementwise(program, inputs, scalars, outs);
    return;
  }
  // A pending result read other than element for element must exist in memory first.
  const bool same_shape = group_.empty() || group_.shape == shape;
  std::uint64_t in_registers = same_shape ? group_.in_registers(inputs) : 0;
  bool needs_memory = !same_shape;
  for (std::size_t i = 0; i < inputs.size() && !needs_memory; ++i)
    needs_memory = unbound(*inputs[i]) && !(in_registers >> i & 1);
  if (needs_memory || !group_.fits(inputs, in_registers)) {
    flush_locked();
    in_registers = 0;  // (the group is empty now)
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!(in_registers >> i & 1)) require_memory(*inputs[i]);
  if (group_.empty()) {
    group_.serial = serial_++;
    group_.shape = shape;
  }
  group_.append(program, inputs, in_registers, scalars, outputs);
  count_recorded();
}

void Fusion::flush() {
  std::lock_guard lock(mu_);
  flush_locked();
}

void Fusion::flush_locked() {
  if (group_.empty()) return;
  // The decorator starts afresh even if running this group throws; whatever happens, the run
  // ends with running_ and the operand lists cleared (their capacity kept), which releases the
  // group's inputs and the live results' extra handles.
  std::swap(group_, running_);
  struct Clear {
    Fusion& f;
    ~Clear() {
      f.running_.clear();
      f.live_.clear();
      f.run_inputs_.clear();
      f.run_outputs_.clear();
      f.run_scalars_.clear();
      f.run_handles_.clear();
    }
  } clear{*this};
  Group& g = running_;

  // The results someone still holds; the rest stay in registers.
  for (const PendingOutput& o : g.outputs) {
    if (auto p = o.buffer.lock()) {
      live_.push_back(std::static_pointer_cast<PendingBuffer>(std::move(p)));
      g.program.output(o.node);
    }
  }
  if (live_.empty()) {  // nothing observable: the whole group is dead code
    trace_unread(inner().device(), g);
    count_unread(g);
    return;
  }
  const PlanLookup found = plan_for(g.program);
  const Plan& plan = *found.plan;
  trace(inner().device(), g, plan, found.hit);

  for (auto slot : plan.input_slots) run_inputs_.push_back(&g.inputs[slot]);
  for (auto slot : plan.scalar_slots) run_scalars_.push_back(g.scalars[slot]);
  for (const auto& p : live_) {
    run_handles_.push_back(inner().empty(g.shape, p->dtype()));
    p->bind(run_handles_.back()->buffer);
    run_outputs_.push_back(run_handles_.back().get());
  }
  inner().elementwise(plan.program, run_inputs_, run_scalars_, detail::Outs(run_outputs_));
  count_group(g, plan, found.hit, run_inputs_);
}

}  // namespace kiln::fusion
