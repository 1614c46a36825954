// Plans for closed groups, cached by structure.
//
// A plan is the group's program cut down to what its live outputs need (the nodes of dropped
// branches, and the inputs and scalars only they read, are gone), plus which of the group's
// input and scalar slots the cut program keeps. Its key is the recorded program's signature
// with the live outputs: op sequence, dtypes and wiring, never scalar values or extents, so a
// repeated sequence with other scalars or another shape reuses the plan. Layouts are not part
// of it: the backend below keys its compiled kernels by layout class (contiguous, strided,
// broadcast) and rank.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/program.hpp"

namespace kiln::fusion {

struct Plan {
  ir::Program program;
  std::vector<std::int32_t> input_slots;   // group input slot of each program input
  std::vector<std::int32_t> scalar_slots;  // group scalar slot of each program scalar
};

struct PlanLookup {
  std::shared_ptr<const Plan> plan;
  bool hit;
};

// The plan of `recorded` (whose outputs are the live results), from the cache or made now.
PlanLookup plan_for(const ir::Program& recorded);

}  // namespace kiln::fusion
