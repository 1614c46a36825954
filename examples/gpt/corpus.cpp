// Corpus (corpus.hpp): the file read whole, windows copied into i32 host buffers and uploaded.
#include "corpus.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

Corpus::Corpus(const std::string& path, std::int64_t block) : block_(block) {
  // stdio rather than a stream: its errno names the cause ("Is a directory") in plain words.
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             std::fclose);
  if (!file) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::uint8_t chunk[1 << 16];
  while (const std::size_t n = std::fread(chunk, 1, sizeof chunk, file.get()))
    bytes_.insert(bytes_.end(), chunk, chunk + n);
  if (std::ferror(file.get()))
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  split_ = bytes_.size() - bytes_.size() / 10;
  const auto need = static_cast<std::size_t>(block + 1);
  if (split_ < need || val_bytes() < need)
    throw std::runtime_error(path + " has " + std::to_string(bytes_.size()) +
                             " bytes; a window of " + std::to_string(need) +
                             " in both its first 90% and its last 10% needs at least " +
                             std::to_string(10 * need));
}

Windows Corpus::gather(const std::vector<std::size_t>& starts, kiln::Device device) const {
  const auto n = static_cast<std::int64_t>(starts.size());
  std::vector<std::int32_t> x, y;
  x.reserve(starts.size() * block_);
  y.reserve(starts.size() * block_);
  for (const std::size_t s : starts)
    for (std::int64_t t = 0; t < block_; ++t) {
      x.push_back(bytes_[s + t]);
      y.push_back(bytes_[s + t + 1]);
    }
  return {kiln::Tensor<2>::from_data(x, {n, block_}, device),
          kiln::Tensor<2>::from_data(y, {n, block_}, device)};
}

Windows Corpus::train_batch(std::int64_t batch, SplitMix64& rng, kiln::Device device) const {
  // A window reads block + 1 bytes, all before split_: the targets never see validation bytes.
  const std::size_t offsets = split_ - block_;
  std::vector<std::size_t> starts(batch);
  for (auto& s : starts) s = rng.below(offsets);
  return gather(starts, device);
}

Windows Corpus::validation(kiln::Device device) const {
  std::vector<std::size_t> starts;
  for (std::size_t s = split_; s + block_ + 1 <= bytes_.size(); s += block_) starts.push_back(s);
  return gather(starts, device);
}
