// Module's walks over its registered parameters and sub-modules (include/kiln/nn/module.hpp).
#include "kiln/nn/module.hpp"

#include <fmt/format.h>

#include <set>

#include "kiln/autograd.hpp"

namespace kiln::nn {

const detail::Handle& AnyParameter::handle() const {
  if (!slot_ || !slot_->value)
    throw ValueError("Parameter: used before it was given a value (an absent bias?)");
  return slot_->value;
}

void AnyParameter::assign(detail::Handle value) const {
  if (!slot_) throw ValueError("Parameter: assigned to an empty parameter");
#if KILN_WITH_AUTODIFF
  // A value already marked (another parameter's memory, or one with a graph) is copied, so that
  // this parameter's leaf and gradient are its own.
  if (detail::requires_grad(value)) value = detail::detach(value);
  detail::set_requires_grad(value, true);
#endif  // (without autodiff a module still runs forward: inference only)
  slot_->value = std::move(value);
}

void Module::check_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError(fmt::format("Module: name '{}' must be non-empty and hold no '.'", name));
  for (const auto& [n, p] : params_)
    if (n == name) throw ValueError(fmt::format("Module: '{}' is registered twice", name));
  for (const auto& [n, m] : children_)
    if (n == name) throw ValueError(fmt::format("Module: '{}' is registered twice", name));
}

void Module::register_parameter(const std::string& name, AnyParameter& p) {
  check_name(name);
  params_.emplace_back(name, &p);
}

void Module::add_child(const std::string& name, Module& m) {
  check_name(name);
  if (&m == this) throw ValueError("Module: a module cannot be its own sub-module");
  children_.emplace_back(name, &m);
}

void Module::walk(const std::string& prefix,
                  std::vector<std::pair<std::string, AnyParameter>>& out) const {
  for (const auto& [name, p] : params_)
    if (p->defined()) out.emplace_back(prefix + name, *p);
  for (const auto& [name, m] : children_) m->walk(prefix + name + ".", out);
}

std::vector<std::pair<std::string, AnyParameter>> Module::named_parameters() const {
  std::vector<std::pair<std::string, AnyParameter>> all, unique;
  walk("", all);
  std::set<const ParameterSlot*> seen;
  for (auto& np : all)
    if (seen.insert(np.second.slot().get()).second) unique.push_back(std::move(np));
  return unique;
}

std::vector<AnyParameter> Module::parameters() const {
  std::vector<AnyParameter> out;
  for (auto& [name, p] : named_parameters()) out.push_back(std::move(p));
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (const auto& p : parameters()) p.assign(detail::to_device(p.handle(), device));
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError(
        fmt::format("Module::to: parameters must be floating, not {}", dtype_name(dtype)));
  NoGradGuard no_grad;
  for (const auto& p : parameters()) p.assign(detail::cast(p.handle(), dtype));
}

void Module::zero_grad() {
  for (const auto& p : parameters()) p.zero_grad();
}

Checkpoint Module::state_dict() const {
  std::vector<std::pair<std::string, AnyParameter>> all;
  walk("", all);
  Checkpoint c;
  for (const auto& [name, p] : all) c.put(name, p.handle());
  return c;
}

void Module::load_state_dict(const Checkpoint& state, bool strict) {
  std::vector<std::pair<std::string, AnyParameter>> all;
  walk("", all);
  std::set<std::string> expected;
  std::vector<std::string> missing;
  for (const auto& [name, p] : all) {
    expected.insert(name);
    if (!state.contains(name)) missing.push_back(name);
  }
  std::vector<std::string> unexpected;
  for (const auto& name : state.names())
    if (!expected.count(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty()))
    throw ValueError(fmt::format("load_state_dict: missing [{}], unexpected [{}]",
                                 fmt::join(missing, ", "), fmt::join(unexpected, ", ")));
  // Check every shape before any parameter changes, so a failed load leaves the module whole.
  for (const auto& [name, p] : all)
    if (state.contains(name) && state.shape(name) != p.shape())
      throw ShapeError(fmt::format("load_state_dict: '{}' has shape {} in the state, {} here", name,
                                   format_dims(state.shape(name)), format_dims(p.shape())));
  NoGradGuard no_grad;
  for (const auto& [name, p] : all) {
    if (!state.contains(name)) continue;
    auto h = state.find(name);
    if (detail::dtype(h) != p.dtype()) h = detail::cast(h, p.dtype());
    if (!(detail::device(h) == p.device())) h = detail::to_device(h, p.device());
    p.assign(h);
  }
}

}  // namespace kiln::nn
