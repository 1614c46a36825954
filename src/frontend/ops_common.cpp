#include "frontend/ops_common.hpp"

#include <fmt/format.h>

#include <array>
#include <limits>

#include "core/checked.hpp"
#include "dispatch/registry.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

Device common_device(const char* op, std::initializer_list<const Handle*> ts) {
  Device d = (*ts.begin())->get()->device;
  for (const Handle* t : ts) {
    if (!((*t)->device == d)) {
      throw DeviceError(
          fmt::format("{}: tensors on different devices: {} and {} (copy with .to(device))", op,
                      d.str(), (*t)->device.str()));
    }
  }
  return d;
}

Backend& backend_of(Device device) { return backend(device); }

Handle view(const TensorImpl& t, Dims shape, Dims strides, std::int64_t offset) {
  auto v = std::make_shared<TensorImpl>();
  v->buffer = t.buffer;
  v->device = t.device;
  v->dtype = t.dtype;
  v->shape = std::move(shape);
  v->strides = std::move(strides);
  v->offset = offset;
  return v;
}

Dims broadcast_shapes(const char* op, const Dims& a, const Dims& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) {
      throw ShapeError(
          fmt::format("{}: shapes {} and {} cannot broadcast", op, format_dims(a), format_dims(b)));
    }
    out[i] = x == 1 ? y : x;
  }
  try {
    checked_numel(op, out);
  } catch (const ShapeError& e) {
    throw ShapeError(
        fmt::format("{} (broadcasting {} and {})", e.what(), format_dims(a), format_dims(b)));
  }
  return out;
}

TensorImpl broadcast_to(const TensorImpl& t, const Dims& shape) {
  TensorImpl v = t;
  const std::size_t lead = shape.size() - t.shape.size();
  v.shape = shape;
  v.strides.assign(shape.size(), 0);
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    v.strides[lead + i] = t.shape[i] == 1 && shape[lead + i] != 1 ? 0 : t.strides[i];
  }
  return v;
}

double checked_scalar(const char* op, Scalar s, DType t) {
  if (t == DType::i32 && (s.value < std::numeric_limits<std::int32_t>::min() ||
                          s.value > std::numeric_limits<std::int32_t>::max())) {
    throw ValueError(fmt::format("{}: scalar {} does not fit i32", op, s.value));
  }
  return s.value;
}

Handle allocate(const char* op, Backend& be, const Dims& shape, DType dtype) {
  const auto bytes = static_cast<std::uint64_t>(checked_bytes(op, shape, dtype));
  if (bytes > be.memory_capacity()) {
    throw OutOfMemoryError(fmt::format(
        "{}: a {} tensor of shape {} needs {} bytes, more than the {} bytes of {}'s memory", op,
        dtype_name(dtype), format_dims(shape), bytes, be.memory_capacity(), be.device().str()));
  }
  try {
    return be.empty(shape, dtype);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(fmt::format("{}: {}", op, e.what()));
  }
}

namespace {

// The calls of one element-wise op: inputs broadcast to `shape`, one new output per program
// output written to `out`. Recording an op under fusion costs little more than this function,
// so it avoids the heap where it can: inputs that already have the shape are passed as they
// are, and operand lists of up to kInline entries live on the stack.
constexpr std::size_t kInline = 4;

void run_into(const char* op, const ir::Program& program, std::span<const Handle> inputs,
              std::span<const double> scalars, const Dims& shape, Device device, Handle* out) {
  Backend& be = backend(device);
  const std::size_t n_in = inputs.size(), n_out = program.outputs.size();
  std::array<const TensorImpl*, kInline> in_inline{}, out_inline{};
  std::vector<const TensorImpl*> in_heap, out_heap;
  if (n_in > kInline) in_heap.resize(n_in);
  if (n_out > kInline) out_heap.resize(n_out);
  const TensorImpl** in = n_in > kInline ? in_heap.data() : in_inline.data();
  const TensorImpl** outs = n_out > kInline ? out_heap.data() : out_inline.data();
  std::vector<TensorImpl> views;  // broadcast views; reserved so pointers into it stay valid
  for (std::size_t i = 0; i < n_in; ++i) {
    if (inputs[i]->shape == shape) {
      in[i] = inputs[i].get();
    } else {
      if (views.empty()) views.reserve(n_in);
      views.push_back(broadcast_to(*inputs[i], shape));
      in[i] = &views.back();
    }
  }
  for (std::size_t o = 0; o < n_out; ++o) {
    out[o] = allocate(op, be, shape, program.dtype(program.outputs[o]));
    outs[o] = out[o].get();
  }
  be.elementwise(program, {in, n_in}, scalars, detail::Outs({outs, n_out}));
}

}  // namespace

std::vector<Handle> run_elementwise(const char* op, const ir::Program& program,
                                    std::span<const Handle> inputs, std::span<const double> scalars,
                                    const Dims& shape, Device device) {
  std::vector<Handle> out(program.outputs.size());
  run_into(op, program, inputs, scalars, shape, device, out.data());
  return out;
}

Handle run_elementwise1(const char* op, const ir::Program& program, std::span<const Handle> inputs,
                        std::span<const double> scalars, const Dims& shape, Device device) {
  if (program.outputs.size() != 1)
    throw InternalError("run_elementwise1: the program has not one output");
  Handle out;
  run_into(op, program, inputs, scalars, shape, device, &out);
  return out;
}

}  // namespace kiln::detail
