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

// A name's launches: every one's device time in ms, kept for the median (4 bytes a launch: a
// million launches of a long profiled run hold 4 MB).
struct Total {
  std::vector<float> ms;
  double sum = 0;
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
      t.ms.push_back(ms);
      t.sum += ms;
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
  struct Row {
    std::string name;
    std::size_t calls;
    double sum, median, min;
  };
  std::vector<Row> rows;
  double all = 0, at_medians = 0;
  for (auto& [name, t] : p.totals) {
    std::sort(t.ms.begin(), t.ms.end());
    const std::size_t n = t.ms.size();
    const double median = n % 2 ? t.ms[n / 2] : (t.ms[n / 2 - 1] + t.ms[n / 2]) / 2.0;
    rows.push_back({name, n, t.sum, median, t.ms.front()});
    all += t.sum;
    at_medians += median * static_cast<double>(n);
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.sum > b.sum; });
  // The medians say what a kernel takes once the one-time costs are paid: a first launch's
  // module load, a graph's capture, or the host's set-up while the GPU waits between the events
  // land in a few launches, and inflate the totals and means.
  std::string s =
      fmt::format("device time per kernel, {:.3f} ms in all, {:.3f} ms at each kernel's median{}\n",
                  all, at_medians, p.lost ? fmt::format(" ({} launches not timed)", p.lost) : "");
  s += fmt::format("  {:>10} {:>8} {:>10} {:>10} {:>10} {:>6}  kernel\n", "total ms", "calls",
                   "mean us", "median us", "min us", "share");
  for (const Row& r : rows) {
    s += fmt::format("  {:>10.3f} {:>8} {:>10.2f} {:>10.2f} {:>10.2f} {:>5.1f}%  {}\n", r.sum,
                     r.calls, r.sum * 1e3 / static_cast<double>(r.calls), r.median * 1e3,
                     r.min * 1e3, 100 * r.sum / all, r.name);
  }
  return s;
}

}  // namespace kiln::cuda
