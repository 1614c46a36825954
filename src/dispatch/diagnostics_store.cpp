// The store as the `kiln` command shows it (diagnostics.hpp): where it is, its rows by identity,
// whether this machine's kiln reads them, and clearing it.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dispatch/diagnostics.hpp"
#include "dispatch/registry.hpp"
#include "kiln/config.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_PERSISTENCE
#include "store/location.hpp"
#include "store/store.hpp"
#endif
#if KILN_WITH_PERSISTENCE && KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/store_identity.hpp"
#endif

namespace kiln::diagnostics {

const char* store_mode_name(StoreMode mode) {
  switch (mode) {
    case StoreMode::closed:
      return "";
    case StoreMode::persistent:
      return "persistent";
    case StoreMode::read_only:
      return "read-only";
    case StoreMode::memory:
      return "memory-only";
  }
  throw InternalError("diagnostics: a StoreMode out of range");
}

#if KILN_WITH_PERSISTENCE
namespace {

StoreMode mode_of(store::Mode m) {
  switch (m) {
    case store::Mode::persistent:
      return StoreMode::persistent;
    case store::Mode::read_only:
      return StoreMode::read_only;
    case store::Mode::memory:
      return StoreMode::memory;
  }
  throw InternalError("diagnostics: a store::Mode out of range");
}

StoreLocation location_of(const store::Store& st) {
  StoreLocation l;
  l.built = true;
  l.mode = mode_of(st.mode());
  l.directory = st.directory().string();
  l.file = st.file().string();
  l.why = st.why();
  l.build = store::build_revision();
  return l;
}

// The identity each present CUDA device's rows carry ("cuda:0"), as the CUDA backend writes them.
using PresentIdentities = std::vector<std::pair<std::string, store::Identity>>;

PresentIdentities present_identities() {
  PresentIdentities ids;
#if KILN_WITH_CUDA
  const int n = detail::cuda_device_count();
  for (int i = 0; i < n; ++i)
    ids.emplace_back(fmt::format("cuda:{}", i), cuda::store_identity(cuda::context(i)));
#endif
  return ids;
}

// Rows of another kiln version or build are never read; with no CUDA device present, rows of this
// build cannot be told current or stale.
std::string identity_status(const store::Identity& id, const PresentIdentities& present) {
  for (const auto& [name, p] : present) {
    if (p == id) return "current (" + name + ")";
  }
  if (id.kiln_version != version() || id.build != store::build_revision() || !present.empty())
    return "stale: another device, version or build";
  return "not compared: no CUDA device present";
}

StoreUsage usage_of(const store::Usage& u) {
  return {u.identity.describe(), "", u.tune_entries, u.kernel_entries, u.bytes};
}

// The process's store while persistence is live (so that the command and the library share one
// Store, and each warning is told once); else one of the command's own, kept in `own`, at the
// same directory.
store::Store& command_store(std::unique_ptr<store::Store>& own) {
  if (store::Store* s = store::process_store()) return *s;
  own = std::make_unique<store::Store>();
  return *own;
}

StoreRow row_of(const store::Entry& e) {
  return {e.key, e.name, e.shape, e.seconds, e.bytes, e.created};
}

bool wants(StoreTables asked, store::Table t) {
  return asked == StoreTables::both || (asked == StoreTables::tune) == (t == store::Table::tune);
}

}  // namespace
#else
namespace {

[[noreturn]] void no_store(const char* what) {
  throw Error(
      fmt::format("{}: kiln was built with -DKILN_PERSISTENCE=OFF: there is no store", what));
}

}  // namespace
#endif

StoreReport process_store_report([[maybe_unused]] bool statuses) {
  StoreReport r;
#if KILN_WITH_PERSISTENCE
  r.location.built = true;
  r.location.directory = store::cache_directory(store::current_environment()).string();
  store::Store* st = store::process_store();
  if (st == nullptr) return r;
  r.location = location_of(*st);
  const PresentIdentities present = statuses ? present_identities() : PresentIdentities{};
  for (const store::Usage& u : st->usage()) {
    r.usage.push_back(usage_of(u));
    if (statuses) r.usage.back().status = identity_status(u.identity, present);
  }
  r.warnings = st->warnings();
#endif
  return r;
}

StoreReport store_report_at(const std::string& directory) {
  StoreReport r;
#if KILN_WITH_PERSISTENCE
  store::Options o;
  o.dir = directory;
  store::Store st(o);
  r.location = location_of(st);
  for (const store::Usage& u : st.usage()) r.usage.push_back(usage_of(u));
#else
  r.location.directory = directory;
  r.location.why = "built with -DKILN_PERSISTENCE=OFF";
#endif
  return r;
}

StoreListing list_store([[maybe_unused]] StoreTables tables) {
#if KILN_WITH_PERSISTENCE
  std::unique_ptr<store::Store> own;
  store::Store& st = command_store(own);
  StoreListing l;
  l.location = location_of(st);
  const PresentIdentities present = present_identities();
  for (const store::Usage& u : st.usage()) {
    StoreIdentityRows& rows = l.identities.emplace_back();
    rows.usage = usage_of(u);
    rows.usage.status = identity_status(u.identity, present);
    if (wants(tables, store::Table::tune) && u.tune_entries > 0) {
      for (const store::Entry& e : st.list(store::Table::tune, u.identity))
        rows.tune.push_back(row_of(e));
    }
    if (wants(tables, store::Table::kernels) && u.kernel_entries > 0) {
      for (const store::Entry& e : st.list(store::Table::kernels, u.identity))
        rows.kernels.push_back(row_of(e));
    }
  }
  return l;
#else
  no_store("list_store");
#endif
}

StoreClearing clear_store([[maybe_unused]] StoreTables tables) {
#if KILN_WITH_PERSISTENCE
  std::unique_ptr<store::Store> own;
  store::Store& st = command_store(own);
  StoreClearing c;
  c.location = location_of(st);
  if (!st.persistent()) {
    c.why = st.why();
    return c;
  }
  for (const store::Table t : {store::Table::tune, store::Table::kernels}) {
    if (!wants(tables, t)) continue;
    for (const store::Entry& e : st.list(t)) {
      (t == store::Table::tune ? c.tune_rows : c.kernels) += 1;
      (t == store::Table::tune ? c.tune_bytes : c.kernel_bytes) += e.bytes;
    }
  }
  // The store never throws: whether the removal reached the file is in what clear returns (the
  // store has gone memory-only when it did not, and the file keeps every row).
  const store::Written w = tables == StoreTables::both   ? st.clear()
                           : tables == StoreTables::tune ? st.clear(store::Table::tune)
                                                         : st.clear(store::Table::kernels);
  c.removed = w.durable;
  c.why = w.why;
  return c;
#else
  no_store("clear_store");
#endif
}

}  // namespace kiln::diagnostics
