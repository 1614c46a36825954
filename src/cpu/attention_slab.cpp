// slab_rows (attention_slab.hpp): an f32 slab whose rows sgemm can describe (a unit last stride
// and a row stride no smaller than D: contiguous heads, or heads cut from a fused qkv projection)
// is read in place; any other (a half type, a broadcast row) is converted or copied into scratch.
#include "cpu/attention_slab.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "kiln/error.hpp"

namespace kiln::cpu {

Mat slab_rows(const detail::TensorImpl& t, std::int64_t b, std::int64_t h, std::int64_t r0,
              std::int64_t n, std::vector<float>& scratch, const KernelTable& k) {
  const std::int64_t d = t.shape[3];
  const std::size_t size = dtype_size(t.dtype);
  const char* base =
      static_cast<const char*>(t.data()) +
      static_cast<std::size_t>(b * t.strides[0] + h * t.strides[1] + r0 * t.strides[2]) * size;
  const std::int64_t rs = t.strides[2];
  if (d == 0) return {nullptr, 1};  // (no product reads it: the scores are zeros)
  if (t.dtype == DType::f32 && (n <= 1 || (rs >= d && rs <= INT_MAX)))
    return {reinterpret_cast<const float*>(base), n <= 1 ? d : rs};
  scratch.resize(static_cast<std::size_t>(n * d));
  for (std::int64_t r = 0; r < n; ++r) {
    const char* row = base + static_cast<std::size_t>(r * rs) * size;
    float* dst = scratch.data() + r * d;
    if (t.dtype == DType::f32) {
      std::memcpy(dst, row, static_cast<std::size_t>(d) * sizeof(float));
    } else {
      k.half_to_f32(t.dtype, reinterpret_cast<const std::uint16_t*>(row), dst,
                    static_cast<std::size_t>(d));
    }
  }
  return {scratch.data(), std::max<std::int64_t>(d, 1)};
}

void check_attention_blas(const char* op, const detail::TensorImpl& q,
                          const detail::TensorImpl& k) {
  if (k.shape[2] > INT_MAX || q.shape[3] > INT_MAX) {
    throw ValueError(std::string(op) + ": " + format_dims(q.shape) + " x " + format_dims(k.shape) +
                     ": a dimension exceeds the BLAS's 32-bit int");
  }
  const BlasLibrary& lib = blas();
  if (lib.sgemm == nullptr) {
    throw DeviceError(std::string(op) + ": CPU attention needs a CBLAS, and " + lib.name +
                      " cannot be loaded: " + lib.error);
  }
}

}  // namespace kiln::cpu
