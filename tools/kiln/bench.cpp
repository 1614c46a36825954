#include "bench.hpp"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bench_measure.hpp"
#include "bench_processes.hpp"
#include "bench_train.hpp"
#include "json.hpp"
#include "kiln/kiln.hpp"

extern char** environ;

namespace kiln::cli {
namespace {

struct DeviceResult {
  std::string device;   // "cpu", "cuda:0"
  std::string backend;  // "dispatch<cpu<avx2>>"
  std::vector<WorkloadResult> workloads;
};

// Indices spread over [0, n): the ends (where an off-by-one shows) and a seeded random sample.
std::vector<std::size_t> sample_indices(std::size_t n, std::size_t count) {
  std::vector<std::size_t> idx{0, n - 1};
  std::mt19937_64 gen(12345);
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  while (idx.size() < count) idx.push_back(pick(gen));
  return idx;
}

constexpr std::int64_t kChainSide = 2048;
constexpr std::int64_t kMatmulSide = 1024;

// The seed's eight element-wise ops, written exactly as the seed writes them.
Tensor<2> chain8(const Tensor<2>& x) {
  auto y = (x * 0.5f + 0.25f).sin().abs();
  auto z = (y * 0.5f + 0.25f).sin().abs();
  return z;
}

double chain8_reference(float x) {
  const double y = std::abs(std::sin(static_cast<double>(x) * 0.5 + 0.25));
  return std::abs(std::sin(y * 0.5 + 0.25));
}

void check_shape(const char* workload, const std::string& device, const Tensor<2>& r,
                 std::int64_t rows, std::int64_t cols, DType dtype) {
  if (r.size(0) != rows || r.size(1) != cols || r.dtype() != dtype) {
    throw CheckError(fmt::format("{} on {}: result is {}x{} {}, expected {}x{} {}", workload,
                                 device, r.size(0), r.size(1), dtype_name(r.dtype()), rows, cols,
                                 dtype_name(dtype)));
  }
}

// The half types' unit in the last place at 1 (bf16 keeps 8 significant bits, f16 11).
double half_epsilon(DType t) { return t == DType::bf16 ? 0x1p-7 : 0x1p-10; }

// Compares a few hundred elements of chain8's output with the same formula in float64 on the host.
// In a half type each of the eight ops may round its result (fusion off), each rounding within
// half a unit at 1 of the output's size (values are at most 1), and no op magnifies an error
// (|sin'| <= 1, the scales are 0.5): so 8 half-units, 4 units at 1.
void check_chain8(const std::string& device, const std::vector<float>& x, const Tensor<2>& z,
                  DType dtype) {
  const double kTolerance = dtype == DType::f32 ? 1e-5 : 4 * half_epsilon(dtype);
  check_shape("chain8", device, z, kChainSide, kChainSide, dtype);
  const std::vector<float> got = z.to_vector<float>();
  for (std::size_t i : sample_indices(got.size(), 300)) {
    const double want = chain8_reference(x[i]);
    const double diff = std::abs(static_cast<double>(got[i]) - want);
    if (!(diff <= kTolerance)) {  // written so that NaN fails too
      throw CheckError(fmt::format(
          "chain8 on {}: element {} is {} for input {}, float64 reference {} (|diff| {:.3g} > {})",
          device, i, got[i], x[i], want, diff, kTolerance));
    }
  }
}

// Compares sampled elements of a*b with float64 dot products. The tolerance is the classic
// worst-case bound for a k-term float dot product, k * 2^-24 * sum|a_ik b_kj|, doubled: any
// correct float32 GEMM meets it, while a wrong index or a missing block misses it by far.
// Under Precision::high (TF32) operands keep 10 mantissa bits, so the bound is 2^-10 relative.
// Half operands (a and b hold their values) multiply exactly in f32 and accumulate in f32; the
// result then rounds once to the half type: one more half-unit relative.
void check_matmul(const std::string& device, const std::vector<float>& a,
                  const std::vector<float>& b, const Tensor<2>& c, bool tf32, std::int64_t n,
                  DType dtype) {
  check_shape("matmul", device, c, n, n, dtype);
  const std::vector<float> got = c.to_vector<float>();
  for (std::size_t flat : sample_indices(got.size(), 200)) {
    const std::size_t i = flat / n, j = flat % n;
    double want = 0, magnitude = 0;
    for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
      const double p = static_cast<double>(a[i * n + k]) * static_cast<double>(b[k * n + j]);
      want += p;
      magnitude += std::abs(p);
    }
    const double rounding = dtype == DType::f32 ? 0.0 : half_epsilon(dtype) * std::abs(want);
    const double tolerance =
        (tf32 ? 0x1p-10 : 2.0 * static_cast<double>(n) * 0x1p-24) * magnitude + rounding + 1e-30;
    const double diff = std::abs(static_cast<double>(got[flat]) - want);
    if (!(diff <= tolerance)) {
      throw CheckError(fmt::format(
          "matmul on {}: element [{}, {}] is {}, float64 reference {} (|diff| {:.3g} > {:.3g})",
          device, i, j, got[flat], want, diff, tolerance));
    }
  }
}

WorkloadResult run_chain8(const Device& device, int runs, DType dtype = DType::f32) {
  const auto x =
      Tensor<2>::random({kChainSide, kChainSide}, Distribution::uniform(0, 1), device, 1).to(dtype);
  const std::vector<float> x_host = x.to_vector<float>();  // also waits for x to exist
  const std::string where = device.str();
  const Timing t = measure(
      device, runs, [&] { return chain8(x); },
      [&](const Tensor<2>& z) { check_chain8(where, x_host, z, dtype); });
  return {"chain8", "", kChainSide, kChainSide, t, dtype, {}};
}

// `name`: "matmul", or "new-shape matmul" (operands made on the CPU: a process whose store is
// empty would otherwise compile the random kernel first).
WorkloadResult run_matmul(const Device& device, int runs, Precision precision,
                          const std::string& name = "matmul", std::int64_t side = kMatmulSide,
                          DType dtype = DType::f32) {
  const Shape<2> shape{side, side};
  const Device made_on = name == "matmul" ? device : Device::cpu();
  const auto a =
      Tensor<2>::random(shape, Distribution::uniform(0, 1), made_on, 2).to(device).to(dtype);
  const auto b =
      Tensor<2>::random(shape, Distribution::uniform(0, 1), made_on, 3).to(device).to(dtype);
  const std::vector<float> a_host = a.to_vector<float>(), b_host = b.to_vector<float>();
  const std::string where = device.str();
  const bool tf32 = precision == Precision::high;
  const Precision saved = float32_matmul_precision();
  set_float32_matmul_precision(precision);
  const Timing t = measure(
      device, runs, [&] { return matmul(a, b); },
      [&](const Tensor<2>& c) { check_matmul(where, a_host, b_host, c, tf32, side, dtype); });
  set_float32_matmul_precision(saved);
  return {name, tf32 ? "high" : "highest", side, side, t, dtype, {}};
}

constexpr const char* kNewShape = "new-shape matmul";

// The "first call of a new shape" rows of every CUDA device that `options` selects, measured
// by a child `kiln bench --one-process --new-shape` whose store is a fresh temporary directory
// (removed afterwards), by device name.
std::map<std::string, std::vector<WorkloadResult>> new_shape_rows(const BenchOptions& options) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "kiln-bench-new-shape-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr)
    throw std::runtime_error("bench: cannot make a temporary directory for the new-shape rows");
  std::vector<std::string> env{"KILN_CACHE_DIR=" + dir};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("KILN_CACHE_DIR=", 0) != 0) env.emplace_back(*e);
  }
  BenchOptions child = options;
  child.device = "cuda";
  child.json = false;
  child.new_shape = true;
  const BenchChild r = run_bench_child(child, ChildStdout::discard, &env);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (const int code = child_failure(r, "the new-shape process"); code != 0) {
    throw std::runtime_error(
        fmt::format("bench: the process measuring the new-shape rows failed ({})", code));
  }
  std::map<std::string, std::vector<WorkloadResult>> rows;
  for (const WorkloadReport& w : r.report) {
    const bool tf32 = w.workload.size() > 5 && w.workload.substr(w.workload.size() - 5) == " tf32";
    Timing t;
    t.first_s = w.first_s;
    t.first_compile = {w.compiled, w.compile_seconds, w.loaded, w.load_seconds};
    t.min_s = w.min_s;
    t.median_s = w.median_s;
    t.runs = w.runs;
    rows[w.device].push_back({kNewShape,
                              tf32 ? "high" : "highest",
                              options.new_shape_side,
                              options.new_shape_side,
                              t,
                              DType::f32,
                              {}});
  }
  return rows;
}

