#include "cuda/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "core/hash.hpp"
#include "core/runtime_config.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "kiln/error.hpp"
#if KILN_WITH_PERSISTENCE
#include "cuda/store_identity.hpp"
#include "store/store.hpp"
#endif

namespace kiln::cuda {
namespace {

// NVRTC program handle, destroyed on every path.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

struct Entry {
  std::string source;  // kept to rule out hash collisions
  cudaLibrary_t library = nullptr;
  std::map<std::string, cudaKernel_t> kernels;
};

// (source hash, arch, options)
using Key = std::tuple<std::uint64_t, std::string, std::string>;

struct Cache {
  std::mutex mu;
  std::map<Key, std::vector<Entry>> entries;  // entries with that hash (almost always one)
  CompileStats stats;
};

// The kernel `name` of a loaded library, looked up once.
cudaKernel_t kernel_of(Entry& e, const std::string& name) {
  auto it = e.kernels.find(name);
  if (it != e.kernels.end()) return it->second;
  cudaKernel_t k = nullptr;
  KILN_CUDA_CHECK(cudaLibraryGetKernel(&k, e.library, name.c_str()));
  e.kernels.emplace(name, k);
  return k;
}

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: libraries stay loaded until exit
  return *c;
}

// Compiles an empty kernel, so that NVRTC has made the statics of its first compile (see
// Background). Its result does not matter: a real compile reports what fails.
bool warm_up_nvrtc(const std::string& arch) {
  Program prog;
  if (nvrtcCreateProgram(&prog.p, "extern \"C\" __global__ void kiln_warm_up() {}",
                         "kiln_warm_up.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return false;
  const auto opts = compile_options(arch);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  return nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data()) == NVRTC_SUCCESS;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

void stop_background_at_exit();  // (below Background)

std::vector<char> compile(const std::string& source, const std::string& source_name,
                          const std::string& arch, bool background) {
  auto t0 = std::chrono::steady_clock::now();
  Program prog;
  KILN_CUDA_CHECK(
      nvrtcCreateProgram(&prog.p, source.c_str(), source_name.c_str(), 0, nullptr, nullptr));
  const auto opts = compile_options(arch);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
  stop_background_at_exit();  // after the statics this compile made (see Background)
  if (r != NVRTC_SUCCESS) {
    std::size_t n = 0;
    nvrtcGetProgramLogSize(prog.p, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog.p, log.data());
    throw DeviceError(fmt::format("NVRTC failed to compile {} for {} ({}): {}\n{}", source_name,
                                  arch, nvrtcGetErrorString(r), joined(opts), log));
  }
  std::size_t size = 0;
  KILN_CUDA_CHECK(nvrtcGetCUBINSize(prog.p, &size));
  std::vector<char> cubin(size);
  KILN_CUDA_CHECK(nvrtcGetCUBIN(prog.p, cubin.data()));
  auto& c = cache();
  std::lock_guard lock(c.mu);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (background ? c.stats.background : c.stats.compiles) += 1;
  (background ? c.stats.background_seconds : c.stats.seconds) += seconds;
  return cubin;
}

// kiln's background compiles (compile_in_background): one thread working through a queue. Never
// destroyed (a cached_kernel may ask it from a static destructor). Its thread is stopped at exit
// by an exit handler (stop_background_at_exit registers it): exit runs handlers and static
// destructors in the reverse order of their registration, so the handler must be registered
// after every static that a compile under way could still use. The CUDA runtime's statics and
// the store (never destroyed) come before the first job. NVRTC makes statics of its own, lazily,
// during compiles: a compile still under way at exit crashed when those went first (cores, H100
// 2026-12-07: the main thread in exit joining this thread, this thread dead of SIGSEGV in
// nvrtcCompileProgram), and compiling an empty kernel first (warm_up_nvrtc) did not cover the
// statics of later, larger kernels. So the handler is registered again after every compile, on
// either thread (stop is idempotent; an entry is a few bytes of libc's list): a static that a
// finished compile made is then destroyed after the thread has stopped. The thread calls nothing
// of CUDA's, only NVRTC and the store, whose identity is taken on the caller's thread.
class Background {
 public:
  friend void stop_background_at_exit();
  using Keep = std::function<void(const std::string& source, const std::vector<char>& cubin)>;
  using Find = std::function<std::optional<std::vector<char>>(const std::string& source)>;

  static Background& get() {
    static auto* b = new Background;
    return *b;
  }

  // The cubin key's job made of `source`: nothing when there is none, when it failed or was
  // abandoned, or (without wait) when it has not ended yet.
  std::optional<std::vector<char>> cubin(const Key& key, const std::string& source, bool wait) {
    std::shared_future<std::vector<char>> result;
    {
      std::lock_guard lock(mu_);
      auto it = jobs_.find(key);
      if (it == jobs_.end() || it->second.source != source) return std::nullopt;
      result = it->second.result;
    }
    if (!wait && result.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      return std::nullopt;
    try {
      return result.get();
    } catch (...) {
      return std::nullopt;  // (the caller compiles it and reports what fails)
    }
  }

  // Queues a compile unless key has a job already; false when none could be queued.
  // `find` looks in the store first (on the thread), `keep` writes a compiled cubin there.
  bool add(const Key& key, const std::string& source, const std::string& source_name,
           const std::string& arch, Find find, Keep keep) {
    static const bool nvrtc_warm = warm_up_nvrtc(arch);  // first: see the comment above
    (void)nvrtc_warm;
    stop_background_at_exit();
    std::lock_guard lock(mu_);
    if (stopped_) return false;
    if (jobs_.count(key)) return true;
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { work(); });
      } catch (const std::system_error&) {
        return false;
      }
    }
    auto job =
        std::make_unique<Job>(Job{source, source_name, arch, {}, std::move(find), std::move(keep)});
    jobs_.emplace(key, Done{source, job->promise.get_future().share()});
    queue_.push_back(std::move(job));
    cv_.notify_one();
    return true;
  }

 private:
  struct Job {
    std::string source, source_name, arch;
    std::promise<std::vector<char>> promise;
    Find find;
    Keep keep;
  };
  struct Done {
    std::string source;
    std::shared_future<std::vector<char>> result;
  };
  void work() {
    for (;;) {
      std::unique_ptr<Job> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
        if (stopped_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        if (auto stored = job->find ? job->find(job->source) : std::nullopt) {
          job->promise.set_value(std::move(*stored));
          continue;
        }
        std::vector<char> cubin = compile(job->source, job->source_name, job->arch, true);
        if (job->keep) job->keep(job->source, cubin);
        job->promise.set_value(std::move(cubin));
      } catch (...) {
        job->promise.set_exception(std::current_exception());
      }
    }
  }

  // Drops the queue and waits for the compile under way (again: nothing).
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      for (auto& job : queue_) {
        job->promise.set_exception(
            std::make_exception_ptr(std::runtime_error("abandoned at exit")));
      }
      queue_.clear();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  std::map<Key, Done> jobs_;
  std::thread thread_;
  bool stopped_ = false;
};

// Registers (again) the exit handler that stops the background thread; see Background.
void stop_background_at_exit() {
  std::atexit([] { Background::get().stop(); });
}

#if KILN_WITH_PERSISTENCE
// Kernel rows carry the identity of the device they were compiled for (the current one, whose
// architecture `arch` is; every caller compiles for its context's device), as tune rows do.
store::Identity kernel_identity(const std::string& arch) {
  int current = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&current));
  const Context& ctx = context(current);
  if (ctx.arch() == arch) return store_identity(ctx);
  store::Identity id;  // (not reached by kiln's callers) the architecture and software alone
  id.compute_capability = arch;
  id.driver = driver_version();
  id.cuda_runtime = runtime_version();
  id.nvrtc = nvrtc_version();
  return id;
}
#endif

