// JSON text for the `kiln` command's --json output: a string literal with its escapes.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;  // UTF-8 bytes pass through: JSON text is UTF-8
        }
    }
  }
  return out + "\"";
}

// A JSON array of values that are JSON text already.
inline std::string json_array(const std::vector<std::string>& values) {
  std::string s;
  for (const std::string& v : values) s += (s.empty() ? "" : ", ") + v;
  return "[" + s + "]";
}

}  // namespace kiln::cli
