#include "core/simd_targets.hpp"

#if KILN_WITH_SIMD
#include <hwy/targets.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>

#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

// The lower-case names of the targets compiled in (HWY_TARGETS: the same set in every kiln
// translation unit, which all build with the same flags), by bit.
struct TargetNames {
  std::array<std::string, 64> by_bit;
  std::vector<std::string> supported;  // this CPU's, best (lowest bit) first
  TargetNames() {
    for (int bit = 0; bit < 64; ++bit) {
      if ((HWY_TARGETS & (std::int64_t{1} << bit)) == 0) continue;
      std::string name = hwy::TargetName(std::int64_t{1} << bit);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      by_bit[bit] = name;
    }
    for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
      supported.push_back(by_bit[__builtin_ctzll(static_cast<unsigned long long>(t))]);
  }
};

const TargetNames& target_names() {
  static const TargetNames names;  // before any cap: simd_targets() lists the CPU's
  return names;
}

}  // namespace

const std::vector<std::string>& simd_targets() { return target_names().supported; }

std::string simd_target_list() {
  std::string list;
  for (const std::string& t : simd_targets()) list += (list.empty() ? "" : ", ") + t;
  return list;
}

void cap_simd_target(const std::string& target) {
  const TargetNames& names = target_names();
  if (target.empty()) {
    hwy::DisableTargets(0);
    return;
  }
  for (int bit = 0; bit < 64; ++bit) {
    if (names.by_bit[bit] != target) continue;
    if (std::find(names.supported.begin(), names.supported.end(), target) == names.supported.end())
      break;
    // Lower bits are better targets (hwy/detect_targets.h): disabling them all caps dispatch.
    hwy::DisableTargets((std::int64_t{1} << bit) - 1);
    return;
  }
  throw ValueError("SIMD target '" + target +
                   "' is not one this CPU supports among those kiln "
                   "was compiled for; expected one of: " +
                   simd_target_list());
}

const char* chosen_simd_target() {
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  if (targets.empty()) return "unknown";
  const int bit = __builtin_ctzll(static_cast<unsigned long long>(targets.front()));
  return target_names().by_bit[bit].c_str();
}

}  // namespace kiln::detail
#endif  // KILN_WITH_SIMD
