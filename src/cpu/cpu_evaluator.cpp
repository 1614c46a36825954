#include "cpu/cpu_evaluator.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "core/layout.hpp"
#include "cpu/parallel.hpp"
#include "kiln/error.hpp"

namespace kiln::ir {

namespace {

using detail::for_each_run;
using detail::JointLayout;
using detail::TensorImpl;

// Every tensor of the call (inputs, then outputs) over one coalesced iteration space: most
// calls end up with rank 1.
JointLayout coalesced(const Dims& shape, std::span<const TensorImpl* const> inputs,
                      std::span<const TensorImpl* const> outputs) {
  // (The walker takes any rank; this limit is the one the CPU's element-wise calls have always
  // stated, kept as it was.)
  if (shape.size() > 16)
    throw ShapeError("element-wise: rank " + std::to_string(shape.size()) + " exceeds 16");
  std::vector<const Dims*> strides;
  for (auto* t : inputs) strides.push_back(&t->strides);
  for (auto* t : outputs) strides.push_back(&t->strides);
  return detail::coalesce(shape, strides);
}

// Block-local storage of 32-bit lanes for one node's value.
using Lane = std::uint32_t;

// How one tensor of the call is accessed after coalescing.
struct Access {
  char* base;  // element 0
  DType dtype;
  const Dims* strides;
  bool dense;  // row-major contiguous over the call's shape: a block is a plain slice of memory
  bool splat;  // every stride 0: one value for the whole call
};

Access access(const TensorImpl& t, const JointLayout& layout, std::size_t which) {
  const Dims& s = layout.strides[which];
  bool all_zero = std::all_of(s.begin(), s.end(), [](auto v) { return v == 0; });
  // (Any rank: the output of x[:, None] - c[None] keeps rank 3, as its inputs do not coalesce.)
  bool dense = true;
  std::int64_t expected = 1;
  for (std::size_t d = layout.shape.size(); d-- > 0;) {
    if (layout.shape[d] != 1 && s[d] != expected) dense = false;
    expected *= layout.shape[d];
  }
  return {static_cast<char*>(t.data()), t.dtype, &s, dense, all_zero};
}

// Whether a tensor of dtype t is stored as the 32-bit lanes it is computed in.
bool lane_sized(DType t) { return dtype_size(t) == sizeof(Lane); }

// One element of half type t as f32, and an f32 rounded to it: for strided runs, element by
// element (dense runs convert with the kernel table's SIMD loops).
float half_value(DType t, std::uint16_t b) {
  return t == DType::bf16 ? kiln::detail::bf16_bits_to_float(b)
                          : kiln::detail::f16_bits_to_float(b);
}
std::uint16_t half_bits(DType t, float f) {
  return t == DType::bf16 ? kiln::detail::float_to_bf16_bits(f)
                          : kiln::detail::float_to_f16_bits(f);
}

// Lane-sized elements [start, end) of a tensor into 32-bit lanes, run by run.
void gather_runs(const Access& a, const Dims& shape, std::int64_t start, std::int64_t end,
                 Lane*& dst) {
  for_each_run(shape, *a.strides, start, end,
               [&](std::int64_t off, std::int64_t n, std::int64_t st, std::int64_t) {
                 const auto* src = reinterpret_cast<const Lane*>(a.base) + off;
                 if (st == 1 && n > 16) {
                   std::memcpy(dst, src, n * sizeof(Lane));
                 } else {
                   for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i * st];
                 }
                 dst += n;
               });
}

// The innermost extent below which gather walks whole tiles of the two innermost dims.
constexpr std::int64_t kShortRun = 16;

// Lane-sized elements [start, start + len) into 32-bit lanes. A short innermost dim (a
// broadcast operand of x[:, None] - c[None] of [m, 8, 2] has runs of 2) is read a tile of the
// two innermost dims at a time, in one double loop, instead of a call per run.
void gather_lanes(const Access& a, const Dims& shape, std::int64_t start, std::int64_t len,
                  Lane* dst) {
  const std::size_t r = shape.size();
  const std::int64_t end = start + len;
  if (r < 2 || shape[r - 1] >= kShortRun) return gather_runs(a, shape, start, end, dst);
  const std::int64_t inner = shape[r - 1], mid = shape[r - 2], tile = inner * mid;
  const std::int64_t s1 = (*a.strides)[r - 1], s2 = (*a.strides)[r - 2];
  std::int64_t first = (start + tile - 1) / tile, last = end / tile;  // whole tiles
  if (first >= last) return gather_runs(a, shape, start, end, dst);
  gather_runs(a, shape, start, first * tile, dst);
  const std::span<const std::int64_t> outer_shape(shape.data(), r - 2),
      outer_strides(a.strides->data(), r - 2);
  detail::Odometer outer(outer_shape, outer_strides, first);
  const auto* base = reinterpret_cast<const Lane*>(a.base);
  const bool dense_tile = s1 == 1 && s2 == inner;
  for (std::int64_t t = first; t < last; ++t, outer.next()) {
    const Lane* src = base + outer.offset();
    if (dense_tile) {
      std::memcpy(dst, src, static_cast<std::size_t>(tile) * sizeof(Lane));
      dst += tile;
      continue;
    }
    for (std::int64_t m = 0; m < mid; ++m, dst += inner) {
      for (std::int64_t i = 0; i < inner; ++i) dst[i] = src[m * s2 + i * s1];
    }
  }
  gather_runs(a, shape, last * tile, end, dst);
}

// Reads [start, start + len) of a tensor into 32-bit lanes (bool widens to 0/1, a half type
// converts to f32).
void gather(const Access& a, const Dims& shape, std::int64_t start, std::int64_t len, Lane* dst,
            const cpu::KernelTable& k) {
  if (lane_sized(a.dtype)) return gather_lanes(a, shape, start, len, dst);
  for_each_run(shape, *a.strides, start, start + len,
               [&](std::int64_t off, std::int64_t n, std::int64_t st, std::int64_t) {
                 if (a.dtype == DType::boolean) {
                   const auto* src = reinterpret_cast<const std::uint8_t*>(a.base) + off;
                   for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i * st] != 0;
                 } else {  // a half type
                   const auto* src = reinterpret_cast<const std::uint16_t*>(a.base) + off;
                   auto* f = reinterpret_cast<float*>(dst);
                   if (st == 1) {
                     k.half_to_f32(a.dtype, src, f, static_cast<std::size_t>(n));
                   } else {
                     for (std::int64_t i = 0; i < n; ++i) f[i] = half_value(a.dtype, src[i * st]);
                   }
                 }
                 dst += n;
               });
}

