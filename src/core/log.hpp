// Diagnostic traces on stderr, chosen by topic: KILN_LOG=fusion,tune (or KILN_LOG=all).
#pragma once

#include <string_view>

namespace kiln::detail {

// Whether KILN_LOG names `topic` (read once, at first use).
bool log_enabled(std::string_view topic);
// Writes "kiln[topic]: line" to stderr as one write, so lines of two threads never interleave.
void log_line(std::string_view topic, std::string_view line);

}  // namespace kiln::detail
