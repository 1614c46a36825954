// DataParallel: buckets, gradient hooks, no_sync and the replica check
// (include/kiln/nn/data_parallel.hpp says how and why).
#include "kiln/nn/data_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "kiln/autograd.hpp"
#include "kiln/process_group.hpp"

namespace kiln::nn {

namespace {

// x's elements in row-major order, as one dim (a view where x is contiguous).
Tensor<1> flat(const detail::Handle& x) { return Tensor<1>(detail::reshape(x, {-1})); }

}  // namespace

struct DataParallelBase::State {
  struct Entry {
    std::string name;
    AnyParameter param;
    Dims shape;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    std::int64_t numel = 0;
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // where its gradient starts in its bucket's flat tensor
    // The tensor its hook was put on, and that registration's number: a hook of an older one
    // (left on a tensor someone still holds) does nothing.
    std::weak_ptr<const detail::TensorImpl> hooked;
    std::uint64_t generation = 0;
    bool ready = false;  // its gradient is final in this backward
  };
  struct Bucket {
    std::vector<std::size_t> entries;
    std::size_t pending = 0;  // entries not ready yet
  };

  DataParallelOptions options;
  std::vector<Entry> entries;  // in bucket order
  std::vector<Bucket> buckets;
  std::vector<std::size_t> by_parameter;  // entries in parameters() order
  std::size_t next = 0;                   // the next bucket to launch
  bool started = false;                   // a hook counted since the last reset
  bool sync = true;                       // false under no_sync()
  DataParallelStats stats;

  void reset() {
    for (Entry& e : entries) e.ready = false;
    for (Bucket& b : buckets) b.pending = b.entries.size();
    next = 0;
    started = false;
  }

  void hook(std::size_t i, const std::weak_ptr<State>& self) {
    Entry& e = entries[i];
    const detail::Handle& h = e.param.handle();
    e.hooked = h;
    ++e.generation;
    // (Built without autodiff a parameter needs no gradient: nothing to reduce.)
    if (!detail::requires_grad(h)) return;
    detail::on_grad_final(h, [self, i, generation = e.generation](const detail::Handle&) {
      if (const auto s = self.lock()) s->ready(i, generation);
    });
    ++stats.hooks_registered;
  }

  // A hook: entry i's gradient is final. Launches, in order, every complete bucket whose turn it
  // is; once all are launched, this backward is done and the counts start again.
  void ready(std::size_t i, std::uint64_t generation) {
    Entry& e = entries[i];
    if (generation != e.generation || !sync || e.ready) return;
    // A hook of a tensor the parameter no longer holds (an optimizer step rebound it, and the
    // next forward has not registered on the new one yet).
    if (e.hooked.lock() != e.param.handle()) return;
    e.ready = true;
    started = true;
    if (--buckets[e.bucket].pending > 0) return;
    while (next < buckets.size() && buckets[next].pending == 0) launch(buckets[next++]);
    if (next == buckets.size()) {
      ++stats.backwards_reduced;
      reset();
    }
  }

