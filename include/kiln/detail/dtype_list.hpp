// kiln's dtypes, listed once. DType, dtype_size, dtype_name, dtype_of, promotion and the CUDA
// code generator's types all expand this list; docs/architecture.md, "Adding a dtype", lists the
// rest of the checklist.
#pragma once

// KILN_DTYPES(X) expands X(id, name, bytes, host type, kind, rank, CUDA storage, CUDA value):
//   kind:  boolean, integral, floating, or half (floating, stored in 16 bits, computed in f32:
//          every op loads it to f32 and rounds its stored results back, as PyTorch does)
//   rank:  type promotion (bool 0 < i32 1 < bf16, f16 2 < f32 3; two different dtypes of
//          equal rank, bf16 and f16, promote to f32)
//   CUDA storage / value: the type of an element in memory and of a value in registers
// The order is the enum's, and appended to only: ids are stored in tuned-choice keys.
#define KILN_DTYPES(X)                                                 \
  X(f32, "f32", 4, float, floating, 3, "float", "float")               \
  X(i32, "i32", 4, std::int32_t, integral, 1, "int", "int")            \
  X(boolean, "bool", 1, bool, boolean, 0, "unsigned char", "bool")     \
  X(bf16, "bf16", 2, ::kiln::bfloat16, half, 2, "kiln::bf16", "float") \
  X(f16, "f16", 2, ::kiln::float16, half, 2, "kiln::f16", "float")
