// The element-wise conformance tests' shared part: a row of the op table (a one-output Program,
// its inputs' dtypes and ranges, a float64 or exact reference, a tolerance) and the fixture that
// runs a row on a chain, with poisoned and with fresh outputs. conformance_elementwise.cpp holds
// the f32, i32 and bool rows; conformance_elementwise_half.cpp the bf16 and f16 rows.
#pragma once

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "chains.hpp"

namespace kc::ew {

using kc::Layout;
using kc::Operand;
using kc::Values;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

// ---- the op table: one row per (op, dtype) the IR defines ----

// An input's dtype and the range its random values come from (bool ignores the range). With
// `ties`, floating values (f32, bf16, f16) are rounded to integers every third element and zero
// every seventh, so that comparisons meet equal operands and casts meet zeros and whole numbers.
struct InputSpec {
  DType dtype;
  double lo = -4, hi = 4;
  bool ties = false;
};

struct Case {
  std::string name;
  Program program;  // one output
  std::vector<InputSpec> inputs;
  std::vector<double> scalars;
  // The exact result at row-major index `index` from the inputs' values there.
  std::function<double(const std::vector<double>& x, std::int64_t index)> ref;
  kt::Tol tol = kt::kExact;
};

inline float f(double x) { return static_cast<float>(x); }
// i32 arithmetic wraps modulo 2^32 (docs/accuracy.md).
inline double wrap(std::int64_t v) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(v)));
}
inline std::int64_t i(double x) { return static_cast<std::int64_t>(x); }
inline double relu(double x) { return x > 0 ? x : 0.0; }

inline Program unary(Op op, DType t) {
  Program p;
  p.output(p.unary(op, p.input(t)));
  return p;
}
inline Program binary(Op op, DType t) {
  Program p;
  const auto a = p.input(t), b = p.input(t);
  p.output(p.binary(op, a, b));
  return p;
}
inline Program cast(DType from, DType to) {
  Program p;
  p.output(p.cast(p.input(from), to));
  return p;
}
inline Program where(DType t) {
  Program p;
  const auto c = p.input(DType::boolean), a = p.input(t), b = p.input(t);
  p.output(p.where(c, a, b));
  return p;
}
inline Program copy(DType t) {
  Program p;
  p.output(p.input(t));
  return p;
}

// A value of dtype t as that dtype stores it.
inline double as(DType t, double v) {
  if (t == DType::f32) return f(v);
  if (t == DType::i32) return static_cast<double>(static_cast<std::int32_t>(v));
  return v != 0;
}

class ElementwiseChainTest : public kc::ChainTest {
 protected:
  Operand input_for(const Dims& shape, const InputSpec& in, const Layout& layout) {
    return input(shape, in.dtype, layout, [&](std::int64_t n) {
      Values v = kc::random_values(in.dtype, n, rng(), in.lo, in.hi);
      if (in.ties && kiln::is_floating(in.dtype)) {  // (whole numbers and 0 are exact halves)
        for (std::size_t k = 0; k < v.size(); k += 3) v[k] = std::round(v[k]);
        for (std::size_t k = 0; k < v.size(); k += 7) v[k] = 0;
      }
      return v;
    });
  }

  // The case's reference over inputs (each already of `shape`).
  static Values reference(const Case& c, const std::vector<Operand>& in, const Dims& shape) {
    std::vector<Values> vals;
    for (const auto& o : in) vals.push_back(o.values());
    const std::int64_t n = kc::detail::numel(shape);
    Values want(static_cast<std::size_t>(n));
    std::vector<double> x(in.size());
    const DType out = c.program.dtype(c.program.outputs[0]);
    for (std::int64_t k = 0; k < n; ++k) {
      for (std::size_t j = 0; j < in.size(); ++j) x[j] = vals[j][static_cast<std::size_t>(k)];
      // f32 and half references stay unrounded: matches() compares them within the row's bound.
      want[static_cast<std::size_t>(k)] =
          kiln::is_floating(out) ? c.ref(x, k) : as(out, c.ref(x, k));
    }
    return want;
  }

