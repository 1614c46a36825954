// kiln::dist::TcpStore (src/dist/tcp_store.hpp), every rank a thread of this process on loopback
// and every server on an ephemeral port (port 0), so that tests can run side by side: binary
// values, gets that wait, exact counters under contention, barriers, wait(), the timeouts of get,
// barrier and connect, a server that goes away under a waiting client, and raw sockets that
// break the protocol, which the server drops while its other clients go on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/tcp_store.hpp"
#include "kiln/error.hpp"

namespace {

using namespace std::chrono_literals;
using kiln::DistError;
using kiln::dist::TcpStore;
using Clock = std::chrono::steady_clock;

constexpr auto kLong =
    5s;  // for calls that should succeed: a failure shows as a timeout, not a hang

TcpStore::Bytes bytes(std::string_view s) { return {s.begin(), s.end()}; }

std::string text(const TcpStore::Bytes& b) { return {b.begin(), b.end()}; }

// A server (rank 0 of `world`) on an ephemeral port.
std::unique_ptr<TcpStore> server(int world, std::chrono::milliseconds timeout = kLong) {
  return std::make_unique<TcpStore>("127.0.0.1", 0, 0, world, timeout);
}

std::unique_ptr<TcpStore> client(const TcpStore& server, int rank,
                                 std::chrono::milliseconds timeout = kLong) {
  return std::make_unique<TcpStore>("127.0.0.1", server.port(), rank, server.world_size(), timeout);
}

// Runs `f`, expecting DistError whose message contains every one of `parts`; returns how long
// it took to throw.
template <typename F>
Clock::duration expect_dist_error(F f, std::initializer_list<std::string> parts) {
  const auto start = Clock::now();
  try {
    f();
    ADD_FAILURE() << "no DistError";
  } catch (const DistError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
  return Clock::now() - start;
}

// A raw TCP connection to the store, for sending what no TcpStore would.
class RawSocket {
 public:
  explicit RawSocket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  ~RawSocket() { ::close(fd_); }
  void send(const std::vector<std::uint8_t>& data) {
    EXPECT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
  }
  // Whether the server closed this connection within `within` (end of stream or a reset).
  bool dropped(std::chrono::milliseconds within = 1s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return false;
    std::uint8_t b[64];
    return ::recv(fd_, b, sizeof b, 0) <= 0;
  }

 private:
  int fd_;
};

std::vector<std::uint8_t> u32(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
          static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

std::vector<std::uint8_t> cat(std::initializer_list<std::vector<std::uint8_t>> parts) {
  std::vector<std::uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TcpStore, SetAndGetBinaryValues) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  TcpStore::Bytes every_byte(512);
  for (std::size_t i = 0; i < every_byte.size(); ++i) every_byte[i] = static_cast<std::uint8_t>(i);
  rank0->set("nccl_id", every_byte);  // zeros included, as in NCCL's 128-byte unique id
  EXPECT_EQ(rank1->get("nccl_id"), every_byte);
  rank1->set("empty", {});
  EXPECT_TRUE(rank0->get("empty").empty());
  rank1->set("nccl_id", bytes("replaced"));
  EXPECT_EQ(text(rank0->get("nccl_id")), "replaced");
  // Keys are bytes too.
  const std::string key("a\0b", 3);
  rank0->set(key, bytes("x"));
  EXPECT_EQ(text(rank1->get(key)), "x");
}

TEST(TcpStore, LargeValuesCrossInPieces) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  // Far beyond a socket buffer, so both sides read and write in many partial pieces.
  TcpStore::Bytes big(24 << 20);
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  rank1->set("big", big);
  EXPECT_EQ(rank0->get("big"), big);
}

TEST(TcpStore, GetWaitsUntilAnotherRankSets) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  std::atomic<bool> set{false};
  auto getter = std::async(std::launch::async, [&] {
    const auto value = rank1->get("late");
    EXPECT_TRUE(set.load());
    return text(value);
  });
  EXPECT_EQ(getter.wait_for(100ms), std::future_status::timeout);
  set = true;
  rank0->set("late", bytes("here"));
  EXPECT_EQ(getter.get(), "here");
}

