// A program built beside the tests, whose build path CMake compiles in (KILN_CLI,
// KILN_STORE_WORKER): the copy next to the running test binary when there is one, so that the
// binaries bundled together onto another machine (the GPU machine) run each other; else the
// build path.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace kt {

inline std::string sibling_program(const std::string& built_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / fs::path(built_path).filename();
    if (fs::exists(beside, ec)) return beside.string();
  }
  return built_path;
}

}  // namespace kt
