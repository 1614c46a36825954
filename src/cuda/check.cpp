#include "cuda/check.hpp"

#include <fmt/format.h>

#include "kiln/error.hpp"

namespace kiln::cuda {

void throw_failed(const char* call, const char* file, int line, const char* message,
                  const char* code_name) {
  throw DeviceError(fmt::format("{} failed: {} ({}) at {}:{}", call, message ? message : "?",
                                code_name ? code_name : "?", file, line));
}

}  // namespace kiln::cuda
