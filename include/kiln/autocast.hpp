// Mixed precision as PyTorch's torch.autocast: while a guard lives, the ops of this thread that
// gain from half precision (matmul, nn::Linear, scaled_dot_product_attention) cast their floating
// operands to the guard's dtype and return it, and the ops that need range or many-term sums
// (softmax, the norms, the losses, sum and mean, exp and log, ...) cast half operands up to f32
// and return f32. Parameters stay what they are (f32 master weights): the casts are element-wise
// ops, so autodiff differentiates them and a parameter's gradient arrives in its own dtype.
// docs/autocast.md lists every op and what it casts to.
//
//   kiln::Autocast on(kiln::DType::bf16);   // or DType::f16
//   auto logits = model(x);                 // bf16 products, f32 softmax / norms / loss
//   { kiln::Autocast off(std::nullopt); }   // a region that runs in the tensors' own dtypes
//
// The state is per thread (as PyTorch's): another thread sees no autocast. Guards nest; each
// restores the state it found. Only the front end reads it, so backward (which issues backend
// calls directly) runs in the dtypes forward recorded.
#pragma once

#include <optional>

#include "kiln/detail/ops.hpp"
#include "kiln/dtype.hpp"

namespace kiln {

namespace detail {
// This thread's autocast dtype (nullopt: off); setting one other than bf16 or f16 is a ValueError.
// autocast_lower is what an op of the lower-precision list (matmul, ...) does to an operand: a
// floating x cast to the autocast dtype; autocast_f32 what an op of the f32 list (softmax, ...)
// does: a half x cast to f32. Either returns x itself when autocast is off or nothing needs a cast.
// (src/frontend/autocast.cpp)
std::optional<DType> autocast_dtype();
void set_autocast_dtype(std::optional<DType> dtype);
Handle autocast_lower(const Handle& x);
Handle autocast_f32(const Handle& x);
}  // namespace detail

class Autocast {
 public:
  // dtype bf16 or f16: autocast on, to that dtype; std::nullopt: off (inside an outer guard).
  // ValueError for any other dtype, before anything changes.
  explicit Autocast(std::optional<DType> dtype) : previous_(detail::autocast_dtype()) {
    detail::set_autocast_dtype(dtype);
  }
  ~Autocast() { detail::set_autocast_dtype(previous_); }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// The dtype this thread's ops autocast to, std::nullopt when autocast is off.
inline std::optional<DType> autocast_dtype() { return detail::autocast_dtype(); }

}  // namespace kiln
