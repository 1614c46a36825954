// The graph the autodiff decorator records: which buffers need a gradient (Meta), the ops that
// wrote them (Node) and the inputs each op takes a gradient to (Edge).
//
// Ownership runs backwards only, from results to what made them: a buffer owns its Meta
// (detail::Buffer::autograd), a Meta the nodes that wrote it, a node its edges (the Metas of its
// inputs) and the forward tensors its backward reads. Nothing global holds the graph, so it goes
// when the last tensor that needs it goes; Node's destructor releases a long chain without
// recursion. A node knows its outputs only weakly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "core/tensor_impl.hpp"

namespace kiln::autodiff {

using detail::Backend;
using detail::Handle;
using detail::TensorImpl;

// Whether ops record for backward on this thread (kiln::NoGradGuard turns it off; backward runs
// with it off).
bool grad_enabled();
void set_grad_enabled(bool on);

// A view's geometry over a buffer, without the memory: where a gradient lands in it.
struct View {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  Dims shape, strides;
  std::int64_t offset = 0;

  static View of(const TensorImpl& t);
  // This view over `buffer`.
  TensorImpl over(std::shared_ptr<detail::Buffer> buffer) const;
  // This view over a gradient kept flat (Meta::grad, Meta::pending), which may itself start at
  // an offset into its buffer (a gradient passed on as it is shares its source's buffer).
  TensorImpl over(const TensorImpl& flat) const;
};

class Node;

// What a buffer that needs a gradient carries. Its gradient is flat: numel elements of the
// buffer's dtype, each the gradient of the buffer element at that index, so that every view of
// the buffer (transposed, sliced, broadcast) finds its elements' gradients through its strides.
struct Meta {
  Meta(DType t, std::int64_t n, Device d) : dtype(t), numel(n), device(d) {}
  DType dtype;
  std::int64_t numel;
  Device device;
  std::vector<std::shared_ptr<Node>> writers;  // the recorded ops that wrote it; none for a leaf
  Handle grad;     // a leaf's gradient, accumulated over backward calls until zeroed
  Handle pending;  // during one backward: the gradient gathered so far for a non-leaf
  // A leaf's callbacks, each run with its accumulated gradient (flat) once a backward pass has
  // added everything it will to it (data-parallel training all-reduces from here).
  std::vector<std::function<void(const Handle&)>> hooks;

  bool leaf() const { return writers.empty(); }
};

// Meta of a buffer of `t`'s dtype, creating it (as a leaf) where there is none.
std::shared_ptr<Meta> meta_for(const TensorImpl& t);

// An input of a recorded op that needs a gradient: its buffer's Meta and the view the op read;
// and, where a writer of that buffer reads its own output in backward, the input itself (a node
// holds its own output only weakly: holding it strongly would make a cycle, output buffer -> Meta
// -> writer -> output buffer, that a graph dropped without backward never frees; so each reader
// that can pass a gradient to it keeps it instead).
struct Edge {
  std::shared_ptr<Meta> meta;
  View view;
  Handle keep;
};
// The edge to `t`, an input that needs a gradient.
Edge edge_to(const TensorImpl& t);

// A recorded op's own output, held weakly (see Edge): alive whenever backward can reach the op.
class WeakOutput {
 public:
  WeakOutput() = default;
  explicit WeakOutput(const TensorImpl& t) : buffer_(t.buffer), view_(View::of(t)) {}
  Handle get() const;           // throws InternalError if it is gone
  Handle get_if_alive() const;  // null if it is gone

 private:
  std::weak_ptr<detail::Buffer> buffer_;
  View view_;
};

// One recorded op. backward() gets the gradient of each output (null where none reached it)
// as a view of the output's shape, and returns the gradient of each edge's view (null where
// none flows), in the edge's dtype and view shape (any strides).
class Node {
 public:
  Node();
  virtual ~Node();
  virtual const char* name() const = 0;
  virtual std::vector<Handle> backward(Backend& be, std::span<const Handle> grad_outputs) = 0;
  // Whether backward reads the op's own outputs (WeakOutput), so that readers keep them.
  virtual bool reads_outputs() const { return false; }
  // Frees what backward reads of the forward pass; true where there was something to free.
  virtual bool release() { return false; }

  std::uint64_t sequence = 0;  // recording order: a node's inputs were recorded before it
  Device device = Device::cpu();
  std::vector<Edge> edges;
  struct Output {
    std::weak_ptr<Meta> meta;
    View view;
  };
  std::vector<Output> outputs;  // (entries of non-differentiable outputs stay empty)
  bool released = false;        // its saved tensors are gone: a second backward cannot run it

 protected:
  // Tensors backward reads; release() drops them (also without recursion).
  std::vector<Handle> saved_;
};

// The next sequence number.
std::uint64_t next_sequence();
// Records `node`, made by the front end rather than by a backend call (a checkpoint, a fused
// loss), as the one writer of `out`, a floating result: its sequence number and device are
// taken now, after those of the nodes of its inputs.
void record_writer(const std::shared_ptr<Node>& node, const TensorImpl& out);
// Nodes alive in the process (kiln::autodiff_stats), for tests that a graph goes with its tensors.
std::int64_t live_nodes();

}  // namespace kiln::autodiff
