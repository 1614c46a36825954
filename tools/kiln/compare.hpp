// `kiln bench --compare`: the seed's experiment in one command. The bench workloads run under
// each configuration (default; each performance feature switched off alone through its
// environment variable; all of them off), each run a fresh `kiln bench --one-process` so that
// first calls pay what they really pay, the configurations alternated over several rounds
// because the machine is noisy, all on one temporary store primed by a default process first.
// Prints a table (rows: workload x device; columns: configurations; each cell the minimum over
// the rounds and its ratio to default), or one JSON object, and can draw the table as an SVG
// bar chart (svg_plot.hpp).
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

struct CompareOptions {
  std::string device = "all";  // "cpu", "cuda" or "all" (every present device)
  int runs = 20;               // timed calls after the first, in each process
  int rounds = 3;              // each round runs every configuration once, in order
  bool json = false;           // one JSON object on stdout instead of the table
  std::string plot;            // an SVG file to write the chart to; empty: none
  // Configuration names (compare_configurations()) to run; empty: every one. default always
  // runs: the ratios are to it.
  std::vector<std::string> configs;
  bool train = false;  // the training steps (kiln bench --train) instead of the seed's workloads
};

// Every configuration's name, in the order they run: "default", "fusion off", ..., "all off".
std::vector<std::string> compare_configurations();

// Runs the comparison and prints it. Returns the exit status: 0, or that of the first process
// that failed (which printed its error; 1 when one was killed). Throws kiln::ValueError for a
// bad configuration name or an unwritable plot file, kiln::DeviceError for an absent device.
int run_compare(const CompareOptions& options);

}  // namespace kiln::cli
