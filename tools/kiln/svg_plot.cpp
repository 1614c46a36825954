#include "svg_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace kiln::cli {
namespace {

// Tableau 10: distinct on screen and in grey-scale print; the first series (the reference) grey.
constexpr const char* kColors[] = {"#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"};
constexpr std::size_t kColorCount = sizeof kColors / sizeof kColors[0];

constexpr double kBarWidth = 16;
constexpr double kGroupGap = 28;
constexpr double kPlotHeight = 360;
constexpr double kLeft = 80;          // the y axis' labels
constexpr double kLegendWidth = 170;  // right of the plot
constexpr double kLineHeight = 16;
// A falling bar's ratio is written below the bar's end, rotated ("0.60x" at font size 9): the
// axis reaches this far below the lowest bar, so that the label ends above the group labels.
constexpr double kFallingLabel = 34;

bool has_bar(double v) { return std::isfinite(v) && v > 0; }

// "0.25x", "1x", "16x": a power of two as a ratio.
std::string power_label(int k) { return fmt::format("{}x", std::ldexp(1.0, k)); }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out(1);
  for (const char c : s) {
    if (c == '\n') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_bar_chart(const BarChart& chart) {
  const std::size_t n_groups = chart.groups.size();
  const std::size_t n_series = chart.series.size();

  // The axis: whole powers of two around every value and 1x, at least 0.5x to 2x.
  double lo = 0, hi = 0;  // log2
  for (const auto& row : chart.values) {
    for (const double v : row) {
      if (!has_bar(v)) continue;
      lo = std::min(lo, std::log2(v));
      hi = std::max(hi, std::log2(v));
    }
  }
  std::size_t group_label_lines = 1;
  for (const std::string& g : chart.groups) {
    group_label_lines = std::max(group_label_lines, lines_of(g).size());
  }
  const double top = 30 + kLineHeight * static_cast<double>(chart.subtitle.size() + 1);
  const double group_width = kBarWidth * static_cast<double>(n_series) + kGroupGap;
  const double plot_width = std::max(200.0, group_width * static_cast<double>(n_groups));
  const double legend_height = 20 * static_cast<double>(n_series) + 10;
  const double bottom = top + std::max(kPlotHeight, legend_height);

  int k_lo = std::min(-1, static_cast<int>(std::floor(lo)));
  const int k_hi = std::max(1, static_cast<int>(std::ceil(hi)));
  while (lo < 0 && (lo - k_lo) / (k_hi - k_lo) * (bottom - top) < kFallingLabel) --k_lo;
  const int step = (k_hi - k_lo) > 12 ? 2 : 1;
  const double width = kLeft + plot_width + kLegendWidth;
  const double height = bottom + 20 + kLineHeight * static_cast<double>(group_label_lines);
  auto y_of = [&](double log2_value) {
    return bottom - (log2_value - k_lo) / (k_hi - k_lo) * (bottom - top);
  };

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect class=\"background\" x=\"0\" y=\"0\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "fill=\"white\"/>\n",
      width, height);
  svg +=
      fmt::format("<text x=\"{:.1f}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                  kLeft, xml_escape(chart.title));
  for (std::size_t i = 0; i < chart.subtitle.size(); ++i) {
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#444\">{}</text>\n", kLeft,
                    22 + kLineHeight * static_cast<double>(i + 1), xml_escape(chart.subtitle[i]));
  }

  // Grid lines and their labels; 1x, the reference, darker.
  for (int k = k_lo; k <= k_hi; k += step) {
    const double y = y_of(k);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"{}\"/>\n"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, y, kLeft + plot_width, y, k == 0 ? "#000" : "#ddd", k == 0 ? 1.5 : 1, kLeft - 6,
        y + 4, power_label(k));
  }
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>\n",
      kLeft, top, bottom);
  const double mid = (top + bottom) / 2;
  svg += fmt::format(
      "<text x=\"18\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1f})\">{}"
      "</text>\n",
      mid, mid, xml_escape(chart.y_label));

  // The bars, group by group, each from the 1x line to its value, its ratio written beyond it.
  const double y_one = y_of(0);
  for (std::size_t g = 0; g < n_groups; ++g) {
    const double x0 = kLeft + kGroupGap / 2 + group_width * static_cast<double>(g);
    for (std::size_t s = 0; s < n_series; ++s) {
      const double v =
          g < chart.values.size() && s < chart.values[g].size() ? chart.values[g][s] : std::nan("");
      if (!has_bar(v)) continue;
      const double y_v = y_of(std::log2(v));
      const double y = std::min(y_v, y_one);
      const double h = std::max(1.0, std::abs(y_v - y_one));  // 1x still shows, as a line
      const double x = x0 + kBarWidth * static_cast<double>(s);
      const std::string tip = g < chart.tooltips.size() && s < chart.tooltips[g].size()
                                  ? chart.tooltips[g][s]
                                  : std::string();
      svg += fmt::format(
          "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\">{}</rect>\n",
          x, y, kBarWidth - 2, h, kColors[s % kColorCount],
          tip.empty() ? "" : fmt::format("<title>{}</title>", xml_escape(tip)));
      // Above a bar that rises, below one that falls, rotated to fit the bar's width.
      const bool up = v >= 1;
      const double ty = up ? y - 3 : y + h + 3;
      const double tx = x + (kBarWidth - 2) / 2 + 3;
      svg += fmt::format(
          "<text x=\"{0:.1f}\" y=\"{1:.1f}\" font-size=\"9\" text-anchor=\"{2}\" "
          "transform=\"rotate(-90 {0:.1f} {1:.1f})\">{3:.2f}x</text>\n",
          tx, ty, up ? "start" : "end", v);
    }
    const std::vector<std::string> label = lines_of(chart.groups[g]);
    const double cx = x0 + kBarWidth * static_cast<double>(n_series) / 2;
    for (std::size_t i = 0; i < label.size(); ++i) {
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", cx,
                         bottom + 16 + kLineHeight * static_cast<double>(i), xml_escape(label[i]));
    }
  }

  // The legend, right of the plot.
  const double lx = kLeft + plot_width + 20;
  for (std::size_t s = 0; s < n_series; ++s) {
    const double ly = top + 20 * static_cast<double>(s);
    svg += fmt::format(
        "<rect class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" "
        "fill=\"{}\"/>\n<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        lx, ly, kColors[s % kColorCount], lx + 18, ly + 10, xml_escape(chart.series[s]));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kiln::cli