  // Runs the case once with a poisoned output laid out as `out_layout`, and once with a fresh
  // output from empty() (which a fusion decorator records instead of running), and checks both.
  void check(const Case& c, const std::vector<Operand>& in, const Dims& shape,
             const Layout& out_layout = kc::contiguous()) {
    std::vector<const TensorImpl*> ins;
    for (const auto& o : in) ins.push_back(&o.view);
    const DType out_t = c.program.dtype(c.program.outputs[0]);
    const Values want = reference(c, in, shape);
    {
      SCOPED_TRACE("poisoned output, " + out_layout.name);
      Operand out = output(shape, out_t, out_layout);
      elementwise(c.program, ins, c.scalars, {&out.view});
      EXPECT_TRUE(kc::matches(read(out), shape, want, c.tol));
      EXPECT_TRUE(untouched_outside(out));
    }
    {
      SCOPED_TRACE("fresh output from empty()");
      poison_allocator(kc::detail::numel(shape), out_t);
      Handle out = be().empty(shape, out_t);
      elementwise(c.program, ins, c.scalars, {out.get()});
      EXPECT_TRUE(kc::matches(read(*out), shape, want, c.tol));
    }
  }

  // Every case of a table, over a shape that crosses the CPU's 4096-element blocks and ends in
  // a partial vector, a short one, and rank 0; inputs dense, then permuted and offset.
  void check_every_op(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name + "\n" + kiln::ir::describe(c.program));
      for (const Dims& shape : {Dims{3, 37, 41}, Dims{7}, Dims{}}) {
        for (const Layout& layout : {kc::contiguous(), kc::permuted()}) {
          SCOPED_TRACE(kiln::format_dims(shape) + " inputs " + layout.name);
          std::vector<Operand> in;
          for (const auto& spec : c.inputs) in.push_back(input_for(shape, spec, layout));
          check(c, in, shape);
        }
      }
    }
  }
  // Each case with every input layout (kc::input_layouts()) in each input slot in turn, the
  // others dense, and then in all of them; over rank-3 shapes (rows of 9 and of 8, which CUDA
  // reads 4 at a time through broadcasts and slices) and empty ones.
  void check_every_input_layout(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      for (const Dims& shape : {Dims{5, 6, 9}, Dims{3, 5, 8}, Dims{4, 0, 3}, Dims{0}}) {
        for (const Layout& layout : kc::input_layouts()) {
          // slot -1: every input in this layout.
          for (int slot = -1; slot < static_cast<int>(c.inputs.size()); ++slot) {
            SCOPED_TRACE(kiln::format_dims(shape) + " " + layout.name + " in " +
                         (slot < 0 ? std::string("every slot") : "slot " + std::to_string(slot)));
            std::vector<Operand> in;
            for (int k = 0; k < static_cast<int>(c.inputs.size()); ++k) {
              in.push_back(input_for(shape, c.inputs[static_cast<std::size_t>(k)],
                                     slot < 0 || slot == k ? layout : kc::contiguous()));
            }
            check(c, in, shape);
          }
        }
      }
    }
  }

  // Each case into every output layout (kc::output_layouts(), strided views of a larger buffer),
  // from sliced inputs and from dense ones.
  void check_every_output_layout(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      for (const Dims& shape : {Dims{5, 6, 9}, Dims{3, 5, 8}, Dims{2, 0, 3}}) {
        for (const Layout& out_layout : kc::output_layouts()) {
          for (const Layout& in_layout : {kc::sliced(), kc::contiguous()}) {
            SCOPED_TRACE(kiln::format_dims(shape) + " into " + out_layout.name + " from " +
                         in_layout.name);
            std::vector<Operand> in;
            for (const auto& spec : c.inputs) in.push_back(input_for(shape, spec, in_layout));
            check(c, in, shape, out_layout);
          }
        }
      }
    }
  }
};

// The rows of `table` named, all of which must exist (a renamed row must not silently drop out
// of a test).
inline std::vector<Case> rows(std::vector<Case> table, const std::set<std::string>& names) {
  std::vector<Case> out;
  for (Case& c : table)
    if (names.count(c.name)) out.push_back(std::move(c));
  EXPECT_EQ(out.size(), names.size()) << "a row named in the test is missing from its table";
  return out;
}

}  // namespace kc::ew
