// Creating tensors, reading them back, moving them between devices.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/checked.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {

double scalar_for(const char* op, double v, DType t) {
  if (t == DType::i32) {
    if (std::isnan(v) || v < std::numeric_limits<std::int32_t>::min() ||
        v > std::numeric_limits<std::int32_t>::max()) {
      throw ValueError(fmt::format("{}: {} does not fit i32", op, v));
    }
    return std::trunc(v);
  }
  if (t == DType::boolean) return v != 0 ? 1.0 : 0.0;
  return v;
}

Handle full(const Dims& shape, Scalar value, DType dtype, Device device) {
  checked_numel("full", shape);
  ir::Program p;
  p.output(p.scalar(dtype));
  double v = scalar_for("full", value.value, dtype);
  return run_elementwise1("full", p, {}, std::span<const double>(&v, 1), shape, device);
}

Handle arange(double start, double stop, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step)) {
    throw ValueError(
        fmt::format("arange: start {}, stop {}, step {}: need finite values and a nonzero step",
                    start, stop, step));
  }
  if (dtype == DType::boolean) throw DTypeError("arange: dtype bool is not supported");
  double count = std::max(0.0, std::ceil((stop - start) / step));
  if (count > std::numeric_limits<std::int32_t>::max()) {
    throw ValueError(fmt::format("arange: {} elements exceed the limit of 2^31 - 1", count));
  }
  // value = start + index * step, computed in the target dtype (exact for integers).
  ir::Program p;
  std::int32_t index = p.cast(p.index(), dtype);
  std::int32_t scaled = p.binary(ir::Op::mul, index, p.scalar(dtype));
  p.output(p.binary(ir::Op::add, scaled, p.scalar(dtype)));
  double scalars[] = {scalar_for("arange", step, dtype), scalar_for("arange", start, dtype)};
  if (dtype == DType::i32 && (scalars[0] != step || scalars[1] != start)) {
    throw ValueError(
        fmt::format("arange: i32 needs integral start and step, got {} and {}", start, step));
  }
  return run_elementwise1("arange", p, {}, scalars, {static_cast<std::int64_t>(count)}, device);
}

Handle from_data(const void* data, std::size_t count, DType dtype, const Dims& shape,
                 Device device) {
  const std::int64_t n = checked_numel("from_data", shape);
  if (count != static_cast<std::uint64_t>(n)) {
    throw ShapeError(fmt::format("from_data: {} values for shape {} ({} elements)", count,
                                 format_dims(shape), n));
  }
  Backend& be = backend_of(device);
  Handle t = allocate("from_data", be, shape, dtype);
  be.upload(data, detail::Out(*t));
  return t;
}

Handle random(const Dims& shape, const Distribution& dist, Device device, std::uint64_t seed,
              DType dtype) {
  checked_numel("random", shape);
  if (!is_floating(dtype)) {
    throw DTypeError(
        fmt::format("random: needs a floating dtype (f32, bf16, f16), got {}", dtype_name(dtype)));
  }
  RandomSpec spec;
  if (dist.kind == Distribution::Kind::uniform) {
    if (!(std::isfinite(dist.a) && std::isfinite(dist.b) && dist.a <= dist.b)) {
      throw ValueError(
          fmt::format("random: uniform({}, {}) needs finite lo <= hi", dist.a, dist.b));
    }
    spec = {RandomSpec::Kind::uniform, dist.a, dist.b};
  } else {
    if (!(std::isfinite(dist.a) && std::isfinite(dist.b) && dist.b >= 0)) {
      throw ValueError(
          fmt::format("random: normal({}, {}) needs a finite mean and std >= 0", dist.a, dist.b));
    }
    spec = {RandomSpec::Kind::normal, dist.a, dist.b};
  }
  // The backend writes the dtype itself where it can (one kernel, 2 bytes an element for a half
  // type); else it draws f32, which the cast rounds to the same values.
  Backend& be = backend_of(device);
  const DType drawn =
      be.supports(BackendOp::random, std::span<const DType>(&dtype, 1)) ? dtype : DType::f32;
  Handle t = allocate("random", be, shape, drawn);
  be.random(spec, seed, detail::Out(*t));
  return drawn == dtype ? t : cast(t, dtype);
}

Handle contiguous(const Handle& x) {
  if (x->is_contiguous()) return x;
  ir::Program p;
  p.output(p.input(x->dtype));
  return run_elementwise1("contiguous", p, std::span<const Handle>(&x, 1), {}, x->shape, x->device);
}

void read(const Handle& t, void* dst, DType as) {
  Handle c = contiguous(t->dtype == as ? t : cast(t, as));
  backend_of(c->device).download(*c, dst);
}

Handle to_device(const Handle& t, Device device) {
  if (t->device == device) return t;
  const auto bytes = static_cast<std::size_t>(t->numel()) * dtype_size(t->dtype);
  std::vector<unsigned char> host;
  try {
    host.resize(bytes);
  } catch (const std::exception&) {  // std::bad_alloc, or std::length_error past max_size()
    throw OutOfMemoryError(fmt::format(
        "to: cannot allocate {} bytes of host memory to move a tensor of shape {} from {} to {}",
        bytes, format_dims(t->shape), t->device.str(), device.str()));
  }
  read(t, host.data(), t->dtype);
  return from_data(host.data(), static_cast<std::size_t>(t->numel()), t->dtype, t->shape, device);
}

}  // namespace kiln::detail
