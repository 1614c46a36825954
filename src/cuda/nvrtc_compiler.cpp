#include "cuda/nvrtc_compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

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

struct Cache {
  std::mutex mu;
  // (source hash, arch, options) -> entries with that hash (almost always one).
  std::map<std::tuple<std::uint64_t, std::string, std::string>, std::vector<Entry>> entries;
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

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
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

// The cubin of `source` for `arch`: from the store when it has it, else compiled (and stored).
std::vector<char> cubin_for(const std::string& source, const std::string& source_name,
                            const std::string& arch, const std::string& options) {
#if KILN_WITH_PERSISTENCE
  store::Store* s = detail::persistence_live() ? store::process_store() : nullptr;
  const store::KernelKey key{source, arch, options};
  if (s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto cubin = s->get_kernel(kernel_identity(arch), key)) {
      auto& c = cache();
      std::lock_guard lock(c.mu);
      c.stats.loaded += 1;
      c.stats.load_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return std::move(*cubin);
    }
  }
  std::vector<char> cubin = compile_cubin(source, source_name, arch);
  if (s) s->put_kernel(kernel_identity(arch), key, cubin, source_name);
  return cubin;
#else
  (void)options;
  return compile_cubin(source, source_name, arch);
#endif
}

}  // namespace

std::vector<std::string> compile_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false",
          "--extra-device-vectorization"};
}

std::vector<char> compile_cubin(const std::string& source, const std::string& source_name,
                                const std::string& arch) {
  auto t0 = std::chrono::steady_clock::now();
  Program prog;
  KILN_CUDA_CHECK(
      nvrtcCreateProgram(&prog.p, source.c_str(), source_name.c_str(), 0, nullptr, nullptr));
  const auto opts = compile_options(arch);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
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
  c.stats.compiles += 1;
  c.stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return cubin;
}

cudaKernel_t cached_kernel(const std::string& source, const std::string& source_name,
                           const std::string& kernel_name, const std::string& arch) {
  auto& c = cache();
  const std::string options = joined(compile_options(arch));
  auto key = std::make_tuple(source_hash(source), arch, options);
  {
    std::lock_guard lock(c.mu);
    for (auto& e : c.entries[key]) {
      if (e.source == source) return kernel_of(e, kernel_name);
    }
  }
  // Compile outside the lock: other threads keep launching cached kernels meanwhile. Two
  // threads that miss the same source both compile it; the second result is dropped.
  std::vector<char> cubin = cubin_for(source, source_name, arch, options);
  std::lock_guard lock(c.mu);
  auto& same_hash = c.entries[key];
  for (auto& e : same_hash) {
    if (e.source == source) return kernel_of(e, kernel_name);
  }
  Entry e;
  e.source = source;
  KILN_CUDA_CHECK(
      cudaLibraryLoadData(&e.library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  same_hash.push_back(std::move(e));
  return kernel_of(same_hash.back(), kernel_name);
}

CompileStats compile_stats() {
  auto& c = cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

std::uint64_t source_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace kiln::cuda
