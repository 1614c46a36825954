// Backward: from root tensors and their gradients to every leaf behind them.
#pragma once

#include <functional>
#include <span>
#include <unordered_map>

#include "autodiff/graph.hpp"

namespace kiln::autodiff {

struct Root {
  const TensorImpl* tensor;  // needs a gradient
  Handle grad;               // of its shape and dtype
};

// Runs the recorded nodes behind `roots` once each, latest first, with grad mode off, and adds
// each leaf's gradient to its Meta's grad. `backend` gives the chain to run on for a device.
// Without retain_graph, every node run frees what it saved; running such a node again throws
// ValueError saying how to keep it.
//
// With `capture` (kiln::grad): each captured Meta's gradient is set in the map, no leaf's grad is
// touched and no hook runs.
using Captures = std::unordered_map<Meta*, Handle>;
void backward(std::span<const Root> roots, bool retain_graph,
              const std::function<Backend&(Device)>& backend, Captures* capture = nullptr);

}  // namespace kiln::autodiff
