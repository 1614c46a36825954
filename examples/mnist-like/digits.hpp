// scikit-learn's digits dataset as Debian's python3-sklearn ships it: digits.csv.gz, one line per
// sample of 64 pixel values (0 to 16) and the label (0 to 9), read directly with zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct Digits {
  std::vector<float> pixels;         // samples x 64, scaled to [0, 1]
  std::vector<std::int32_t> labels;  // samples
  std::size_t size() const { return labels.size(); }
};

// Where python3-sklearn puts the file.
inline const char* kDigitsPath =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

// Throws std::runtime_error naming the file and the line when it cannot be read or parsed.
Digits load_digits(const std::string& path);
