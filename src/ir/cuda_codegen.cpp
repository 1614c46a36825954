#include "ir/cuda_codegen.hpp"

#include <fmt/format.h>

#include "embed/ir/box_muller.cuh.hpp"
#include "embed/ir/cuda_half_math.cuh.hpp"
#include "embed/ir/cuda_math.cuh.hpp"
#include "embed/ir/cuda_prelude.cuh.hpp"
#include "kiln/error.hpp"

namespace kiln::ir {
namespace {

const char* value_type(DType t) { return cuda_value_type(t); }

// The expression that converts value `v` of dtype `from` to `to`: a conversion between the
// dtypes' value types (a half type's is float), then, into a half type, the rounding an explicit
// cast stores.
std::string cast_expr(const std::string& v, DType from, DType to) {
  if (from == to) return v;
  const DType f = compute_dtype(from), t = compute_dtype(to);
  std::string e = v;
  // A half-type operand may hold an unrounded float (an intermediate of a fused group): it is
  // rounded to its type first, the value a stored result would have.
  if (from == DType::bf16) e = fmt::format("kiln::round_bf16({})", v);
  if (from == DType::f16) e = fmt::format("kiln::round_f16({})", v);
  if (f != t) {
    const char* pattern = "{}";
    switch (t) {
      case DType::f32:
        pattern = f == DType::i32 ? "(float){}" : "({} ? 1.0f : 0.0f)";
        break;
      case DType::i32:
        pattern = f == DType::f32 ? "kiln::f32_to_i32({})" : "({} ? 1 : 0)";
        break;
      case DType::boolean:
        pattern = f == DType::f32 ? "({} != 0.0f)" : "({} != 0)";
        break;
      case DType::bf16:
      case DType::f16:
        throw InternalError("cuda codegen: a half type is not a value type");
    }
    e = fmt::format(fmt::runtime(pattern), e);
  }
  if (to == DType::bf16) return fmt::format("kiln::round_bf16({})", e);
  if (to == DType::f16) return fmt::format("kiln::round_f16({})", e);
  return e;
}

const char* comparison_operator(Op op) {
  switch (op) {
    case Op::eq:
      return "==";
    case Op::ne:
      return "!=";
    case Op::lt:
      return "<";
    case Op::le:
      return "<=";
    case Op::gt:
      return ">";
    default:
      return ">=";
  }
}

// Whether each node's value is rounded to a half type before anything reads it: a half-typed
// node whose every use is a cast to another dtype (cast_expr rounds a half operand first) or an
// output (stored rounded; a reduction's prologue rounds it too). Such a node may take the cheaper
// forms of src/ir/cuda_half_math.cuh; an intermediate that another op reads in f32 may not.
std::vector<bool> rounded_to_half(const Program& p) {
  std::vector<bool> r(p.nodes.size());
  for (std::size_t n = 0; n < p.nodes.size(); ++n) r[n] = is_half(p.nodes[n].dtype);
  for (const Node& node : p.nodes) {
    if (node.op == Op::cast && p.dtype(node.a) != node.dtype) continue;
    const std::int32_t operands[] = {node.a, node.b, node.c};
    for (int k = 0; k < arity(node.op); ++k) r[static_cast<std::size_t>(operands[k])] = false;
  }
  return r;
}

// The ops with a cheaper form for a result rounded to a half type (cuda_half_math.cuh).
bool has_half_form(Op op) {
  switch (op) {
    case Op::rsqrt:
    case Op::sigmoid:
    case Op::silu:
    case Op::gelu:
    case Op::sin:
    case Op::cos:
    case Op::log:
    case Op::pow:
      return true;
    default:
      return false;
  }
}

// The function in the prelude (or CUDA's math library) that computes a unary op.
std::string unary_call(Op op, const std::string& a, bool to_half) {
  if (to_half && has_half_form(op)) return fmt::format("kiln::{}_to_half({})", op_name(op), a);
  switch (op) {
    case Op::neg:
    case Op::abs:
    case Op::relu:
    case Op::rsqrt:
    case Op::sigmoid:
    case Op::gelu:
    case Op::silu:
    case Op::erf:
    case Op::sin:
    case Op::cos:
      return fmt::format("kiln::{}({})", op_name(op), a);
    case Op::tan:
    case Op::exp:
    case Op::log:
    case Op::sqrt:
    case Op::tanh:
      return fmt::format("{}f({})", op_name(op), a);
      KILN_IR_NOT_UNARY_CASES
      break;
  }
  throw InternalError(fmt::format("cuda codegen: {} is not a unary op", op_name(op)));
}

// One statement per node: `const T vN = ...;`. Leaves read the body's parameters.
std::string body_statements(const Program& p) {
  const std::vector<bool> to_half = rounded_to_half(p);
  std::string s;
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const Node& node = p.nodes[n];
    const auto a = fmt::format("v{}", node.a), b = fmt::format("v{}", node.b),
               c = fmt::format("v{}", node.c);
    std::string e;
    switch (node.op) {
      case Op::input:
        e = fmt::format("x{}", node.a);
        break;
      case Op::scalar:
        e = node.dtype == DType::boolean ? fmt::format("(s{} != 0)", node.a)
                                         : fmt::format("s{}", node.a);
        break;
      case Op::index:
        e = "(int)i";
        break;
      case Op::cast:
        e = cast_expr(a, p.dtype(node.a), node.dtype);
        break;
      case Op::add:
      case Op::sub:
      case Op::mul:
      case Op::div:
      case Op::pow:
      case Op::minimum:
      case Op::maximum:
        e = fmt::format("kiln::{}{}({}, {})", op_name(node.op),
                        to_half[n] && has_half_form(node.op) ? "_to_half" : "", a, b);
        break;
      case Op::eq:
      case Op::ne:
      case Op::lt:
      case Op::le:
      case Op::gt:
      case Op::ge:
        e = fmt::format("({} {} {})", a, comparison_operator(node.op), b);
        break;
      case Op::where:
        e = fmt::format("({} ? {} : {})", a, b, c);
        break;
      default:
        e = unary_call(node.op, a, to_half[n]);
    }
    s += fmt::format("  const {} v{} = {};\n", value_type(node.dtype), n, e);
  }
  for (std::size_t o = 0; o < p.outputs.size(); ++o)
    s += fmt::format("  y{} = v{};\n", o, p.outputs[o]);
  return s;
}

std::string load_value(DType t, const std::string& e) { return cuda_load_value(t, e); }

}  // namespace

