// The store as the `kiln` command shows it (`kiln tune --list`, `kiln doctor`): which of its
// identities this machine's kiln would read, and sizes in readable units.
#pragma once

#if KILN_WITH_PERSISTENCE
#include <cstdint>
#include <string>
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

// "512 B", "3.4 KiB", "12.0 MiB".
std::string format_bytes(std::int64_t bytes);

}  // namespace kiln::cli
#endif