#if KILN_WITH_PERSISTENCE
store::Store* live_store() { return detail::persistence_live() ? store::process_store() : nullptr; }
#endif

#if KILN_WITH_PERSISTENCE
// s's cubin of `source` under identity id, counted as loaded; or nothing.
std::optional<std::vector<char>> read_stored(store::Store& s, const store::Identity& id,
                                             const std::string& source, const std::string& arch,
                                             const std::string& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto cubin = s.get_kernel(id, {source, arch, options});
  if (cubin) {
    auto& c = cache();
    std::lock_guard lock(c.mu);
    c.stats.loaded += 1;
    c.stats.load_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return cubin;
}
#endif

// The store's cubin of `source` for `arch`, or nothing.
std::optional<std::vector<char>> stored_cubin([[maybe_unused]] const std::string& source,
                                              [[maybe_unused]] const std::string& arch,
                                              [[maybe_unused]] const std::string& options) {
#if KILN_WITH_PERSISTENCE
  if (store::Store* s = live_store())
    return read_stored(*s, kernel_identity(arch), source, arch, options);
#endif
  return std::nullopt;
}

// before_first_compile's functions, run (and dropped) by the first compile on a caller's thread.
struct FirstCompileHooks {
  std::mutex mu;
  std::vector<std::function<void()>> pending;
};
FirstCompileHooks& first_compile_hooks() {
  static auto* h = new FirstCompileHooks;  // never destroyed: a compile may come at exit
  return *h;
}

void run_first_compile_hooks() {
  std::vector<std::function<void()>> run;
  {
    auto& h = first_compile_hooks();
    std::lock_guard lock(h.mu);
    run.swap(h.pending);
  }
  for (auto& f : run) f();
}

// The cubin of `source` for `arch`: a background compile's (waited for), the store's, or
// compiled now (and stored).
std::vector<char> cubin_for(const Key& key, const std::string& source,
                            const std::string& source_name, const std::string& arch,
                            const std::string& options) {
  if (auto cubin = Background::get().cubin(key, source, true)) return std::move(*cubin);
  if (auto cubin = stored_cubin(source, arch, options)) return std::move(*cubin);
  run_first_compile_hooks();
  std::vector<char> cubin = compile_cubin(source, source_name, arch);
#if KILN_WITH_PERSISTENCE
  if (store::Store* s = live_store())
    s->put_kernel(kernel_identity(arch), {source, arch, options}, cubin, source_name);
#else
  (void)options;
#endif
  return cubin;
}

// Under c.mu: source's loaded entry, or nullptr.
Entry* find_entry(Cache& c, const Key& key, const std::string& source) {
  auto it = c.entries.find(key);
  if (it == c.entries.end()) return nullptr;
  for (auto& e : it->second)
    if (e.source == source) return &e;
  return nullptr;
}

// The kernel from memory, or nullptr.
cudaKernel_t in_memory(const Key& key, const std::string& source, const std::string& kernel_name) {
  auto& c = cache();
  std::lock_guard lock(c.mu);
  Entry* e = find_entry(c, key, source);
  return e ? kernel_of(*e, kernel_name) : nullptr;
}

// Loads `cubin` into memory as `source`'s (unless another thread got there first).
cudaKernel_t loaded(const Key& key, const std::string& source, const std::string& kernel_name,
                    const std::vector<char>& cubin) {
  auto& c = cache();
  std::lock_guard lock(c.mu);
  if (Entry* e = find_entry(c, key, source)) return kernel_of(*e, kernel_name);
  auto& same_hash = c.entries[key];
  Entry e;
  e.source = source;
  KILN_CUDA_CHECK(
      cudaLibraryLoadData(&e.library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  same_hash.push_back(std::move(e));
  return kernel_of(same_hash.back(), kernel_name);
}

Key key_of(const std::string& source, const std::string& arch) {
  return {source_hash(source), arch, joined(compile_options(arch))};
}

}  // namespace

std::vector<std::string> compile_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false",
          "--extra-device-vectorization"};
}

