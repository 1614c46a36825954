// Text as the `kiln` command prints it: stored text made safe for a terminal, and sizes in
// readable units.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cli {

// `text` with what a terminal would act on made visible: \n, \t and \r as such, other control
// characters (C0, DEL, and C1 written in UTF-8) and bytes that are not UTF-8 as \xNN, and the
// backslash doubled. The store's text is anybody's bytes (a name, a key, another kiln's
// identity): printed raw, an escape sequence in it could rewrite the terminal.
std::string printable(std::string_view text);

// "512 B", "3.4 KiB", "12.0 MiB".
std::string format_bytes(std::int64_t bytes);

}  // namespace kiln::cli
