// The Backend methods that are not ops, on every chain: name (composed the way the registry's
// names are), device and memory_capacity (passed through decorators), empty (a contiguous tensor
// of the shape and dtype asked, zero extents and rank 0 included), upload and download (bit
// exact, at an offset, of nothing), download waiting for pending work, and sync leaving every
// queued op done in the backend itself.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "chains.hpp"

namespace {

using kc::Operand;
using kc::Values;
using kiln::Device;
using kiln::Dims;
using kiln::DType;
using kiln::detail::Handle;
using kiln::detail::TensorImpl;
using kiln::ir::Op;
using kiln::ir::Program;

constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::boolean, DType::bf16, DType::f16};

class BackendMemory : public kc::ChainTest {
 protected:
  // Random bytes of n elements of dtype t (f32, i32, bf16, f16: any bit pattern, NaN payloads and
  // subnormals included; bool: 0 or 1).
  kc::Raw random_bytes(std::int64_t n, DType t) {
    kc::Raw r{t, std::vector<unsigned char>(static_cast<std::size_t>(n) * kiln::dtype_size(t))};
    for (auto& b : r.bytes)
      b = static_cast<unsigned char>(t == DType::boolean ? rng()() & 1 : rng()());
    return r;
  }
  // Whether two byte strings are equal, naming the first difference.
  static ::testing::AssertionResult same_bytes(const kc::Raw& got, const kc::Raw& want) {
    if (got.bytes.size() != want.bytes.size())
      return ::testing::AssertionFailure()
             << got.bytes.size() << " bytes, " << want.bytes.size() << " expected";
    for (std::size_t i = 0; i < got.bytes.size(); ++i)
      if (got.bytes[i] != want.bytes[i])
        return ::testing::AssertionFailure()
               << "byte " << i << " of " << got.bytes.size() << ": got " << int(got.bytes[i])
               << ", expected " << int(want.bytes[i]);
    return ::testing::AssertionSuccess();
  }
};
KILN_INSTANTIATE_CHAINS(BackendMemory);

// The backend names itself "<kind><<target>>" (cpu<avx2>, cuda<sm_90>); each decorator wraps the
// name below it, "fusion<cpu<avx2>>", so the composed name says which features are live.
TEST_P(BackendMemory, NameComposesTheChain) {
  const auto& spec = GetParam();
  const std::string base = chain().layer(0).name();
  // "<label><target>" with a target of lower-case letters, digits and '_' (no <regex>: g++ 12
  // warns inside it under the sanitizers' -O2, and the build treats warnings as errors).
  const std::string head = spec.backend.label + "<";
  const bool named = base.size() > head.size() + 1 && base.compare(0, head.size(), head) == 0 &&
                     base.back() == '>' &&
                     std::all_of(base.begin() + static_cast<std::ptrdiff_t>(head.size()),
                                 base.end() - 1, [](char ch) {
                                   return std::islower(static_cast<unsigned char>(ch)) ||
                                          std::isdigit(static_cast<unsigned char>(ch)) || ch == '_';
                                 });
  EXPECT_TRUE(named) << base;
  for (std::size_t i = 1; i < chain().depth(); ++i) {
    EXPECT_EQ(chain().layer(i).name(),
              spec.decorators[i - 1].label + "<" + chain().layer(i - 1).name() + ">");
  }
}

// Decorators report the device and the capacity of the backend they wrap.
TEST_P(BackendMemory, DeviceAndCapacity) {
  const Device d = chain().layer(0).device();
  if (GetParam().backend.label == "cpu") {
    EXPECT_EQ(d, Device::cpu());
  } else {
    EXPECT_EQ(d.kind(), Device::Kind::cuda);
    EXPECT_EQ(d.index(), 0);
  }
  const std::uint64_t capacity = chain().layer(0).memory_capacity();
  EXPECT_GE(capacity, std::uint64_t{1} << 26) << "less than 64 MiB";
  for (std::size_t i = 1; i < chain().depth(); ++i) {
    EXPECT_EQ(chain().layer(i).device(), d) << chain().layer(i).name();
    EXPECT_EQ(chain().layer(i).memory_capacity(), capacity) << chain().layer(i).name();
  }
}

// empty() gives a contiguous tensor of the shape and dtype asked, on this device, at offset 0,
// whose memory holds numel elements (written and read back here through upload and download).
TEST_P(BackendMemory, EmptyIsAContiguousTensorOfTheShapeAsked) {
  for (DType t : kDTypes) {
    for (const Dims& shape : {Dims{}, Dims{1}, Dims{7}, Dims{0}, Dims{3, 0, 5}, Dims{2, 3, 4},
                              Dims{1, 1, 1, 1, 9}, Dims{4099}}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + kiln::format_dims(shape));
      const Handle h = be().empty(shape, t);
      ASSERT_TRUE(h);
      ASSERT_TRUE(h->buffer);
      EXPECT_EQ(h->shape, shape);
      EXPECT_EQ(h->dtype, t);
      EXPECT_EQ(h->device, be().device());
      EXPECT_EQ(h->offset, 0);
      EXPECT_EQ(h->strides, kiln::detail::contiguous_strides(shape));
      EXPECT_TRUE(h->is_contiguous());
      EXPECT_GE(h->buffer->bytes(), static_cast<std::size_t>(h->numel()) * kiln::dtype_size(t));
      const kc::Raw data = random_bytes(h->numel(), t);
      be().upload(data.bytes.data(), kiln::detail::Out(*h));
      EXPECT_TRUE(same_bytes(read(*h), data));
    }
  }
}

