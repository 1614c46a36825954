#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::detail {

bool log_enabled(std::string_view topic) {
  static const std::vector<std::string> topics = [] {
    std::vector<std::string> out;
    std::string item;
    const char* v = std::getenv("KILN_LOG");
    for (const char* c = v ? v : "";; ++c) {
      if (*c == ',' || *c == '\0') {
        if (!item.empty()) out.push_back(item);
        item.clear();
        if (*c == '\0') break;
      } else {
        item.push_back(*c);
      }
    }
    return out;
  }();
  for (const auto& t : topics)
    if (t == topic || t == "all") return true;
  return false;
}

void log_line(std::string_view topic, std::string_view line) {
  std::string s = "kiln[" + std::string(topic) + "]: " + std::string(line) + "\n";
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace kiln::detail