// "chain8 2048x2048 f32", "matmul 1024x1024 f32 tf32", "matmul 4096x4096 bf16": a workload as
// lines and reports name it.
std::string label(const WorkloadResult& w) {
  return fmt::format("{} {}x{} {}{}", w.name, w.rows, w.cols, dtype_name(w.dtype),
                     w.precision == "high" ? " tf32" : "");
}

// The seed's line; a matmul under Precision::high says so, and a first call that compiled
// kernels says how much of it that was.
std::string text_line(const WorkloadResult& w) {
  const Timing& t = w.timing;
  std::string line =
      fmt::format("{}: first {}, next {} min {} median {}", label(w), format_duration(t.first_s),
                  t.runs, format_duration(t.min_s), format_duration(t.median_s));
  if (w.name == kNewShape) {
    // The bound a first call of a new shape keeps (tune::Policy::first_call()).
    line += fmt::format(" (empty store; bound max(300 ms, 20 x min) = {})",
                        format_duration(std::max(0.3, 20 * t.min_s)));
  }
  if (t.first_compile.kernels > 0) {
    line += fmt::format(" (first call compiled {} kernels in {})", t.first_compile.kernels,
                        format_duration(t.first_compile.seconds));
  }
  if (t.first_compile.loaded > 0) {
    line += fmt::format(" (first call loaded {} kernels from the store in {})",
                        t.first_compile.loaded, format_duration(t.first_compile.load_seconds));
  }
  return line + step_facts_text(w);
}

