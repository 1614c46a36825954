#include "cuda/reduce_source.hpp"

#include <fmt/format.h>

#include <set>

#include "embed/cuda/kernels/reduce.cuh.hpp"
#include "ir/cuda_codegen.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda {
namespace {

using detail::ReduceOp;

// The device side (the policies of each op, the loops of each variant, the block's fixed
// combining tree) is CUDA C in src/cuda/kernels/reduce.cuh, after the element-wise prelude in
// every source. What varies is generated here: the extern "C" entry points that instantiate it
// for one spec (op, dtype, ranks, variant, index width), and a prologue's element-wise program.

const char* op_tag(ReduceOp op) { return detail::reduce_name(op); }

// The C++ name of the device policy for op over values of dtype t.
std::string policy(ReduceOp op, DType t) {
  const char* v = ir::cuda_value_type(t == DType::boolean ? DType::i32 : t);
  switch (op) {
    case ReduceOp::sum:
      return fmt::format("kr::Sum<{}>", v);
    case ReduceOp::mean:
      return fmt::format("kr::Mean<{}>", v);
    case ReduceOp::max:
      return fmt::format("kr::Extreme<{}, true>", v);
    case ReduceOp::min:
      return fmt::format("kr::Extreme<{}, false>", v);
    case ReduceOp::argmax:
      return fmt::format("kr::Arg<{}, true>", v);
    case ReduceOp::argmin:
      return fmt::format("kr::Arg<{}, false>", v);
  }
  return "?";
}

// The storage type of the output (reduce_result_dtype's).
const char* out_type(ReduceOp op, DType t) {
  return ir::cuda_storage_type(detail::reduce_result_dtype(op, t));
}

const char* variant_tag(ReduceVariant v) {
  switch (v) {
    case ReduceVariant::block:
      return "block";
    case ReduceVariant::thread:
      return "thread";
    case ReduceVariant::block_split:
      return "blocksplit";
    case ReduceVariant::thread_split:
      return "threadsplit";
  }
  return "?";
}

bool is_split(ReduceVariant v) {
  return v == ReduceVariant::block_split || v == ReduceVariant::thread_split;
}

std::string entry_point(const ReduceKernelSpec& s) {
  const bool by_block =
      s.variant == ReduceVariant::block || s.variant == ReduceVariant::block_split;
  const std::string p = policy(s.op, s.dtype);
  return fmt::format(
      "extern \"C\" __global__ void __launch_bounds__(256) {}(const {}* __restrict__ x, {}* "
      "__restrict__ out, {}::Acc* __restrict__ part, kr::Geom<{}, {}> g) {{\n"
      "  kr::{}<{}, {}, {}, {}, {}>(x, out, part, g);\n}}\n",
      reduce_kernel_name(s), ir::cuda_storage_type(s.dtype), out_type(s.op, s.dtype), p,
      s.outer_rank, s.reduced_rank, by_block ? "by_block" : "by_thread", p, s.outer_rank,
      s.reduced_rank, s.wide_index ? "unsigned long long" : "unsigned",
      is_split(s.variant) ? "true" : "false");
}

std::string combine_entry_point(ReduceOp op, DType t) {
  const std::string p = policy(op, t);
  return fmt::format(
      "extern \"C\" __global__ void __launch_bounds__(256) {}(const {}::Acc* __restrict__ part, "
      "{}* __restrict__ out, long long outputs, long long chunks, long long len) {{\n"
      "  kr::combine<{}>(part, out, outputs, chunks, len);\n}}\n",
      reduce_combine_name(op, t), p, out_type(op, t), p);
}

// The prologue's source struct for spec k, and the entry point that reduces through it:
//   (const In0* in0, ..., Out* out, Acc* part, <float|int> s0, ..., Geom<RO, RR, sets> g)
// get() loads each input at the offset of its stride set (a splat was loaded once, when the
// struct was made) and calls the element-wise body, with set 0's offset as the element's
// index; so the value is the element-wise kernel's, computed the same way.
std::string prologue_entry_point(const ReducePrologueSpec& ps, const std::string& name, int k) {
  const ReduceKernelSpec& s = ps.reduce;
  const ir::Program& prog = *ps.program;
  const char* I = s.wide_index ? "unsigned long long" : "unsigned";
  const std::string body = fmt::format("kiln_body{}", k), type = fmt::format("KilnPrologue{}", k);
  auto load = [](DType t, const std::string& v) { return ir::cuda_load_value(t, v); };
  std::string members, loads, args = "off.v[0]", kparams, init;
  for (std::size_t i = 0; i < prog.inputs.size(); ++i) {
    const DType t = prog.inputs[i];
    kparams += fmt::format("const {}* __restrict__ in{}, ", ir::cuda_storage_type(t), i);
    init += init.empty() ? "" : ", ";
    if (ps.input_sets[i] < 0) {
      members += fmt::format("  {} z{};\n", ir::cuda_value_type(t), i);
      init += load(t, fmt::format("kiln::ldg(in{})", i));
      args += fmt::format(", z{}", i);
    } else {
      members += fmt::format("  const {}* in{};\n", ir::cuda_storage_type(t), i);
      init += fmt::format("in{}", i);
      loads +=
          fmt::format("    const {} x{} = {};\n", ir::cuda_value_type(t), i,
                      load(t, fmt::format("kiln::ldg(in{} + off.v[{}])", i, ps.input_sets[i])));
      args += fmt::format(", x{}", i);
    }
  }
  std::string sparams;
  for (std::size_t j = 0; j < prog.scalars.size(); ++j) {
    const char* st = ir::cuda_scalar_type(prog.scalars[j]);
    members += fmt::format("  {} s{};\n", st, j);
    sparams += fmt::format(", {} s{}", st, j);
    init += fmt::format("{}s{}", init.empty() ? "" : ", ", j);
    args += fmt::format(", s{}", j);
  }
  const DType vt = prog.dtype(prog.outputs[0]);
  const char* value = ir::cuda_value_type(vt == DType::boolean ? DType::i32 : vt);
  std::string src = ir::cuda_body(prog, body, s.wide_index);
  // A half-type value is reduced as the tensor would hold it: rounded to its type (the value
  // the unfused group would have stored, and what the CPU, which does not fuse these, reduces).
  const char* round = vt == DType::bf16  ? "kiln::round_bf16"
                      : vt == DType::f16 ? "kiln::round_f16"
                                         : "";
  src += fmt::format(
      "struct {0} {{\n{1}"
      "  __device__ __forceinline__ {2} get(const kr::Offsets<{4}, {3}>& off) const {{\n{5}"
      "    {6} y0;\n    {7}({8}, y0);\n    return {9}(y0);\n  }}\n}};\n",
      type, members, value, I, ps.sets, loads, ir::cuda_value_type(vt), body, args, round);
  const bool by_block =
      s.variant == ReduceVariant::block || s.variant == ReduceVariant::block_split;
  const std::string p = policy(s.op, s.dtype);
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__(256) {}({}{}* __restrict__ out, "
      "{}::Acc* __restrict__ part{}, kr::Geom<{}, {}, {}> g) {{\n"
      "  const {} x = {{{}}};\n"
      "  kr::{}<{}, {}, {}, {}, {}>(x, out, part, g);\n}}\n",
      name, kparams, out_type(s.op, s.dtype), p, sparams, s.outer_rank, s.reduced_rank, ps.sets,
      type, init, by_block ? "by_block" : "by_thread", p, s.outer_rank, s.reduced_rank, I,
      is_split(s.variant) ? "true" : "false");
  return src;
}

}  // namespace

