// The Highway SIMD targets kiln was compiled for and this CPU supports, and the cap on which one
// dynamic dispatch may pick (KILN_SIMD=avx2, Config::simd_target). Here in core, below the CPU
// backend, because the configuration checks a target name before any backend exists.
#pragma once

#if KILN_WITH_SIMD
#include <string>
#include <vector>

namespace kiln::detail {

// The targets compiled in that this CPU supports, best first, lower case ("avx2"), whatever the
// cap.
const std::vector<std::string>& simd_targets();
// simd_targets() joined for messages: "avx2, sse4, ssse3".
std::string simd_target_list();
// Caps SIMD dispatch at `target`, one of simd_targets(): no better target is used. "" lifts the
// cap. Anything else is a ValueError naming the valid ones.
void cap_simd_target(const std::string& target);
// The target dynamic dispatch picks now: the best this CPU supports, at or under the cap.
const char* chosen_simd_target();

}  // namespace kiln::detail
#endif
