#include "compare.hpp"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "bench_processes.hpp"
#include "dispatch/diagnostics.hpp"
#include "json.hpp"
#include "kiln/kiln.hpp"
#include "svg_plot.hpp"
#include "table.hpp"

extern char** environ;

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// The performance features and the environment variable that switches each off (config.hpp).
struct Switch {
  const char* feature;
  const char* variable;
};
constexpr Switch kSwitches[] = {
    {"fusion", "KILN_FUSION"},   {"autotune", "KILN_AUTOTUNE"}, {"persistence", "KILN_PERSISTENCE"},
    {"threads", "KILN_THREADS"}, {"simd", "KILN_SIMD"},         {"cudnn", "KILN_CUDNN"}};
constexpr const char* kCacheDir = "KILN_CACHE_DIR";

struct Configuration {
  std::string name;              // "default", "fusion off", "all off"
  std::vector<std::string> env;  // what it sets: "KILN_FUSION=0"
};

// A configuration left out, and why.
struct Skipped {
  std::string name, why;
};

std::string name_of(const Switch& s) { return fmt::format("{} off", s.feature); }

// --configs accepts "fusion off", "fusion-off" and "fusion_off".
std::string normalized(std::string s) {
  std::replace(s.begin(), s.end(), '-', ' ');
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

// The configurations to run, in the fixed order, and those skipped because their feature is
// not compiled in (kiln::features()).
std::pair<std::vector<Configuration>, std::vector<Skipped>> plan(
    const std::vector<std::string>& asked) {
  const std::vector<std::string> all = compare_configurations();
  std::set<std::string> wanted{"default"};
  if (asked.empty()) wanted.insert(all.begin(), all.end());
  for (const std::string& a : asked) {
    const std::string n = normalized(a);
    if (std::find(all.begin(), all.end(), n) == all.end()) {
      std::string valid;
      for (const std::string& v : all) valid += (valid.empty() ? "" : ", ") + v;
      throw ValueError(
          fmt::format("bench --compare --configs: unknown configuration '{}' (valid: {}; '-' "
                      "may stand for the space)",
                      a, valid));
    }
    wanted.insert(n);
  }
  std::map<std::string, FeatureState> state;
  for (const FeatureState& f : features()) state.emplace(f.name, f);

  std::vector<Configuration> run;
  std::vector<Skipped> skipped;
  run.push_back({"default", {}});
  std::vector<std::string> all_off;
  std::vector<std::string> compiled_out;
  for (const Switch& s : kSwitches) {
    const auto it = state.find(s.feature);
    const bool compiled = it != state.end() && it->second.compiled;
    const std::string var = fmt::format("{}=0", s.variable);
    if (compiled) {
      all_off.push_back(var);
    } else {
      compiled_out.emplace_back(s.feature);
    }
    if (wanted.count(name_of(s)) == 0) continue;
    if (compiled) {
      run.push_back({name_of(s), {var}});
    } else {
      skipped.push_back(
          {name_of(s), it == state.end() ? "not among kiln::features()" : it->second.why});
    }
  }
  if (wanted.count("all off") != 0) {
    if (all_off.empty()) {
      skipped.push_back({"all off", "no performance feature is compiled in: it is default"});
    } else {
      run.push_back({"all off", all_off});
    }
  }
  return {run, skipped};
}

// A fresh directory for the comparison's store, removed with its contents at the end.
class TempStore {
 public:
  TempStore() {
    std::string tmpl = (fs::temp_directory_path() / "kiln-compare-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error(
          fmt::format("bench --compare: cannot create {}: {}", tmpl, std::strerror(errno)));
    }
    path_ = tmpl;
  }
  ~TempStore() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempStore(const TempStore&) = delete;
  TempStore& operator=(const TempStore&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Ctrl-C (SIGINT), SIGTERM or SIGHUP during a comparison stops it cleanly: the signal is noted
// instead of killing kiln, the running child finishes or dies of it (a terminal's Ctrl-C reaches
// the child too), no further child starts, the temporary store is removed, and kiln then dies of
// the same signal, so that its caller sees the interruption. Declared before the TempStore, so
// destroyed after it.
class Interrupts {
 public:
  Interrupts() {
    struct sigaction on_signal {};
    on_signal.sa_handler = [](int sig) { caught_ = sig; };
    sigemptyset(&on_signal.sa_mask);
    for (std::size_t i = 0; i < std::size(kSignals); ++i)
      sigaction(kSignals[i], &on_signal, &saved_[i]);
  }
  ~Interrupts() {
    for (std::size_t i = 0; i < std::size(kSignals); ++i)
      sigaction(kSignals[i], &saved_[i], nullptr);
    if (caught_ != 0) raise(caught_);
  }
  Interrupts(const Interrupts&) = delete;
  Interrupts& operator=(const Interrupts&) = delete;
  int caught() const { return caught_; }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  static inline volatile std::sig_atomic_t caught_ = 0;
  struct sigaction saved_[std::size(kSignals)]{};
};

// The plot file, opened before the comparison runs (so that a bad path fails at once) and
// removed again if the comparison fails before it is written.
class PlotFile {
 public:
  explicit PlotFile(const std::string& path) : path_(path) {
    if (path_.empty()) return;
    std::error_code ec;
    existed_ = fs::exists(path_, ec);
    file_.open(path_, std::ios::out | std::ios::trunc);
    if (!file_) {
      throw ValueError(fmt::format("bench --compare --plot {}: cannot write the file: {}", path_,
                                   std::strerror(errno)));
    }
  }
  ~PlotFile() {
    if (path_.empty() || written_) return;
    file_.close();
    std::error_code ec;
    if (!existed_) fs::remove(path_, ec);
  }
  PlotFile(const PlotFile&) = delete;
  PlotFile& operator=(const PlotFile&) = delete;
  void write(const std::string& text) {
    file_ << text;
    file_.close();
    if (!file_) {
      throw ValueError(fmt::format("bench --compare --plot {}: writing failed", path_));
    }
    written_ = true;
  }

 private:
  std::string path_;
  bool existed_ = false, written_ = false;
  std::ofstream file_;
};

// This process's environment without kiln's switches and store directory (each configuration
// sets its own), and the switches it had set, which the comparison ignores.
std::pair<std::vector<std::string>, std::vector<std::string>> base_environment() {
  std::vector<std::string> env, ignored;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool ours = name == kCacheDir;
    for (const Switch& s : kSwitches) {
      if (name == s.variable) {
        ours = true;
        ignored.push_back(entry);
      }
    }
    if (!ours) env.push_back(entry);
  }
  return {env, ignored};
}

// What each child is asked for: `all` becomes `cpu` when no CUDA device is present (said once
// here rather than by every process), and asking for an absent kind is an error with kiln's
// reason.
std::string child_device(const std::string& which, std::vector<std::string>& notes) {
  bool cuda = false;
  std::vector<std::string> absent;
  for (const DeviceInfo& d : devices()) {
    if (d.name.rfind("cuda", 0) != 0) continue;
    if (d.present) {
      cuda = true;
    } else {
      absent.push_back(fmt::format("{} is absent: {}", d.name, d.reason));
    }
  }
  std::string why;
  for (const std::string& a : absent) why += (why.empty() ? "" : "; ") + a;
  if (which == "cuda" && !cuda) {
    throw DeviceError(fmt::format("bench --compare --device cuda: {}",
                                  why.empty() ? "kiln::devices() does not list it" : why));
  }
  if (which == "all" && !cuda) {
    if (!why.empty()) notes.push_back(fmt::format("skipping cuda: {}", why));
    return "cpu";
  }
  return which;
}

// The comparison's processes run on a temporary store; this one needs no store of its own and
// must not touch the user's: with persistence live, opening a CUDA device (child_device asks
// kiln::devices()) starts the backend's background preload of tuned matmuls, which opens the
// process's store at the user's directory (and makes its -wal and -shm there). Persistence is
// switched off for this process alone, before any device is opened; the children's environment
// comes from base_environment, not from this switch.
void keep_off_the_users_store() {
  Config c = config();
  c.persistence = false;
  set_config(c);
}

// What the store held after the priming process: what `default` reads in its first calls.
struct StoreContents {
  bool persistent = false;
  std::string why;  // when not persistent
  std::int64_t tune_rows = 0, kernels = 0, bytes = 0;
};

StoreContents store_contents(const fs::path& dir) {
  StoreContents c;
  const diagnostics::StoreReport r = diagnostics::store_report_at(dir.string());
  c.persistent = r.location.mode == diagnostics::StoreMode::persistent;
  c.why = r.location.why;
  for (const diagnostics::StoreUsage& u : r.usage) {
    c.tune_rows += u.tune_rows;
    c.kernels += u.kernels;
    c.bytes += u.bytes;
  }
  return c;
}

// What the priming process left, for the store's line: `cpu_only` when no CUDA device ran.
std::string describe(const StoreContents& c, bool cpu_only) {
  if (!c.persistent) {
    return fmt::format("; kiln keeps no store ({}): every process compiles and tunes again", c.why);
  }
  std::string what = fmt::format(
      ", and left it holding {} tuned matmul choices and {} compiled kernels ({} bytes)",
      c.tune_rows, c.kernels, c.bytes);
  if (cpu_only && c.tune_rows == 0 && c.kernels == 0) {
    what += ": nothing for the store to save here (the CPU compiles and tunes nothing)";
  }
  return what;
}

// One row of the table: a workload on a device, its min or its first call.
struct Row {
  std::string device;    // "cpu", "cuda:0"
  std::string workload;  // as reported: "matmul 1024x1024 f32 tf32"
  bool first = false;    // the first call's seconds; else the min of the timed calls
  std::string label;     // "chain8 cpu", "first matmul tf32 cuda:0"
  std::string metric() const { return first ? "first" : "min"; }
};

// "chain8", "matmul", "matmul tf32", "new-shape matmul": a reported f32 workload without its
// shape (the words before the first that starts with a digit); another dtype keeps its name and
// side: "chain8 bf16 2048", "matmul bf16 4096".
std::string short_name(const std::string& workload) {
  std::size_t end = workload.find(' ');
  while (end != std::string::npos && end + 1 < workload.size() &&
         !std::isdigit(static_cast<unsigned char>(workload[end + 1])))
    end = workload.find(' ', end + 1);
  std::string s = workload.substr(0, end);
  if (end != std::string::npos) {
    // After the name: "<rows>x<cols> <dtype>[ tf32]".
    const std::size_t shape_end = workload.find(' ', end + 1);
    const std::size_t dtype_end =
        shape_end == std::string::npos ? std::string::npos : workload.find(' ', shape_end + 1);
    const std::string shape = workload.substr(end + 1, shape_end - end - 1);
    const std::string dtype = shape_end == std::string::npos
                                  ? ""
                                  : workload.substr(shape_end + 1, dtype_end - shape_end - 1);
    if (!dtype.empty() && dtype != "f32") s += " " + dtype + " " + shape.substr(0, shape.find('x'));
  }
  const std::string tf32 = " tf32";
  if (workload.size() >= tf32.size() &&
      workload.compare(workload.size() - tf32.size(), tf32.size(), tf32) == 0) {
    s += tf32;
  }
  return s;
}

// The rows, from default's first round: min rows, then first-call rows; within each, workload
// by workload (in the order bench runs them), device by device.
std::vector<Row> rows_of(const std::vector<WorkloadReport>& reports) {
  std::vector<std::string> workloads, devices_seen;
  for (const WorkloadReport& w : reports) {
    const std::string n = short_name(w.workload);
    if (std::find(workloads.begin(), workloads.end(), n) == workloads.end()) workloads.push_back(n);
    if (std::find(devices_seen.begin(), devices_seen.end(), w.device) == devices_seen.end()) {
      devices_seen.push_back(w.device);
    }
  }
  std::vector<Row> rows;
  for (const bool first : {false, true}) {
    for (const std::string& n : workloads) {
      for (const std::string& d : devices_seen) {
        for (const WorkloadReport& w : reports) {
          if (w.device != d || short_name(w.workload) != n) continue;
          rows.push_back(
              {d, w.workload, first, fmt::format("{}{} {}", first ? "first " : "", n, d)});
        }
      }
    }
  }
  return rows;
}

constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// The row's seconds in one process's report, or NaN when it did not report the row.
double value_in(const std::vector<WorkloadReport>& reports, const Row& row) {
  for (const WorkloadReport& w : reports) {
    if (w.device == row.device && w.workload == row.workload) {
      return row.first ? w.first_s : w.min_s;
    }
  }
  return kMissing;
}

// Everything measured: per configuration, per round, what its process reported.
struct Measurements {
  std::vector<Configuration> configs;
  std::vector<std::vector<std::vector<WorkloadReport>>> reports;  // [config][round]
  std::vector<Row> rows;

  std::vector<double> per_round(std::size_t c, const Row& row) const {
    std::vector<double> v;
    for (const auto& r : reports[c]) v.push_back(value_in(r, row));
    return v;
  }
  double cell(std::size_t c, const Row& row) const {
    double best = kMissing;
    for (const double v : per_round(c, row)) {
      if (!std::isnan(v) && (std::isnan(best) || v < best)) best = v;
    }
    return best;
  }
  double ratio(std::size_t c, const Row& row) const {
    const double reference = cell(0, row);  // configs[0] is default
    const double v = cell(c, row);
    return reference > 0 ? v / reference : kMissing;
  }
  // device -> backend name, as configuration c's first process reported them, in order.
  std::vector<std::pair<std::string, std::string>> backends(std::size_t c) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const WorkloadReport& w : reports[c].front()) {
      bool seen = false;
      for (const auto& [d, b] : out) seen |= d == w.device;
      if (!seen) out.emplace_back(w.device, w.backend);
    }
    return out;
  }
};

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  return std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm) > 0 ? buf : "";
}

