#include "cuda/index_source.hpp"

#include <fmt/format.h>

#include "embed/cuda/kernels/index.cuh.hpp"
#include "ir/cuda_codegen.hpp"

namespace kiln::cuda {
namespace {

// The unsigned type of an element (or vector) size: copies move bits, whatever the dtype.
const char* bits_type(std::size_t size) {
  switch (size) {
    case 1:
      return "unsigned char";
    case 2:
      return "unsigned short";
    case 4:
      return "unsigned";
    default:
      return "uint4";
  }
}

constexpr DType kAccumulated[] = {DType::f32, DType::i32, DType::bf16, DType::f16};
constexpr const char* kStages[] = {"init",  "finish",       "atomic",
                                   "owner", "segment_rows", "segment_rows_vec"};
constexpr const char* kGeometry = "long long O, long long N, long long K, long long I";

std::string entry_points() {
  std::string s;
  for (std::size_t size : {1, 2, 4}) {
    s += fmt::format(
        "extern \"C\" __global__ void {0}(const {1}* x, const int* idx, {1}* out, {2}, "
        "int per_row, int op, ki::ErrorWord* err) {{\n  ki::gather(x, idx, out, O, N, K, I, "
        "per_row, op, err);\n}}\n",
        index_gather_name(size), bits_type(size), kGeometry);
  }
  for (std::size_t size : {1, 2, 4, 16}) {
    s += fmt::format(
        "extern \"C\" __global__ void {0}(const {1}* x, const int* idx, {1}* out, long long O, "
        "long long N, long long K, long long W, int op, ki::ErrorWord* err) {{\n"
        "  ki::select_rows(x, idx, out, O, N, K, W, op, err);\n}}\n",
        index_rows_name(size), bits_type(size));
  }
  for (DType t : kAccumulated) {
    const char* T = ir::cuda_storage_type(t);
    const char* A = t == DType::i32 ? "int" : "float";
    s += fmt::format(
        "extern \"C\" __global__ void {}(const {}* x, {}* acc, long long n) {{ ki::init(x, acc, "
        "n); }}\n",
        index_accumulate_name("init", t), T, A);
    s += fmt::format(
        "extern \"C\" __global__ void {}(const {}* acc, {}* out, long long n) {{ ki::finish(acc, "
        "out, n); }}\n",
        index_accumulate_name("finish", t), A, T);
    s += fmt::format(
        "extern \"C\" __global__ void {}(const int* idx, const {}* src, {}* acc, {}, int per_row, "
        "int op, ki::ErrorWord* err) {{\n  ki::atomic_add(idx, src, acc, O, N, K, I, per_row, op, "
        "err);\n}}\n",
        index_accumulate_name("atomic", t), T, A, kGeometry);
    s += fmt::format(
        "extern \"C\" __global__ void {}(const int* idx, const {}* src, {}* acc, {}, int per_row) "
        "{{\n  ki::owner_sum(idx, src, acc, O, N, K, I, per_row);\n}}\n",
        index_accumulate_name("owner", t), T, A, kGeometry);
    for (const bool vec : {false, true}) {  // an element, or a 16-byte word, per lane
      const char* stage = vec ? "segment_rows_vec" : "segment_rows";
      const std::size_t lanes = vec ? 16 / dtype_size(t) : 1;
      s += fmt::format(
          "extern \"C\" __global__ void {0}(const int* sorted, const int* perm, const {1}* src, "
          "{1}* out, {2}) {{\n  ki::segment_rows<{1}, {3}>(sorted, perm, src, out, O, N, K, I);"
          "\n}}\n",
          index_accumulate_name(stage, t), T, kGeometry, lanes);
    }
  }
  s += fmt::format(
      "extern \"C\" __global__ void {}(const int* idx, long long count, long long N, int op, "
      "ki::ErrorWord* err) {{ ki::check(idx, count, N, op, err); }}\n",
      index_check_name());
  return s;
}

}  // namespace

std::string index_gather_name(std::size_t element_size) {
  return fmt::format("kiln_index_gather_s{}", element_size);
}
std::string index_rows_name(std::size_t vector_size) {
  return fmt::format("kiln_index_rows_s{}", vector_size);
}
std::string index_accumulate_name(const char* stage, DType t) {
  return fmt::format("kiln_index_{}_{}", stage, dtype_name(t));
}

std::vector<std::string> index_kernel_names() {
  std::vector<std::string> out;
  for (std::size_t size : {1, 2, 4}) out.push_back(index_gather_name(size));
  for (std::size_t size : {1, 2, 4, 16}) out.push_back(index_rows_name(size));
  for (DType t : kAccumulated)
    for (const char* stage : kStages) out.push_back(index_accumulate_name(stage, t));
  out.push_back(index_check_name());
  return out;
}

const std::string& index_source() {
  static const std::string s =
      ir::cuda_prelude() + std::string(embed::cuda_kernels_index_cuh) + entry_points();
  return s;
}

}  // namespace kiln::cuda
