// parse_options (options.hpp): std::from_chars, which accepts no leading space, sign or trailing
// text that std::stoi would silently skip, so "--steps 10x" is an error rather than 10.
#include "options.hpp"

#include <charconv>
#include <sstream>
#include <string_view>
#include <system_error>

namespace {

template <class T>
T number(std::string_view name, std::string_view value, T lo, T hi) {
  T v{};
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    throw UsageError(std::string(name) + " wants a number, not '" + std::string(value) + "'");
  // !(lo <= v) also catches a NaN, which from_chars accepts for floating types.
  if (!(lo <= v && v <= hi)) {
    std::ostringstream m;  // %g-like bounds: 1e-08 rather than std::to_string's 0.000000
    m << name << " " << value << " is out of range [" << lo << ", " << hi << "]";
    throw UsageError(m.str());
  }
  return v;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 30;  // keeps step * batch * block in range
  for (int i = 1; i < argc; i += 2) {
    const std::string_view k = argv[i];
    if (k == "--help" || k == "-h") {
      o.help = true;
      return o;
    }
    if (i + 1 >= argc) throw UsageError("option " + std::string(k) + " needs a value");
    const std::string_view v = argv[i + 1];
    if (k == "--device") {
      if (v != "cpu" && v != "cuda")
        throw UsageError("--device is cpu or cuda, not '" + std::string(v) + "'");
      o.device = v;
    } else if (k == "--steps") {
      o.steps = number<std::int64_t>(k, v, 1, kMaxCount);
    } else if (k == "--batch") {
      o.batch = number<std::int64_t>(k, v, 1, 65536);
    } else if (k == "--lr") {
      o.lr = number<double>(k, v, 1e-8, 1.0);
    } else if (k == "--log-every") {
      o.log_every = number<std::int64_t>(k, v, 1, kMaxCount);
    } else if (k == "--seed") {
      o.seed = number<std::uint64_t>(k, v, 0, UINT64_MAX);
    } else if (k == "--max-val-loss") {
      o.max_val_loss = number<double>(k, v, 0.0, 1e9);
    } else if (k == "--text") {
      o.text = v;
    } else if (k == "--prompt") {
      if (v.empty()) throw UsageError("--prompt needs at least one byte to continue from");
      o.prompt = v;
    } else if (k == "--temperature") {
      o.sample.temperature = number<double>(k, v, 1e-3, 100.0);
    } else if (k == "--top-k") {
      o.sample.top_k = number<std::int64_t>(k, v, 1, 256);
    } else if (k == "--sample-bytes") {
      o.sample.bytes = number<std::int64_t>(k, v, 0, 1 << 20);
    } else {
      throw UsageError("unknown option " + std::string(k));
    }
  }
  return o;
}
