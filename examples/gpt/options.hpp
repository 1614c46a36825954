// The command line of the gpt example: `--name value` pairs, each checked for its type and range
// so that a bad one is a message naming it (and main's exit status 2), never a crash.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "corpus.hpp"
#include "sample.hpp"

struct Options {
  std::string device;  // "cpu", "cuda"; empty: the fastest present (kiln::Device::best())
  std::int64_t steps = 2000, batch = 32, log_every = 100;
  double lr = 4e-3;
  std::uint64_t seed = 0;
  double max_val_loss = std::log(256.0);  // the loss of a uniform guess: by default, beat that
  std::string text = kDefaultText;
  std::string prompt = "The GNU General Public License";
  SampleOptions sample;
  bool help = false;
};

// What a bad option throws; main prints it with the usage line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline const char* kUsage =
    "usage: gpt [--device cpu|cuda] [--steps 2000] [--batch 32] [--lr 4e-3] [--log-every 100]\n"
    "           [--seed 0] [--max-val-loss 5.545] [--text /usr/share/common-licenses/GPL-3]\n"
    "           [--prompt TEXT] [--temperature 0.8] [--top-k 20] [--sample-bytes 200]\n";

// Throws UsageError for an unknown option, a missing value, or a value that does not parse or is
// out of range.
Options parse_options(int argc, char** argv);
