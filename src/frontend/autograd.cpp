// The front end of autodiff: marking leaves, running backward, reading gradients.
#include <fmt/format.h>

#include "dispatch/registry.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/detail/ops.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_AUTODIFF
#include "autodiff/engine.hpp"
#include "autodiff/graph.hpp"
#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"
#endif

namespace kiln::detail {

#if KILN_WITH_AUTODIFF

void set_requires_grad(const Handle& t, bool on) {
  if (!is_floating(t->dtype)) {
    throw DTypeError(fmt::format("requires_grad: only floating tensors have gradients, not {}",
                                 dtype_name(t->dtype)));
  }
  auto& meta = t->buffer->autograd;
  if (meta && !meta->leaf()) {
    throw ValueError(
        "requires_grad: this tensor is the result of ops that record a gradient, so it needs "
        "one already; only a leaf's flag can be set (detach() gives a leaf)");
  }
  if (on)
    autodiff::meta_for(*t);
  else
    meta.reset();
}

bool requires_grad(const Handle& t) { return t->buffer && t->buffer->autograd != nullptr; }

Handle grad(const Handle& t) {
  const auto& meta = t->buffer->autograd;
  if (!meta || !meta->leaf() || !meta->grad) return nullptr;
  // The flat gradient seen through this tensor's view.
  return std::make_shared<TensorImpl>(autodiff::View::of(*t).over(*meta->grad));
}

void zero_grad(const Handle& t) {
  if (const auto& meta = t->buffer->autograd) meta->grad.reset();
}

void set_grad(const Handle& t, const Handle& g) {
  const auto& meta = t->buffer->autograd;
  if (!meta) {
    throw ValueError(
        "set_grad: the tensor does not need a gradient, so it has none to set (call "
        "requires_grad(true) first)");
  }
  if (!meta->leaf()) {
    throw ValueError(
        "set_grad: the tensor is the result of ops that record a gradient; only a leaf keeps "
        "one (as PyTorch's .grad of a non-leaf)");
  }
  if (g->shape != t->shape) {
    throw ShapeError(fmt::format("set_grad: the gradient has shape {} but the tensor {}",
                                 format_dims(g->shape), format_dims(t->shape)));
  }
  if (g->dtype != t->dtype) {
    throw DTypeError(fmt::format("set_grad: the gradient is {} but the tensor {} (cast it first)",
                                 dtype_name(g->dtype), dtype_name(t->dtype)));
  }
  if (g->device != t->device) {
    throw DeviceError(
        fmt::format("set_grad: the gradient is on {} but the tensor on {} (move it "
                    "first)",
                    g->device.str(), t->device.str()));
  }
  for (std::size_t d = 0; d < t->shape.size(); ++d) {
    if (t->strides[d] == 0 && t->shape[d] > 1) {
      throw ValueError(fmt::format(
          "set_grad: the tensor is a broadcast view (dim {} of extent {} has stride 0), whose "
          "elements share memory; set the gradient of the tensor it was expanded from",
          d, t->shape[d]));
    }
  }
  const bool was = autodiff::grad_enabled();
  autodiff::set_grad_enabled(false);
  struct Restore {
    bool was;
    ~Restore() { autodiff::set_grad_enabled(was); }
  } restore{was};
  // A gradient carries no graph and no mark of its own.
  const Handle v = requires_grad(g) ? detach(g) : g;
  const autodiff::View view = autodiff::View::of(*t);
  const std::int64_t n = meta->numel;
  const bool whole =
      view.offset == 0 && numel(view.shape) == n && dense_strides(view.shape, view.strides);
  bool same_layout = whole;
  for (std::size_t d = 0; same_layout && d < view.shape.size(); ++d)
    same_layout = view.shape[d] == 1 || v->strides[d] == view.strides[d];
  if (same_layout) {
    // g's memory in order is the flat gradient: kept as it is (at its offset), not copied.
    meta->grad = std::make_shared<TensorImpl>(autodiff::reshaped(*v, {n}));
    return;
  }
  // g in another layout than the tensor's view (a contiguous g of a transposed leaf), or a view
  // of part of the leaf's memory: written into a flat gradient of its own, where the elements
  // outside the view keep the gradient they had (zero where there was none).
  Backend& be = backend(t->device);
  Handle flat;
  if (whole) {
    flat = be.empty({n}, meta->dtype);
  } else {
    flat = autodiff::zeros(be, n, meta->dtype);
    if (meta->grad) autodiff::copy_into(be, *meta->grad, *flat);
  }
  autodiff::copy_into(be, *v, view.over(*flat));
  meta->grad = flat;
}

void backward(const Handle& t, const Handle& grad_output, bool retain_graph) {
  Handle g = grad_output;
  if (!g) {
    if (numel(t->shape) != 1) {
      throw ShapeError(fmt::format(
          "backward: a tensor of {} elements needs grad_output (only a one-element tensor's "
          "gradient is implied: 1)",
          numel(t->shape)));
    }
    autodiff::set_grad_enabled(false);
    g = full(t->shape, Scalar{1.0, false}, t->dtype, t->device);
    autodiff::set_grad_enabled(true);
  }
  if (g->shape != t->shape || g->device != t->device) {
    throw ShapeError(fmt::format(
        "backward: grad_output of shape {} on {} for a tensor of shape {} "
        "on {}",
        format_dims(g->shape), g->device.str(), format_dims(t->shape), t->device.str()));
  }
  const autodiff::Root root{t.get(), g};
  autodiff::backward(std::span(&root, 1), retain_graph,
                     [](Device d) -> Backend& { return backend(d); });
}

Handle detach(const Handle& t) {
  if (!requires_grad(t)) return t;
  const bool was = autodiff::grad_enabled();
  autodiff::set_grad_enabled(false);
  ir::Program copy;
  copy.output(copy.input(t->dtype));
  Handle out = run_elementwise1("detach", copy, std::span(&t, 1), {}, t->shape, t->device);
  autodiff::set_grad_enabled(was);
  return out;
}

std::vector<Handle> gradients(const Handle& output, std::span<const Handle> inputs,
                              bool retain_graph) {
  if (numel(output->shape) != 1) {
    throw ShapeError(fmt::format("grad: the output has {} elements, not 1", numel(output->shape)));
  }
  autodiff::Captures capture;
  for (const Handle& t : inputs) {
    if (!t->buffer->autograd)
      throw ValueError("grad: an input does not need a gradient (call requires_grad(true))");
    capture[t->buffer->autograd.get()];
  }
  autodiff::set_grad_enabled(false);
  Handle one = full(output->shape, Scalar{1.0, false}, output->dtype, output->device);
  autodiff::set_grad_enabled(true);
  const autodiff::Root root{output.get(), one};
  autodiff::backward(
      std::span(&root, 1), retain_graph, [](Device d) -> Backend& { return backend(d); }, &capture);
  std::vector<Handle> out;
  for (const Handle& t : inputs) {
    Handle flat = capture[t->buffer->autograd.get()];
    if (!flat) {
      autodiff::set_grad_enabled(false);
      out.push_back(full(t->shape, Scalar{0.0, false}, t->dtype, t->device));
      autodiff::set_grad_enabled(true);
      continue;
    }
    out.push_back(std::make_shared<TensorImpl>(autodiff::View::of(*t).over(*flat)));
  }
  return out;
}

Handle checkpoint(const std::function<Handle(const std::vector<Handle>&)>& region,
                  const std::vector<Handle>& inputs) {
  bool any = false;
  for (const Handle& t : inputs) any |= requires_grad(t);
  if (!any || !autodiff::grad_enabled()) return region(inputs);
  Handle out;
  {
    autodiff::set_grad_enabled(false);
    struct Restore {
      ~Restore() { autodiff::set_grad_enabled(true); }
    } restore;
    out = region(inputs);
    // The node needs a result of its own: one no op recorded (an input returned as it is is
    // copied).
    if (out->buffer->autograd) {
      ir::Program copy;
      copy.output(copy.input(out->dtype));
      out = run_elementwise1("checkpoint", copy, std::span(&out, 1), {}, out->shape, out->device);
    }
  }
  if (!is_floating(out->dtype)) return out;
  // Backward runs the region again, maybe after the autocast guard forward ran under is gone: it
  // runs under the state forward saw, as PyTorch's checkpoint does, so it recomputes the same
  // values in the same dtypes.
  auto replay = [region, cast_to = autocast_dtype()](const std::vector<Handle>& in) {
    struct Restore {
      std::optional<DType> outer = autocast_dtype();
      ~Restore() { set_autocast_dtype(outer); }
    } restore;
    set_autocast_dtype(cast_to);
    return region(in);
  };
  autodiff::record_checkpoint(replay, inputs, *out,
                              [](Device d) -> Backend& { return backend(d); });
  return out;
}

void on_grad_final(const Handle& t, std::function<void(const Handle&)> hook) {
  const auto& meta = t->buffer->autograd;
  if (!meta || !meta->leaf()) {
    throw ValueError(
        "on_grad_final: only a leaf that needs a gradient has a final gradient "
        "(call requires_grad(true) first)");
  }
  const autodiff::View view = autodiff::View::of(*t);
  meta->hooks.push_back([view, hook = std::move(hook)](const Handle& flat) {
    hook(std::make_shared<TensorImpl>(view.over(*flat)));
  });
}

bool grad_enabled() { return autodiff::grad_enabled(); }
long long live_autodiff_nodes() { return autodiff::live_nodes(); }
void set_grad_enabled(bool on) { autodiff::set_grad_enabled(on); }

#else

namespace {
[[noreturn]] void absent(const char* op) {
  throw ValueError(
      fmt::format("{}: this kiln was built without autodiff (-DKILN_AUTODIFF=OFF); "
                  "rebuild kiln with -DKILN_AUTODIFF=ON",
                  op));
}
}  // namespace

void set_requires_grad(const Handle&, bool on) {
  if (on) absent("requires_grad");
}
bool requires_grad(const Handle&) { return false; }
Handle grad(const Handle&) { return nullptr; }
void zero_grad(const Handle&) {}
void set_grad(const Handle&, const Handle&) { absent("set_grad"); }
void backward(const Handle&, const Handle&, bool) { absent("backward"); }
Handle detach(const Handle& t) { return t; }
void on_grad_final(const Handle&, std::function<void(const Handle&)>) { absent("on_grad_final"); }
std::vector<Handle> gradients(const Handle&, std::span<const Handle>, bool) { absent("grad"); }
Handle checkpoint(const std::function<Handle(const std::vector<Handle>&)>& region,
                  const std::vector<Handle>& inputs) {
  return region(inputs);
}
bool grad_enabled() { return false; }
void set_grad_enabled(bool) {}
long long live_autodiff_nodes() { return 0; }

#endif

}  // namespace kiln::detail