// Writes 32-bit lanes (or one lane repeated, when splat) to [start, start + len) of a tensor,
// rounding f32 lanes to a half type.
void scatter(const Access& a, const Dims& shape, std::int64_t start, std::int64_t len,
             const Lane* src, bool splat, const cpu::KernelTable& k) {
  for_each_run(shape, *a.strides, start, start + len,
               [&](std::int64_t off, std::int64_t n, std::int64_t st, std::int64_t) {
                 if (is_half(a.dtype)) {
                   auto* d = reinterpret_cast<std::uint16_t*>(a.base) + off;
                   const auto* f = reinterpret_cast<const float*>(src);
                   if (st == 1 && !splat) {
                     k.f32_to_half(a.dtype, f, d, static_cast<std::size_t>(n));
                   } else {
                     for (std::int64_t i = 0; i < n; ++i)
                       d[i * st] = half_bits(a.dtype, f[splat ? 0 : i]);
                   }
                   if (!splat) src += n;
                   return;
                 }
                 for (std::int64_t i = 0; i < n; ++i) {
                   Lane v = src[splat ? 0 : i];
                   if (a.dtype == DType::boolean)
                     reinterpret_cast<std::uint8_t*>(a.base)[off + i * st] = v != 0;
                   else
                     reinterpret_cast<Lane*>(a.base)[off + i * st] = v;
                 }
                 if (!splat) src += n;
               });
}

