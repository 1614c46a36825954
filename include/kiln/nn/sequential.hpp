// kiln::nn::Sequential: modules applied in order, registered as "0", "1", ... (as
// torch.nn.Sequential). Ranks are compile-time in kiln, so it chains modules whose forward
// maps a Tensor<2> to a Tensor<2> and/or a Tensor<3> to a Tensor<3> (Linear, the norms, Dropout,
// the activations, and a user's own module with such a forward); calling it at a rank that one of
// its modules lacks is a ShapeError naming the module.
//
//   kiln::nn::Sequential mlp;
//   mlp.push_back(std::make_shared<kiln::nn::Linear>(64, 128));
//   mlp.push_back(std::make_shared<kiln::nn::ReLU>());
//   auto y = mlp(x);
#pragma once

#include <functional>
#include <memory>

#include "kiln/nn/module.hpp"

namespace kiln::nn {

class Sequential : public Module {
 public:
  template <class M>
  M& push_back(std::shared_ptr<M> m) {
    Step step;
    if constexpr (requires(const M& c, const Tensor<2>& x) {
                    { c.forward(x) } -> std::same_as<Tensor<2>>;
                  })
      step.rank2 = [p = m.get()](const Tensor<2>& x) { return p->forward(x); };
    if constexpr (requires(const M& c, const Tensor<3>& x) {
                    { c.forward(x) } -> std::same_as<Tensor<3>>;
                  })
      step.rank3 = [p = m.get()](const Tensor<3>& x) { return p->forward(x); };
    static_assert(
        requires(const M& c, const Tensor<2>& x) { c.forward(x); } ||
            requires(const M& c, const Tensor<3>& x) { c.forward(x); },
        "Sequential: the module needs a const forward of a Tensor<2> or a Tensor<3>");
    register_module(std::to_string(steps_.size()), *m);
    step.module = std::move(m);
    steps_.push_back(std::move(step));
    return *static_cast<M*>(steps_.back().module.get());
  }
  std::size_t size() const { return steps_.size(); }
  Module& operator[](std::size_t i) const { return *steps_.at(i).module; }

  Tensor<2> forward(const Tensor<2>& x) const;
  Tensor<3> forward(const Tensor<3>& x) const;
  template <std::size_t D>
  Tensor<D> operator()(const Tensor<D>& x) const {
    return forward(x);
  }

 private:
  struct Step {
    std::shared_ptr<Module> module;
    std::function<Tensor<2>(const Tensor<2>&)> rank2;
    std::function<Tensor<3>(const Tensor<3>&)> rank3;
  };
  std::vector<Step> steps_;
};

}  // namespace kiln::nn
