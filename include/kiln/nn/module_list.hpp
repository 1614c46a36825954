// kiln::nn::ModuleList<M>: sub-modules of one type registered as "0", "1", ... (as
// torch.nn.ModuleList), owned through unique_ptr since modules cannot move.
#pragma once

#include <memory>
#include <vector>

#include "kiln/nn/module.hpp"

namespace kiln::nn {

template <class M>
class ModuleList : public Module {
 public:
  M& push_back(std::unique_ptr<M> m) {
    register_module(std::to_string(items_.size()), *m);
    items_.push_back(std::move(m));
    return *items_.back();
  }
  std::size_t size() const { return items_.size(); }
  M& operator[](std::size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::unique_ptr<M>> items_;
};

}  // namespace kiln::nn