std::string reduce_kernel_name(const ReduceKernelSpec& s) {
  return fmt::format("kiln_reduce_{}_{}_o{}r{}_{}{}", op_tag(s.op), dtype_name(s.dtype),
                     s.outer_rank, s.reduced_rank, variant_tag(s.variant), s.wide_index ? 64 : 32);
}

std::string reduce_combine_name(ReduceOp op, DType t) {
  return fmt::format("kiln_reduce_{}_{}_combine", op_tag(op), dtype_name(t));
}

std::size_t reduce_partial_bytes(ReduceOp op, DType) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      return 8;  // double or 64-bit integer
    case ReduceOp::max:
    case ReduceOp::min:
      return 4;  // float or int
    default:
      return 16;  // {value, int64 index}
  }
}

std::string reduce_source(std::span<const ReduceKernelSpec> specs) {
  std::string src = ir::cuda_prelude();
  src += embed::cuda_kernels_reduce_cuh;
  std::set<std::pair<ReduceOp, DType>> combines;
  for (const auto& s : specs) {
    src += entry_point(s);
    if (is_split(s.variant) && combines.emplace(s.op, s.dtype).second)
      src += combine_entry_point(s.op, s.dtype);
  }
  return src;
}

ReducePrologueSource reduce_prologue_source(std::span<const ReducePrologueSpec> specs) {
  ReducePrologueSource out;
  out.source = ir::cuda_prelude();
  out.source += embed::cuda_kernels_reduce_cuh;
  std::set<std::pair<ReduceOp, DType>> combines;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const ReducePrologueSpec& ps = specs[k];
    const ReduceKernelSpec& s = ps.reduce;
    const ir::Program& prog = *ps.program;
    if (prog.outputs.size() != 1 || ps.input_sets.size() != prog.inputs.size() || ps.sets < 1 ||
        prog.dtype(prog.outputs[0]) != s.dtype) {
      throw InternalError(fmt::format(
          "reduce_prologue_source: spec {} needs a program of one {} output, a stride set (or -1) "
          "for each of its {} inputs and at least 1 set; it has {} outputs{}, {} input sets and "
          "{} sets",
          k, dtype_name(s.dtype), prog.inputs.size(), prog.outputs.size(),
          prog.outputs.empty()
              ? ""
              : fmt::format(" (the first {})", dtype_name(prog.dtype(prog.outputs[0]))),
          ps.input_sets.size(), ps.sets));
    }
    for (int set : ps.input_sets) {
      if (set < -1 || set >= ps.sets) {
        throw InternalError(
            fmt::format("reduce_prologue_source: spec {} has an input in stride set {} "
                        "of {}",
                        k, set, ps.sets));
      }
    }
    out.kernels.push_back(fmt::format(
        "kiln_reduce_prologue{}_{}_{}_o{}r{}s{}_{}{}", k, op_tag(s.op), dtype_name(s.dtype),
        s.outer_rank, s.reduced_rank, ps.sets, variant_tag(s.variant), s.wide_index ? 64 : 32));
    out.source += prologue_entry_point(ps, out.kernels.back(), static_cast<int>(k));
    if (is_split(s.variant) && combines.emplace(s.op, s.dtype).second)
      out.source += combine_entry_point(s.op, s.dtype);
  }
  return out;
}

