#include "store/location.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace kiln::store {

Environment current_environment() {
  Environment env;
  env.kiln_cache_dir = std::getenv("KILN_CACHE_DIR");
  env.xdg_cache_home = std::getenv("XDG_CACHE_HOME");
  env.home = std::getenv("HOME");
  if (env.home == nullptr || *env.home == '\0') {
    // A daemon or a container may run without HOME; the user's entry still names a home. The
    // string must outlive the returned struct, hence one per process (the user does not change).
    static const std::string home = [] {
      long n = sysconf(_SC_GETPW_R_SIZE_MAX);
      std::vector<char> buf(n > 0 ? static_cast<std::size_t>(n) : 16384);
      passwd pw{};
      passwd* found = nullptr;
      if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr ||
          found->pw_dir == nullptr)
        return std::string();
      return std::string(found->pw_dir);
    }();
    env.home = home.empty() ? nullptr : home.c_str();
  }
  return env;
}

std::filesystem::path cache_directory(const Environment& env) {
  namespace fs = std::filesystem;
  if (env.kiln_cache_dir && *env.kiln_cache_dir) return fs::path(env.kiln_cache_dir);
  if (env.xdg_cache_home && *env.xdg_cache_home) {
    fs::path xdg(env.xdg_cache_home);
    if (xdg.is_absolute()) return xdg / "kiln";
  }
  if (env.home && *env.home) return fs::path(env.home) / ".cache" / "kiln";
  return {};
}

}  // namespace kiln::store