std::string cuda_load_value(DType t, const std::string& e) {
  switch (t) {
    case DType::boolean:
      return fmt::format("({} != 0)", e);
    case DType::bf16:
    case DType::f16:
      return fmt::format("kiln::to_f32({})", e);
    case DType::f32:
    case DType::i32:
      break;
  }
  return e;
}

namespace {

std::string load_expr(DType t, const std::string& ptr, const std::string& off) {
  return load_value(t, fmt::format("{}[{}]", ptr, off));
}

// The value v of dtype t as its stored element.
std::string store_value(DType t, const std::string& v) {
  switch (t) {
    case DType::boolean:
      return fmt::format("(unsigned char){}", v);
    case DType::bf16:
      return fmt::format("kiln::to_bf16({})", v);
    case DType::f16:
      return fmt::format("kiln::to_f16({})", v);
    case DType::f32:
    case DType::i32:
      break;
  }
  return v;
}

// Four stored elements of dtype t, loaded or stored at once.
const char* vector_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float4";
    case DType::i32:
      return "int4";
    case DType::boolean:
      return "uchar4";
    case DType::bf16:
      return "kiln::bf16x4";
    case DType::f16:
      return "kiln::f16x4";
  }
  return "?";
}

// The C type of a scalar parameter of dtype t.
const char* scalar_type(DType t) { return cuda_scalar_type(t); }

constexpr const char* kLane[4] = {"x", "y", "z", "w"};

}  // namespace

const char* cuda_value_type(DType t) { return detail::info(t).cuda_value; }

const char* cuda_storage_type(DType t) { return detail::info(t).cuda_storage; }

const char* cuda_scalar_type(DType t) { return compute_dtype(t) == DType::f32 ? "float" : "int"; }

// The prelude is CUDA C of its own, src/ir/cuda_math.cuh, src/ir/box_muller.cuh,
// src/ir/cuda_prelude.cuh and src/ir/cuda_half_math.cuh, embedded at build time; what each kernel
// adds to it (body, geometry, entry point) is generated below.
const std::string& cuda_prelude() {
  static const std::string s =
      std::string(embed::ir_cuda_math_cuh) + std::string(embed::ir_box_muller_cuh) +
      std::string(embed::ir_cuda_prelude_cuh) + std::string(embed::ir_cuda_half_math_cuh);
  return s;
}

