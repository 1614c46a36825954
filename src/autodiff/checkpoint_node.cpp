// kiln::checkpoint's node: the region's intermediates are not kept; backward runs the region
// again from its saved inputs, with recording on, and takes the gradient back through that.
#include <utility>

#include "autodiff/engine.hpp"
#include "autodiff/nodes.hpp"
#include "autodiff/tensor_ops.hpp"

namespace kiln::autodiff {

namespace {

class CheckpointNode final : public Node {
 public:
  CheckpointNode(Region fn, std::span<const Handle> inputs, std::function<Backend&(Device)> be)
      : fn_(std::move(fn)), backend_(std::move(be)) {
    for (const Handle& h : inputs) {
      saved_.push_back(h);
      if (h->buffer->autograd) edges.push_back(edge_to(*h));
      wanted_.push_back(h->buffer->autograd != nullptr);
    }
  }
  const char* name() const override { return "checkpoint"; }
  bool release() override { return std::exchange(saved_, {}).size() > 0; }

  std::vector<Handle> backward(Backend& be, std::span<const Handle> grads) override {
    // Fresh leaves with the inputs' values, so that the recomputed graph ends at them.
    std::vector<Handle> leaves;
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      if (!wanted_[i]) {
        leaves.push_back(saved_[i]);
        continue;
      }
      Handle copy = be.empty(saved_[i]->shape, saved_[i]->dtype);
      copy_into(be, *saved_[i], *copy);
      meta_for(*copy);
      leaves.push_back(copy);
    }
    Handle out;
    {
      const bool was = grad_enabled();
      set_grad_enabled(true);
      struct Restore {
        bool was;
        ~Restore() { set_grad_enabled(was); }
      } restore{was};
      out = fn_(leaves);
    }
    const Root root{out.get(), grads[0]};
    autodiff::backward(std::span(&root, 1), false, backend_);
    std::vector<Handle> result;
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      if (!wanted_[i]) continue;
      const Handle& flat = leaves[i]->buffer->autograd->grad;
      if (!flat) {
        result.push_back(nullptr);
        continue;
      }
      TensorImpl g = *flat;
      g.shape = leaves[i]->shape;
      g.strides = detail::contiguous_strides(g.shape);
      result.push_back(std::make_shared<TensorImpl>(std::move(g)));
    }
    return result;
  }

 private:
  Region fn_;
  std::function<Backend&(Device)> backend_;
  std::vector<bool> wanted_;
};

}  // namespace

void record_checkpoint(Region fn, std::span<const Handle> inputs, const TensorImpl& out,
                       std::function<Backend&(Device)> backend) {
  record_writer(std::make_shared<CheckpointNode>(std::move(fn), inputs, std::move(backend)), out);
}

}  // namespace kiln::autodiff
