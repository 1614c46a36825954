#include "tune.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "kiln/kiln.hpp"
#include "store_status.hpp"
#include "table.hpp"
#if KILN_WITH_PERSISTENCE
#include "store/store.hpp"
#endif
#if KILN_WITH_PERSISTENCE && KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/store_identity.hpp"
#endif
#if KILN_WITH_AUTOTUNE
#include "tune/tune_key.hpp"
#include "tune/tuner.hpp"
#endif

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// Why the feature is not live now ("built with -DKILN_AUTOTUNE=OFF", "KILN_AUTOTUNE=0 in the
// environment"), or nothing when it is.
std::optional<std::string> feature_off(const std::string& name) {
  for (const FeatureState& f : features()) {
    if (f.name == name) return f.live ? std::nullopt : std::optional<std::string>(f.why);
  }
  return name + " is not among kiln::features()";
}

struct MatmulSize {
  std::int64_t m = 0, n = 0, k = 0;
};

// "1024x1024x1024,4096x4096x4096": each entry three positive integers joined by 'x'.
std::vector<MatmulSize> parse_sizes(const std::string& list) {
  auto bad = [&](const std::string& entry, const char* what) {
    return ValueError(fmt::format(
        "tune --matmul '{}': '{}' {}; each problem is MxNxK, three positive integers joined by "
        "x (e.g. 1024x1024x1024), problems separated by commas",
        list, entry, what));
  };
  std::vector<MatmulSize> sizes;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    const std::string entry = list.substr(start, comma - start);
    std::array<std::int64_t, 3> v{};
    std::size_t pos = 0;
    for (int i = 0; i < 3; ++i) {
      if (i > 0) {
        if (pos >= entry.size() || entry[pos] != 'x') throw bad(entry, "is not MxNxK");
        ++pos;
      }
      const char* first = entry.data() + pos;
      const char* last = entry.data() + entry.size();
      const auto [end, ec] = std::from_chars(first, last, v[i]);
      if (ec == std::errc::result_out_of_range) throw bad(entry, "has an extent out of range");
      if (ec != std::errc() || end == first) throw bad(entry, "is not MxNxK");
      if (v[i] < 1) throw bad(entry, "has an extent below 1");
      pos = static_cast<std::size_t>(end - entry.data());
    }
    if (pos != entry.size()) throw bad(entry, "is not MxNxK");
    sizes.push_back({v[0], v[1], v[2]});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

// The CUDA device `spec` names ("cuda", "cuda:N"), which kiln::devices() must list as present.
Device cuda_device(const std::string& spec) {
  int index = 0;
  if (spec != "cuda") {
    const char* first = spec.data() + 5;
    const char* last = spec.data() + spec.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (spec.rfind("cuda:", 0) != 0 || ec != std::errc() || end != last || first == last ||
        index < 0) {
      throw ValueError(
          fmt::format("tune --device '{}': expected cuda or cuda:N (autotune is for CUDA)", spec));
    }
  }
  const std::string name = fmt::format("cuda:{}", index);
  std::string why, present;
  for (const DeviceInfo& d : devices()) {
    if (d.name == name && d.present) return Device::cuda(index);
    if (d.name.rfind("cuda", 0) != 0) continue;
    if (d.present) present += (present.empty() ? "" : ", ") + d.name;
    if (!d.present) why = d.reason;
  }
  if (!why.empty())
    throw DeviceError(fmt::format("tune --matmul on {}: no CUDA device: {}", spec, why));
  throw DeviceError(fmt::format("tune --matmul on {}: {} is not present (present: {})", spec, name,
                                present.empty() ? "none" : present));
}

// An operand of logical shape [rows, cols] (with the batch in front when batch > 1): stored as
// it is (N) or stored transposed and viewed back (T), so that the matmul sees that layout.
template <int D>
Tensor<D> operand(std::array<std::int64_t, D> shape, char layout, const Device& device,
                  std::uint64_t seed) {
  if (layout == 'T') std::swap(shape[D - 2], shape[D - 1]);
  Tensor<D> t = Tensor<D>::random(shape, Distribution::uniform(-1, 1), device, seed);
  return layout == 'T' ? t.transpose(D - 2, D - 1) : t;
}

#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE && KILN_WITH_CUDA
// One matmul of the problem on fresh random operands, waited for; its seconds, operands apart.
double run_one_matmul(const MatmulSize& s, const TuneOptions& o, const Device& device) {
  std::random_device rd;
  const std::uint64_t seed = (std::uint64_t{rd()} << 32) ^ rd();
  auto timed = [&](const auto& a, const auto& b) {
    device.sync();  // the operands exist before the clock starts
    const auto t0 = std::chrono::steady_clock::now();
    const auto c = matmul(a, b);
    device.sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (o.batch == 1) {
    return timed(operand<2>({s.m, s.k}, o.layout[0], device, seed),
                 operand<2>({s.k, s.n}, o.layout[1], device, seed + 1));
  }
  return timed(operand<3>({o.batch, s.m, s.k}, o.layout[0], device, seed),
               operand<3>({o.batch, s.k, s.n}, o.layout[1], device, seed + 1));
}
#endif

#if KILN_WITH_PERSISTENCE
std::string format_time(std::int64_t seconds_since_1970) {
  const std::time_t t = static_cast<std::time_t>(seconds_since_1970);
  std::tm tm{};
  char buf[32];
  if (localtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm) == 0)
    return std::to_string(seconds_since_1970);
  return buf;
}

void print_location(store::Store& st) {
  switch (st.mode()) {
    case store::Mode::persistent:
      fmt::print("store: {} (persistent)\n", st.file().string());
      break;
    case store::Mode::read_only:
      fmt::print("store: {} (read-only: {})\n", st.file().string(), st.why());
      break;
    case store::Mode::memory:
      fmt::print("store: {} (memory-only: {})\n", st.directory().string(), st.why());
      break;
  }
  fmt::print("this build: kiln {}, build {} (rows of another build are stale)\n", version(),
             store::build_revision());
  if (const auto off = feature_off("persistence")) {
    fmt::print(
        "note: persistence is off for kiln processes now ({}): they neither read nor "
        "write this store\n",
        *off);
  }
}

std::optional<store::Table> table_of(const std::string& name) {
  if (name.empty()) return std::nullopt;
  return name == "tune" ? store::Table::tune : store::Table::kernels;
}

void run_list(const TuneOptions& o) {
  std::unique_ptr<store::Store> own;
  store::Store& st = command_store(own);
  print_location(st);
  const auto only = table_of(o.table);
  const auto present = present_identities();
  bool any = false;
  for (const store::Usage& u : st.usage()) {
    const bool tune = (!only || *only == store::Table::tune) && u.tune_entries > 0;
    const bool kernels = (!only || *only == store::Table::kernels) && u.kernel_entries > 0;
    if (!tune && !kernels) continue;
    any = true;
    fmt::print("\n{}: {}\n", printable(u.identity.describe()),
               identity_status(u.identity, present));
    if (tune) {
      const auto rows = st.list(store::Table::tune, u.identity);
      fmt::print("  tune rows ({}):\n", rows.size());
      std::vector<std::vector<std::string>> cells{
          {"key", "shape timed", "chosen", "time", "written"}};
      for (const store::Entry& e : rows) {
        cells.push_back({printable(e.key), printable(e.shape), printable(e.name),
                         format_duration(e.seconds), format_time(e.created)});
      }
      print_table(cells, "    ");
    }
    if (kernels) {
      const auto rows = st.list(store::Table::kernels, u.identity);
      fmt::print("  kernels ({}):\n", rows.size());
      std::vector<std::vector<std::string>> cells{{"key", "label", "size", "written"}};
      for (const store::Entry& e : rows) {
        cells.push_back(
            {printable(e.key), printable(e.name), format_bytes(e.bytes), format_time(e.created)});
      }
      print_table(cells, "    ");
    }
  }
  if (!any) fmt::print("no entries{}\n", only ? fmt::format(" in the {} table", o.table) : "");
}

struct Count {
  std::int64_t rows = 0, bytes = 0;
};

Count count(store::Store& st, store::Table t) {
  Count c;
  for (const store::Entry& e : st.list(t)) {
    ++c.rows;
    c.bytes += e.bytes;
  }
  return c;
}

void run_clear(const TuneOptions& o) {
  std::unique_ptr<store::Store> own;
  store::Store& st = command_store(own);
  if (st.mode() == store::Mode::memory) {
    throw Error(fmt::format("tune --clear: the store at {} cannot be used ({}): nothing removed",
                            st.directory().string(), st.why()));
  }
  if (st.mode() == store::Mode::read_only)
    throw Error(fmt::format("tune --clear: nothing removed: {}", st.why()));
  const fs::path file = st.file();
  const auto only = table_of(o.table);
  const bool tune = !only || *only == store::Table::tune;
  const bool kernels = !only || *only == store::Table::kernels;
  const Count tune_before = tune ? count(st, store::Table::tune) : Count{};
  const Count kernels_before = kernels ? count(st, store::Table::kernels) : Count{};
  // The store never throws: whether the removal reached the file is in what clear returns (the
  // store has gone memory-only when it did not, and the file keeps every row).
  const store::Written w = only ? st.clear(*only) : st.clear();
  if (!w)
    throw Error(fmt::format("tune --clear: nothing removed from {}: {}", file.string(), w.why));
  std::vector<std::string> parts;
  if (tune)
    parts.push_back(
        fmt::format("{} tune rows ({})", tune_before.rows, format_bytes(tune_before.bytes)));
  if (kernels)
    parts.push_back(
        fmt::format("{} kernels ({})", kernels_before.rows, format_bytes(kernels_before.bytes)));
  fmt::print("removed {} from {}\n", parts.size() == 2 ? parts[0] + " and " + parts[1] : parts[0],
             file.string());
}
#endif

#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE && KILN_WITH_CUDA
// Rows of one identity by key.
std::map<std::string, store::Entry> tune_rows(store::Store& st, const store::Identity& id) {
  std::map<std::string, store::Entry> rows;
  for (store::Entry& e : st.list(store::Table::tune, id)) rows.emplace(e.key, std::move(e));
  return rows;
}

bool same_row(const store::Entry& a, const store::Entry& b) {
  return a.name == b.name && a.shape == b.shape && a.seconds == b.seconds &&
         a.created == b.created && a.bytes == b.bytes;
}

void tune_matmuls(const std::vector<MatmulSize>& sizes, const TuneOptions& o,
                  const Device& device) {
  store::Store* st = store::process_store();
  if (st == nullptr) throw Error("tune --matmul: persistence is off: there is no store to fill");
  // A store that cannot be written is no place to tune into: the choices would be lost when
  // kiln tune exits.
  auto refuse_unless_persistent = [&](const std::string& prefix) {
    if (st->persistent()) return;
    throw Error(fmt::format("tune --matmul: {}the store at {} cannot be written ({})", prefix,
                            st->directory().string(), st->why()));
  };
  refuse_unless_persistent("");
  const store::Identity id = cuda::store_identity(cuda::context(device.index()));
  fmt::print("store: {}\ndevice: {}, {}\n", st->file().string(), device.str(),
             printable(id.describe()));

  const Precision saved = float32_matmul_precision();
  set_float32_matmul_precision(o.precision == "high" ? Precision::high : Precision::highest);
  tune::Tuner& tuner = tune::process_tuner();
  tuner.set_policy(o.exhaustive ? tune::Policy::exhaustive() : tune::Policy::offline());
  std::set<std::string> retuned;  // --exhaustive: keys tuned again in this command
  int unstored = 0;
  try {
    for (const MatmulSize& s : sizes) {
      const tune::MatmulProblem problem{"f32",   o.precision, o.layout[0], o.layout[1],
                                        o.batch, s.m,         s.n,         s.k};
      const std::string key = tune::matmul_key(problem);
      // What the store holds of the key may come from a first call's bounded tuning: asked to be
      // exhaustive, tune it again (once per command: a later problem of the bucket finds it).
      if (o.exhaustive && retuned.insert(key).second) tuner.forget(device.str(), key);
      const auto before = tune_rows(*st, id);
      const double seconds = run_one_matmul(s, o, device);
      // A write that failed turned the store memory-only, where the rows below would be found
      // all the same: what reached the file is only known while it is still persistent.
      refuse_unless_persistent(fmt::format("{}: its choice did not reach the file: ", key));
      const auto after = tune_rows(*st, id);
      bool fresh = false;
      for (const auto& [k, e] : after) {
        if (auto it = before.find(k); it != before.end() && same_row(it->second, e)) continue;
        fresh = true;
        fmt::print("{}: tuned now (the call took {}): {}, {} (timed on {})\n", printable(k),
                   format_duration(seconds), printable(e.name), format_duration(e.seconds),
                   printable(e.shape));
      }
      if (fresh) continue;
      if (auto it = after.find(key); it != after.end()) {
        fmt::print("{}: already in the store: {}, {} (timed on {})\n", key,
                   printable(it->second.name), format_duration(it->second.seconds),
                   printable(it->second.shape));
      } else {
        ++unstored;
        fmt::print("{}: not in the store after the call (the call took {})\n", key,
                   format_duration(seconds));
      }
    }
  } catch (...) {
    set_float32_matmul_precision(saved);
    throw;
  }
  set_float32_matmul_precision(saved);
  if (unstored > 0) {
    throw Error(fmt::format("tune --matmul: {} of {} problems left no row of {} in {}", unstored,
                            sizes.size(), device.str(), st->file().string()));
  }
}
#endif

#if !KILN_WITH_PERSISTENCE
[[noreturn]] void compiled_out(const char* what) {
  throw Error(fmt::format("tune {}: persistence is compiled out ({}): there is no store", what,
                          feature_off("persistence").value_or("?")));
}
#endif

}  // namespace