TEST(TcpStore, AddFromEightRanksIsExact) {
  auto rank0 = server(9);
  std::vector<std::unique_ptr<TcpStore>> ranks;
  for (int r = 1; r <= 8; ++r) ranks.push_back(client(*rank0, r));
  constexpr int kAdds = 200;
  std::vector<std::thread> threads;
  for (auto& store : ranks)
    threads.emplace_back([&store] {
      for (int i = 0; i < kAdds; ++i) store->add("counter", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(rank0->add("counter", 0), 8 * kAdds);
  EXPECT_EQ(text(rank0->get("counter")), std::to_string(8 * kAdds));  // decimal, as torch's
  EXPECT_EQ(rank0->add("counter", -1600), 0);
  EXPECT_EQ(rank0->add("fresh", -7), -7);
}

TEST(TcpStore, ThreadsShareOneStore) {
  auto rank0 = server(1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) rank0->add("shared", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(rank0->add("shared", 0), 400);
}

TEST(TcpStore, AddRefusesWhatIsNotACounter) {
  auto rank0 = server(1);
  rank0->set("text", bytes("12a"));
  expect_dist_error([&] { rank0->add("text", 1); }, {"add to key 'text'", "not a counter"});
  rank0->add("big", INT64_MAX);
  expect_dist_error([&] { rank0->add("big", 1); }, {"overflows"});
  EXPECT_EQ(rank0->add("big", 0), INT64_MAX);  // the connection stays usable
}

TEST(TcpStore, WaitReturnsOnceEveryKeyIsSet) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  rank0->set("a", bytes("1"));
  std::atomic<bool> b_set{false};
  auto waiter = std::async(std::launch::async, [&] {
    rank1->wait({"a", "b", "a"});
    EXPECT_TRUE(b_set.load());
  });
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);
  b_set = true;
  rank0->set("b", {});
  waiter.get();
  rank1->wait({});
}

TEST(TcpStore, BarrierReleasesNobodyBeforeTheLastArrives) {
  constexpr int kWorld = 4, kRounds = 3;
  auto rank0 = server(kWorld);
  std::vector<std::unique_ptr<TcpStore>> ranks;
  ranks.push_back(std::move(rank0));
  for (int r = 1; r < kWorld; ++r) ranks.push_back(client(*ranks[0], r));
  std::atomic<int> arrived{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      for (int round = 1; round <= kRounds; ++round) {
        // Ranks arrive at different times; none may leave before all of this round arrived.
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
        arrived.fetch_add(1);
        ranks[static_cast<std::size_t>(r)]->barrier();
        EXPECT_GE(arrived.load(), round * kWorld) << "rank " << r << ", round " << round;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(arrived.load(), kRounds * kWorld);
  while (!ranks.empty()) ranks.pop_back();  // the clients first, as their ranks would leave
}

TEST(TcpStore, RankZeroLeavingServesTheRequestsStillToCome) {
  // Rank 0 may leave as soon as its last barrier releases it, before another rank's last request
  // has reached the store: the store serves the clients it has until they leave.
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  rank0->set("last", bytes("word"));
  auto leaving = std::async(std::launch::async, [&] { rank0.reset(); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(text(rank1->get("last")), "word");
  const auto t0 = std::chrono::steady_clock::now();
  rank1.reset();
  leaving.get();  // the store closes once its last client has left
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(TcpStore, GetTimesOutNamingTheKey) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1, 200ms);
  const auto took = expect_dist_error([&] { rank1->get("never"); },
                                      {"get of key 'never'", "timed out after 200 ms", "rank 1",
                                       "127.0.0.1:" + std::to_string(rank0->port())});
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 1s);
  // The store works on after a timeout (on a new connection).
  rank0->set("never", bytes("now"));
  EXPECT_EQ(text(rank1->get("never")), "now");
}

TEST(TcpStore, BarrierTimesOutWhenARankIsMissing) {
  auto rank0 = server(3, 200ms);
  auto rank1 = client(*rank0, 1, 200ms);
  auto other = std::async(std::launch::async, [&] {
    expect_dist_error([&] { rank1->barrier(); }, {"barrier 0", "timed out after 200 ms"});
  });
  const auto took = expect_dist_error([&] { rank0->barrier(); },
                                      {"barrier 0", "of 3", "kiln/barrier/0/done", "rank 0"});
  EXPECT_LT(took, 1s);
  other.get();
}

TEST(TcpStore, ConnectWhereNobodyListensTimesOut) {
  // A port that is bound but not listening refuses connections, and no other test can take it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const auto took = expect_dist_error([&] { TcpStore("127.0.0.1", port, 1, 2, 200ms); },
                                      {"connect from rank 1", "127.0.0.1:" + std::to_string(port),
                                       "timed out after 200 ms", "Connection refused"});
  ::close(fd);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 1s);
}

TEST(TcpStore, ListeningOnATakenPortFails) {
  auto first = server(1);
  expect_dist_error([&] { TcpStore("127.0.0.1", first->port(), 0, 1, 200ms); },
                    {"rank 0 cannot listen on 127.0.0.1:" + std::to_string(first->port())});
}

TEST(TcpStore, ArgumentsAreChecked) {
  expect_dist_error([] { TcpStore("127.0.0.1", 0, 2, 2, 1s); }, {"rank 2 is not in [0, 2)"});
  expect_dist_error([] { TcpStore("127.0.0.1", 0, 1, 2, 1s); }, {"port 0"});
  expect_dist_error([] { TcpStore("127.0.0.1", 0, 0, 1, 0ms); }, {"timeout"});
  auto rank0 = server(1);
  expect_dist_error([&] { rank0->set(std::string(4097, 'k'), {}); }, {"4097 bytes"});
  rank0->set(std::string(4096, 'k'), bytes("longest key"));
  EXPECT_EQ(text(rank0->get(std::string(4096, 'k'))), "longest key");
}

TEST(TcpStore, ServerGoingAwayEndsAWaitingGetAtOnce) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1, 10s);
  auto waiter = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    expect_dist_error([&] { rank1->get("never"); },
                      {"get of key 'never'", "closed the connection; rank 0 may have exited"});
    return Clock::now() - start;
  });
  std::this_thread::sleep_for(50ms);
  const auto destroyed = Clock::now();
  rank0.reset();
  EXPECT_EQ(waiter.wait_for(1s), std::future_status::ready) << "the waiting get hangs";
  EXPECT_LT(Clock::now() - destroyed, 1s);
  waiter.get();
  // Later calls fail at once too.
  const auto took =
      expect_dist_error([&] { rank1->set("k", {}); }, {"set of key 'k'", "closed the connection"});
  EXPECT_LT(took, 100ms);
}

