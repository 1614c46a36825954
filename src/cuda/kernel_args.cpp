#include "cuda/kernel_args.hpp"

namespace kiln::cuda {

void KernelArgs::clear() {
  words_.clear();
  starts_.clear();
}

std::size_t KernelArgs::start(std::size_t words) {
  starts_.push_back(words_.size());
  words_.resize(words_.size() + words, 0);
  return starts_.size() - 1;
}

void KernelArgs::set_pointer(std::size_t index, const void* p) {
  std::memcpy(&words_[starts_[index]], &p, sizeof p);
}

void KernelArgs::scalars(std::span<const DType> types, std::span<const double> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (compute_dtype(types[i]) == DType::f32)  // (a half-type scalar is passed as f32)
      value(static_cast<float>(values[i]));
    else
      value(types[i] == DType::boolean ? int{values[i] != 0} : static_cast<int>(values[i]));
  }
}

void KernelArgs::int64_struct(std::span<const long long> fields) {
  const std::size_t i = start(fields.size());
  if (!fields.empty()) std::memcpy(words_.data() + starts_[i], fields.data(), fields.size_bytes());
}

void** KernelArgs::pointers() {
  // Taken only now: words_ may have moved while arguments were added.
  pointers_.resize(starts_.size());
  for (std::size_t i = 0; i < starts_.size(); ++i) pointers_[i] = words_.data() + starts_[i];
  return pointers_.data();
}

}  // namespace kiln::cuda
