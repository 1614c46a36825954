#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

constexpr unsigned kAllTopics = (1u << kLogTopics.size()) - 1;

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

unsigned topic_bit(std::string_view value, std::string_view item) {
  if (item == "all") return kAllTopics;
  for (std::size_t i = 0; i < kLogTopics.size(); ++i)
    if (kLogTopics[i] == item) return 1u << i;
  std::string valid;
  for (std::string_view t : kLogTopics) valid += std::string(t) + ", ";
  throw ValueError("KILN_LOG=" + std::string(value) + ": '" + std::string(item) +
                   "' is not a topic; expected a comma-separated list of: " + valid + "all");
}

unsigned env_topics() {
  const char* v = std::getenv("KILN_LOG");
  return parse_log_topics(v ? v : "");
}

}  // namespace

unsigned parse_log_topics(std::string_view value) {
  unsigned bits = 0;
  for (std::string_view rest = value;;) {
    const std::size_t comma = rest.find(',');
    // (Empty items, as in "fusion," or a set but empty KILN_LOG, name nothing.)
    if (std::string_view item = trimmed(rest.substr(0, comma)); !item.empty())
      bits |= topic_bit(value, item);
    if (comma == std::string_view::npos) return bits;
    rest.remove_prefix(comma + 1);
  }
}

void check_log_env() { env_topics(); }

bool log_enabled(LogTopic topic) {
  static const unsigned bits = [] {
    try {
      return env_topics();
    } catch (const ValueError&) {
      return 0u;
    }
  }();
  return bits >> topic.index() & 1;
}

void log_line(LogTopic topic, std::string_view line) {
  std::string s = "kiln[" + std::string(topic.name()) + "]: " + std::string(line) + "\n";
  std::fwrite(s.data(), 1, s.size(), stderr);
}

}  // namespace kiln::detail