TEST(TcpStore, ServerDropsClientsThatBreakTheProtocol) {
  auto rank0 = server(2);
  auto rank1 = client(*rank0, 1);
  const auto still_serves = [&](const std::string& step) {
    rank1->set("ok", bytes(step));
    EXPECT_EQ(text(rank0->get("ok")), step) << step;
  };
  still_serves("before");

  // A partial frame that never completes holds nothing up for the others.
  RawSocket partial(rank0->port());
  partial.send({10, 0, 0});
  still_serves("beside a partial frame");

  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> rogues = {
      {"text", bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},  // its length prefix is too long
      {"oversized length", u32(0xffffffff)},
      {"zero length", u32(0)},
      {"unknown op", cat({u32(2), {0x7f, 0}})},
      {"key past the frame", cat({u32(5), {2}, u32(100)})},
      {"key over 4 KiB",
       cat({u32(1 + 4 + 5000), {2}, u32(5000), std::vector<std::uint8_t>(5000, 'k')})},
      {"bytes left over", cat({u32(1 + 4 + 1 + 1), {2}, u32(1), {'k'}, {0}})},
      {"add without its delta", cat({u32(1 + 4 + 1 + 4), {3}, u32(1), {'k'}, {0, 0, 0, 0}})},
      // Two gets of a missing key at once: the second comes before the first's reply.
      {"pipelined", cat({u32(6), {2}, u32(1), {'z'}, u32(6), {2}, u32(1), {'z'}})},
  };
  for (const auto& [name, data] : rogues) {
    RawSocket rogue(rank0->port());
    rogue.send(data);
    EXPECT_TRUE(rogue.dropped()) << name << ": the server kept the connection";
    still_serves("after " + name);
  }
  // The partial frame's client is still connected: only the broken ones were dropped.
  EXPECT_FALSE(partial.dropped(50ms));
}

}  // namespace