// upload then download copies numel * dtype_size bytes each way, bit for bit.
TEST_P(BackendMemory, UploadDownloadRoundTrip) {
  for (DType t : kDTypes) {
    for (std::int64_t n : {1, 2, 3, 4, 5, 63, 4099, 100003}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + std::to_string(n));
      const Handle h = be().empty({n}, t);
      const kc::Raw data = random_bytes(n, t);
      be().upload(data.bytes.data(), kiln::detail::Out(*h));
      EXPECT_TRUE(same_bytes(read(*h), data));
      // A second upload replaces the first.
      const kc::Raw again = random_bytes(n, t);
      be().upload(again.bytes.data(), kiln::detail::Out(*h));
      EXPECT_TRUE(same_bytes(read(*h), again));
    }
  }
}

// A contiguous tensor may start anywhere in its buffer: upload writes and download reads its
// elements only, from its offset.
TEST_P(BackendMemory, UploadDownloadAtAnOffset) {
  for (DType t : kDTypes) {
    for (const Dims& shape : {Dims{5}, Dims{3, 7}, Dims{1}}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + kiln::format_dims(shape));
      const Operand o = output(shape, t, kc::offset());  // a poisoned buffer, the view at 13
      const kc::Raw data = random_bytes(kc::detail::numel(shape), t);
      be().upload(data.bytes.data(), kiln::detail::Out(o.view));
      EXPECT_TRUE(same_bytes(read(o.view), data));
      EXPECT_TRUE(same_bytes(read(o), data));  // (read(o) gathers from the whole buffer)
      EXPECT_TRUE(untouched_outside(o));
    }
  }
}

// Zero elements: upload reads nothing and download writes nothing.
TEST_P(BackendMemory, EmptyTransfers) {
  for (DType t : kDTypes) {
    const Operand o = output({0, 4}, t, kc::offset());
    const kc::Raw data = random_bytes(4, t);  // never read
    be().upload(data.bytes.data(), kiln::detail::Out(o.view));
    EXPECT_TRUE(untouched_outside(o));
    unsigned char sentinel[8];
    std::memset(sentinel, 0xC3, sizeof sentinel);
    be().download(o.view, sentinel);
    for (unsigned char b : sentinel) EXPECT_EQ(b, 0xC3) << "download of nothing wrote";
  }
}

// download waits for the work that writes its tensor, however far behind the device is: a long
// chain of calls, each reading the last, read at once.
TEST_P(BackendMemory, DownloadWaitsForPendingWork) {
  const Dims shape{256, 256};
  const Operand x = input(shape, DType::f32, kc::contiguous(), -1, 1);
  Program add_one;
  {
    const auto in = add_one.input(DType::f32), one = add_one.scalar(DType::f32);
    add_one.output(add_one.binary(Op::add, in, one));
  }
  Handle y = be().empty(shape, DType::f32);
  elementwise(add_one, {&x.view}, {1.0}, {y.get()});
  for (int i = 0; i < 99; ++i) {
    Handle next = be().empty(shape, DType::f32);
    elementwise(add_one, {y.get()}, {1.0}, {next.get()});
    y = next;
  }
  Values want;
  for (double v : x.values()) {
    float f = static_cast<float>(v);
    for (int i = 0; i < 100; ++i) f = f + 1.0f;
    want.push_back(f);
  }
  // Rows 10 to 19 of a pending result, downloaded as a contiguous view at an offset first.
  Handle z = be().empty(shape, DType::f32);
  elementwise(add_one, {y.get()}, {1.0}, {z.get()});
  TensorImpl rows = *z;
  rows.shape = {10, shape[1]};
  rows.offset = 10 * shape[1];
  Values want_rows;
  for (std::int64_t k = 10 * shape[1]; k < 20 * shape[1]; ++k)
    want_rows.push_back(static_cast<float>(want[static_cast<std::size_t>(k)]) + 1.0f);
  EXPECT_TRUE(kc::matches(read(rows), rows.shape, want_rows)) << "rows of a pending result";
  EXPECT_TRUE(kc::matches(read(*y), shape, want));
}

// After sync, every op queued on the chain has run in the backend itself: results have memory
// there and the backend at the bottom of the chain, asked directly, reads the right values (a
// decorator that kept recorded work past sync would fail this).
TEST_P(BackendMemory, SyncRunsEverythingQueued) {
  be().sync();  // nothing queued: a no-op
  const Dims shape{64, 96};
  const Operand x = input(shape, DType::f32);
  Program square;
  {
    const auto in = square.input(DType::f32);
    square.output(square.binary(Op::mul, in, in));
  }
  Handle y = be().empty(shape, DType::f32), z = be().empty(shape, DType::f32);
  elementwise(square, {&x.view}, {}, {y.get()});
  elementwise(square, {y.get()}, {}, {z.get()});
  be().sync();
  be().sync();  // twice: idempotent
  Values ys, zs;
  for (double v : x.values()) {
    const float s = static_cast<float>(v) * static_cast<float>(v);
    ys.push_back(s);
    zs.push_back(s * s);
  }
  auto& bottom = chain().layer(0);
  for (const auto& [t, want] : {std::pair{y, ys}, {z, zs}}) {
    ASSERT_NE(t->buffer->data(), nullptr) << "a result has no memory after sync";
    kc::Raw got{DType::f32, std::vector<unsigned char>(want.size() * 4)};
    bottom.download(*t, got.bytes.data());
    EXPECT_TRUE(kc::matches(got, shape, want)) << "read from " << bottom.name() << " directly";
  }
}

}  // namespace
