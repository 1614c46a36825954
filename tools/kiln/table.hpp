// Plain-text tables for the `kiln` command's listings (`kiln info`, `kiln tune --list`).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kiln::cli {

// Prints rows as left-aligned columns two spaces apart, each as wide as its widest cell.
inline void print_table(const std::vector<std::vector<std::string>>& rows, const char* indent) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (std::size_t c = 0; c < row.size(); ++c) {
      // The last cell is not padded, so lines carry no trailing blanks.
      line += c + 1 == row.size() ? row[c] : fmt::format("{:<{}}  ", row[c], width[c]);
    }
    fmt::print("{}\n", line);
  }
}

}  // namespace kiln::cli