  // One all-reduce of the bucket's gradients, flattened into one tensor; each parameter's
  // gradient becomes its slice of the average (a view: nothing is copied back).
  void launch(const Bucket& b) {
    NoGradGuard no_grad;
    std::vector<Tensor<1>> parts;
    parts.reserve(b.entries.size());
    for (std::size_t i : b.entries) {
      const Entry& e = entries[i];
      detail::Handle g = detail::grad(e.param.handle());
      if (!g) {
        throw DistError(fmt::format(
            "DataParallel: the gradient of parameter '{}' was cleared while backward was "
            "reducing its bucket",
            e.name));
      }
      parts.push_back(flat(g));
    }
    const Tensor<1> all = parts.size() == 1 ? parts[0] : cat(parts, 0);
    const Tensor<1> avg = dist::all_reduce(all, dist::ReduceOp::avg);
    for (std::size_t i : b.entries) {
      const Entry& e = entries[i];
      const Tensor<1> piece = avg.slice(0, e.offset, e.offset + e.numel);
      detail::set_grad(e.param.handle(), detail::reshape(piece.handle(), e.shape));
    }
    ++stats.buckets_reduced;
  }
};

DataParallelBase::DataParallelBase(Module& module, DataParallelOptions options)
    : module_(&module), state_(std::make_shared<State>()) {
  if (!dist::is_initialized()) {
    throw DistError(
        "DataParallel: no process group; call kiln::dist::init_process_group(device) before "
        "wrapping a module");
  }
  if (!(options.bucket_cap_mib > 0) || !(options.first_bucket_mib > 0)) {
    throw ValueError(
        fmt::format("DataParallel: bucket_cap_mib ({}) and first_bucket_mib ({}) must be positive",
                    options.bucket_cap_mib, options.first_bucket_mib));
  }
  State& s = *state_;
  s.options = options;
  const Device group = dist::group_device();
  const auto named = module.named_parameters();
  for (const auto& [name, p] : named) {
    if (p.device() != group) {
      throw DistError(fmt::format(
          "DataParallel: parameter '{}' is on {} but the process group on {}; move the module "
          "there (Module::to(kiln::dist::group_device())) before wrapping it",
          name, p.device().str(), group.str()));
    }
  }

  // Rank 0's values everywhere (named_parameters() gives each slot once: tied ones are one).
  {
    NoGradGuard no_grad;
    for (const auto& [name, p] : named) {
      if (p.numel() == 0) continue;
      const Tensor<1> value = dist::broadcast(flat(p.handle()), 0);
      p.assign(detail::reshape(value.handle(), p.shape()));
    }
  }

  // The buckets (PyTorch's compute_bucket_assignment_by_size): parameters in reverse order, one
  // open bucket per dtype and device, closed at the first limit for that key's first bucket and
  // at the cap after it; then in the order of their first parameter.
  struct Open {
    DType dtype;
    Device device;
    std::vector<std::size_t> members;  // indices into named
    double bytes = 0;
  };
  struct Closed {
    std::vector<std::size_t> members;
    std::size_t first = 0;  // its first member's position in the reverse order
  };
  std::vector<Open> open;
  std::vector<std::pair<DType, Device>> had_first;  // keys whose first bucket is closed
  std::vector<Closed> closed;
  std::vector<std::size_t> position(named.size());
  const double mib = 1024.0 * 1024.0;
  std::size_t pos = 0;
  for (std::size_t k = named.size(); k-- > 0;) {
    const AnyParameter& p = named[k].second;
    if (p.numel() == 0) continue;  // no gradient ever reaches it
    position[k] = pos++;
    const DType t = p.dtype();
    const Device d = p.device();
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const Open& o) { return o.dtype == t && o.device == d; });
    if (it == open.end()) it = open.insert(open.end(), Open{t, d, {}, 0});
    it->members.push_back(k);
    it->bytes += static_cast<double>(p.numel()) * static_cast<double>(dtype_size(t));
    const bool first =
        std::find(had_first.begin(), had_first.end(), std::pair(t, d)) == had_first.end();
    const double limit = (first ? options.first_bucket_mib : options.bucket_cap_mib) * mib;
    if (it->bytes >= limit) {
      const std::size_t at = position[it->members.front()];
      closed.push_back({std::move(it->members), at});
      if (first) had_first.emplace_back(t, d);
      open.erase(it);
    }
  }
  for (Open& o : open) closed.push_back({o.members, position[o.members.front()]});
  std::stable_sort(closed.begin(), closed.end(),
                   [](const Closed& a, const Closed& b) { return a.first < b.first; });

  std::vector<std::optional<std::size_t>> entry_of(named.size());
  for (const Closed& c : closed) {
    State::Bucket bucket;
    std::int64_t offset = 0;
    for (std::size_t k : c.members) {
      const auto& [name, p] = named[k];
      State::Entry e;
      e.name = name;
      e.param = p;
      e.shape = p.shape();
      e.dtype = p.dtype();
      e.device = p.device();
      e.numel = p.numel();
      e.bucket = s.buckets.size();
      e.offset = offset;
      offset += e.numel;
      entry_of[k] = s.entries.size();
      bucket.entries.push_back(s.entries.size());
      s.entries.push_back(std::move(e));
    }
    s.buckets.push_back(std::move(bucket));
  }
  for (const auto& i : entry_of)
    if (i) s.by_parameter.push_back(*i);
  s.reset();
  for (std::size_t i = 0; i < s.entries.size(); ++i) s.hook(i, state_);
}