std::string json_report(const std::vector<DeviceResult>& results) {
  std::string devices;
  for (const DeviceResult& d : results) {
    std::string workloads;
    for (const WorkloadResult& w : d.workloads) {
      if (!workloads.empty()) workloads += ", ";
      // {} prints the shortest text that reads back as the same double: valid JSON numbers.
      workloads += fmt::format(
          "{{\"name\": {}, \"shape\": [{}, {}], \"dtype\": \"{}\", {}\"first_s\": {}, "
          "\"min_s\": {}, \"median_s\": {}, \"runs\": {}, \"first_compiles\": {}, "
          "\"first_compile_s\": {}, \"first_loaded\": {}{}}}",
          json_string(w.name), w.rows, w.cols, dtype_name(w.dtype),
          w.precision.empty() ? "" : fmt::format("\"precision\": {}, ", json_string(w.precision)),
          w.timing.first_s, w.timing.min_s, w.timing.median_s, w.timing.runs,
          w.timing.first_compile.kernels, w.timing.first_compile.seconds,
          w.timing.first_compile.loaded,
          w.step.peak_bytes == 0 ? ""
                                 : fmt::format(", \"tokens_per_step\": {}, \"flops_per_step\": {}, "
                                               "\"peak_bytes\": {}",
                                               w.step.tokens, w.step.flops, w.step.peak_bytes));
    }
    if (!devices.empty()) devices += ", ";
    devices += fmt::format("{{\"device\": {}, \"name\": {}, \"workloads\": [{}]}}",
                           json_string(d.device), json_string(d.backend), workloads);
  }
  return fmt::format("{{\"kiln_version\": {}, \"devices\": [{}]}}", json_string(kiln::version()),
                     devices);
}

// The figures for the process that started this one (bench_processes.hpp): one line per
// workload, tab-separated, the fields run_bench's comment lists.
void write_report(int fd, const std::vector<DeviceResult>& results) {
  std::FILE* f = fdopen(fd, "w");
  if (f == nullptr) throw std::runtime_error(fmt::format("bench: fdopen({}) failed", fd));
  for (const DeviceResult& d : results) {
    for (const WorkloadResult& w : d.workloads) {
      const Timing& t = w.timing;
      const CompileStats& c = t.first_compile;
      fmt::print(f, "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", d.device, d.backend, label(w),
                 t.first_s, c.kernels, c.seconds, c.loaded, c.load_seconds, t.min_s, t.median_s,
                 t.runs);
    }
  }
  std::fclose(f);
}

// Whether the device's chain multiplies `dtype` (the "matmul dtypes" kiln info lists). Asks
// that device alone: `kiln bench --device cpu` never opens a GPU.
bool runs_matmul(const Device& device, DType dtype) {
  for (const auto& f : device_info(device).facts) {
    if (f.name != "matmul dtypes") continue;
    const std::string list = " " + f.value + " ";
    if (list.find(std::string(" ") + dtype_name(dtype) + " ") != std::string::npos) return true;
  }
  return false;
}