std::uint64_t cuda_divider(std::uint32_t e) {
  if (e == 0) throw InternalError("cuda codegen: a divider for an extent of 0");
  int shift = 0;
  while ((std::uint64_t{1} << shift) < e) ++shift;
  const std::uint64_t magic =
      ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - e)) / e + 1;
  return magic | static_cast<std::uint64_t>(shift) << 32;
}

std::string CudaLayout::tag() const {
  auto code = [](Access a) {
    switch (a) {
      case Access::contiguous:
        return 'c';
      case Access::splat:
        return 'z';
      case Access::strided:
        return 's';
      case Access::row_strided:
        return 'r';
      case Access::row_splat:
        return 'p';
    }
    return '?';
  };
  std::string t = vectorized ? "v" : "e";
  t += wide_index ? "64" : "32";
  t += fmt::format("r{}.", rank);
  for (Access a : inputs) t += code(a);
  t += '.';
  for (Access a : outputs) t += code(a);
  return t;
}

std::string cuda_body(const Program& p, const std::string& name, bool wide_index) {
  std::string params = fmt::format("{} i", wide_index ? "unsigned long long" : "unsigned");
  for (std::size_t i = 0; i < p.inputs.size(); ++i)
    params += fmt::format(", {} x{}", value_type(p.inputs[i]), i);
  for (std::size_t s = 0; s < p.scalars.size(); ++s)
    params += fmt::format(", {} s{}", scalar_type(p.scalars[s]), s);
  for (std::size_t o = 0; o < p.outputs.size(); ++o)
    params += fmt::format(", {}& y{}", value_type(p.dtype(p.outputs[o])), o);
  return fmt::format("__device__ __forceinline__ void {}({}) {{\n{}}}\n", name, params,
                     body_statements(p));
}