Lane scalar_lane(double v, DType t) {
  Lane out;
  if (compute_dtype(t) == DType::f32) {
    float f = static_cast<float>(v);
    std::memcpy(&out, &f, sizeof f);
  } else if (t == DType::i32) {
    auto i = static_cast<std::int32_t>(v);
    std::memcpy(&out, &i, sizeof i);
  } else {
    out = v != 0;
  }
  return out;
}

// A scratch slot per node, reused once the node's last reader has run (liveness), so long
// programs need few block buffers.
std::vector<int> assign_slots(const Program& p, int& n_slots) {
  const int n = static_cast<int>(p.nodes.size());
  auto operands = [&](int i) {
    const Node& node = p.nodes[i];
    int ar = arity(node.op);
    return std::array<int, 3>{ar > 0 ? node.a : -1, ar > 1 ? node.b : -1, ar > 2 ? node.c : -1};
  };
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < n; ++i) {
    for (int o : operands(i)) {
      if (o >= 0) last_use[o] = i;
    }
  }
  for (auto o : p.outputs) last_use[o] = n;  // outputs live to the end of the block
  std::vector<int> slot(n), free_slots;
  n_slots = 0;
  for (int i = 0; i < n; ++i) {
    if (free_slots.empty()) {
      slot[i] = n_slots++;
    } else {
      slot[i] = free_slots.back();
      free_slots.pop_back();
    }
    // Operands read for the last time here are freed after the node has its own slot, so a
    // kernel never writes over an operand it is reading.
    std::array<int, 3> ops = operands(i);
    for (int j = 0; j < 3; ++j) {
      int o = ops[j];
      bool first = o >= 0 && std::find(ops.begin(), ops.begin() + j, o) == ops.begin() + j;
      if (first && last_use[o] == i) free_slots.push_back(slot[o]);
    }
  }
  return slot;
}

// f32 lanes rounded to the values of half type t (in may be out).
void round_lanes(const cpu::KernelTable& k, DType t, const float* in, float* out, std::size_t n) {
  std::uint16_t bits[1024];
  for (std::size_t i = 0; i < n; i += 1024) {
    const std::size_t m = std::min<std::size_t>(1024, n - i);
    k.f32_to_half(t, in + i, bits, m);
    k.half_to_f32(t, bits, out + i, m);
  }
}

