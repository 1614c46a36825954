// kiln::nn::Module: the base of every layer and model, holding named parameters and named
// sub-modules, as torch.nn.Module does.
//
// C++ has no reflection, so a module registers what it holds, by name, in its constructor (as
// LibTorch's register_parameter / register_module): the names are the ones PyTorch's state_dict
// uses ("transformer.h.0.attn.c_attn.weight"), so they must be spelled anyway, and registration
// keeps the walk explicit (no macros, no code generation). A module registers the address of its
// member Parameter and Module objects, so it can be neither copied nor moved: build it in place
// (a member, a local, std::make_unique / std::make_shared).
//
//   struct Mlp : kiln::nn::Module {
//     kiln::nn::Linear fc1{64, 128}, fc2{128, 10};
//     Mlp() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     kiln::Tensor<2> forward(const kiln::Tensor<2>& x) { return fc2(fc1(x).relu()); }
//   };
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/checkpoint.hpp"
#include "kiln/nn/parameter.hpp"

namespace kiln::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its sub-modules, depth first in registration order,
  // named by their dotted path. A tied parameter appears once, under its first name (as
  // torch's named_parameters).
  std::vector<std::pair<std::string, AnyParameter>> named_parameters() const;
  std::vector<AnyParameter> parameters() const;
  // The direct sub-modules, in registration order.
  const std::vector<std::pair<std::string, Module*>>& named_children() const { return children_; }

  // Training mode (the default) or evaluation mode, for this module and every sub-module:
  // Dropout is the identity in eval().
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves or casts every parameter (their gradients are dropped). Build optimizers after this:
  // they keep per-parameter state of the old device and dtype.
  void to(Device device);
  void to(DType dtype);
  // Clears every parameter's gradient.
  void zero_grad();

  // Every parameter under every name it has (a tied one under each, as torch's state_dict), as
  // a Checkpoint for kiln::save.
  Checkpoint state_dict() const;
  // Loads values by name, cast to each parameter's dtype and placed on its device. ShapeError
  // when a shape differs; with strict, ValueError naming the missing and unexpected names.
  void load_state_dict(const Checkpoint& state, bool strict = true);

 protected:
  // Registers a member parameter (an undefined one, such as an absent bias, is skipped by the
  // walks). Names are unique per module and hold no '.' (ValueError otherwise).
  void register_parameter(const std::string& name, AnyParameter& p);
  template <class M>
  M& register_module(const std::string& name, M& m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, Module& m);
  void check_name(const std::string& name) const;
  // Every (name, parameter) with duplicates for tied ones.
  void walk(const std::string& prefix,
            std::vector<std::pair<std::string, AnyParameter>>& out) const;

  std::vector<std::pair<std::string, AnyParameter*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

}  // namespace kiln::nn