// kiln::devices() names a present device "cpu" or "cuda:N" (and an absent kind "cuda").
std::string kind_of(const std::string& name) { return name.substr(0, name.find(':')); }

Device device_named(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  const auto colon = name.find(':');
  return Device::cuda(colon == std::string::npos ? 0 : std::stoi(name.substr(colon + 1)));
}

// The present devices that `which` selects. Asking for a kind by name when none is present is an
// error that carries kiln's reason; `all` skips absent kinds, saying so on stderr.
std::vector<Device> select_devices(const std::string& which) {
  std::vector<Device> chosen;
  std::vector<std::string> absent;
  for (const DeviceInfo& info : devices()) {
    if (which != "all" && kind_of(info.name) != which) continue;
    if (info.present) {
      chosen.push_back(device_named(info.name));
    } else {
      absent.push_back(fmt::format("{} is absent: {}", info.name, info.reason));
      if (which == "all") fmt::print(stderr, "bench: skipping {}: {}\n", info.name, info.reason);
    }
  }
  if (which != "all" && chosen.empty()) {
    std::string why;
    for (const std::string& a : absent) why += (why.empty() ? "" : "; ") + a;
    throw DeviceError(fmt::format("bench --device {}: {}", which,
                                  why.empty() ? "kiln::devices() does not list it" : why));
  }
  if (chosen.empty()) throw DeviceError("bench: kiln::devices() lists no present device");
  return chosen;
}

}  // namespace

std::string format_duration(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.2f}us", seconds * 1e6);
  return fmt::format("{:.2f}ms", seconds * 1e3);
}

void run_bench(const BenchOptions& options) {
  std::vector<DeviceResult> results;
  std::optional<std::map<std::string, std::vector<WorkloadResult>>> new_shapes;
  for (const Device& device : select_devices(options.device)) {
    DeviceResult r{device.str(), device.backend_name(), {}};
    if (!options.json) {
      fmt::print("name = {}\n", r.backend);
      std::fflush(stdout);  // each line appears as soon as it is measured
    }
    auto report = [&](WorkloadResult w) {
      r.workloads.push_back(std::move(w));
      if (!options.json) {
        fmt::print("{}\n", text_line(r.workloads.back()));
        std::fflush(stdout);
      }
    };
    const bool cuda = device.kind() == Device::Kind::cuda;
    if (options.train) {
      report(run_mlp_step(device, options.runs));
      if (cuda) {
        report(run_gpt2_step(device, options.runs, std::nullopt));
        report(run_gpt2_step(device, options.runs, DType::bf16));
      }
      results.push_back(std::move(r));
      continue;
    }
    if (options.new_shape) {
      if (cuda) {
        for (const Precision p : {Precision::highest, Precision::high})
          report(run_matmul(device, options.runs, p, kNewShape, options.new_shape_side));
      }
      results.push_back(std::move(r));
      continue;
    }
    report(run_chain8(device, options.runs));
    report(run_matmul(device, options.runs, Precision::highest));
    // The CPU computes strict fp32 under either precision; CUDA has TF32 tensor cores.
    if (cuda) report(run_matmul(device, options.runs, Precision::high));
    // bf16, where the device's chain runs it: chain8, and matmul at 1024 (and on CUDA at 4096,
    // where tensor cores make it the workload of training; on the CPU a 4096^3 product takes
    // a second or more, too long for the hundred runs a bench makes).
    report(run_chain8(device, options.runs, DType::bf16));
    if (runs_matmul(device, DType::bf16)) {
      report(
          run_matmul(device, options.runs, Precision::highest, "matmul", kMatmulSide, DType::bf16));
      if (cuda)
        report(run_matmul(device, options.runs, Precision::highest, "matmul", 4096, DType::bf16));
    }
    if (cuda) {
      if (!new_shapes) new_shapes = new_shape_rows(options);  // (every CUDA device at once)
      for (WorkloadResult& w : (*new_shapes)[r.device]) report(std::move(w));
    }
    results.push_back(std::move(r));
  }
  if (options.json) fmt::print("{}\n", json_report(results));
  if (options.report_fd >= 0) write_report(options.report_fd, results);
}

}  // namespace kiln::cli
