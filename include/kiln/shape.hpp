// Shapes: the front end's static-rank extents and the dynamic-rank form the backends see.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Extents of a tensor of rank D.
template <std::size_t D>
using Shape = std::array<std::int64_t, D>;

// Extents of any rank, as the backends and the dynamic-rank layer carry them.
using Dims = std::vector<std::int64_t>;

// "[2, 3]"
std::string format_dims(const Dims& d);

}  // namespace kiln
