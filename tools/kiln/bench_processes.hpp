// `kiln bench` as several processes: the same workloads run by fresh processes one after the
// other on one store, so that what the store saves a later process (compiling kernels, tuning
// matmul) shows in its first calls, in one command.
#pragma once

#include "bench.hpp"

namespace kiln::cli {

// Runs `options.processes` processes of this executable (/proc/self/exe) with the bench options
// and the hidden --one-process flag, one after the other. Text: each one's output under a header
// naming the store and its entries before it started, then each workload's first call in every
// process. JSON: one object holding each process's object. Returns the exit status: 0, or that
// of the first process that failed (which has printed its error), or 1 when one was killed.
int run_bench_processes(const BenchOptions& options);

}  // namespace kiln::cli
