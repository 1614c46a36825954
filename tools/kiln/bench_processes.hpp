// `kiln bench` as several processes: the same workloads run by fresh processes one after the
// other on one store, so that what the store saves a later process (compiling kernels, tuning
// matmul) shows in its first calls, in one command. Also the one way to start such a process and
// collect what it measured, which `kiln bench --compare` (compare.hpp) shares.
#pragma once

#include <string>
#include <vector>

#include "bench.hpp"

namespace kiln::cli {

// Runs `options.processes` processes of this executable (/proc/self/exe) with the bench options
// and the hidden --one-process flag, one after the other. Text: each one's output under a header
// naming the store and its entries before it started, then each workload's first call in every
// process. JSON: one object holding each process's object. Returns the exit status: 0, or that
// of the first process that failed (which has printed its error), or 1 when one was killed.
int run_bench_processes(const BenchOptions& options);

// One workload in one `kiln bench --one-process`, as that process reported it (report_fd).
struct WorkloadReport {
  std::string device;      // "cpu", "cuda:0"
  std::string backend;     // its backend chain in that process: "dispatch<fusion<cpu<avx2>>>"
  std::string workload;    // "chain8 2048x2048 f32", "matmul 1024x1024 f32 tf32"
  double first_s = 0;      // the first call
  long long compiled = 0;  // kernels the first call compiled, and the seconds that took
  double compile_seconds = 0;
  long long loaded = 0;  // kernels the first call read from the store, and the seconds
  double load_seconds = 0;
  double min_s = 0, median_s = 0;  // of the timed calls after the first
  int runs = 0;
};

// Where the child's stdout goes: ours, a pipe read into BenchChild::stdout_text, or /dev/null.
enum class ChildStdout { inherit, capture, discard };

struct BenchChild {
  int status = 0;                      // waitpid's
  std::string stdout_text;             // ChildStdout::capture: what it printed
  std::vector<WorkloadReport> report;  // inherit / discard: what it reported, one per workload
};

// Runs `kiln bench --one-process --device D --runs N [--json]` (options' values) as this
// executable and waits for it. Unless its stdout is captured, it reports its figures on a pipe
// (--report-fd). `env`: its environment, "NAME=VALUE" entries; nullptr: this process's. Its
// stderr is ours, so its errors show. Throws std::runtime_error when it cannot be started or
// reports something unreadable (a successful child only).
BenchChild run_bench_child(const BenchOptions& options, ChildStdout out,
                           const std::vector<std::string>* env = nullptr);

// 0 when the child exited with status 0; else the status to exit with (its own, or 1 when a
// signal killed it), having said on stderr that `what` ("process 2 of 3") failed.
int child_failure(const BenchChild& child, const std::string& what);

}  // namespace kiln::cli
