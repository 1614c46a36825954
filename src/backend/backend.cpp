// The names and result dtypes the interface declares (backend.hpp).
#include "backend/backend.hpp"

namespace kiln::detail {

const char* reduce_name(ReduceOp op) {
  constexpr const char* names[] = {"sum", "mean", "max", "min", "argmax", "argmin"};
  return names[static_cast<int>(op)];
}

DType reduce_result_dtype(ReduceOp op, DType in) {
  switch (op) {
    case ReduceOp::sum:
      return is_floating(in) ? in : DType::i32;
    case ReduceOp::mean:
      return is_floating(in) ? in : DType::f32;
    case ReduceOp::max:
    case ReduceOp::min:
      return in;
    case ReduceOp::argmax:
    case ReduceOp::argmin:
      return DType::i32;
  }
  return in;
}

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::elementwise:
      return "elementwise";
    case BackendOp::reduce:
      return "reduce";
    case BackendOp::matmul:
      return "matmul";
    case BackendOp::random:
      return "random";
    case BackendOp::index:
      return "index";
    case BackendOp::rows:
      return "rows";
    case BackendOp::order:
      return "order";
    case BackendOp::attention:
      return "attention";
    case BackendOp::collective:
      return "collective";
  }
  return "?";
}

bool supports_common_dtypes(BackendOp op, std::span<const DType> dtypes) {
  switch (op) {
    case BackendOp::elementwise:
    case BackendOp::reduce:
    case BackendOp::order:  // every dtype (bool sorts false before true, cumsums to i32)
    case BackendOp::index:  // every dtype (scatter_add and index_add refuse bool: no addition)
      return true;
    case BackendOp::rows:  // the floating dtypes: f32, bf16, f16
    case BackendOp::matmul:
    case BackendOp::attention:
    case BackendOp::random:
      for (DType t : dtypes)
        if (!is_floating(t)) return false;
      return true;
    case BackendOp::collective:  // the floating dtypes and i32 (NCCL has no bool)
      for (DType t : dtypes)
        if (!is_floating(t) && t != DType::i32) return false;
      return true;
  }
  return false;
}

}  // namespace kiln::detail
