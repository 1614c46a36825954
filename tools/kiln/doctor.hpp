// `kiln doctor`: what this build and this machine give kiln, and what is lost, each loss with
// its cost and its fix.
#pragma once

namespace kiln::cli {

struct DoctorOptions {
  bool json = false;    // one JSON object on stdout instead of the report
  bool strict = false;  // a feature switched off on purpose counts as lost, too
};

// Prints the report and returns the exit status:
//   0  healthy: every performance feature is live, or lost only on purpose (a build that
//      acknowledged it with -DKILN_QUIET_FEATURES=ON, a run-time switch, a SIMD cap);
//   1  a performance feature is lost by accident (compiled out unacknowledged, a store that
//      cannot be written, a single-threaded BLAS), or with `strict`, lost at all.
// A missing GPU is reported, never counted: kiln runs on the CPU then, as asked.
int run_doctor(const DoctorOptions& options);

}  // namespace kiln::cli
