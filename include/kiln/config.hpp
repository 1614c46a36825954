// Run-time configuration and the state of every performance feature.
//
// Defaults come from the environment when kiln is first used: KILN_SIMD=0 runs scalar loops,
// KILN_THREADS=0 runs one CPU thread, KILN_THREADS=N caps the pool at N threads.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct Config {
  bool simd = true;  // Highway kernels (if compiled in); false runs scalar loops
  int threads = -1;  // -1: all hardware threads; 0: threads off (one thread); N: at most N
};

// The configuration now in force.
Config config();
// Replaces it; takes effect for the next op. Throws ValueError on a bad value.
void set_config(const Config& c);

struct FeatureState {
  std::string name;  // "simd", "threads", ...
  bool compiled;     // built in (CMake option)
  bool live;         // compiled and switched on now
  std::string why;   // e.g. "on", "KILN_SIMD=0 in the environment", "built with -DKILN_SIMD=OFF"
};

// Every feature kiln knows, compiled-in or not, live or not, and why.
std::vector<FeatureState> features();

std::string version();

}  // namespace kiln
