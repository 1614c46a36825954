// The training text as bytes (token = byte, vocabulary 256), split into a training part and a
// held-out validation part (the last tenth), and the next-byte windows cut from each.
#pragma once

#include <cstdint>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#include "rng.hpp"

// A real text every Debian system has (package base-files), so nothing is downloaded.
inline const char* kDefaultText = "/usr/share/common-licenses/GPL-3";

struct Windows {
  kiln::Tensor<2> x, y;  // [n, block] i32; y is x shifted by one byte
};

class Corpus {
 public:
  // Reads the whole file. Throws std::runtime_error naming the file when it cannot be read or is
  // too short for a window of block + 1 bytes in both parts.
  Corpus(const std::string& path, std::int64_t block);

  std::size_t train_bytes() const { return split_; }
  std::size_t val_bytes() const { return bytes_.size() - split_; }

  // `batch` windows of the training part at offsets drawn from `rng`: any offset, not only
  // multiples of the block, so a 32 KB text gives ~32,000 distinct windows rather than ~500.
  Windows train_batch(std::int64_t batch, SplitMix64& rng, kiln::Device device) const;
  // Every non-overlapping window of the validation part, the same on every call, so successive
  // validation losses are comparable.
  Windows validation(kiln::Device device) const;

 private:
  Windows gather(const std::vector<std::size_t>& starts, kiln::Device device) const;

  std::vector<std::uint8_t> bytes_;
  std::size_t split_;  // bytes_[0, split_) trains, bytes_[split_, end) validates
  std::int64_t block_;
};