// Evaluates p's nodes over elements [start, start + len) of one block (len <= kBlock) into
// value[] (one per node), in `lanes` (kBlock per slot of slot_of): a leaf is read in place or
// gathered, every other node is one kernel call over the block. A node for which
// direct_of(node) gives an address writes its (not splat) lanes there instead of its slot.
template <class DirectOf>
void evaluate_block(const Program& p, const cpu::KernelTable& k, const Dims& shape,
                    std::span<const Access> in, std::span<const Lane> scalar_lanes,
                    std::span<const int> slot_of, std::int64_t start, std::int64_t len, Lane* lanes,
                    cpu::Lanes* value, DirectOf&& direct_of) {
  const int n = static_cast<int>(p.nodes.size());
  for (int i = 0; i < n; ++i) {
    const Node& node = p.nodes[i];
    Lane* buf = lanes + static_cast<std::size_t>(slot_of[i]) * kBlock;
    switch (node.op) {
      case Op::input: {
        const Access& a = in[node.a];
        if (a.splat) {
          gather(a, shape, 0, 1, buf, k);
          value[i] = {buf, true};
        } else if (a.dense && lane_sized(a.dtype)) {
          value[i] = {a.base + start * sizeof(Lane), false};  // read in place
        } else {
          gather(a, shape, start, len, buf, k);
          value[i] = {buf, false};
        }
        continue;
      }
      case Op::scalar:
        value[i] = {&scalar_lanes[node.a], true};
        continue;
      case Op::index: {
        auto* idx = reinterpret_cast<std::int32_t*>(buf);
        for (std::int64_t j = 0; j < len; ++j) idx[j] = static_cast<std::int32_t>(start + j);
        value[i] = {buf, false};
        continue;
      }
      default:
        break;
    }
    const int ar = arity(node.op);
    const bool all_splat =
        value[node.a].splat && (ar < 2 || value[node.b].splat) && (ar < 3 || value[node.c].splat);
    const std::size_t count = all_splat ? 1 : static_cast<std::size_t>(len);
    Lane* direct = all_splat ? nullptr : direct_of(i);
    Lane* out = direct ? direct : buf;
    const DType t = compute_dtype(node.dtype);
    if (node.op == Op::cast) {
      // A half-type operand may hold an unrounded f32 value (an intermediate of a fused group),
      // so a cast first rounds it to that type: the value a stored result would have (an input
      // was loaded from such values: nothing to round). Then the computed dtypes convert, and a
      // half-type result is rounded: the value an explicit cast stores.
      const DType from = p.dtype(node.a);
      cpu::Lanes src = value[node.a];
      if (is_half(from) && p.nodes[node.a].op != Op::input) {
        round_lanes(k, from, static_cast<const float*>(src.p), reinterpret_cast<float*>(out),
                    count);
        src = {out, src.splat};
      }
      k.unary(node.op, compute_dtype(from), t, src, out, count);
      if (is_half(node.dtype))
        round_lanes(k, node.dtype, reinterpret_cast<const float*>(out),
                    reinterpret_cast<float*>(out), count);
    } else if (ar == 1) {
      k.unary(node.op, t, t, value[node.a], out, count);
    } else if (ar == 2) {
      k.binary(node.op, compute_dtype(p.dtype(node.a)), value[node.a], value[node.b], out, count);
    } else {
      k.where(t, value[node.a], value[node.b], value[node.c], out, count);
    }
    value[i] = {out, all_splat};
  }
}

}  // namespace

void evaluate_cpu(const Program& p, std::span<const TensorImpl* const> inputs,
                  std::span<const double> scalars, std::span<const TensorImpl* const> outputs,
                  const cpu::KernelTable& k) {
  if (inputs.size() != p.inputs.size() || scalars.size() != p.scalars.size() ||
      outputs.size() != p.outputs.size() || outputs.empty()) {
    throw InternalError("element-wise: program and call disagree on inputs, scalars or outputs");
  }
  const Dims& shape = outputs[0]->shape;
  const std::int64_t total = detail::numel(shape);
  if (total == 0) return;

  const JointLayout layout = coalesced(shape, inputs, outputs);
  std::vector<Access> in_access, out_access;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    in_access.push_back(access(*inputs[i], layout, i));
  for (std::size_t i = 0; i < outputs.size(); ++i)
    out_access.push_back(access(*outputs[i], layout, inputs.size() + i));

  std::vector<Lane> scalar_lanes(scalars.size());
  for (std::size_t i = 0; i < scalars.size(); ++i)
    scalar_lanes[i] = scalar_lane(scalars[i], p.scalars[i]);

  const int n = static_cast<int>(p.nodes.size());
  int n_slots = 0;
  const std::vector<int> slot_of = assign_slots(p, n_slots);
  // An output node written straight into its (dense, 32-bit) output tensor skips the scatter.
  std::vector<int> direct_output(n, -1);
  for (std::size_t o = 0; o < p.outputs.size(); ++o) {
    const Node& node = p.nodes[p.outputs[o]];
    if (out_access[o].dense && lane_sized(node.dtype) && arity(node.op) > 0 &&
        direct_output[p.outputs[o]] < 0) {
      direct_output[p.outputs[o]] = static_cast<int>(o);
    }
  }

  const std::int64_t n_blocks = (total + kBlock - 1) / kBlock;
  cpu::parallel_for(n_blocks, std::max<std::int64_t>(1, (1 << 16) / kBlock),
                    [&](std::int64_t b0, std::int64_t b1) {
                      std::vector<Lane> scratch(static_cast<std::size_t>(n_slots) * kBlock);
                      std::vector<cpu::Lanes> value(n);
                      for (std::int64_t blk = b0; blk < b1; ++blk) {
                        const std::int64_t start = blk * kBlock;
                        const std::int64_t len = std::min(kBlock, total - start);
                        evaluate_block(
                            p, k, layout.shape, in_access, scalar_lanes, slot_of, start, len,
                            scratch.data(), value.data(), [&](int i) -> Lane* {
                              if (direct_output[i] < 0) return nullptr;
                              return reinterpret_cast<Lane*>(out_access[direct_output[i]].base) +
                                     start;
                            });
                        for (std::size_t o = 0; o < p.outputs.size(); ++o) {
                          const int node = p.outputs[o];
                          if (direct_output[node] == static_cast<int>(o) && !value[node].splat)
                            continue;
                          scatter(out_access[o], layout.shape, start, len,
                                  static_cast<const Lane*>(value[node].p), value[node].splat, k);
                        }
                      }
                    });
}

