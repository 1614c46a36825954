// How the tuner times and checks a CUDA matmul candidate (src/tune/tuner.hpp's Bench).
//
// Timing: before each run the L2 cache is overwritten (a memset of twice its size on the same
// stream), so no candidate finds the operands that the one before it left in L2; the run is
// bracketed by CUDA events on the device's stream.
// Checking: every element of a candidate's output against the first valid candidate's, within
// twice the sum of both products' error bounds. The bound of element (i, j) uses
// max_k |a_ik| * sum_k |b_kj| >= sum_k |a_ik b_kj| (computed on the host at the first check), times
//   Precision::highest: 2k * 2^-24   (each fp32 dot product is within k * 2^-24 of exact);
//   Precision::high:    2 * (2^-10 + k * 2^-24)   (TF32 rounds each operand to 10 bits);
//   Precision::medium:  2 * (2^-7 + k * 2^-24)    (bf16 tensor cores: 7 bits);
// and for bf16 or f16 outputs (products exact in fp32, strict's bound) plus one rounding of
// each output to the half type.
// Both doubled, so a correct candidate never fails it, while a wrong tile or index misses it by
// orders of magnitude. The operands are downloaded as the device memory their views cover and
// read through their strides on the host (no copy kernel, which might have to be compiled).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/tensor_impl.hpp"
#include "cuda/context.hpp"
#include "kiln/config.hpp"
#include "tune/tuner.hpp"

namespace kiln::cuda {

class MatmulBench final : public tune::Bench {
 public:
  // out[B, m, n] = a[B, m, k] @ b[B, k, n], the tensors the candidates read and write.
  MatmulBench(Context& ctx, const detail::TensorImpl& a, const detail::TensorImpl& b,
              const detail::TensorImpl& out, Precision precision);
  ~MatmulBench() override;
  MatmulBench(const MatmulBench&) = delete;
  MatmulBench& operator=(const MatmulBench&) = delete;

  double time(const tune::Candidate& c) override;
  void keep_reference() override;
  bool agrees(std::string& why) override;
  double agrees_estimate() const override;

 private:
  std::vector<float> download(const void* from, std::size_t n) const;
  std::vector<float> download_out() const;
  void compute_bounds();

  Context& ctx_;
  const detail::TensorImpl &a_, &b_, &out_;
  Precision precision_;
  std::shared_ptr<detail::Buffer> flush_;  // twice the L2 size
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  // The reference candidate's output: a copy on the device until the first check downloads it.
  std::shared_ptr<detail::Buffer> reference_on_device_;
  std::vector<float> reference_;
  double seconds_per_byte_ = 0;  // of a sample download, host clock
  // Made at the first agrees(): gamma * max_k |a_ik| per (batch of a, row) and sum_k |b_kj| per
  // (batch of b, column); element (p, i, j)'s bound is their product.
  std::vector<double> row_max_, col_sum_;
};

}  // namespace kiln::cuda