void run_tune(const TuneOptions& o) {
  const int asked = !o.matmul.empty() + o.list + o.clear;
  if (asked != 1) {
    throw ValueError(
        fmt::format("tune: give exactly one of --matmul MxNxK[,...], --list, --clear "
                    "({} given)",
                    asked));
  }
  if (!o.table.empty() && !o.list && !o.clear) {
    throw ValueError("tune --table: goes with --list or --clear");
  }
  if (o.list || o.clear) {
#if KILN_WITH_PERSISTENCE
    o.list ? run_list(o) : run_clear(o);
    return;
#else
    compiled_out(o.list ? "--list" : "--clear");
#endif
  }

  const std::vector<MatmulSize> sizes = parse_sizes(o.matmul);
  if (const auto off = feature_off("autotune")) {
    throw Error(fmt::format(
        "tune --matmul: autotune is off ({}): matmul would take the heuristic's first choice "
        "and tune nothing",
        *off));
  }
  if (const auto off = feature_off("persistence")) {
    throw Error(fmt::format(
        "tune --matmul: persistence is off ({}): the choices would not outlive kiln tune", *off));
  }
  const Device device = cuda_device(o.device);
#if KILN_WITH_PERSISTENCE && KILN_WITH_AUTOTUNE && KILN_WITH_CUDA
  tune_matmuls(sizes, o, device);
#else
  // features() says autotune and persistence are live, and a CUDA device is present: each is
  // compiled in, so this is not reached.
  throw Error(fmt::format("tune --matmul: {} has no CUDA autotune in this build", device.str()));
#endif
}

}  // namespace kiln::cli
