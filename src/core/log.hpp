// Diagnostic traces on stderr, chosen by topic: KILN_LOG=fusion,tune (or KILN_LOG=all).
#pragma once

#include <array>
#include <string_view>

namespace kiln::detail {

// Every topic KILN_LOG may name (besides "all"), in the order its error message lists them.
inline constexpr std::array<std::string_view, 6> kLogTopics{"fusion",  "fusion:summary", "graphs",
                                                            "profile", "store",          "tune"};

// One of kLogTopics, named by a string literal; a name not in the list does not compile, so
// the list the error message gives is every topic the code logs.
class LogTopic {
 public:
  // Implicit, so that a call reads log_enabled("tune").
  consteval LogTopic(const char* name) : index_(index_of(name)) {}
  int index() const { return index_; }
  std::string_view name() const { return kLogTopics[static_cast<std::size_t>(index_)]; }

 private:
  static consteval int index_of(std::string_view name) {
    for (std::size_t i = 0; i < kLogTopics.size(); ++i)
      if (kLogTopics[i] == name) return static_cast<int>(i);
    throw "not a KILN_LOG topic: add it to kLogTopics";  // (a compile error, never thrown)
  }
  int index_;
};

// The topics a KILN_LOG value names, one bit per kLogTopics entry; ValueError naming the value
// and listing the valid topics when an item is none of them.
unsigned parse_log_topics(std::string_view value);
// Parses the environment's KILN_LOG, throwing as parse_log_topics does. kiln's configuration
// calls it with the other KILN_* switches, so a bad value is an error at the first kiln call.
void check_log_env();

// Whether KILN_LOG names `topic` (read once; false for every topic if KILN_LOG is bad, which
// check_log_env reports).
bool log_enabled(LogTopic topic);
// Writes "kiln[topic]: line" to stderr as one write, so lines of two threads never interleave.
void log_line(LogTopic topic, std::string_view line);

}  // namespace kiln::detail