DataParallelBase::~DataParallelBase() = default;

const DataParallelOptions& DataParallelBase::options() const { return state_->options; }

void DataParallelBase::prepare_forward() {
  State& s = *state_;
  if (s.started) {
    std::vector<std::string> missing;
    for (std::size_t b = s.next; b < s.buckets.size(); ++b)
      for (std::size_t i : s.buckets[b].entries)
        if (!s.entries[i].ready) missing.push_back("'" + s.entries[i].name + "'");
    std::string others;
    for (std::size_t k = 1; k < missing.size() && k < 9; ++k)
      others += (k > 1 ? ", " : "") + missing[k];
    if (missing.size() > 9) others += fmt::format(" and {} more", missing.size() - 9);
    const std::size_t incomplete = s.next;
    s.reset();
    throw DistError(fmt::format(
        "DataParallel: expected to have finished reduction in the prior iteration before "
        "starting a new one: parameter {} received no gradient in the last backward{}, so "
        "bucket {} of {} (counting from 0) and those after it were never all-reduced. Every "
        "parameter must take part in the loss on every rank (DataParallel has no "
        "find_unused_parameters): remove the parameters forward does not use, or add 0 * "
        "p.sum() of each to the loss",
        missing.empty() ? std::string("(none)") : missing.front(),
        others.empty() ? std::string() : " (nor did " + others + ")", incomplete,
        s.buckets.size()));
  }
  for (std::size_t i : s.by_parameter) {
    State::Entry& e = s.entries[i];
    const detail::Handle& h = e.param.handle();
    if (e.hooked.lock() == h) continue;
    if (detail::shape(h) != e.shape || detail::dtype(h) != e.dtype ||
        detail::device(h) != e.device) {
      throw DistError(fmt::format(
          "DataParallel: parameter '{}' changed from {} {} on {} to {} {} on {} since the "
          "DataParallel was built; build it after Module::to and load_state_dict",
          e.name, dtype_name(e.dtype), format_dims(e.shape), e.device.str(),
          dtype_name(detail::dtype(h)), format_dims(detail::shape(h)), detail::device(h).str()));
    }
    s.hook(i, state_);
  }
}

DataParallelBase::NoSync::NoSync(std::shared_ptr<State> state)
    : state_(std::move(state)), was_(state_->sync) {
  state_->sync = false;
}

DataParallelBase::NoSync::~NoSync() { state_->sync = was_; }

DataParallelBase::NoSync DataParallelBase::no_sync() { return NoSync(state_); }

void DataParallelBase::check_in_sync() const {
  const State& s = *state_;
  if (s.by_parameter.empty()) return;
  NoGradGuard no_grad;
  std::vector<Tensor<1>> spreads;
  for (std::size_t i : s.by_parameter) {
    Tensor<1> x = flat(s.entries[i].param.handle());
    if (x.dtype() != DType::f32) x = x.to(DType::f32);
    const Tensor<1> hi = dist::all_reduce(x, dist::ReduceOp::max);
    const Tensor<1> lo = -dist::all_reduce(-x, dist::ReduceOp::max);
    spreads.push_back((hi - lo).max().reshape({1}));
  }
  const std::vector<float> spread = cat(spreads, 0).to_vector();
  for (std::size_t k = 0; k < spread.size(); ++k) {
    if (spread[k] == 0) continue;
    const State::Entry& e = s.entries[s.by_parameter[k]];
    throw DistError(fmt::format(
        "DataParallel: parameter '{}' differs across ranks: its values on two ranks are up to "
        "{} apart (nan: a rank holds NaN); the replicas have drifted apart",
        e.name, spread[k]));
  }
}

std::vector<std::vector<std::string>> DataParallelBase::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const State::Bucket& b : state_->buckets) {
    out.emplace_back();
    for (std::size_t i : b.entries) out.back().push_back(state_->entries[i].name);
  }
  return out;
}

DataParallelStats DataParallelBase::stats() const { return state_->stats; }

}  // namespace kiln::nn
