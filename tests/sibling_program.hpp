// A program built beside the tests, whose build path CMake compiles in (KILN_CLI,
// KILN_STORE_WORKER): the copy next to the running test binary when there is one, so that the
// binaries bundled together onto another machine (the GPU machine) run each other; else the
// build path. Also the null-terminated argv/envp arrays that posix_spawn takes.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

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

// A null-terminated array of pointers into `strings`, which must outlive it.
inline std::vector<char*> null_terminated(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace kt