std::vector<ReduceSource> all_reduce_sources_for_tests() {
  constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::max,
                               ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin};
  constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};
  constexpr ReduceVariant kVariants[] = {ReduceVariant::block, ReduceVariant::thread,
                                         ReduceVariant::block_split, ReduceVariant::thread_split};
  // (outer, reduced) ranks: a full reduction of dense memory, one dim of a 3-d tensor, and a
  // full reduction in row-major order of a strided 3-d tensor (every offset_of branch).
  constexpr int kRanks[][2] = {{0, 1}, {2, 1}, {0, 3}};
  std::vector<ReduceSource> out;
  for (ReduceVariant v : kVariants) {
    ReduceSource rs;
    rs.name = fmt::format("kiln_reduce_test_{}.cu", variant_tag(v));
    std::vector<ReduceKernelSpec> specs;
    for (ReduceOp op : kOps) {
      for (DType t : kDTypes) {
        for (const auto& r : kRanks) {
          for (bool wide : {false, true}) specs.push_back({op, t, r[0], r[1], v, wide});
        }
        if (is_split(v)) rs.kernels.push_back(reduce_combine_name(op, t));
      }
    }
    for (const auto& s : specs) rs.kernels.push_back(reduce_kernel_name(s));
    rs.source = reduce_source(specs);
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace kiln::cuda
