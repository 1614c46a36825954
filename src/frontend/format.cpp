// kiln::format: a tensor as text, laid out as PyTorch's torch/_tensor_str.py lays it out (its
// default print options: 1000 elements before eliding, 3 edge items, 4 decimals, 80 columns).
#include "kiln/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/tensor_impl.hpp"

namespace kiln::detail {
namespace {

constexpr std::int64_t kThreshold = 1000;  // more elements than this are elided
constexpr std::int64_t kEdge = 3;          // entries kept at each end of an elided dim
constexpr std::size_t kLineWidth = 80;

// The part of t that is printed: t itself, or, when t is elided, t with every dim longer than
// 2 * kEdge cut to its first and last kEdge entries (cut[d] says which), so that only those are
// read back. The longest dims are cut first: each cat then copies the least.
Handle printed_part(const Handle& t, std::vector<bool>& cut) {
  const int rank = t->rank();
  cut.assign(rank, false);
  if (t->numel() <= kThreshold) return t;
  std::vector<int> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return t->shape[a] > t->shape[b]; });
  Handle part = t;
  for (int d : order) {
    const std::int64_t n = t->shape[d];
    if (n <= 2 * kEdge) break;
    const Handle ends[] = {slice(part, d, 0, kEdge, 1), slice(part, d, n - kEdge, n, 1)};
    part = cat(ends, d);
    cut[d] = true;
  }
  return part;
}

template <class T>
std::vector<T> read_all(const Handle& t, DType as) {
  std::vector<T> v(static_cast<std::size_t>(t->numel()));
  read(t, v.data(), as);
  return v;
}

// Floating values as PyTorch prints them: fixed with 4 decimals, or scientific when the nonzero
// finite magnitudes span more than 1000x, or go above 1e8 or below 1e-4.
std::vector<std::string> float_cells(const std::vector<float>& v) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (float x : v) {
    if (!std::isfinite(x) || x == 0) continue;
    lo = std::min(lo, std::abs(double{x}));
    hi = std::max(hi, std::abs(double{x}));
  }
  const bool sci = hi > 0 && (hi / lo > 1000.0 || hi > 1e8 || lo < 1e-4);
  std::vector<std::string> cells;
  cells.reserve(v.size());
  for (float x : v)
    cells.push_back(sci ? fmt::format("{:.4e}", double{x}) : fmt::format("{:.4f}", double{x}));
  return cells;
}

// Every printed element as text, right-aligned to the widest.
std::vector<std::string> cells_of(const Handle& part) {
  std::vector<std::string> cells;
  switch (part->dtype) {
    case DType::f32:
    case DType::bf16:  // read back as f32, which holds every half value exactly
    case DType::f16:
      cells = float_cells(read_all<float>(part, DType::f32));
      break;
    case DType::i32:
      for (std::int32_t x : read_all<std::int32_t>(part, DType::i32))
        cells.push_back(std::to_string(x));
      break;
    case DType::boolean:
      for (std::uint8_t x : read_all<std::uint8_t>(part, DType::boolean))
        cells.push_back(x ? "true" : "false");
      break;
  }
  std::size_t width = 0;
  for (const auto& c : cells) width = std::max(width, c.size());
  for (auto& c : cells) c.insert(0, width - c.size(), ' ');
  return cells;
}

// Nested brackets over the printed part: rows of the last dim wrapped at kLineWidth, a blank
// line between blocks per dim above the last two, `...` where a dim was cut.
class Layout {
 public:
  Layout(const Dims& shape, const std::vector<bool>& cut, const std::vector<std::string>& cells)
      : shape_(shape), cut_(cut), cells_(cells), strides_(contiguous_strides(shape)) {}

  std::string text(std::size_t indent) {
    if (shape_.empty()) return cells_.at(0);
    block(0, 0, indent);
    return std::move(out_);
  }

 private:
  void block(std::size_t dim, std::int64_t offset, std::size_t indent) {
    const bool last = dim + 1 == shape_.size();
    const std::size_t per_line =
        last ? std::max<std::size_t>(
                   1, (kLineWidth - std::min(indent, kLineWidth)) / (cells_.at(0).size() + 2))
             : 1;
    std::string gap(1, ',');
    gap.append(last ? 1 : shape_.size() - dim - 1, '\n').append(indent + 1, ' ');
    out_ += '[';
    std::size_t on_line = 0;
    auto separate = [&] {
      if (on_line == 0) return;
      out_ += on_line % per_line != 0 ? std::string(", ") : gap;
    };
    for (std::int64_t i = 0; i < shape_[dim]; ++i) {
      if (cut_[dim] && i == kEdge) {
        separate();
        out_ += last ? " ..." : "...";
        ++on_line;
      }
      separate();
      if (last)
        out_ += cells_[offset + i * strides_[dim]];
      else
        block(dim + 1, offset + i * strides_[dim], indent + 1);
      ++on_line;
    }
    out_ += ']';
  }

  const Dims& shape_;
  const std::vector<bool>& cut_;
  const std::vector<std::string>& cells_;
  Dims strides_;
  std::string out_;
};

}  // namespace

std::string format_tensor(const Handle& t) {
  const std::string head = "tensor(";
  std::string body = "[]";
  if (t->numel() > 0) {
    std::vector<bool> cut;
    const Handle part = printed_part(t, cut);
    body = Layout(part->shape, cut, cells_of(part)).text(head.size());
  }
  return fmt::format("{}{}, shape={}, dtype={}, device={})", head, body, format_dims(t->shape),
                     dtype_name(t->dtype), t->device.str());
}

}  // namespace kiln::detail
