// Where the store lives: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
#pragma once

#include <filesystem>
#include <string>

namespace kiln::store {

// The variables the directory is chosen from (null when unset), so that the rule can be tested
// without changing the process's environment.
struct Environment {
  const char* kiln_cache_dir = nullptr;
  const char* xdg_cache_home = nullptr;
  const char* home = nullptr;  // $HOME, else the password database's home of the user
};

// The environment of this process now.
Environment current_environment();

// The store's directory under `env`: KILN_CACHE_DIR when set and not empty (as given, relative or
// not); else XDG_CACHE_HOME/kiln when it is an absolute path (the XDG rule: a relative one is
// ignored); else HOME/.cache/kiln. Empty when none applies (no usable HOME).
std::filesystem::path cache_directory(const Environment& env);

// The database file inside a store directory.
inline constexpr const char* kFileName = "kiln.db";

}  // namespace kiln::store
