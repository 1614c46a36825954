// `kiln tune --matmul` (diagnostics.hpp): the process's tuner and store, set to tune one CUDA
// device ahead of time, and what each problem's call left in the store.
#include <fmt/format.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "dispatch/diagnostics.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE && KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/store_identity.hpp"
#include "store/store.hpp"
#include "tune/tune_key.hpp"
#include "tune/tuner.hpp"
#define KILN_DIAGNOSTICS_TUNE 1
#else
#define KILN_DIAGNOSTICS_TUNE 0
#endif

namespace kiln::diagnostics {

#if KILN_DIAGNOSTICS_TUNE
namespace {

// Rows of one identity by key.
std::map<std::string, store::Entry> tune_rows(store::Store& st, const store::Identity& id) {
  std::map<std::string, store::Entry> rows;
  for (store::Entry& e : st.list(store::Table::tune, id)) rows.emplace(e.key, std::move(e));
  return rows;
}

bool same_row(const store::Entry& a, const store::Entry& b) {
  return a.name == b.name && a.shape == b.shape && a.seconds == b.seconds &&
         a.created == b.created && a.bytes == b.bytes;
}

StoreRow row_of(const store::Entry& e) {
  return {e.key, e.name, e.shape, e.seconds, e.bytes, e.created};
}

// The command checks its options; this is for any other caller, whose problem would otherwise
// become a tune key no matmul ever looks up.
void check(const MatmulProblem& p) {
  const bool ok =
      (p.precision == "highest" || p.precision == "high") &&
      (p.layout_a == 'N' || p.layout_a == 'T') && (p.layout_b == 'N' || p.layout_b == 'T') &&
      p.batch >= 1 && p.m >= 1 && p.n >= 1 && p.k >= 1 &&
      (p.dtype == "f32" || p.dtype == "bf16" || p.dtype == "f16") && (!p.bias || p.batch == 1);
  if (ok) return;
  throw ValueError(fmt::format(
      "tune --matmul: not a matmul problem: precision '{}' (highest or high), layout {}{} (N or "
      "T each), batch {}, {}x{}x{} (each at least 1), dtype '{}' (f32, bf16 or f16), bias {} "
      "(batch 1 only)",
      p.precision, p.layout_a, p.layout_b, p.batch, p.m, p.n, p.k, p.dtype, p.bias));
}

}  // namespace

struct MatmulTuning::Impl {
  std::string lane;  // the tuner's lane of the device, "cuda:0"
  bool exhaustive = false;
  store::Store* store = nullptr;
  store::Identity id;
  std::string file, described;
  std::set<std::string> retuned;  // exhaustive: keys forgotten in this session

  // A store that cannot be written is no place to tune into: the choices would be lost when
  // kiln tune exits.
  void refuse_unless_persistent(const std::string& prefix) const {
    if (store->persistent()) return;
    throw Error(fmt::format("tune --matmul: {}the store at {} cannot be written ({})", prefix,
                            store->directory().string(), store->why()));
  }
};

MatmulTuning::MatmulTuning(int cuda_index, bool exhaustive) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.lane = fmt::format("cuda:{}", cuda_index);
  s.exhaustive = exhaustive;
  s.store = store::process_store();
  if (s.store == nullptr)
    throw Error("tune --matmul: persistence is off: there is no store to fill");
  s.refuse_unless_persistent("");
  s.id = cuda::store_identity(cuda::context(cuda_index));
  s.file = s.store->file().string();
  s.described = s.id.describe();
  tune::process_tuner().set_policy(exhaustive ? tune::Policy::exhaustive()
                                              : tune::Policy::offline());
}

MatmulTuning::~MatmulTuning() = default;

const std::string& MatmulTuning::store_file() const { return impl_->file; }

const std::string& MatmulTuning::identity() const { return impl_->described; }

MatmulTuned MatmulTuning::tune(const MatmulProblem& p, const std::function<void()>& run) {
  check(p);
  Impl& s = *impl_;
  MatmulTuned out;
  // A half product's key says "highest" whatever the f32 precision (the precision has no say
  // there), and an epilogue's key names it: both as cuda/matmul/matmul.cpp makes them.
  out.key = tune::matmul_key({p.dtype, p.dtype == "f32" ? p.precision : "highest", p.layout_a,
                              p.layout_b, p.batch, p.m, p.n, p.k, p.bias ? "bias" : ""});
  // What the store holds of the key may come from a first call's bounded tuning: asked to be
  // exhaustive, tune it again (once per session: a later problem of the bucket finds it).
  if (s.exhaustive && s.retuned.insert(out.key).second)
    tune::process_tuner().forget(s.lane, out.key);
  const auto before = tune_rows(*s.store, s.id);
  run();
  // A write that failed turned the store memory-only, where the rows below would be found all
  // the same: what reached the file is only known while it is still persistent.
  s.refuse_unless_persistent(fmt::format("{}: its choice did not reach the file: ", out.key));
  const auto after = tune_rows(*s.store, s.id);
  for (const auto& [k, e] : after) {
    if (auto it = before.find(k); it != before.end() && same_row(it->second, e)) continue;
    out.fresh.push_back(row_of(e));
  }
  if (auto it = after.find(out.key); it != after.end()) out.row = row_of(it->second);
  return out;
}
#else
// No CUDA autotune with persistence in this build. The command asks only once features() said
// autotune and persistence are live and a CUDA device is present, which such a build never says;
// should it ask all the same, the constructor says what is missing.
struct MatmulTuning::Impl {
  std::string none;
};

MatmulTuning::MatmulTuning(int cuda_index, bool) {
  throw Error(fmt::format("tune --matmul: cuda:{} has no CUDA autotune in this build", cuda_index));
}

MatmulTuning::~MatmulTuning() = default;

const std::string& MatmulTuning::store_file() const { return impl_->none; }

const std::string& MatmulTuning::identity() const { return impl_->none; }

MatmulTuned MatmulTuning::tune(const MatmulProblem&, const std::function<void()>&) {
  throw InternalError("MatmulTuning::tune without a CUDA autotune");
}
#endif

}  // namespace kiln::diagnostics
