// The optimizers' multi-tensor updates (detail::adamw_update): one Backend::adamw call for every
// parameter of a group, where the backend has the kernel.
#include "frontend/ops_common.hpp"

namespace kiln::detail {

std::vector<AdamWOutput> adamw_update(std::span<const AdamWInput> in, const AdamWHyper& h) {
  if (in.empty()) return {};
  const Device device = in[0].param->device;
  const auto usable = [&](const Handle& t, const Dims& shape) {
    return !t || (t->device == device && t->dtype == DType::f32 && t->shape == shape &&
                  t->is_contiguous());
  };
  for (const AdamWInput& i : in) {
    const Dims& shape = i.param->shape;
    if (!i.grad || !usable(i.param, shape) || !usable(i.grad, shape) || !usable(i.m, shape) ||
        !usable(i.v, shape) || !i.m != !i.v)
      return {};
  }
  if (h.clip && (h.clip->device != device || h.clip->dtype != DType::f32)) return {};
  Backend& be = backend_of(device);
  const AdamWScalars scalars{h.lr,    h.weight_decay, h.beta1,  h.beta2,     h.eps,
                             h.bias1, h.bias2,        h.factor, h.clip.get()};
  if (!be.adamw({}, scalars)) return {};  // no kernel: allocate nothing
  std::vector<AdamWOutput> out;
  std::vector<AdamWTensors> calls;
  for (const AdamWInput& i : in) {
    const Dims& shape = i.param->shape;
    out.push_back({allocate("adamw", be, shape, DType::f32),
                   allocate("adamw", be, shape, DType::f32),
                   allocate("adamw", be, shape, DType::f32)});
    calls.push_back({i.param.get(), i.grad.get(), i.m.get(), i.v.get(), Out(*out.back().param),
                     Out(*out.back().m), Out(*out.back().v)});
  }
  if (!be.adamw(calls, scalars)) return {};
  return out;
}

}  // namespace kiln::detail
