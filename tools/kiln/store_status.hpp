// The store as the `kiln` command shows it (`kiln tune --list`, `kiln doctor`): which of its
// identities this machine's kiln would read, stored text made safe for a terminal, and sizes in
// readable units.
#pragma once

#if KILN_WITH_PERSISTENCE
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.hpp"

namespace kiln::cli {

// The identity of each present CUDA device ("cuda:0"), as the CUDA backend writes its rows.
std::vector<std::pair<std::string, store::Identity>> present_identities();

// Whether this machine's kiln would read rows of `id`: "current (cuda:0)", "stale: ...", or
// "not compared: no CUDA device present".
std::string identity_status(const store::Identity& id,
                            const std::vector<std::pair<std::string, store::Identity>>& present);

// `text` with what a terminal would act on made visible: \n, \t and \r as such, other control
// characters (C0, DEL, and C1 written in UTF-8) and bytes that are not UTF-8 as \xNN, and the
// backslash doubled. The store's text is anybody's bytes (a name, a key, another kiln's
// identity): printed raw, an escape sequence in it could rewrite the terminal.
std::string printable(std::string_view text);

// The process's store when persistence is live (so that the command and the library share one
// Store, and each warning is told once); else one of the command's own, kept in `own`, at the
// same directory: `kiln tune --list` shows the store that processes with persistence on use.
store::Store& command_store(std::unique_ptr<store::Store>& own);

// "512 B", "3.4 KiB", "12.0 MiB".
std::string format_bytes(std::int64_t bytes);

}  // namespace kiln::cli
#endif
