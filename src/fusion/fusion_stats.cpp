#include "fusion/fusion_stats.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <bit>
#include <climits>
#include <cstdlib>
#include <functional>

#include "core/log.hpp"

namespace kiln::fusion {
namespace {

// Groups by ops: bucket 0 holds 0 ops, 1 holds 1, b >= 2 holds 2^(b-2)+1 .. 2^(b-1); the last
// one everything above.
constexpr std::size_t kBuckets = 10;

std::size_t bucket_of(long long ops) {
  if (ops <= 0) return 0;
  return std::min<std::size_t>(1 + std::bit_width(static_cast<unsigned long long>(ops - 1)),
                               kBuckets - 1);
}

std::string bucket_label(std::size_t b) {
  if (b <= 1) return std::to_string(b);
  const long long hi = 1ll << (b - 1), lo = hi / 2 + 1;
  if (b == kBuckets - 1) return fmt::format("{}+", lo);
  return lo == hi ? std::to_string(hi) : fmt::format("{}-{}", lo, hi);
}

// Atomics only (trivially destructible), so the summary printed at exit may read them after
// every other static is gone.
struct Counters {
  std::atomic<long long> ops_recorded{0}, groups_run{0}, plan_hits{0}, plan_misses{0},
      outputs_written{0}, bytes_written{0}, reductions_fused{0};
  std::atomic<long long> bytes_read{0}, intermediates_elided{0}, bytes_elided{0}, dead_ops{0},
      groups_unread{0};
  // Ops of the plans run (groups and fused reductions' prologues).
  std::atomic<long long> ops_run{0}, ops_min{LLONG_MAX}, ops_max{0};
  std::array<std::atomic<long long>, kBuckets> groups_by_ops{};
};
Counters counters;

void add(std::atomic<long long>& c, long long n) { c.fetch_add(n, std::memory_order_relaxed); }

// Sets c to v if beyond(v, c): a running minimum or maximum.
template <class Beyond>
void extend(std::atomic<long long>& c, long long v, Beyond beyond) {
  for (long long now = c.load(); beyond(v, now) && !c.compare_exchange_weak(now, v);) {
  }
}

void count_plan(const Plan& plan, bool hit, std::span<const detail::TensorImpl* const> inputs) {
  const long long ops = ops_of(plan.program);
  add(counters.groups_run, 1);
  add(hit ? counters.plan_hits : counters.plan_misses, 1);
  add(counters.ops_run, ops);
  add(counters.groups_by_ops[bucket_of(ops)], 1);
  extend(counters.ops_min, ops, std::less<>());
  extend(counters.ops_max, ops, std::greater<>());
  // An input's bytes in memory: a broadcast dimension (stride 0) is read once, not per element.
  for (const detail::TensorImpl* t : inputs) {
    long long n = static_cast<long long>(dtype_size(t->dtype));
    for (std::size_t d = 0; d < t->shape.size(); ++d)
      n *= t->strides[d] != 0 || t->shape[d] == 0 ? t->shape[d] : 1;
    add(counters.bytes_read, n);
  }
}

// The bytes of one element of `node`'s value.
long long node_bytes(const ir::Program& p, std::int32_t node) {
  return static_cast<long long>(dtype_size(p.nodes[static_cast<std::size_t>(node)].dtype));
}

// Recorded results of g nobody holds any longer: their values stayed in registers.
void count_elided(const Group& g) {
  const long long numel = detail::numel(g.shape);
  for (const PendingOutput& o : g.outputs) {
    if (!o.buffer.expired()) continue;
    add(counters.intermediates_elided, 1);
    add(counters.bytes_elided, numel * node_bytes(g.program, o.node));
  }
}

std::string bytes_text(long long b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  if (b < 1024ll * 1024 * 1024)
    return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
}

void print_summary() { detail::log_line("fusion:summary", summary()); }

}  // namespace

int ops_of(const ir::Program& p) {
  int n = 0;
  for (const ir::Node& node : p.nodes) n += node.op != ir::Op::input && node.op != ir::Op::scalar;
  return n;
}

void count_recorded() { add(counters.ops_recorded, 1); }

void count_group(const Group& g, const Plan& plan, bool hit,
                 std::span<const detail::TensorImpl* const> inputs) {
  count_plan(plan, hit, inputs);
  count_elided(g);
  add(counters.dead_ops, ops_of(g.program) - ops_of(plan.program));
  const long long numel = detail::numel(g.shape);
  for (std::int32_t o : plan.program.outputs) {
    add(counters.outputs_written, 1);
    add(counters.bytes_written, numel * node_bytes(plan.program, o));
  }
}

void count_reduction(const Plan& plan, bool hit,
                     std::span<const detail::TensorImpl* const> inputs) {
  count_plan(plan, hit, inputs);
  add(counters.reductions_fused, 1);
}

void count_unread(const Group& g) {
  add(counters.groups_unread, 1);
  add(counters.dead_ops, ops_of(g.program));
  count_elided(g);
}

FusionStats stats() {
  return {counters.ops_recorded.load(),    counters.groups_run.load(),
          counters.plan_hits.load(),       counters.plan_misses.load(),
          counters.outputs_written.load(), counters.bytes_written.load(),
          counters.reductions_fused.load()};
}

std::string summary() {
  const Counters& c = counters;
  const long long groups = c.groups_run.load();
  std::string s = fmt::format(
      "{} ops recorded; {} groups run ({} of them reductions with the open group as their "
      "prologue); {} groups closed with no result left to write\n",
      c.ops_recorded.load(), groups, c.reductions_fused.load(), c.groups_unread.load());
  if (groups > 0) {
    s += fmt::format(
        "  ops per group: min {}, mean {:.1f}, max {}; groups by ops:", c.ops_min.load(),
        static_cast<double>(c.ops_run.load()) / groups, c.ops_max.load());
    for (std::size_t b = 0; b < kBuckets; ++b)
      if (long long n = c.groups_by_ops[b].load()) s += fmt::format(" {}: {},", bucket_label(b), n);
    s.back() = '\n';
  }
  const CompileStats compiled = compile_stats();
  s += fmt::format(
      "  plans: {} cached, {} new; kernels compiled: {} ({:.2f} s), loaded from the store: {}\n",
      c.plan_hits.load(), c.plan_misses.load(), compiled.kernels, compiled.seconds,
      compiled.loaded);
  s += fmt::format(
      "  memory: {} read, {} written ({} results); {} intermediates ({}) never written; {} "
      "recorded ops not needed by any written result",
      bytes_text(c.bytes_read.load()), bytes_text(c.bytes_written.load()), c.outputs_written.load(),
      c.intermediates_elided.load(), bytes_text(c.bytes_elided.load()), c.dead_ops.load());
  return s;
}

void summary_at_exit() {
  static const bool registered =
      detail::log_enabled("fusion:summary") && std::atexit(print_summary) == 0;
  (void)registered;
}

}  // namespace kiln::fusion
