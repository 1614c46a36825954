#include "tune.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "dispatch/diagnostics.hpp"
#include "kiln/kiln.hpp"
#include "table.hpp"
#include "text.hpp"

namespace kiln::cli {
namespace {

// The feature of that name among kiln::features().
FeatureState feature(const std::string& name) {
  for (const FeatureState& f : features()) {
    if (f.name == name) return f;
  }
  throw InternalError(name + " is not among kiln::features()");
}

// Why the feature is not live now ("built with -DKILN_AUTOTUNE=OFF", "KILN_AUTOTUNE=0 in the
// environment"), or nothing when it is.
std::optional<std::string> feature_off(const std::string& name) {
  const FeatureState f = feature(name);
  return f.live ? std::nullopt : std::optional<std::string>(f.why);
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

DType dtype_of(const std::string& name) {
  return name == "bf16" ? DType::bf16 : name == "f16" ? DType::f16 : DType::f32;
}

// An operand of logical shape [rows, cols] (with the batch in front when batch > 1) of `dtype`:
// stored as it is (N) or stored transposed and viewed back (T), so that the matmul sees that
// layout.
template <int D>
Tensor<D> operand(std::array<std::int64_t, D> shape, char layout, DType dtype, const Device& device,
                  std::uint64_t seed) {
  if (layout == 'T') std::swap(shape[D - 2], shape[D - 1]);
  Tensor<D> t = Tensor<D>::random(shape, Distribution::uniform(-1, 1), device, seed).to(dtype);
  return layout == 'T' ? t.transpose(D - 2, D - 1) : t;
}

// One matmul of the problem on fresh random operands, waited for; its seconds, operands apart.
// With --bias it is a linear layer's: x @ w^T + bias, w = b^T (b stored transposed, layout T,
// is the weight as nn::Linear holds it).
double run_one_matmul(const MatmulSize& s, const TuneOptions& o, const Device& device) {
  std::random_device rd;
  const std::uint64_t seed = (std::uint64_t{rd()} << 32) ^ rd();
  const DType dtype = dtype_of(o.dtype);
  auto timed = [&](const auto& a, const auto& b, const auto& product) {
    device.sync();  // the operands exist before the clock starts
    const auto t0 = std::chrono::steady_clock::now();
    const auto c = product(a, b);
    device.sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto plain = [](const auto& a, const auto& b) { return matmul(a, b); };
  if (o.bias) {  // (batch 1: the command checks)
    const Tensor<1> bias =
        Tensor<1>::random({s.n}, Distribution::uniform(-1, 1), device, seed + 2).to(dtype);
    return timed(
        operand<2>({s.m, s.k}, o.layout[0], dtype, device, seed),
        operand<2>({s.k, s.n}, o.layout[1], dtype, device, seed + 1),
        [&](const Tensor<2>& a, const Tensor<2>& b) { return linear(a, b.transpose(0, 1), bias); });
  }
  if (o.batch == 1) {
    return timed(operand<2>({s.m, s.k}, o.layout[0], dtype, device, seed),
                 operand<2>({s.k, s.n}, o.layout[1], dtype, device, seed + 1), plain);
  }
  return timed(operand<3>({o.batch, s.m, s.k}, o.layout[0], dtype, device, seed),
               operand<3>({o.batch, s.k, s.n}, o.layout[1], dtype, device, seed + 1), plain);
}

std::string format_time(std::int64_t seconds_since_1970) {
  const std::time_t t = static_cast<std::time_t>(seconds_since_1970);
  std::tm tm{};
  char buf[32];
  if (localtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm) == 0)
    return std::to_string(seconds_since_1970);
  return buf;
}

void print_location(const diagnostics::StoreLocation& l) {
  switch (l.mode) {
    case diagnostics::StoreMode::persistent:
      fmt::print("store: {} (persistent)\n", l.file);
      break;
    case diagnostics::StoreMode::read_only:
      fmt::print("store: {} (read-only: {})\n", l.file, l.why);
      break;
    case diagnostics::StoreMode::memory:
    case diagnostics::StoreMode::closed:  // (the command's store is always opened)
      fmt::print("store: {} (memory-only: {})\n", l.directory, l.why);
      break;
  }
  fmt::print("this build: kiln {}, build {} (rows of another build are stale)\n", version(),
             l.build);
  if (const auto off = feature_off("persistence")) {
    fmt::print(
        "note: persistence is off for kiln processes now ({}): they neither read nor "
        "write this store\n",
        *off);
  }
}

// --table: "tune", "kernels", or empty for both.
diagnostics::StoreTables tables_of(const std::string& name) {
  if (name.empty()) return diagnostics::StoreTables::both;
  return name == "tune" ? diagnostics::StoreTables::tune : diagnostics::StoreTables::kernels;
}

void run_list(const TuneOptions& o) {
  const diagnostics::StoreTables only = tables_of(o.table);
  const diagnostics::StoreListing listing = diagnostics::list_store(only);
  print_location(listing.location);
  bool any = false;
  for (const diagnostics::StoreIdentityRows& id : listing.identities) {
    const diagnostics::StoreUsage& u = id.usage;
    const bool tune = only != diagnostics::StoreTables::kernels && u.tune_rows > 0;
    const bool kernels = only != diagnostics::StoreTables::tune && u.kernels > 0;
    if (!tune && !kernels) continue;
    any = true;
    fmt::print("\n{}: {}\n", printable(u.identity), u.status);
    if (tune) {
      fmt::print("  tune rows ({}):\n", id.tune.size());
      std::vector<std::vector<std::string>> cells{
          {"key", "shape timed", "chosen", "time", "written"}};
      for (const diagnostics::StoreRow& e : id.tune) {
        cells.push_back({printable(e.key), printable(e.shape), printable(e.name),
                         format_duration(e.seconds), format_time(e.created)});
      }
      print_table(cells, "    ");
    }
    if (kernels) {
      fmt::print("  kernels ({}):\n", id.kernels.size());
      std::vector<std::vector<std::string>> cells{{"key", "label", "size", "written"}};
      for (const diagnostics::StoreRow& e : id.kernels) {
        cells.push_back(
            {printable(e.key), printable(e.name), format_bytes(e.bytes), format_time(e.created)});
      }
      print_table(cells, "    ");
    }
  }
  if (!any) {
    fmt::print("no entries{}\n", only != diagnostics::StoreTables::both
                                     ? fmt::format(" in the {} table", o.table)
                                     : "");
  }
}

void run_clear(const TuneOptions& o) {
  const diagnostics::StoreTables only = tables_of(o.table);
  const diagnostics::StoreClearing c = diagnostics::clear_store(only);
  const diagnostics::StoreLocation& l = c.location;
  if (l.mode == diagnostics::StoreMode::memory) {
    throw Error(fmt::format("tune --clear: the store at {} cannot be used ({}): nothing removed",
                            l.directory, l.why));
  }
  if (l.mode == diagnostics::StoreMode::read_only)
    throw Error(fmt::format("tune --clear: nothing removed: {}", l.why));
  if (!c.removed)
    throw Error(fmt::format("tune --clear: nothing removed from {}: {}", l.file, c.why));
  std::vector<std::string> parts;
  if (only != diagnostics::StoreTables::kernels)
    parts.push_back(fmt::format("{} tune rows ({})", c.tune_rows, format_bytes(c.tune_bytes)));
  if (only != diagnostics::StoreTables::tune)
    parts.push_back(fmt::format("{} kernels ({})", c.kernels, format_bytes(c.kernel_bytes)));
  fmt::print("removed {} from {}\n", parts.size() == 2 ? parts[0] + " and " + parts[1] : parts[0],
             l.file);
}

void tune_matmuls(const std::vector<MatmulSize>& sizes, const TuneOptions& o,
                  const Device& device) {
  diagnostics::MatmulTuning tuning(device.index(), o.exhaustive);
  fmt::print("store: {}\ndevice: {}, {}\n", tuning.store_file(), device.str(),
             printable(tuning.identity()));

  const Precision saved = float32_matmul_precision();
  set_float32_matmul_precision(o.precision == "high" ? Precision::high : Precision::highest);
  int unstored = 0;
  try {
    for (const MatmulSize& s : sizes) {
      double seconds = 0;
      const diagnostics::MatmulTuned t = tuning.tune(
          {o.precision, o.layout[0], o.layout[1], o.batch, s.m, s.n, s.k, o.dtype, o.bias},
          [&] { seconds = run_one_matmul(s, o, device); });
      for (const diagnostics::StoreRow& e : t.fresh) {
        fmt::print("{}: tuned now (the call took {}): {}, {} (timed on {})\n", printable(e.key),
                   format_duration(seconds), printable(e.name), format_duration(e.seconds),
                   printable(e.shape));
      }
      if (!t.fresh.empty()) continue;
      if (t.row) {
        fmt::print("{}: already in the store: {}, {} (timed on {})\n", t.key,
                   printable(t.row->name), format_duration(t.row->seconds),
                   printable(t.row->shape));
      } else {
        ++unstored;
        fmt::print("{}: not in the store after the call (the call took {})\n", t.key,
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
                            sizes.size(), device.str(), tuning.store_file()));
  }
}

[[noreturn]] void compiled_out(const char* what) {
  throw Error(fmt::format("tune {}: persistence is compiled out ({}): there is no store", what,
                          feature_off("persistence").value_or("?")));
}

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
    if (!feature("persistence").compiled) compiled_out(o.list ? "--list" : "--clear");
    o.list ? run_list(o) : run_clear(o);
    return;
  }

  const std::vector<MatmulSize> sizes = parse_sizes(o.matmul);
  if (o.dtype != "f32" && o.precision != "highest") {
    throw ValueError(fmt::format(
        "tune --precision {}: a {} product has no float32 precision (it is for --dtype f32)",
        o.precision, o.dtype));
  }
  if (o.bias && o.batch != 1) {
    throw ValueError(fmt::format(
        "tune --bias: a linear layer's product is one matrix (--batch 1), not {}", o.batch));
  }
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
  tune_matmuls(sizes, o, cuda_device(o.device));
}

}  // namespace kiln::cli
