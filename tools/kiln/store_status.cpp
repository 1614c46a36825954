#include "store_status.hpp"

#if KILN_WITH_PERSISTENCE
#include <fmt/format.h>

#include "kiln/kiln.hpp"
#if KILN_WITH_CUDA
#include "cuda/context.hpp"
#include "cuda/store_identity.hpp"
#endif

namespace kiln::cli {

std::vector<std::pair<std::string, store::Identity>> present_identities() {
  std::vector<std::pair<std::string, store::Identity>> ids;
#if KILN_WITH_CUDA
  for (const DeviceInfo& d : devices()) {
    if (!d.present || d.name.rfind("cuda:", 0) != 0) continue;
    const int index = std::stoi(d.name.substr(5));
    ids.emplace_back(d.name, cuda::store_identity(cuda::context(index)));
  }
#endif
  return ids;
}

std::string identity_status(const store::Identity& id,
                            const std::vector<std::pair<std::string, store::Identity>>& present) {
  for (const auto& [name, p] : present) {
    if (p == id) return "current (" + name + ")";
  }
  if (id.kiln_version != version() || !present.empty()) return "stale: another device or version";
  return "not compared: no CUDA device present";
}

std::string format_bytes(std::int64_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1024 * 1024));
}

}  // namespace kiln::cli
#endif
