// The CPU backend's parallel loop: oneTBB when threads are compiled in and live, else inline.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::cpu {

// Runs fn(begin, end) over [0, n) in chunks of about `grain` items (TBB splits down to between
// grain/2 and grain), across kiln's threads
// when threads are live and n > grain; inline on the calling thread otherwise.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

// Sorts [begin, end) ascending (std::sort's result): across kiln's threads when threads are live
// and the range is long (a single long row: randperm), inline otherwise.
void parallel_sort(std::uint64_t* begin, std::uint64_t* end);

// The number of threads kiln's CPU loops and the BLAS may use now (1 when threads are off).
int thread_count();

}  // namespace kiln::cpu
