// A user's program for tests/test_log.cpp, which runs it with KILN_LOG set and reads its stderr:
//
//   kiln_log_program chain8
//       chain8 (8 element-wise ops) over a 256x256 f32 tensor four times, each result read back,
//       on the CPU. Prints kiln::fusion_summary() on stdout, then "done" on stderr before exit.
//   kiln_log_program mixed
//       Calls whose IR is more than one op (clamp, a mixed-dtype add), a recorded op whose
//       handle is dropped, a reduction of one result of a larger group, and a group none of
//       whose results is left to write.
//   kiln_log_program matmul-cuda
//       On the GPU: chain8 of a [256, 256] tensor and its matmul with itself, read back (for
//       KILN_LOG=profile, which times both kinds of launch).
//
// Exit 2 with "ValueError: <message>" on stderr when a kiln call throws it (a bad KILN_LOG).
#include <cstdio>
#include <string>

#include "kiln/kiln.hpp"

namespace {

using kiln::Tensor;

Tensor<2> input() {
  return Tensor<2>::random({256, 256}, kiln::Distribution::normal(), kiln::Device::cpu(), 7);
}

Tensor<2> half_sin_abs(const Tensor<2>& x) { return (x * 0.5f + 0.25f).sin().abs(); }

void chain8() {
  const Tensor<2> x = input();
  for (int i = 0; i < 4; ++i) {
    // (In one statement with the read, the inner call's result would live until the read and
    // be written too: a temporary lives to the end of its full expression.)
    const Tensor<2> z = half_sin_abs(half_sin_abs(x));
    z.to_vector<float>();
  }
  std::fputs(kiln::fusion_summary().c_str(), stdout);
}

void mixed() {
  const Tensor<2> x = input();
  auto clamped = x.clamp(-1, 1).gelu();  // clamp: maximum and minimum
  clamped.to_vector<float>();
  auto ints = Tensor<2>::ones({256, 256}, kiln::DType::i32);
  auto sum = (x + ints).relu();  // casts ints to f32 first
  sum.to_vector<float>();
  auto a = x * 2.0f;
  { auto dropped = a.sin(); }  // recorded, then its handle gone: never needed
  auto b = kiln::where(a > 0.0f, a, a.exp());
  auto s = (x * x).sum(1);  // a prologue of one op cut from the group
  b.to_vector<float>();
  s.to_vector<float>();
  { auto unread = (x - 1.0f).abs(); }
  x.sum().item<float>();  // closes the group of `unread`, which nobody holds
}

void matmul_cuda() {
  const auto x =
      Tensor<2>::random({256, 256}, kiln::Distribution::normal(), kiln::Device::cuda(0), 7);
  const Tensor<2> z = half_sin_abs(half_sin_abs(x));
  kiln::matmul(z, z).to_vector<float>();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "chain8") {
      chain8();
    } else if (what == "mixed") {
      mixed();
    } else if (what == "matmul-cuda") {
      matmul_cuda();
    } else {
      std::fprintf(stderr, "usage: kiln_log_program chain8|mixed|matmul-cuda\n");
      return 1;
    }
  } catch (const kiln::ValueError& e) {
    std::fprintf(stderr, "ValueError: %s\n", e.what());
    return 2;
  }
  std::fputs("done\n", stderr);
  return 0;
}
