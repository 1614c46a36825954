// The per-thread lists of recycled small blocks (src/core/recycled.hpp): a freed object's block
// serves the next object of its size on the freeing thread, a block may be freed on another
// thread than the one that made it, and objects made from recycled blocks are fresh objects.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/recycled.hpp"

namespace {

using kiln::detail::make_recycled;

struct Payload {  // a size no other recycled type has
  std::array<std::int64_t, 13> values{};
  explicit Payload(std::int64_t v) { values.fill(v); }
};

TEST(Recycled, AFreedBlockServesTheNextObjectOfItsSize) {
  if (kiln::detail::kKeptPerThread == 0) GTEST_SKIP() << "nothing is kept under AddressSanitizer";
  auto a = make_recycled<Payload>(1);
  const void* block = a.get();
  a.reset();
  const auto b = make_recycled<Payload>(2);
  EXPECT_EQ(static_cast<const void*>(b.get()), block);
  for (std::int64_t v : b->values) EXPECT_EQ(v, 2) << "a new object, constructed afresh";
}

TEST(Recycled, ObjectsFreedOnAnotherThreadAndManyAtOnceStayIntact) {
  // More than a list keeps, made here and freed on another thread, then made again here.
  std::vector<std::shared_ptr<Payload>> made;
  for (int i = 0; i < 3 * kiln::detail::kKeptPerThread + 10; ++i)
    made.push_back(make_recycled<Payload>(i));
  for (std::size_t i = 0; i < made.size(); ++i)
    for (std::int64_t v : made[i]->values) ASSERT_EQ(v, static_cast<std::int64_t>(i));
  std::thread([&made] { made.clear(); }).join();  // (that thread's list is released at its exit)
  std::vector<std::shared_ptr<Payload>> again;
  for (int i = 0; i < 100; ++i) again.push_back(make_recycled<Payload>(-i));
  for (std::size_t i = 0; i < again.size(); ++i)
    for (std::int64_t v : again[i]->values) ASSERT_EQ(v, -static_cast<std::int64_t>(i));
}

}  // namespace
