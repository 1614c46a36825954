// The bar chart of `kiln bench --compare --plot` (tools/kiln/svg_plot.cpp) as a unit: a bar that
// falls below 1x has its ratio written below it, and the axis leaves room for that label above
// the group labels, however low the bar.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../tools/kiln/svg_plot.hpp"

namespace {

// The number after `attribute="` in the first element of svg that contains `marker`.
double attribute_near(const std::string& svg, const char* marker, const char* attribute) {
  const std::size_t at = svg.find(marker);
  EXPECT_NE(at, std::string::npos) << marker;
  std::string needle(attribute);
  needle.append("=\"");
  const std::size_t a = svg.find(needle, svg.rfind('<', at));
  return std::strtod(svg.c_str() + a + needle.size(), nullptr);
}

TEST(SvgPlot, AFallingBarsLabelEndsAboveTheGroupLabels) {
  for (const double low : {0.93, 0.6, 0.51, 0.26, 0.01}) {
    SCOPED_TRACE(low);
    const kiln::cli::BarChart chart{"a title",
                                    {"a subtitle"},
                                    "time over default",
                                    {"first group", "second group"},
                                    {"default", "feature off"},
                                    {{1.0, 300.0}, {1.0, low}},
                                    {}};
    const std::string svg = kiln::cli::svg_bar_chart(chart);
    char label[32];
    std::snprintf(label, sizeof label, ">%.2fx</text>", low);
    // The label starts just below the bar's end and runs down (rotated, anchored at its end).
    const double label_top = attribute_near(svg, label, "y");
    // The group labels sit 16 px under the plot's bottom; the lowest grid line is the bottom.
    const double group_label_y = attribute_near(svg, ">second group</text>", "y");
    EXPECT_GE(group_label_y - 16 - label_top, 30) << svg;
  }
}

}  // namespace