// The CPU's model name from /proc/cpuinfo ("AMD EPYC 7B13"), or "".
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "";
}

// "1 round", "3 rounds".
std::string count_of(long long n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

std::string environment_text(const Configuration& c) {
  if (c.env.empty()) return "(none set)";
  std::string s;
  for (const std::string& e : c.env) s += (s.empty() ? "" : " ") + e;
  return s;
}

std::string backends_text(const std::vector<std::pair<std::string, std::string>>& b) {
  std::string s;
  for (const auto& [d, name] : b) s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", d, name);
  return s;
}

std::string cell_text(double seconds, double ratio) {
  if (std::isnan(seconds)) return "-";
  return fmt::format("{} ({:.2f}x)", format_duration(seconds), ratio);
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

struct Context {
  explicit Context(const CompareOptions& o) : options(o), date(today()), cpu(cpu_model()) {}
  const CompareOptions& options;
  std::string device;  // what the children were asked for
  std::vector<std::string> notes;
  std::vector<std::string> ignored_env;
  std::vector<Skipped> skipped;
  fs::path store_dir;
  StoreContents primed;
  std::string date, cpu;
};

BarChart chart_of(const Context& ctx, const Measurements& m) {
  BarChart chart;
  chart.title = "kiln bench --compare: each configuration's time over default's";
  for (const auto& [d, b] : m.backends(0)) {
    chart.subtitle.push_back(
        fmt::format("{}: {}{}", d, b, d == "cpu" && !ctx.cpu.empty() ? ", " + ctx.cpu : ""));
  }
  chart.subtitle.push_back(
      fmt::format("kiln {}, {}: each bar the minimum over {} of fresh processes (--runs {}), over "
                  "default's",
                  version(), ctx.date, count_of(ctx.options.rounds, "round"), ctx.options.runs));
  chart.y_label = "time / default's time (log2 axis; above 1x: slower)";
  for (const Configuration& c : m.configs) chart.series.push_back(c.name);
  for (const Row& row : m.rows) {
    chart.groups.push_back(
        fmt::format("{}{}\n{}", row.first ? "first " : "", short_name(row.workload), row.device));
    std::vector<double> values;
    std::vector<std::string> tips;
    for (std::size_t c = 0; c < m.configs.size(); ++c) {
      values.push_back(m.ratio(c, row));
      tips.push_back(fmt::format("{}, {}: {}", row.label, m.configs[c].name,
                                 cell_text(m.cell(c, row), m.ratio(c, row))));
    }
    chart.values.push_back(std::move(values));
    chart.tooltips.push_back(std::move(tips));
  }
  return chart;
}

void print_text(const Context& ctx, const Measurements& m) {
  const CompareOptions& o = ctx.options;
  fmt::print(
      "kiln bench --compare: {} x {}, each run a fresh `kiln bench --one-process --device {} "
      "--runs {}`\n",
      count_of(m.configs.size(), "configuration"), count_of(o.rounds, "round"), ctx.device, o.runs);
  for (const std::string& n : ctx.notes) fmt::print("{}\n", n);
  for (const std::string& e : ctx.ignored_env) {
    fmt::print("ignoring {} from the environment: each configuration sets its own switches\n", e);
  }
  for (const Skipped& s : ctx.skipped) fmt::print("skipped: {} ({})\n", s.name, s.why);
  fmt::print(
      "store: a fresh directory ({}), removed at the end; one default process ran first, not "
      "counted{}\n",
      ctx.store_dir.string(), describe(ctx.primed, ctx.device == "cpu"));
  fmt::print("\nconfigurations:\n");
  std::vector<std::vector<std::string>> table{{"name", "environment", "backend"}};
  for (std::size_t c = 0; c < m.configs.size(); ++c) {
    table.push_back(
        {m.configs[c].name, environment_text(m.configs[c]), backends_text(m.backends(c))});
  }
  print_table(table, "  ");

  fmt::print("\n");
  table.clear();
  std::vector<std::string> header{""};
  for (const Configuration& c : m.configs) header.push_back(c.name);
  table.push_back(std::move(header));
  for (const Row& row : m.rows) {
    std::vector<std::string> line{row.label};
    for (std::size_t c = 0; c < m.configs.size(); ++c) {
      line.push_back(cell_text(m.cell(c, row), m.ratio(c, row)));
    }
    table.push_back(std::move(line));
  }
  print_table(table, "");
  fmt::print(
      "\neach cell: the minimum over {} of the min of {} (\"first\": of the first call) and, "
      "in brackets, its ratio to default (above 1.00x: slower)\n",
      count_of(o.rounds, "round"), count_of(o.runs, "timed call"));
  if (!o.plot.empty()) {
    fmt::print("plot: {} ({} bars, the ratios on a log2 axis)\n", o.plot,
               m.rows.size() * m.configs.size());
  }
}

void print_json(const Context& ctx, const Measurements& m) {
  const CompareOptions& o = ctx.options;
  std::vector<std::string> configs;
  for (std::size_t c = 0; c < m.configs.size(); ++c) {
    std::vector<std::string> env, backends;
    for (const std::string& e : m.configs[c].env) env.push_back(json_string(e));
    for (const auto& [d, b] : m.backends(c)) {
      backends.push_back(
          fmt::format("{{\"device\": {}, \"name\": {}}}", json_string(d), json_string(b)));
    }
    configs.push_back(fmt::format("{{\"name\": {}, \"environment\": {}, \"backends\": {}}}",
                                  json_string(m.configs[c].name), json_array(env),
                                  json_array(backends)));
  }
  std::vector<std::string> skipped;
  for (const Skipped& s : ctx.skipped) {
    skipped.push_back(
        fmt::format("{{\"name\": {}, \"why\": {}}}", json_string(s.name), json_string(s.why)));
  }
  std::vector<std::string> rows;
  for (const Row& row : m.rows) {
    std::vector<std::string> cells;
    for (std::size_t c = 0; c < m.configs.size(); ++c) {
      std::vector<std::string> rounds;
      for (const double v : m.per_round(c, row)) rounds.push_back(json_number(v));
      cells.push_back(fmt::format("{}: {{\"seconds\": {}, \"ratio\": {}, \"rounds\": {}}}",
                                  json_string(m.configs[c].name), json_number(m.cell(c, row)),
                                  json_number(m.ratio(c, row)), json_array(rounds)));
    }
    std::string joined;
    for (const std::string& s : cells) joined += (joined.empty() ? "" : ", ") + s;
    rows.push_back(fmt::format(
        "{{\"label\": {}, \"device\": {}, \"workload\": {}, \"metric\": {}, \"cells\": {{{}}}}}",
        json_string(row.label), json_string(row.device), json_string(row.workload),
        json_string(row.metric()), joined));
  }
  std::vector<std::string> notes, ignored;
  for (const std::string& n : ctx.notes) notes.push_back(json_string(n));
  for (const std::string& e : ctx.ignored_env) ignored.push_back(json_string(e));
  fmt::print(
      "{{\"kiln_version\": {}, \"date\": {}, \"cpu\": {}, \"device\": {}, \"runs\": {}, "
      "\"rounds\": {}, \"notes\": {}, \"ignored_environment\": {}, "
      "\"store\": {{\"persistent\": {}, \"why\": {}, \"primed_tune_rows\": {}, "
      "\"primed_kernels\": {}, \"primed_bytes\": {}}}, "
      "\"configurations\": {}, \"skipped\": {}, \"rows\": {}, \"plot\": {}}}\n",
      json_string(version()), json_string(ctx.date), json_string(ctx.cpu), json_string(ctx.device),
      o.runs, o.rounds, json_array(notes), json_array(ignored), ctx.primed.persistent,
      json_string(ctx.primed.why), ctx.primed.tune_rows, ctx.primed.kernels, ctx.primed.bytes,
      json_array(configs), json_array(skipped), json_array(rows),
      o.plot.empty() ? "null" : json_string(o.plot));
}

}  // namespace

std::vector<std::string> compare_configurations() {
  std::vector<std::string> names{"default"};
  for (const Switch& s : kSwitches) names.push_back(name_of(s));
  names.emplace_back("all off");
  return names;
}

int run_compare(const CompareOptions& options) {
  if (options.rounds < 1) {
    throw ValueError(fmt::format("bench --compare --rounds {}: at least 1", options.rounds));
  }
  if (options.runs < 1) {
    throw ValueError(fmt::format("bench --compare --runs {}: at least 1", options.runs));
  }
  keep_off_the_users_store();
  Context ctx(options);
  auto [configs, skipped] = plan(options.configs);
  ctx.skipped = std::move(skipped);
  ctx.device = child_device(options.device, ctx.notes);
  PlotFile plot(options.plot);

  Interrupts interrupts;
  TempStore store;
  ctx.store_dir = store.path();
  auto [base, ignored] = base_environment();
  ctx.ignored_env = std::move(ignored);
  base.push_back(fmt::format("{}={}", kCacheDir, store.path().string()));

  BenchOptions bench;
  bench.device = ctx.device;
  bench.runs = options.runs;
  bench.train = options.train;
  // (base by an init-capture: clang 14 cannot capture a structured binding.)
  auto run_one = [&, &base = base](const Configuration& c, const std::string& what,
                                   std::vector<WorkloadReport>& out) {
    std::vector<std::string> env = base;
    env.insert(env.end(), c.env.begin(), c.env.end());
    BenchChild child = run_bench_child(bench, ChildStdout::discard, &env);
    if (interrupts.caught()) {
      fmt::print(stderr, "\nkiln: bench --compare: interrupted by signal {} ({}); stopping\n",
                 interrupts.caught(), strsignal(interrupts.caught()));
      return 128 + interrupts.caught();
    }
    if (const int code = child_failure(child, what); code != 0) return code;
    if (child.report.empty()) {
      throw std::runtime_error(fmt::format("bench --compare: {} reported nothing", what));
    }
    out = std::move(child.report);
    return 0;
  };

  fmt::print(stderr, "kiln: bench --compare: priming the store with one default process\n");
  std::vector<WorkloadReport> prime;
  if (const int code = run_one(configs.front(), "the priming process (default)", prime)) {
    return code;
  }
  ctx.primed = store_contents(store.path());

  Measurements m;
  m.configs = configs;
  m.reports.resize(configs.size());
  for (int r = 1; r <= options.rounds; ++r) {
    fmt::print(stderr, "kiln: bench --compare: round {} of {}:", r, options.rounds);
    for (std::size_t c = 0; c < configs.size(); ++c) {
      fmt::print(stderr, " {}", configs[c].name);
      std::vector<WorkloadReport> reports;
      const std::string what =
          fmt::format("the {} process of round {} of {}", configs[c].name, r, options.rounds);
      if (const int code = run_one(configs[c], what, reports)) {
        fmt::print(stderr, "\n");
        return code;
      }
      m.reports[c].push_back(std::move(reports));
    }
    fmt::print(stderr, "\n");
  }
  m.rows = rows_of(m.reports.front().front());

  if (!options.plot.empty()) plot.write(svg_bar_chart(chart_of(ctx, m)));
  if (options.json) {
    print_json(ctx, m);
  } else {
    print_text(ctx, m);
  }
  return 0;
}

}  // namespace kiln::cli