struct RangeEvaluator::Impl {
  const Program& p;
  const cpu::KernelTable& k;
  JointLayout layout;
  std::vector<Access> in;
  std::vector<Lane> scalar_lanes;
  std::vector<int> slot_of;
  int n_slots = 0;
};

RangeEvaluator::RangeEvaluator(const Program& p, std::span<const TensorImpl* const> inputs,
                               std::span<const double> scalars, const Dims& shape,
                               const cpu::KernelTable& k) {
  if (inputs.size() != p.inputs.size() || scalars.size() != p.scalars.size() ||
      p.outputs.size() != 1) {
    throw InternalError(
        "element-wise: program and range call disagree on inputs, scalars or outputs");
  }
  auto impl = std::make_unique<Impl>(Impl{p, k, coalesced(shape, inputs, {}), {}, {}, {}, 0});
  for (std::size_t i = 0; i < inputs.size(); ++i)
    impl->in.push_back(access(*inputs[i], impl->layout, i));
  for (std::size_t i = 0; i < scalars.size(); ++i)
    impl->scalar_lanes.push_back(scalar_lane(scalars[i], p.scalars[i]));
  impl->slot_of = assign_slots(p, impl->n_slots);
  impl_ = std::move(impl);
}

RangeEvaluator::~RangeEvaluator() = default;

RangeEvaluator::Scratch RangeEvaluator::scratch() const {
  return {std::vector<Lane>(static_cast<std::size_t>(impl_->n_slots) * kBlock),
          std::vector<cpu::Lanes>(impl_->p.nodes.size())};
}

void RangeEvaluator::run(std::int64_t start, std::int64_t len, void* dst, Scratch& sc) const {
  const Impl& m = *impl_;
  const Program& p = m.p;
  const int result = p.outputs[0];
  const DType out_t = p.dtype(result);
  for (std::int64_t done = 0; done < len; done += kBlock) {
    const std::int64_t first = start + done, count = std::min(kBlock, len - done);
    // A computed 32-bit result goes straight to dst; bool and leaves are copied after.
    Lane* direct = out_t == DType::boolean ? nullptr : static_cast<Lane*>(dst) + done;
    evaluate_block(p, m.k, m.layout.shape, m.in, m.scalar_lanes, m.slot_of, first, count,
                   sc.lanes.data(), sc.value.data(),
                   [&](int i) { return i == result ? direct : nullptr; });
    const cpu::Lanes r = sc.value[result];
    const auto* src = static_cast<const Lane*>(r.p);
    if (out_t == DType::boolean) {
      auto* d = static_cast<std::uint8_t*>(dst) + done;
      for (std::int64_t j = 0; j < count; ++j) d[j] = src[r.splat ? 0 : j] != 0;
    } else if (r.splat) {
      std::fill(direct, direct + count, src[0]);
    } else if (src != direct) {
      std::memcpy(direct, src, static_cast<std::size_t>(count) * sizeof(Lane));
    }
  }
}

}  // namespace kiln::ir
