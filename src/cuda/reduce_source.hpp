// The CUDA C source of the reduction kernels (sum, mean, max, min, argmax, argmin), as strings.
//
// Like src/ir/cuda_codegen.hpp this knows nothing of devices or NVRTC: the kernels are CUDA C
// templates (one policy per op, one loop per variant, in src/cuda/kernels/reduce.cuh, embedded
// at build time) and a source instantiates them with extern "C" entry points named after
// everything they are specialised on, so that one source can batch many kernels (the compile
// test does) and a run-time source holds just one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "ir/program.hpp"

namespace kiln::cuda {

// How the work of one output is spread over the GPU.
enum class ReduceVariant : std::uint8_t {
  block,         // one block per output; its threads stride over the reduced elements
  thread,        // one thread per output (adjacent threads: adjacent outputs)
  block_split,   // one block per (output, chunk), writing partial accumulators
  thread_split,  // one thread per (output, chunk), adjacent threads on adjacent outputs
};

struct ReduceKernelSpec {
  detail::ReduceOp op = detail::ReduceOp::sum;
  DType dtype = DType::f32;  // of the input
  int outer_rank = 0;        // coalesced kept dims (0: one output)
  int reduced_rank = 1;      // coalesced reduced dims, at least 1
  ReduceVariant variant = ReduceVariant::block;
  bool wide_index = false;  // 64-bit positions and offsets (past 2^31 - 1)

  bool operator==(const ReduceKernelSpec&) const = default;
};

// Kernel parameters, every variant:
//   (const In* x, Out* out, Acc* partial, Geometry g)
// where Geometry is a struct of int64 values, in order: outputs, reduced length, chunks per
// output, chunk length, the outer extents then strides (outer_rank each), the reduced extents
// then strides (reduced_rank each). Output o is out[o] in row-major order of the outer dims;
// the split variants write partial[o * chunks + c] instead and leave out alone. Blocks are a
// multiple of 32 threads, at most 256.
std::string reduce_kernel_name(const ReduceKernelSpec& spec);

// The split variants' second kernel, in the same source as them: one block per output
// combines its chunks' partials in a fixed tree and writes out.
//   (const Acc* partial, Out* out, int64 outputs, int64 chunks, int64 reduced length)
std::string reduce_combine_name(detail::ReduceOp op, DType dtype);

// The bytes of one partial accumulator (the split variants' scratch is outputs * chunks of
// them).
std::size_t reduce_partial_bytes(detail::ReduceOp op, DType dtype);

// One complete source (prelude, templates, entry points) with the kernels of `specs`, and the
// combine kernel of every split spec's (op, dtype).
std::string reduce_source(std::span<const ReduceKernelSpec> specs);

// A reduction of an element-wise prologue's value (Backend::reduce_prologue): the kernel
// evaluates `program` (one output, of reduce.dtype) for each element it reduces instead of
// reading it. The geometry has `sets` stride sets; set 0 is the value's own row-major
// (contiguous) layout, whose offset is the element's index (for Op::index), and input i is read
// at the offset of set input_sets[i], or is a splat (-1: every element is its element 0).
// The outer and reduced ranks are those of the dims coalesced over every set.
struct ReducePrologueSpec {
  ReduceKernelSpec reduce;
  const ir::Program* program = nullptr;
  std::vector<int> input_sets;
  int sets = 1;
};

// Kernel parameters:
//   (const In0* in0, ..., Out* out, Acc* partial, <float|int> s0, ..., Geometry g)
// with one pointer per program input (a splat's too), the scalars as cuda_kernel takes them,
// and the geometry of reduce_kernel_name's kernels followed, for each set after the first, by
// its outer strides then its reduced strides. The split variants' combine kernel is
// reduce_combine_name's, in the same source.
struct ReducePrologueSource {
  std::string source;                // the prelude, the library, and one kernel per spec
  std::vector<std::string> kernels;  // the entry point of each spec
};
ReducePrologueSource reduce_prologue_source(std::span<const ReducePrologueSpec> specs);

// Every kernel the generator can produce, for every op x dtype x variant x index width at
// representative (outer, reduced) ranks (0, 1), (2, 1), (0, 3), batched into one source per
// variant (compiling one large source costs far less than many small ones).
struct ReduceSource {
  std::string name;  // "kiln_reduce_test_block.cu"
  std::string source;
  std::vector<std::string> kernels;  // the entry points it defines
};
std::vector<ReduceSource> all_reduce_sources_for_tests();

}  // namespace kiln::cuda