std::vector<char> compile_cubin(const std::string& source, const std::string& source_name,
                                const std::string& arch) {
  return compile(source, source_name, arch, false);
}

cudaKernel_t cached_kernel(const std::string& source, const std::string& source_name,
                           const std::string& kernel_name, const std::string& arch) {
  const Key key = key_of(source, arch);
  if (cudaKernel_t k = in_memory(key, source, kernel_name)) return k;
  // Compile outside the lock: other threads keep launching cached kernels meanwhile. Two
  // threads that miss the same source both compile it; the second result is dropped.
  return loaded(key, source, kernel_name,
                cubin_for(key, source, source_name, arch, std::get<2>(key)));
}

cudaKernel_t ready_kernel(const std::string& source, const std::string& kernel_name,
                          const std::string& arch) {
  const Key key = key_of(source, arch);
  if (cudaKernel_t k = in_memory(key, source, kernel_name)) return k;
  auto cubin = Background::get().cubin(key, source, false);
  if (!cubin) cubin = stored_cubin(source, arch, std::get<2>(key));
  return cubin ? loaded(key, source, kernel_name, *cubin) : nullptr;
}

void before_first_compile(std::function<void()> f) {
  auto& h = first_compile_hooks();
  std::lock_guard lock(h.mu);
  h.pending.push_back(std::move(f));
}

void compile_in_background(const std::string& source, const std::string& source_name,
                           const std::string& arch) {
  const Key key = key_of(source, arch);
  {
    auto& c = cache();
    std::lock_guard lock(c.mu);
    if (find_entry(c, key, source)) return;
  }
  Background::Find find;
  Background::Keep keep;
#if KILN_WITH_PERSISTENCE
  try {
    if (store::Store* s = live_store()) {
      // The identity on this thread: it names the current device.
      const store::Identity id = kernel_identity(arch);
      const std::string options = std::get<2>(key);
      find = [s, id, arch, options](const std::string& src) {
        return read_stored(*s, id, src, arch, options);
      };
      keep = [s, id, name = source_name, arch, options](const std::string& src,
                                                        const std::vector<char>& cubin) {
        s->put_kernel(id, {src, arch, options}, cubin, name);
      };
    }
  } catch (const std::exception&) {
    return;  // (left to cached_kernel, which reports what fails)
  }
#endif
  Background::get().add(key, source, source_name, arch, std::move(find), std::move(keep));
}

CompileStats compile_stats() {
  auto& c = cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

std::uint64_t source_hash(const std::string& s) { return detail::hash_bytes(s); }

}  // namespace kiln::cuda
