// kiln::Config: defaults from the environment, changed from code, read on hot paths.
#include "core/runtime_config.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/log.hpp"
#if KILN_WITH_SIMD
#include "core/simd_targets.hpp"
#endif
#include "kiln/error.hpp"

namespace kiln {
namespace {

constexpr bool kSimdCompiled = KILN_WITH_SIMD;
constexpr bool kThreadsCompiled = KILN_WITH_THREADS;
constexpr bool kFusionCompiled = KILN_WITH_FUSION;
constexpr bool kPersistenceCompiled = KILN_WITH_PERSISTENCE;
constexpr bool kAutotuneCompiled = KILN_WITH_AUTOTUNE;
constexpr bool kAutodiffCompiled = KILN_WITH_AUTODIFF;
constexpr bool kCudnnCompiled = KILN_WITH_CUDNN;

// Where the value in force came from, for features().
struct Source {
  bool simd_from_env = false;
  bool threads_from_env = false;
  bool fusion_from_env = false;
  bool persistence_from_env = false;
  bool autotune_from_env = false;
  bool cudnn_from_env = false;
};

// Parses "0"/"1"/"off"/"on" style switches; anything else is an error listing the valid ones.
bool parse_switch(const char* var, const std::string& v) {
  if (v == "0" || v == "off" || v == "OFF" || v == "false") return false;
  if (v == "1" || v == "on" || v == "ON" || v == "true") return true;
  throw ValueError(std::string(var) + "=" + v + ": expected one of 0, 1, off, on, false, true");
}

// KILN_SIMD: a switch, or a Highway target name that caps dispatch (with SIMD on).
void parse_simd(const std::string& v, Config& cfg) {
  try {
    cfg.simd = parse_switch("KILN_SIMD", v);
    return;
  } catch (const ValueError&) {
#if KILN_WITH_SIMD
    const auto& targets = detail::simd_targets();
    if (std::find(targets.begin(), targets.end(), v) != targets.end()) {
      cfg.simd = true;
      cfg.simd_target = v;
      return;
    }
    throw ValueError("KILN_SIMD=" + v + ": expected one of 0, 1, off, on, false, true, or a SIMD " +
                     "target this CPU supports, to cap dispatch at: " + detail::simd_target_list());
#else
    throw ValueError("KILN_SIMD=" + v + ": expected one of 0, 1, off, on, false, true (kiln was " +
                     "built with -DKILN_SIMD=OFF, so there are no SIMD targets to choose)");
#endif
  }
}

int parse_threads(const std::string& v) {
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > 1 << 16)
    throw ValueError("KILN_THREADS=" + v + ": expected 0 (one thread) or a thread count N >= 1");
  return static_cast<int>(n);
}

struct State {
  std::mutex mu;
  Config cfg;
  Source src;
  std::atomic<bool> simd{true};
  std::atomic<int> threads{1};
  std::atomic<bool> fusion{true};
  std::atomic<bool> persistence{true};
  std::atomic<bool> autotune{true};
  std::atomic<bool> cudnn{true};
  std::string capped_at;  // the SIMD cap applied to Highway's dispatch ("": none)

  State() {
    if (const char* v = std::getenv("KILN_SIMD")) {
      parse_simd(v, cfg);
      src.simd_from_env = true;
    }
    if (const char* v = std::getenv("KILN_THREADS")) {
      cfg.threads = parse_threads(v);
      src.threads_from_env = true;
    }
    if (const char* v = std::getenv("KILN_FUSION")) {
      cfg.fusion = parse_switch("KILN_FUSION", v);
      src.fusion_from_env = true;
    }
    if (const char* v = std::getenv("KILN_PERSISTENCE")) {
      cfg.persistence = parse_switch("KILN_PERSISTENCE", v);
      src.persistence_from_env = true;
    }
    if (const char* v = std::getenv("KILN_AUTOTUNE")) {
      cfg.autotune = parse_switch("KILN_AUTOTUNE", v);
      src.autotune_from_env = true;
    }
    if (const char* v = std::getenv("KILN_CUDNN")) {
      cfg.cudnn = parse_switch("KILN_CUDNN", v);
      src.cudnn_from_env = true;
    }
    detail::check_log_env();  // (read where it is used; checked here, with the other switches)
    publish();
  }
  void publish() {
#if KILN_WITH_SIMD
    if (cfg.simd_target != capped_at) detail::cap_simd_target(cfg.simd_target);
    capped_at = cfg.simd_target;
#endif
    simd = kSimdCompiled && cfg.simd;
    int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int n = cfg.threads < 0 ? hw : std::max(1, cfg.threads);
    threads = kThreadsCompiled ? n : 1;
    fusion = kFusionCompiled && cfg.fusion;
    persistence = kPersistenceCompiled && cfg.persistence;
    autotune = kAutotuneCompiled && cfg.autotune;
    cudnn = kCudnnCompiled && cfg.cudnn;
  }
};

State& state() {
  static State s;
  return s;
}

std::atomic<void (*)()> before_fusion_switch{nullptr};

}  // namespace

Config config() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.cfg;
}

