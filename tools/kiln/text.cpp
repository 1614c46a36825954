#include "text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::cli {

namespace {

// The length of the UTF-8 sequence that starts at s[i] (2 to 4), or 0 when it is not one: a
// stray continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  }
  if (n == 0 || i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : utf8_length(s, i);
    const std::size_t step = std::max<std::size_t>(n, 1);  // a byte that is not UTF-8 alone
    // C1 controls (U+0080 to U+009F) are 0xc2 0x80 to 0xc2 0x9f: some terminals act on them.
    const bool c1 = n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0;
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (n == 0 || c1 || c < 0x20 || c == 0x7f) {
      for (std::size_t k = i; k < i + step; ++k)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[k]));
    } else {
      out.append(s.substr(i, n));
    }
    i += step;
  }
  return out;
}

std::string format_bytes(std::int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1024 * 1024));
}

}  // namespace kiln::cli