CudaKernel cuda_kernel(const Program& p, const CudaLayout& l) {
  if (l.inputs.size() != p.inputs.size() || l.outputs.size() != p.outputs.size()) {
    throw InternalError("cuda codegen: layout does not match the program's inputs and outputs");
  }
  const char* I = l.wide_index ? "unsigned long long" : "unsigned";
  const std::size_t n_in = p.inputs.size(), n_out = p.outputs.size();
  auto out_dtype = [&](std::size_t o) { return p.dtype(p.outputs[o]); };

  // Strided operands (any of the three kinds), in input-then-output order: their slot in the
  // geometry struct.
  auto has_strides = [](Access a) { return a != Access::contiguous && a != Access::splat; };
  std::vector<int> in_slot(n_in, -1), out_slot(n_out, -1);
  int strided = 0;
  for (std::size_t i = 0; i < n_in; ++i)
    if (has_strides(l.inputs[i])) in_slot[i] = strided++;
  for (std::size_t o = 0; o < n_out; ++o)
    if (has_strides(l.outputs[o])) out_slot[o] = strided++;
  for (std::size_t k = 0; k < n_in + n_out; ++k) {
    const Access a = k < n_in ? l.inputs[k] : l.outputs[k - n_in];
    if (l.vectorized ? a == Access::strided : a == Access::row_strided || a == Access::row_splat)
      throw InternalError("cuda codegen: strided access does not match the vectorization");
    if (k >= n_in && a == Access::row_splat)
      throw InternalError("cuda codegen: an output is never row_splat");
  }
  if (strided && l.rank < 1) throw InternalError("cuda codegen: strided operands need rank >= 1");

  CudaKernel k;
  k.name = "kiln_elementwise";  // each source is its own library, so one name serves

  std::string src = cuda_prelude();
  src += cuda_body(p, "kiln_body", l.wide_index);
  if (strided) {
    const int dividers = l.wide_index ? 0 : l.rank;
    src += fmt::format("struct KilnGeometry {{ long long v[{}]; }};\n",
                       l.rank * (1 + strided) + dividers);
  }

  // The kernel's parameter list.
  std::string kparams;
  auto sep = [&] { return kparams.empty() ? "" : ", "; };
  for (std::size_t i = 0; i < n_in; ++i)
    kparams +=
        fmt::format("{}const {}* __restrict__ in{}", sep(), cuda_storage_type(p.inputs[i]), i);
  for (std::size_t o = 0; o < n_out; ++o)
    kparams += fmt::format("{}{}* __restrict__ out{}", sep(), cuda_storage_type(out_dtype(o)), o);
  for (std::size_t s = 0; s < p.scalars.size(); ++s)
    kparams += fmt::format("{}{} s{}", sep(), scalar_type(p.scalars[s]), s);
  if (strided) kparams += fmt::format("{}KilnGeometry g", sep());
  kparams += fmt::format("{}{} n", sep(), I);

  std::string body;
  body += fmt::format("  const {0} step = ({0})gridDim.x * blockDim.x;\n", I);
  body += fmt::format("  const {0} first = ({0})blockIdx.x * blockDim.x + threadIdx.x;\n", I);
  for (std::size_t i = 0; i < n_in; ++i) {
    if (l.inputs[i] == Access::splat)
      body += fmt::format("  const {} z{} = {};\n", value_type(p.inputs[i]), i,
                          load_expr(p.inputs[i], fmt::format("in{}", i), "0"));
  }
  auto call_args = [&](const std::string& idx, const std::string& x_prefix,
                       const std::string& y_prefix) {
    std::string a = idx;
    for (std::size_t i = 0; i < n_in; ++i)
      a += l.inputs[i] == Access::splat ? fmt::format(", z{}", i)
                                        : fmt::format(", {}{}", x_prefix, i);
    for (std::size_t s = 0; s < p.scalars.size(); ++s) a += fmt::format(", s{}", s);
    for (std::size_t o = 0; o < n_out; ++o) a += fmt::format(", {}{}", y_prefix, o);
    return a;
  };
  // The strided operands' offsets o0, o1, .. of the element at index `index`. The coordinates,
  // innermost first: a quotient and remainder per extent but the outermost (what remains is its
  // coordinate). A 32-bit index divides by multiplying (cuda_divider's magic number and shift,
  // after the strides): integer division is a long instruction sequence on the GPU, and it ran
  // for every element of broadcasting kernels.
  auto offsets = [&](const std::string& index) {
    std::string c = fmt::format("    {} rem = {};\n", I, index);
    for (int s = 0; s < strided; ++s) c += fmt::format("    {} o{} = 0;\n", I, s);
    for (int d = l.rank - 1; d >= 0; --d) {
      if (d == 0) {
        c += fmt::format("    {{ const {} c = rem;", I);
      } else if (l.wide_index) {
        c += fmt::format("    {{ const {0} e = ({0})g.v[{1}]; const {0} c = rem % e; rem /= e;", I,
                         d);
      } else {
        c += fmt::format(
            "    {{ const unsigned long long m = (unsigned long long)g.v[{0}]; const unsigned q = "
            "(unsigned)(((unsigned long long)__umulhi(rem, (unsigned)m) + rem) >> (m >> 32)); "
            "const unsigned c = rem - q * (unsigned)g.v[{1}]; rem = q;",
            l.rank * (1 + strided) + d, d);
      }
      for (int s = 0; s < strided; ++s)
        c += fmt::format(" o{} += c * ({})g.v[{}];", s, I, l.rank * (1 + s) + d);
      c += " }\n";
    }
    return c;
  };
  // One element at index i: loads, body, stores (contiguous and strided operands).
  std::string element;
  if (strided) element += offsets("i");
  for (std::size_t i = 0; i < n_in; ++i) {
    if (l.inputs[i] == Access::splat) continue;
    std::string off = in_slot[i] >= 0 ? fmt::format("o{}", in_slot[i]) : "i";
    element += fmt::format("    const {} x{} = {};\n", value_type(p.inputs[i]), i,
                           load_expr(p.inputs[i], fmt::format("in{}", i), off));
  }
  for (std::size_t o = 0; o < n_out; ++o)
    element += fmt::format("    {} y{};\n", value_type(out_dtype(o)), o);
  element += fmt::format("    kiln_body({});\n", call_args("i", "x", "y"));
  for (std::size_t o = 0; o < n_out; ++o) {
    // A splat output (all strides 0) is one element written by every thread with the same
    // value; only a size-1 iteration space produces it, so write it at 0.
    std::string off = out_slot[o] >= 0                ? fmt::format("o{}", out_slot[o])
                      : l.outputs[o] == Access::splat ? "0"
                                                      : "i";
    element += fmt::format("    out{}[{}] = {};\n", o, off,
                           store_value(out_dtype(o), fmt::format("y{}", o)));
  }

  if (l.vectorized) {
    // Without strides, each thread loads the vectors of two steps (v0 and v0 + step) before it
    // computes either: with one 8- or 16-byte load in flight per thread, an SM holds too few
    // bytes in flight to keep HBM busy (a bf16 copy reached 0.92 of cudaMemcpy's bandwidth).
    const bool pairs = strided == 0;
    body += fmt::format("  const {} nv = n / 4;\n", I);
    if (pairs) {
      body += fmt::format("  for ({} v0 = first; v0 < nv; v0 += 2 * step) {{\n", I);
      for (std::size_t i = 0; i < n_in; ++i)
        if (l.inputs[i] == Access::contiguous)
          body += fmt::format("    {} p{}[2];\n", vector_type(p.inputs[i]), i);
      body += "#pragma unroll\n    for (int u = 0; u < 2; ++u) {\n";
      body += fmt::format("      const {} v = v0 + u * step;\n      if (v < nv) {{\n", I);
      for (std::size_t i = 0; i < n_in; ++i)
        if (l.inputs[i] == Access::contiguous)
          body += fmt::format("        p{0}[u] = reinterpret_cast<const {1}*>(in{0})[v];\n", i,
                              vector_type(p.inputs[i]));
      body += "      }\n    }\n";
      body += "#pragma unroll\n    for (int u = 0; u < 2; ++u) {\n";
      body += fmt::format("    const {} v = v0 + u * step;\n    if (v >= nv) break;\n", I);
    } else {
      body += fmt::format("  for ({} v = first; v < nv; v += step) {{\n", I);
    }
    if (strided) body += offsets("4 * v");
    for (std::size_t i = 0; i < n_in; ++i) {
      const char* vt = vector_type(p.inputs[i]);
      if (l.inputs[i] == Access::contiguous && pairs)
        body += fmt::format("    const {0} a{1} = p{1}[u];\n", vt, i);
      else if (l.inputs[i] == Access::contiguous)
        body +=
            fmt::format("    const {0} a{1} = reinterpret_cast<const {0}*>(in{1})[v];\n", vt, i);
      else if (l.inputs[i] == Access::row_strided)
        body += fmt::format("    const {0} a{1} = *reinterpret_cast<const {0}*>(in{1} + o{2});\n",
                            vt, i, in_slot[i]);
      else if (l.inputs[i] == Access::row_splat)
        body += fmt::format(
            "    const {} z{} = {};\n", value_type(p.inputs[i]), i,
            load_expr(p.inputs[i], fmt::format("in{}", i), fmt::format("o{}", in_slot[i])));
    }
    for (std::size_t o = 0; o < n_out; ++o)
      body += fmt::format("    {} r{};\n", vector_type(out_dtype(o)), o);
    for (int lane = 0; lane < 4; ++lane) {
      body += "    {\n";
      for (std::size_t i = 0; i < n_in; ++i) {
        if (l.inputs[i] == Access::splat) continue;
        if (l.inputs[i] == Access::row_splat) {
          body += fmt::format("      const {0} x{1} = z{1};\n", value_type(p.inputs[i]), i);
          continue;
        }
        std::string lv = fmt::format("a{}.{}", i, kLane[lane]);
        body += fmt::format("      const {} x{} = {};\n", value_type(p.inputs[i]), i,
                            load_value(p.inputs[i], lv));
      }
      for (std::size_t o = 0; o < n_out; ++o)
        body += fmt::format("      {} y{};\n", value_type(out_dtype(o)), o);
      body += fmt::format("      kiln_body({});\n",
                          call_args(fmt::format("4 * v + {}", lane), "x", "y"));
      for (std::size_t o = 0; o < n_out; ++o)
        body += fmt::format("      r{}.{} = {};\n", o, kLane[lane],
                            store_value(out_dtype(o), fmt::format("y{}", o)));
      body += "    }\n";
    }
    for (std::size_t o = 0; o < n_out; ++o) {
      if (l.outputs[o] == Access::row_strided)
        body += fmt::format("    *reinterpret_cast<{}*>(out{} + o{}) = r{};\n",
                            vector_type(out_dtype(o)), o, out_slot[o], o);
      else
        body += fmt::format("    reinterpret_cast<{}*>(out{})[v] = r{};\n",
                            vector_type(out_dtype(o)), o, o);
    }
    if (pairs) body += "    }\n";
    body += "  }\n";
    body += fmt::format("  for ({} i = nv * 4 + first; i < n; i += step) {{\n{}  }}\n", I, element);
  } else {
    body += fmt::format("  for ({} i = first; i < n; i += step) {{\n{}  }}\n", I, element);
  }
  src += fmt::format("extern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n{}}}\n",
                     k.name, kparams, body);
  k.source = std::move(src);
  return k;
}

}  // namespace kiln::ir
