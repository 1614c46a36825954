// A grouped bar chart of ratios as standalone SVG text, for `kiln bench --compare --plot`: one
// group per row of the comparison, one bar per configuration, bar height the ratio to a reference
// on a log2 axis (so that 2x slower and 2x faster are the same height either side of 1x).
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

struct BarChart {
  std::string title;
  std::vector<std::string> subtitle;  // lines under the title (devices, date, ...)
  std::string y_label;
  // Each group's label, "\n" between its lines ("first matmul\ncpu").
  std::vector<std::string> groups;
  std::vector<std::string> series;  // one bar in every group per series, and a legend entry
  // values[g][s]: group g's bar for series s, a positive ratio; NaN or <= 0: no bar.
  std::vector<std::vector<double>> values;
  // tooltips[g][s]: the bar's <title> (shown on hover); may be empty.
  std::vector<std::vector<std::string>> tooltips;
};

// The chart as an SVG document. Each bar is one <rect class="bar">, drawn from the 1x line to its
// value; each legend swatch a <rect class="legend">. Text is escaped for XML.
std::string svg_bar_chart(const BarChart& chart);

// `s` with &, <, >, " and ' as XML entities.
std::string xml_escape(const std::string& s);

}  // namespace kiln::cli
