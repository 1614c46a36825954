// The fuser's open group: element-wise calls spliced into one IR program as they are recorded.
//
// Every call of a group runs over the same iteration shape. An input is either a tensor with
// memory (kept alive by the group, one slot per distinct view) or a pending result of this
// group read element for element, which becomes a reference to the node that computes it. Each
// output becomes a pending tensor; the group remembers it weakly, so a handle the user drops is
// simply gone when the group closes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fusion/pending_buffer.hpp"
#include "ir/program.hpp"

namespace kiln::fusion {

// Limits that close a group. Each recorded op adds a statement to the generated kernel and each
// input a pointer (and, when strided, a geometry row) to its parameters: 32 ops keep NVRTC under
// about 100 ms even for chains of sin (whose argument reduction is long) and the kernel's
// registers well below the spilling point; 16 inputs keep the parameter block small and most
// loads coalesced. A loop that records more simply runs as a repeated group of 32.
inline constexpr int kMaxOps = 32;
inline constexpr std::size_t kMaxInputs = 16;
// The most inputs one recorded call may have (the front end's ops have at most 3); a call with
// more runs unfused.
inline constexpr std::size_t kMaxCallInputs = 64;

struct PendingOutput {
  std::weak_ptr<detail::Buffer> buffer;  // a PendingBuffer (held as its base: one atomic less)
  std::int32_t node;
};

struct Group {
  std::uint64_t serial = 0;  // distinguishes this group from the ones before it
  Dims shape;
  int ops = 0;
  ir::Program program;                     // outputs empty while recording
  std::vector<detail::TensorImpl> inputs;  // one per input slot, holding their buffers
  std::vector<std::int32_t> input_nodes;   // the input leaf of each slot
  std::vector<double> scalars;             // one per scalar slot
  std::vector<PendingOutput> outputs;

  bool empty() const { return ops == 0; }
  // Back to an empty group; the vectors keep their capacity for the next one.
  void clear();
  // Whether the call's input can be read as a node of this group (a pending result of it, seen
  // element for element) rather than from memory.
  bool reads_in_registers(const detail::TensorImpl& input) const;
  // Bit i set where inputs[i] reads_in_registers (a call has at most kMaxCallInputs inputs).
  std::uint64_t in_registers(std::span<const detail::TensorImpl* const> inputs) const;
  // Whether one more call with these inputs (in_registers: as above) still fits under the limits.
  bool fits(std::span<const detail::TensorImpl* const> inputs, std::uint64_t in_registers) const;
  // Splices the call in; its outputs must be fresh pending tensors of `shape`.
  void append(const ir::Program& call, std::span<const detail::TensorImpl* const> inputs,
              std::uint64_t in_registers, std::span<const double> scalars,
              std::span<const detail::TensorImpl* const> outputs);

 private:
  std::int32_t input_slot(const detail::TensorImpl& t);
};

}  // namespace kiln::fusion
