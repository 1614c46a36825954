// The `kiln` command: `kiln bench`, `kiln info`, `kiln --version`.
//
// Exit status: 0 on success; 2 for an error kiln raised (a kiln::Error, printed as
// "kiln: <message>"); 3 when a benchmark's result failed its check; 1 for anything unexpected;
// CLI11's own codes for a bad command line.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench.hpp"
#include "kiln/kiln.hpp"

namespace {

// Prints rows as left-aligned columns two spaces apart, each as wide as its widest cell.
void print_table(const std::vector<std::vector<std::string>>& rows, const char* indent) {
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

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void run_info() {
  fmt::print("kiln {}\n\ndevices:\n", kiln::version());
  std::vector<std::vector<std::string>> rows{{"name", "present", "backend / why absent"}};
  for (const kiln::DeviceInfo& d : kiln::devices()) {
    rows.push_back({d.name, yes_no(d.present), d.present ? d.backend_name : d.reason});
  }
  print_table(rows, "  ");

  fmt::print("\nfeatures:\n");
  rows = {{"name", "compiled", "live", "why"}};
  for (const kiln::FeatureState& f : kiln::features()) {
    rows.push_back({f.name, yes_no(f.compiled), yes_no(f.live), f.why});
  }
  print_table(rows, "  ");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: a C++ tensor library whose performance features you can see"};
  // A callback, so that the library is asked for its version only when --version is given.
  app.set_version_flag("--version", [] { return "kiln " + kiln::version(); });
  app.require_subcommand(1);

  kiln::cli::BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "Time the seed workloads (chain8 2048x2048, matmul 1024x1024, f32) on each device");
  bench_cmd->add_option("--device", bench.device, "cpu, cuda, or all present devices")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}))
      ->capture_default_str();
  bench_cmd->add_option("--runs", bench.runs, "Timed calls after the first")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  bench_cmd->add_flag("--json", bench.json, "Print one JSON object instead of text lines");

  CLI::App* info_cmd =
      app.add_subcommand("info", "Print kiln's version, the devices and the features");

  CLI11_PARSE(app, argc, argv);

  try {
    if (*bench_cmd) kiln::cli::run_bench(bench);
    if (*info_cmd) run_info();
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: {}\n", e.what());
    return 2;
  } catch (const kiln::cli::CheckError& e) {
    fmt::print(stderr, "kiln: bench: wrong result, timings discarded: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {  // a bug or the system (out of memory), not the user
    fmt::print(stderr, "kiln: unexpected error: {}\n", e.what());
    return 1;
  }
  return 0;
}
