#include "cuda/kernel_profile.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "cuda/driver_entry.hpp"

namespace kiln::cuda {
namespace {

struct Pending {
  cudaKernel_t kernel;  // named at collection, or
  std::string name;     // this, where kernel is null
  cudaEvent_t start, end;
};

struct Total {
  long long calls = 0;
  double ms = 0;
};

struct Profile {
  std::mutex mu;
  std::vector<Pending> pending;
  std::map<std::string, Total> totals;
  std::map<cudaKernel_t, std::string> names;
  long long lost = 0;  // launches whose events never completed (an error, or still running at exit)
};
Profile& profile() {
  static auto* p = new Profile;  // (never destroyed: read at exit)
  return *p;
}

std::string name_of(Profile& p, cudaKernel_t k) {
  auto it = p.names.find(k);
  if (it != p.names.end()) return it->second;
  static const auto get_name =
      driver_entry_point<PFN_cuKernelGetName_v12030>("cuKernelGetName", 12030);
  const char* name = nullptr;
  std::string s = get_name && get_name(&name, reinterpret_cast<CUkernel>(k)) == CUDA_SUCCESS && name
                      ? std::string(name)
                      : fmt::format("kernel {}", static_cast<const void*>(k));
  return p.names.emplace(k, std::move(s)).first->second;
}

// Folds the finished launches of p.pending into p.totals (p.mu held); with `all`, also drops the
// unfinished ones as lost.
void collect_locked(Profile& p, bool all) {
  std::size_t kept = 0;
  for (Pending& e : p.pending) {
    const cudaError_t state = cudaEventQuery(e.end);
    if (state == cudaErrorNotReady && !all) {
      p.pending[kept++] = std::move(e);
      continue;
    }
    float ms = 0;
    if (state == cudaSuccess && cudaEventElapsedTime(&ms, e.start, e.end) == cudaSuccess) {
      Total& t = p.totals[e.kernel ? name_of(p, e.kernel) : e.name];
      ++t.calls;
      t.ms += ms;
    } else {
      ++p.lost;
    }
    cudaGetLastError();  // (a failed query leaves its error to no one else)
    cudaEventDestroy(e.start);
    cudaEventDestroy(e.end);
  }
  p.pending.resize(kept);
}

// A new event recorded on `stream`, or null (the error cleared) where CUDA refuses either step.
cudaEvent_t recorded_event(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) == cudaSuccess && cudaEventRecord(e, stream) == cudaSuccess) return e;
  cudaGetLastError();
  if (e) cudaEventDestroy(e);
  return nullptr;
}

void print_at_exit() {
  const std::string report = kernel_time_report();
  if (!report.empty()) detail::log_line("profile", report);
}

}  // namespace

void name_kernel(cudaKernel_t kernel, std::string name) {
  if (!profiling()) return;
  Profile& p = profile();
  std::lock_guard lock(p.mu);
  p.names[kernel] = std::move(name);
}

bool profiling() {
  static const bool on = [] {
    const bool enabled = detail::log_enabled("profile");
    if (enabled) std::atexit(print_at_exit);
    return enabled;
  }();
  return on;
}

KernelTimer::KernelTimer(cudaStream_t stream, cudaKernel_t kernel) : kernel_(kernel) {
  if (profiling()) start(stream);
}

KernelTimer::KernelTimer(cudaStream_t stream, std::string name) : name_(std::move(name)) {
  if (profiling()) start(stream);
}

void KernelTimer::start(cudaStream_t stream) {
  start_ = recorded_event(stream);
  stream_ = stream;
}

// (No exception leaves: it may run while one unwinds.)
KernelTimer::~KernelTimer() {
  if (!start_) return;
  const cudaEvent_t end = recorded_event(stream_);
  if (!end) {
    cudaEventDestroy(start_);
    return;
  }
  Profile& p = profile();
  std::lock_guard lock(p.mu);
  p.pending.push_back({kernel_, std::move(name_), start_, end});
  if (p.pending.size() >= 8192) collect_locked(p, false);  // a long run between syncs
}

void collect_kernel_times() {
  if (!profiling()) return;
  Profile& p = profile();
  std::lock_guard lock(p.mu);
  collect_locked(p, false);
}

std::string kernel_time_report() {
  Profile& p = profile();
  std::lock_guard lock(p.mu);
  collect_locked(p, true);
  if (p.totals.empty()) return {};
  std::vector<std::pair<std::string, Total>> rows(p.totals.begin(), p.totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto& r : rows) all += r.second.ms;
  std::string s = fmt::format("device time per kernel, {:.3f} ms in all{}\n", all,
                              p.lost ? fmt::format(" ({} launches not timed)", p.lost) : "");
  s +=
      fmt::format("  {:>10} {:>8} {:>10} {:>6}  kernel\n", "total ms", "calls", "mean us", "share");
  for (const auto& [name, t] : rows) {
    s += fmt::format("  {:>10.3f} {:>8} {:>10.2f} {:>5.1f}%  {}\n", t.ms, t.calls,
                     t.ms * 1e3 / static_cast<double>(t.calls), 100 * t.ms / all, name);
  }
  return s;
}

}  // namespace kiln::cuda
