#include "cuda/matmul/cublaslt_state.hpp"

#include <map>
#include <mutex>

#include "cuda/check.hpp"
#include "cuda/device_memory.hpp"
#include "kiln/config.hpp"
#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_ops.hpp"
#include "cuda/store_identity.hpp"
#include "store/location.hpp"
#include "store/store.hpp"
#include "tune/tune_key.hpp"
#endif

namespace kiln::cuda {
namespace {

struct Slot {
  std::mutex mu;  // held while the state is made (and preloaded), so a second caller waits
  bool made = false;
  LtState state;
};

Slot& slot(int index) {
  static std::mutex mu;
  static auto* slots = new std::map<int, Slot>;  // never destroyed, as the handles in it
  std::lock_guard lock(mu);
  return (*slots)[index];
}

// Under s.mu: makes s's state.
void make(Context& ctx, Slot& s) {
  if (s.made) return;
  LtState state;
  state.workspace = device_alloc(ctx, kWorkspaceBytes);  // (makes ctx's device current)
  KILN_CUDA_CHECK(cublasLtCreate(&state.handle));
  s.state = std::move(state);
  s.made = true;
}

#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE
// The tuned matmul choices the store holds for ctx's device, as (problem, value), the newest
// kPreloaded of them (each may load a kernel module, 13-18 ms: a store that many programs have
// filled must not keep the first matmul waiting long); none when there is no store file yet
// (looking must not create one) or persistence is off.
std::vector<std::pair<tune::MatmulProblem, std::string>> stored_matmuls(const Context& ctx) {
  constexpr std::size_t kPreloaded = 8;
  std::vector<std::pair<tune::MatmulProblem, std::string>> out;
  std::error_code ec;
  const auto file = store::cache_directory(store::current_environment()) / store::kFileName;
  if (!std::filesystem::exists(file, ec)) return out;
  store::Store* store = store::process_store();
  if (!store) return out;
  const store::Identity id = store_identity(ctx);
  std::vector<store::Entry> rows = store->list(store::Table::tune, id);
  std::stable_sort(rows.begin(), rows.end(), [](const store::Entry& a, const store::Entry& b) {
    return a.created > b.created;
  });
  for (const store::Entry& e : rows) {
    if (out.size() == kPreloaded) break;
    if (auto problem = tune::parse_matmul_key(e.key)) {
      if (auto row = store->get_tune(id, e.key)) out.emplace_back(*problem, row->value);
    }
  }
  return out;
}

// The background threads, joined at exit. Made at the first call, after the CUDA runtime has
// started (a context exists), so destroyed before the runtime shuts down.
struct Background {
  std::mutex mu;
  std::set<int> started;  // device indices
  std::vector<std::thread> threads;
  ~Background() {
    for (std::thread& t : threads) t.join();
  }
};
#endif

}  // namespace

const LtState& lt_state(Context& ctx) {
  Slot& s = slot(ctx.index);
  std::lock_guard lock(s.mu);
  make(ctx, s);
  return s.state;
}

void prepare_lt_in_background([[maybe_unused]] Context& ctx) {
#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE
  static Background background;
  std::lock_guard lock(background.mu);
  if (!background.started.insert(ctx.index).second) return;
  try {
    background.threads.emplace_back([&ctx] {
      try {
        // Nothing tuned here yet: nothing to prepare. (Setting cuBLASLt up with a heuristic
        // query instead crashed processes that exited during it: the query evidently makes state
        // whose teardown is registered after this thread's join, so exit destroyed it under the
        // query; `kiln doctor` and `kiln bench --device cpu` with an empty store on an H100,
        // 2026-12-05. The stored path checks and runs known algorithms, no heuristic.)
        const auto stored = stored_matmuls(ctx);
        if (stored.empty()) return;
        Slot& s = slot(ctx.index);
        std::lock_guard slot_lock(s.mu);  // the first matmul waits for all of this
        make(ctx, s);
        for (const auto& [problem, value] : stored) preload_matmul(ctx, s.state, problem, value);
      } catch (...) {
        // Left for the first matmul, which makes the state itself and reports what fails.
      }
    });
  } catch (const std::system_error&) {
    // No thread to be had: cuBLASLt is set up at the first matmul, as without a store.
  }
#endif
}

}  // namespace kiln::cuda
