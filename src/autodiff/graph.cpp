// The graph's small pieces: grad mode, views, metas, and releasing long chains iteratively.
#include "autodiff/graph.hpp"

#include <atomic>

#include "kiln/error.hpp"

namespace kiln::autodiff {

namespace {
thread_local bool grad_on = true;
std::atomic<std::uint64_t> sequence_counter{0};
std::atomic<std::int64_t> node_count{0};

// A node being destroyed hands the nodes only it kept alive to the outermost destructor's stack
// instead of destroying them inside its own destructor, and the outermost one empties it: a
// 100,000-op chain is freed in a loop, not 100,000 nested destructors. (A plain pointer, so that
// a graph freed during the thread's exit finds nothing destroyed already.)
thread_local std::vector<std::shared_ptr<Node>>* doomed = nullptr;

// Moves the writers of `m` out where `m` dies with its last owner (the caller's reference).
void steal_writers(std::shared_ptr<Meta>& m) {
  if (m && m.use_count() == 1)
    for (auto& w : m->writers)
      if (w.use_count() == 1) doomed->push_back(std::move(w));
}
}  // namespace

bool grad_enabled() { return grad_on; }
void set_grad_enabled(bool on) { grad_on = on; }

std::uint64_t next_sequence() { return sequence_counter.fetch_add(1, std::memory_order_relaxed); }

void record_writer(const std::shared_ptr<Node>& node, const TensorImpl& out) {
  node->sequence = next_sequence();
  node->device = out.device;
  std::shared_ptr<Meta> m = meta_for(out);
  m->writers.push_back(node);
  node->outputs = {{m, View::of(out)}};
}

View View::of(const TensorImpl& t) { return {t.dtype, t.device, t.shape, t.strides, t.offset}; }

TensorImpl View::over(std::shared_ptr<detail::Buffer> buffer) const {
  TensorImpl t;
  t.buffer = std::move(buffer);
  t.device = device;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.offset = offset;
  return t;
}

TensorImpl View::over(const TensorImpl& flat) const {
  TensorImpl t = over(flat.buffer);
  t.offset += flat.offset;
  return t;
}

std::shared_ptr<Meta> meta_for(const TensorImpl& t) {
  auto& slot = t.buffer->autograd;
  if (!slot) {
    const auto n = static_cast<std::int64_t>(t.buffer->bytes() / dtype_size(t.dtype));
    slot = std::make_shared<Meta>(t.dtype, n, t.device);
  }
  return slot;
}

Edge edge_to(const TensorImpl& t) {
  Edge e{meta_for(t), View::of(t), nullptr};
  for (const auto& w : e.meta->writers)
    if (w->reads_outputs()) e.keep = std::make_shared<TensorImpl>(t);
  return e;
}

Handle WeakOutput::get() const {
  Handle t = get_if_alive();
  if (!t) throw InternalError("autodiff: a recorded op's output is gone before its backward");
  return t;
}

Handle WeakOutput::get_if_alive() const {
  auto buffer = buffer_.lock();
  return buffer ? std::make_shared<TensorImpl>(view_.over(std::move(buffer))) : nullptr;
}

std::int64_t live_nodes() { return node_count.load(std::memory_order_relaxed); }

Node::Node() { node_count.fetch_add(1, std::memory_order_relaxed); }

Node::~Node() {
  node_count.fetch_sub(1, std::memory_order_relaxed);
  std::vector<std::shared_ptr<Node>> stack;
  const bool outermost = doomed == nullptr;
  if (outermost) doomed = &stack;
  // Edges first: a Meta that only an edge holds dies with it; then the saved tensors (the
  // edges' kept inputs among them), whose buffers may hold the same Metas (so only now is each
  // buffer the last owner of its Meta).
  for (Edge& e : edges)
    if (e.keep) saved_.push_back(std::move(e.keep));
  for (Edge& e : edges) steal_writers(e.meta);
  edges.clear();
  for (Handle& h : saved_)
    if (h && h.use_count() == 1 && h->buffer.use_count() == 1) steal_writers(h->buffer->autograd);
  saved_.clear();
  if (!outermost) return;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n.reset();  // its destructor pushes what it alone kept alive
  }
  doomed = nullptr;
}

}  // namespace kiln::autodiff
