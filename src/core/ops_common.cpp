#include "core/ops_common.hpp"

#include <fmt/format.h>

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

void check_extents(const char* op, const Dims& shape) {
  for (auto e : shape) {
    if (e < 0)
      throw ShapeError(fmt::format("{}: negative dimension {} in {}", op, e, format_dims(shape)));
  }
}

std::vector<Handle> run_elementwise(const ir::Program& program, std::span<const Handle> inputs,
                                    std::span<const double> scalars, const Dims& shape,
                                    Device device) {
  Backend& be = backend(device);
  std::vector<TensorImpl> in(inputs.size());
  std::vector<const TensorImpl*> in_ptrs(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in[i] = broadcast_to(*inputs[i], shape);
    in_ptrs[i] = &in[i];
  }
  std::vector<Handle> out;
  std::vector<const TensorImpl*> out_ptrs;
  for (auto node : program.outputs) {
    out.push_back(be.empty(shape, program.dtype(node)));
    out_ptrs.push_back(out.back().get());
  }
  be.elementwise(program, in_ptrs, scalars, out_ptrs);
  return out;
}

Handle run_elementwise1(const ir::Program& program, std::span<const Handle> inputs,
                        std::span<const double> scalars, const Dims& shape, Device device) {
  return run_elementwise(program, inputs, scalars, shape, device)[0];
}

}  // namespace kiln::detail
