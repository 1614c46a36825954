// What the fusion decorator did in this process, over every device: the counters behind
// kiln::fusion_stats(), and the summary that KILN_LOG=fusion:summary prints at exit and
// kiln::fusion_summary() returns on demand.
#pragma once

#include <span>
#include <string>

#include "fusion/group.hpp"
#include "fusion/plan_cache.hpp"
#include "kiln/config.hpp"

namespace kiln::fusion {

// The ops a program evaluates: its nodes less the inputs and scalars it reads. A trace header
// counts these, the lines listed under it, so that one front-end call of several IR ops (clamp
// is maximum and minimum; a mixed-dtype add casts first) counts as what runs.
int ops_of(const ir::Program& p);

// One element-wise call recorded into a group.
void count_recorded();
// The group g ran as `plan` (found in the cache or not) over `inputs`, writing the results in
// plan.program.outputs; called while the results written are still held.
void count_group(const Group& g, const Plan& plan, bool hit,
                 std::span<const detail::TensorImpl* const> inputs);
// A reduction ran with `plan`, cut from the open group, as its prologue over `inputs`.
void count_reduction(const Plan& plan, bool hit, std::span<const detail::TensorImpl* const> inputs);
// The group g closed with no handle to any of its results left: nothing ran.
void count_unread(const Group& g);

FusionStats stats();
// Lines "N ops recorded; ...", ops per group, plans, memory read, written and never written.
std::string summary();
// From the first call on, with KILN_LOG=fusion:summary, prints summary() on stderr at exit.
void summary_at_exit();

}  // namespace kiln::fusion