void set_config(const Config& c) {
  if (c.threads < -1) {
    throw ValueError("set_config: threads = " + std::to_string(c.threads) +
                     ": expected -1 (all), 0 (one thread) or a count N >= 1");
  }
#if KILN_WITH_SIMD
  const auto& targets = detail::simd_targets();
  if (!c.simd_target.empty() &&
      std::find(targets.begin(), targets.end(), c.simd_target) == targets.end()) {
    throw ValueError(
        "set_config: simd_target = '" + c.simd_target +
        "': not a SIMD target this CPU supports; expected one of: " + detail::simd_target_list());
  }
#else
  if (!c.simd_target.empty()) {
    throw ValueError("set_config: simd_target = '" + c.simd_target +
                     "': kiln was built with -DKILN_SIMD=OFF, so there are no SIMD targets");
  }
#endif
  auto& s = state();
  // What was recorded runs before fusion switches, so no pending tensor outlives its decorator.
  if (c.fusion != s.fusion.load()) {
    if (auto flush = before_fusion_switch.load()) flush();
  }
  std::lock_guard lock(s.mu);
  s.cfg = c;
  s.src = Source{};
  s.publish();
}

std::vector<FeatureState> detail::switch_states() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  std::vector<FeatureState> out;
  auto add = [&](std::string name, bool compiled, bool on, bool from_env, const char* var,
                 std::string built_why) {
    std::string why;
    if (!compiled)
      why = built_why;
    else if (on)
      why = "on";
    else if (from_env)
      why = std::string(var) + " in the environment";
    else
      why = "switched off by kiln::set_config";
    out.push_back({std::move(name), compiled, compiled && on, why});
  };
  add("simd", kSimdCompiled, s.cfg.simd, s.src.simd_from_env, "KILN_SIMD=0",
      "built with -DKILN_SIMD=OFF");
  if (out.back().live && !s.cfg.simd_target.empty()) {
    out.back().why = "on, capped at " + s.cfg.simd_target + " by " +
                     (s.src.simd_from_env ? "KILN_SIMD=" + s.cfg.simd_target + " in the environment"
                                          : std::string("kiln::set_config"));
  }
  add("threads", kThreadsCompiled, s.cfg.threads != 0, s.src.threads_from_env, "KILN_THREADS=0",
      "built with -DKILN_THREADS=OFF");
  add("fusion", kFusionCompiled, s.cfg.fusion, s.src.fusion_from_env, "KILN_FUSION=0",
      "built with -DKILN_FUSION=OFF");
  add("persistence", kPersistenceCompiled, s.cfg.persistence, s.src.persistence_from_env,
      "KILN_PERSISTENCE=0", "built with -DKILN_PERSISTENCE=OFF");
  add("autotune", kAutotuneCompiled, s.cfg.autotune, s.src.autotune_from_env, "KILN_AUTOTUNE=0",
      "built with -DKILN_AUTOTUNE=OFF");
  // Live says kiln may call cuDNN; whether libcudnn loads is the CUDA backend's to say (kiln info's
  // "cudnn" line, kiln doctor). A build without CUDA has no such feature to lose.
  if (KILN_WITH_CUDA)
    add("cudnn", kCudnnCompiled, s.cfg.cudnn, s.src.cudnn_from_env, "KILN_CUDNN=0",
        "built with -DKILN_CUDNN=OFF");
  // No run-time switch: a tensor that needs no gradient records nothing (NoGradGuard per scope).
  out.push_back({"autodiff", kAutodiffCompiled, kAutodiffCompiled,
                 kAutodiffCompiled ? "on: records ops on tensors that need a gradient"
                                   : "built with -DKILN_AUTODIFF=OFF"});
  return out;
}

namespace {
std::atomic<Precision> matmul_precision{Precision::highest};
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::highest:
      return "highest";
    case Precision::high:
      return "high";
    case Precision::medium:
      return "medium";
  }
  return "?";
}

void set_float32_matmul_precision(Precision p) {
  if (p != Precision::highest && p != Precision::high && p != Precision::medium) {
    throw ValueError(
        "set_float32_matmul_precision: expected Precision::highest, Precision::high or "
        "Precision::medium");
  }
  matmul_precision.store(p, std::memory_order_relaxed);
}

Precision float32_matmul_precision() { return matmul_precision.load(std::memory_order_relaxed); }

namespace {
std::atomic<bool>& deterministic_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("KILN_DETERMINISTIC");
    return v && std::string_view(v) == "1";
  }()};
  return on;
}
}  // namespace

void set_deterministic(bool on) { deterministic_flag().store(on, std::memory_order_relaxed); }
bool deterministic() { return deterministic_flag().load(std::memory_order_relaxed); }

std::string version() { return KILN_VERSION; }

namespace detail {
std::optional<Precision> precision_from_name(std::string_view name) {
  for (Precision p : {Precision::highest, Precision::high, Precision::medium})
    if (name == precision_name(p)) return p;
  return std::nullopt;
}
bool simd_live() { return state().simd.load(std::memory_order_relaxed); }
int thread_limit() { return state().threads.load(std::memory_order_relaxed); }
bool fusion_live() { return state().fusion.load(std::memory_order_relaxed); }
bool autotune_live() { return state().autotune.load(std::memory_order_relaxed); }
bool cudnn_live() { return state().cudnn.load(std::memory_order_relaxed); }
bool persistence_live() { return state().persistence.load(std::memory_order_relaxed); }
void set_before_fusion_switch(void (*flush)()) { before_fusion_switch.store(flush); }
}  // namespace detail

}  // namespace kiln
