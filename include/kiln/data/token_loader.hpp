// Batches of next-token training pairs from a token file as nanoGPT's train.bin: a flat array of
// uint16 little-endian token ids, memory-mapped (never read whole). The file is cut into
// windows of block_size + 1 tokens starting every block_size tokens; each epoch visits every
// window once in an order shuffled from (seed, epoch), so one seed gives one sequence of batches
// on every machine. x is a window's first block_size tokens, y the same shifted by one.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::data {

struct TokenBatch {
  Tensor<2> x, y;  // [batch_size, block_size] i32
};

class TokenLoader {
 public:
  // ValueError when the file cannot be opened or mapped, its size is odd, or it holds fewer than
  // block_size + 1 tokens; batch_size and block_size must be positive.
  TokenLoader(const std::filesystem::path& path, std::int64_t batch_size, std::int64_t block_size,
              std::uint64_t seed, Device device = Device::cpu());
  ~TokenLoader();
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  // The next batch; an epoch that runs out mid-batch continues in the next epoch's order.
  TokenBatch next();

  std::int64_t tokens() const { return count_; }
  std::int64_t windows() const { return static_cast<std::int64_t>(order_.size()); }
  std::int64_t epoch() const { return epoch_; }

 private:
  void shuffle();

  const std::uint8_t* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::int64_t count_ = 0, batch_, block_;
  std::uint64_t seed_;
  Device device_;
  std::vector<std::int64_t> order_;
  std::size_t cursor_ = 0;
  std::int64_t epoch_ = 0;
};

}  // namespace kiln::data
