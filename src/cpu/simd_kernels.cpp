// The SIMD kernel table: Highway vectors, compiled for every x86/Arm target Highway can attain
// and dispatched at run time to the best one this CPU supports, and the names of those targets.
// The kernels themselves: simd_unary.cpp (unary ops and casts), simd_binary.cpp (binary ops,
// comparisons, where), both built on simd_common-inl.hpp.
#if KILN_WITH_SIMD

#include <hwy/targets.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/simd_dispatch.hpp"
#include "kiln/error.hpp"

namespace kiln::cpu {
namespace {

// The lower-case names of the targets compiled in (HWY_TARGETS: the set foreach_target compiles
// the kernel files for, with the same flags), by bit; static storage for target().
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

// The target HWY_DYNAMIC_DISPATCH picks now: the best (lowest) bit of the targets this CPU
// supports among those compiled in, less those the cap disabled.
const char* chosen_target() {
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  if (targets.empty()) return "unknown";
  const int bit = __builtin_ctzll(static_cast<unsigned long long>(targets.front()));
  return target_names().by_bit[bit].c_str();
}

}  // namespace

const KernelTable& simd_kernels() {
  static const KernelTable table{chosen_target, simd_unary, simd_binary, simd_where};
  return table;
}

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

}  // namespace kiln::cpu

#endif  // KILN_WITH_SIMD
