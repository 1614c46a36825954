// TokenLoader (kiln/data/token_loader.hpp): a read-only mapping of the file, a per-epoch
// Fisher-Yates shuffle of window starts driven by SplitMix64 (specified here, unlike std::shuffle
// and the standard distributions, so the order is the same with every standard library).
#include "kiln/data/token_loader.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kiln/error.hpp"

namespace kiln::data {
namespace {

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

TokenLoader::TokenLoader(const std::filesystem::path& path, std::int64_t batch_size,
                         std::int64_t block_size, std::uint64_t seed, Device device)
    : batch_(batch_size), block_(block_size), seed_(seed), device_(device) {
  if (batch_size <= 0 || block_size <= 0)
    throw ValueError(
        fmt::format("TokenLoader: batch_size and block_size must be positive, got "
                    "{} and {}",
                    batch_size, block_size));
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    throw ValueError(
        fmt::format("TokenLoader: cannot open {}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw ValueError(fmt::format("TokenLoader: cannot stat {}", path.string()));
  }
  bytes_ = static_cast<std::size_t>(st.st_size);
  count_ = static_cast<std::int64_t>(bytes_ / 2);
  if (bytes_ % 2 != 0 || count_ < block_size + 1) {
    ::close(fd);
    throw ValueError(
        fmt::format("TokenLoader: {} has {} bytes: needs an even size (uint16 "
                    "tokens) of at least block_size + 1 = {} tokens",
                    path.string(), bytes_, block_size + 1));
  }
  void* map = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    throw ValueError(
        fmt::format("TokenLoader: cannot map {}: {}", path.string(), std::strerror(errno)));
  data_ = static_cast<const std::uint8_t*>(map);
  for (std::int64_t start = 0; start + block_ + 1 <= count_; start += block_)
    order_.push_back(start);
  shuffle();
}

TokenLoader::~TokenLoader() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), bytes_);
}

void TokenLoader::shuffle() {
  std::sort(order_.begin(), order_.end());
  std::uint64_t state = seed_ ^ (0x632be59bd9b4e019ULL * static_cast<std::uint64_t>(epoch_ + 1));
  for (std::size_t i = order_.size(); i > 1; --i)
    std::swap(order_[i - 1], order_[splitmix(state) % i]);
  cursor_ = 0;
}

TokenBatch TokenLoader::next() {
  std::vector<std::int32_t> x(static_cast<std::size_t>(batch_ * block_)), y(x.size());
  for (std::int64_t b = 0; b < batch_; ++b) {
    if (cursor_ == order_.size()) {
      ++epoch_;
      shuffle();
    }
    const std::int64_t start = order_[cursor_++];
    for (std::int64_t t = 0; t <= block_; ++t) {
      const std::uint8_t* p = data_ + 2 * (start + t);
      const auto token = static_cast<std::int32_t>(p[0] | (p[1] << 8));  // little-endian
      if (t < block_) x[static_cast<std::size_t>(b * block_ + t)] = token;
      if (t > 0) y[static_cast<std::size_t>(b * block_ + t - 1)] = token;
    }
  }
  return {Tensor<2>::from_data(x, {batch_, block_}, device_),
          Tensor<2>::from_data(y, {batch_, block_}, device_)};
}

}  // namespace kiln::data
