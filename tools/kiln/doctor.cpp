#include "doctor.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "dispatch/diagnostics.hpp"
#include "json.hpp"
#include "kiln/kiln.hpp"
#include "table.hpp"
#include "text.hpp"

namespace kiln::cli {
namespace {

// A thing lost, what it costs and how to get it back. `accident`: nobody asked for it (a
// compiled-out feature the build did not acknowledge, a store that cannot be written).
struct Finding {
  std::string feature;  // "fusion", "store", "blas", "simd"
  std::string what, cost, fix;
  bool accident = false;
};

// What each performance feature buys; the figures are the seed stack's, which lost them all at
// once (issue 6), and `kiln bench --compare` measures them on this machine.
struct FeatureCost {
  const char* name;
  const char* option;  // the CMake option and environment variable
  const char* cost;
};
constexpr FeatureCost kCosts[] = {
    {"fusion", "KILN_FUSION",
     "element-wise chains run one kernel per op, each writing its intermediate to memory: about "
     "3x slower on chain8"},
    {"autotune", "KILN_AUTOTUNE",
     "CUDA matmul takes the cuBLASLt heuristic's first choice untimed, which can be slower than "
     "the best candidate"},
    {"persistence", "KILN_PERSISTENCE",
     "every process compiles its kernels and tunes its matmuls again: up to seconds in each "
     "first call"},
    {"threads", "KILN_THREADS",
     "the CPU backend and its BLAS run on one thread: about 4x slower CPU matmul"},
    {"simd", "KILN_SIMD", "CPU element-wise kernels run scalar loops"},
    {"cudnn", "KILN_CUDNN",
     "bf16/f16 attention runs kiln's own kernels instead of cuDNN's: 1.4x slower at GPT-2 small's "
     "shape on the H100, its bf16 training step 7 % slower"},
};

// What losing the feature of that name costs (kCosts lists every one the doctor reports).
const char* cost_of(std::string_view name) {
  for (const FeatureCost& c : kCosts)
    if (name == c.name) return c.cost;
  throw kiln::InternalError("kCosts has no " + std::string(name));
}

// kiln::features(), asked once per report.
using Features = std::vector<FeatureState>;

void feature_findings(const Features& features, std::vector<Finding>& out) {
  // The build acknowledged its compiled-out features (-DKILN_QUIET_FEATURES=ON, as the minimal
  // preset does).
  const bool quiet = diagnostics::quiet_build();
  for (const FeatureState& f : features) {
    for (const FeatureCost& c : kCosts) {
      if (f.name != c.name || f.live) continue;
      if (!f.compiled) {
        out.push_back({f.name, fmt::format("{} is compiled out ({}=OFF)", f.name, c.option), c.cost,
                       fmt::format("rebuild kiln with -D{}=ON", c.option), !quiet});
      } else {
        out.push_back({f.name, fmt::format("{} is switched off ({})", f.name, f.why), c.cost,
                       f.why.find("environment") != std::string::npos
                           ? fmt::format("unset {}", c.option)
                           : std::string("leave it on in kiln::set_config"),
                       false});
      }
    }
  }
}

// The feature of that name; features() lists every one the doctor asks about.
const FeatureState& feature(const Features& features, const std::string& name) {
  for (const FeatureState& f : features)
    if (f.name == name) return f;
  throw kiln::InternalError("kiln::features() has no " + name);
}

// ---- the CPU ----

struct CpuFacts {
  std::string backend;                   // "dispatch<fusion<cpu<avx2>>>"
  std::string simd_target;               // the target dispatched to now, "scalar" without SIMD
  std::vector<std::string> cpu_targets;  // this CPU's, best first (empty without SIMD)
  int threads = 1;                       // kiln's CPU loops (oneTBB)
  unsigned hardware_threads = 1;
  std::string blas;
  std::string blas_core;         // the BLAS's kernels for this CPU, where it says ("Haswell")
  std::string blas_core_origin;  // who chose them (cpu::blas_core_origin)
  std::string matmul_error;      // why CPU matmul failed, when it did
  int blas_threads = 1;          // as the BLAS reports it after a product large enough to thread
};

CpuFacts cpu_facts() {
  CpuFacts f;
  const Device cpu = Device::cpu();
  f.backend = cpu.backend_name();
  const std::string inner = f.backend.substr(f.backend.find("cpu<") + 4);
  f.simd_target = inner.substr(0, inner.find('>'));
  f.hardware_threads = std::max(1u, std::thread::hardware_concurrency());
  // kiln gives the BLAS its thread count per product (src/cpu/matmul.cpp): ask after one large
  // enough to be threaded, so that the count is what CPU matmul really runs on.
  const auto a = Tensor<2>::ones({256, 256}, DType::f32, cpu);
  try {
    (void)matmul(a, a).sum().item();
  } catch (const kiln::DeviceError& e) {
    f.matmul_error = e.what();  // no CBLAS could be loaded: a finding below
  }
  diagnostics::CpuReport r = diagnostics::cpu_report();
  f.cpu_targets = std::move(r.simd_targets);
  f.threads = r.threads;
  f.blas = std::move(r.blas);
  f.blas_core = std::move(r.blas_core);
  f.blas_core_origin = std::move(r.blas_core_origin);
  f.blas_threads = r.blas_threads;
  return f;
}

// Whether OpenBLAS's kernel set `core` uses AVX2 or wider vectors. OpenBLAS picks it from the CPU
// model; a model newer than the library (Debian 12's 0.3.21 on a 5th-generation Xeon) gets the
// SSE3 "Prescott" kernels, which measured 5x slower there (docs/benchmarks.md).
bool wide_blas_core(const std::string& core) {
  for (const char* wide : {"Haswell", "Zen", "Excavator", "SkylakeX", "Cooperlake",
                           "SapphireRapids", "Neoverse", "ARMV8SVE", "A64FX"}) {
    if (core.rfind(wide, 0) == 0) return true;
  }
  return false;
}

void cpu_findings(const CpuFacts& c, const Features& features, std::vector<Finding>& out) {
  if (!c.matmul_error.empty()) {
    out.push_back({"blas", c.matmul_error, "CPU matmul does not run",
                   "install a CBLAS (libopenblas0) or name one in KILN_BLAS", true});
  }
  const std::string best = c.cpu_targets.empty() ? "" : c.cpu_targets.front();
  if (!c.blas_core.empty() && best.rfind("avx", 0) == 0 && !wide_blas_core(c.blas_core)) {
    const char* fit = best.rfind("avx3", 0) == 0 ? "SkylakeX" : "Haswell";
    out.push_back(
        {"blas",
         fmt::format("OpenBLAS runs its {} kernels (no AVX2) on a CPU that has {}: it does not "
                     "know this CPU model",
                     c.blas_core, best),
         "CPU matmul about 5x slower (1024^3 f32 on the H200 host's 16 Xeon cores: 8.9 ms "
         "instead of 1.7 ms)",
         fmt::format("set OPENBLAS_CORETYPE={} in the environment, or install a newer OpenBLAS",
                     fit),
         true});
  }
  if (c.matmul_error.empty() && feature(features, "threads").live && c.threads > 1 &&
      c.blas_threads <= 1) {
    out.push_back({"blas",
                   fmt::format("the BLAS runs single-threaded ({}) while kiln uses {} threads",
                               c.blas, c.threads),
                   fmt::format("CPU matmul uses one core of {}", c.hardware_threads),
                   "link a threaded BLAS (Debian: apt-get install libopenblas0-pthread)", true});
  }
  const FeatureState& simd = feature(features, "simd");
  if (simd.live && !c.cpu_targets.empty() && c.simd_target != c.cpu_targets.front()) {
    out.push_back({"simd",
                   fmt::format("Highway target {} on a CPU that has {} ({})", c.simd_target,
                               c.cpu_targets.front(), simd.why),
                   "CPU element-wise kernels use narrower vectors than this CPU offers",
                   "unset KILN_SIMD or leave Config::simd_target empty", false});
  }
}

// ---- the store ----

struct StoreUsage {
  std::string identity, status;
  std::int64_t tune_entries = 0, kernel_entries = 0, bytes = 0;
};

struct StoreFacts {
  bool built = false;
  bool open = false;      // persistence live: this process opened it
  std::string directory;  // where it is (or would be)
  std::string file;       // the database in use; empty while memory-only
  std::string mode;       // "persistent", "read-only", "memory-only"
  std::string build;      // this build's revision, which its rows carry
  bool writable = false;
  std::string why;              // why not writable
  std::int64_t file_bytes = 0;  // the database and its write-ahead log
  std::vector<StoreUsage> usage;
  // What opening and reading it found and dealt with (a corrupt file moved aside, tables that
  // were not kiln's rebuilt...): the store's warnings, less the one `why` already tells.
  std::vector<std::string> found;
};

StoreFacts store_facts() {
  StoreFacts f;
  const diagnostics::StoreReport r = diagnostics::process_store_report(/*statuses=*/true);
  const diagnostics::StoreLocation& l = r.location;
  f.built = l.built;
  f.directory = l.directory;
  if (l.mode == diagnostics::StoreMode::closed) return f;
  const bool persistent = l.mode == diagnostics::StoreMode::persistent;
  f.open = true;
  f.file = l.file;
  f.mode = diagnostics::store_mode_name(l.mode);
  f.build = l.build;
  f.writable = persistent && ::access(f.directory.c_str(), W_OK) == 0;
  f.why = persistent ? (f.writable ? "" : "the directory is not writable") : l.why;
  for (const char* suffix : {"", "-wal"}) {
    if (f.file.empty()) break;  // memory-only: no file to measure
    std::error_code ec;
    const auto n = std::filesystem::file_size(f.file + suffix, ec);
    if (!ec) f.file_bytes += static_cast<std::int64_t>(n);
  }
  for (const diagnostics::StoreUsage& u : r.usage) {
    f.usage.push_back({printable(u.identity), u.status, u.tune_rows, u.kernels, u.bytes});
  }
  for (const std::string& w : r.warnings) {
    if (f.why.empty() || w.find(f.why) == std::string::npos) f.found.push_back(w);
  }
  return f;
}

void store_findings(const StoreFacts& s, std::vector<Finding>& out) {
  if (s.open && !s.writable) {
    out.push_back({"store", fmt::format("the store at {} is not writable ({})", s.directory, s.why),
                   "every process tunes its matmuls and compiles its kernels again",
                   "make the directory writable, or point KILN_CACHE_DIR at one that is", true});
  }
  for (const std::string& w : s.found) {
    out.push_back({"store", "the store: " + w, "the rows it held are measured and compiled again",
                   "nothing to do now (remove a file moved aside once you no longer want it)",
                   true});
  }
}

// ---- output ----

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_text(const std::vector<DeviceInfo>& devs, const Features& features, const CpuFacts& c,
                const diagnostics::CudaReport& g, const StoreFacts& s,
                const std::vector<Finding>& findings, int status) {
  fmt::print("kiln {} doctor\n\ndevices:\n", version());
  std::vector<std::vector<std::string>> rows{{"name", "present", "backend / why absent"}};
  for (const DeviceInfo& d : devs)
    rows.push_back({d.name, yes_no(d.present), d.present ? d.backend_name : d.reason});
  print_table(rows, "  ");

  fmt::print("\nfeatures:\n");
  rows = {{"name", "compiled", "live", "why"}};
  for (const FeatureState& f : features)
    rows.push_back({f.name, yes_no(f.compiled), yes_no(f.live), f.why});
  print_table(rows, "  ");

  // Modes that change results, not speed alone (kiln/config.hpp).
  fmt::print("\nmodes:\n");
  // Autocast is a guard a program holds per thread (kiln/autocast.hpp): doctor's own thread has
  // none, so the row names the switch and says where a training program's state shows.
  const std::optional<DType> autocast = autocast_dtype();
  print_table(
      {{"deterministic", deterministic() ? "on: scatter_add and index_add sum in index order"
                                         : "off: CUDA sums with atomics (the CPU is "
                                           "deterministic always; KILN_DETERMINISTIC=1)"},
       {"float32_matmul_precision", precision_name(float32_matmul_precision())},
       {"autocast", autocast ? fmt::format("{} on this thread", dtype_name(*autocast))
                             : "off on this thread (a kiln::Autocast guard sets it per thread; "
                               "a training program prints its own)"}},
      "  ");

  fmt::print("\ncpu:\n");
  std::string targets;
  for (const std::string& t : c.cpu_targets) targets += (targets.empty() ? "" : ", ") + t;
  print_table({{"simd target", c.simd_target},
               {"cpu supports", targets.empty() ? "(SIMD compiled out)" : targets},
               {"threads",
                fmt::format("{} of {} hardware threads (oneTBB)", c.threads, c.hardware_threads)},
               {"blas", c.blas},
               {"blas core", c.blas_core.empty() ? "(not reported)"
                                                 : c.blas_core + " (" + c.blas_core_origin + ")"},
               {"blas threads", std::to_string(c.blas_threads)}},
              "  ");

  fmt::print("\ncuda:\n");
  if (g.built) {
    print_table({{"runtime", g.runtime},
                 {"driver", g.driver},
                 {"nvrtc", g.nvrtc},
                 {"cublasLt", g.cublas},
                 {"nccl", g.nccl + " (kiln::dist, loaded at run time)"},
                 {"cudnn", g.cudnn + " (bf16/f16 attention, loaded at run time)"}},
                "  ");
  } else {
    fmt::print("  not built\n");
  }

  fmt::print("\nstore:\n");
  if (!s.built) {
    fmt::print("  not built (-DKILN_PERSISTENCE=OFF)\n");
  } else if (!s.open) {
    fmt::print("  {} (not opened: persistence is off in this process)\n", s.directory);
  } else {
    fmt::print("  {} ({}, {})\n", s.file.empty() ? s.directory : s.file,
               s.writable ? "writable" : "not writable: " + s.why, format_bytes(s.file_bytes));
    fmt::print("  this build: kiln {}, build {}\n", version(), s.build);
    for (const std::string& w : s.found) fmt::print("  found: {}\n", w);
    if (s.usage.empty()) fmt::print("  no rows\n");
    rows = {{"identity", "tune rows", "kernels", "bytes", "status"}};
    for (const StoreUsage& u : s.usage) {
      rows.push_back({u.identity, std::to_string(u.tune_entries), std::to_string(u.kernel_entries),
                      format_bytes(u.bytes), u.status});
    }
    if (!s.usage.empty()) print_table(rows, "  ");
  }

  fmt::print("\nfindings:\n");
  if (findings.empty()) fmt::print("  none: every performance feature is live\n");
  for (const Finding& f : findings) {
    fmt::print("  - [{}] {}: {}; fix: {}\n", f.accident ? "lost" : "off on purpose", f.what, f.cost,
               f.fix);
  }
  if (status != 0) {
    fmt::print("\na performance feature is lost (exit status 1)\n");
  } else if (!findings.empty()) {
    fmt::print("\nhealthy: what is off was switched off on purpose (--strict counts it as lost)\n");
  } else {
    fmt::print("\nhealthy\n");
  }
}

// A JSON array of strings.
std::string json_strings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(json_string(s));
  return json_array(quoted);
}

void print_json(const std::vector<DeviceInfo>& devs, const Features& features, const CpuFacts& c,
                const diagnostics::CudaReport& g, const StoreFacts& s,
                const std::vector<Finding>& findings, int status) {
  std::vector<std::string> items;
  for (const DeviceInfo& d : devs) {
    items.push_back(fmt::format(R"({{"name": {}, "present": {}, "backend": {}, "reason": {}}})",
                                json_string(d.name), d.present, json_string(d.backend_name),
                                json_string(d.reason)));
  }
  std::string out = fmt::format(R"({{"version": {}, "devices": [{}], "features": [)",
                                json_string(version()), fmt::join(items, ", "));
  items.clear();
  for (const FeatureState& f : features) {
    items.push_back(fmt::format(R"({{"name": {}, "compiled": {}, "live": {}, "why": {}}})",
                                json_string(f.name), f.compiled, f.live, json_string(f.why)));
  }
  out +=
      fmt::format(R"({}], "cpu": {{"simd_target": {}, "cpu_targets": {}, "threads": {}, )"
                  R"("hardware_threads": {}, "blas": {}, "blas_core": {}, "blas_core_origin": {}, )"
                  R"("blas_threads": {}}}, )",
                  fmt::join(items, ", "), json_string(c.simd_target), json_strings(c.cpu_targets),
                  c.threads, c.hardware_threads, json_string(c.blas), json_string(c.blas_core),
                  json_string(c.blas_core_origin), c.blas_threads);
  out += fmt::format(
      R"("cuda": {{"built": {}, "runtime": {}, "driver": {}, "nvrtc": {}, "cublas": {}, )"
      R"("nccl": {}, "cudnn": {}}}, )",
      g.built, json_string(g.runtime), json_string(g.driver), json_string(g.nvrtc),
      json_string(g.cublas), json_string(g.nccl), json_string(g.cudnn));
  items.clear();
  for (const StoreUsage& u : s.usage) {
    items.push_back(fmt::format(
        R"({{"identity": {}, "status": {}, "tune_entries": {}, "kernel_entries": {}, "bytes": {}}})",
        json_string(u.identity), json_string(u.status), u.tune_entries, u.kernel_entries, u.bytes));
  }
  out += fmt::format(
      R"("store": {{"built": {}, "open": {}, "directory": {}, "file": {}, "mode": {}, )"
      R"("build": {}, "writable": {}, "why": {}, "bytes": {}, "usage": [{}], "found": {}}}, )"
      R"("findings": [)",
      s.built, s.open, json_string(s.directory), json_string(s.file), json_string(s.mode),
      json_string(s.build), s.writable, json_string(s.why), s.file_bytes, fmt::join(items, ", "),
      json_strings(s.found));
  items.clear();
  for (const Finding& f : findings) {
    items.push_back(
        fmt::format(R"({{"feature": {}, "what": {}, "cost": {}, "fix": {}, "on_purpose": {}}})",
                    json_string(f.feature), json_string(f.what), json_string(f.cost),
                    json_string(f.fix), !f.accident));
  }
  out += fmt::format(R"({}], "healthy": {}, "exit_status": {}}})", fmt::join(items, ", "),
                     status == 0, status);
  fmt::print("{}\n", out);
}

// cuDNN compiled in and switched on, a GPU present, and libcudnn that does not load: bf16/f16
// attention quietly runs kiln's slower kernels. (No GPU: nothing would call it.)
void cudnn_findings(const std::vector<DeviceInfo>& devs, const diagnostics::CudaReport& g,
                    std::vector<Finding>& out) {
  const bool gpu = std::any_of(devs.begin(), devs.end(), [](const DeviceInfo& d) {
    return d.present && d.name.rfind("cuda:", 0) == 0;
  });
  if (!gpu || g.cudnn.rfind("absent: ", 0) != 0) return;
  out.push_back({"cudnn", "cuDNN is absent (" + g.cudnn.substr(8) + ")", cost_of("cudnn"),
                 "install cuDNN 9 where the loader finds libcudnn.so.9, or set KILN_CUDNN_LIBRARY",
                 true});
}

}  // namespace

int run_doctor(const DoctorOptions& o) {
  const std::vector<DeviceInfo> devs = devices();
  const Features feats = features();
  const CpuFacts c = cpu_facts();
  const diagnostics::CudaReport g = diagnostics::cuda_report();
  const StoreFacts s = store_facts();
  std::vector<Finding> findings;
  feature_findings(feats, findings);
  cpu_findings(c, feats, findings);
  store_findings(s, findings);
  cudnn_findings(devs, g, findings);
  int status = 0;
  for (const Finding& f : findings)
    if (f.accident || o.strict) status = 1;
  if (o.json) {
    print_json(devs, feats, c, g, s, findings, status);
  } else {
    print_text(devs, feats, c, g, s, findings, status);
  }
  return status;
}

}  // namespace kiln::cli
