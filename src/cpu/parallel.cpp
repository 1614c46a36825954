// kiln's CPU parallel loop: oneTBB's work-stealing parallel_for inside an arena sized to
// kiln's thread limit, or a plain loop when threads are compiled out.
#include "cpu/parallel.hpp"

#include <algorithm>

#include "core/runtime_config.hpp"

#if KILN_WITH_THREADS
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <mutex>
#endif

namespace kiln::cpu {

#if KILN_WITH_THREADS
namespace {

// The arena for the current thread limit. An arena caps concurrency without touching TBB's
// global state (which other libraries in the process may use). Callers hold a shared_ptr, so a
// limit change while a loop runs replaces the cached arena without destroying the running one.
std::shared_ptr<tbb::task_arena> arena_for(int threads) {
  static std::mutex mu;
  static std::shared_ptr<tbb::task_arena> arena;
  static int arena_threads = 0;
  std::lock_guard lock(mu);
  if (!arena || arena_threads != threads) {
    arena = std::make_shared<tbb::task_arena>(threads);
    arena_threads = threads;
  }
  return arena;
}

}  // namespace

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int threads = detail::thread_limit();
  if (threads <= 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // Exceptions thrown by fn cancel the loop and reach the caller (TBB rethrows the first).
  // TBB never runs more threads than its default concurrency (the cores this process may
  // use); asking an arena for more only makes TBB print a warning.
  arena_for(std::min(threads, tbb::info::default_concurrency()))->execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, static_cast<std::size_t>(grain)),
                      [&](const tbb::blocked_range<std::int64_t>& r) { fn(r.begin(), r.end()); });
  });
}

void parallel_sort(std::uint64_t* begin, std::uint64_t* end) {
  const int threads = detail::thread_limit();
  if (threads <= 1 || end - begin < 65536) {
    std::sort(begin, end);
    return;
  }
  arena_for(std::min(threads, tbb::info::default_concurrency()))->execute([&] {
    tbb::parallel_sort(begin, end);
  });
}

#else

void parallel_sort(std::uint64_t* begin, std::uint64_t* end) { std::sort(begin, end); }

void parallel_for(std::int64_t n, std::int64_t /*grain*/,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n > 0) fn(0, n);
}

#endif

int thread_count() { return detail::thread_limit(); }

}  // namespace kiln::cpu
