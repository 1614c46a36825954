// The rendezvous store's server (store_server.hpp): a key table, counters, and requests that wait
// for keys, served from one thread over non-blocking sockets.
//
// A client that breaks the protocol (store_protocol.hpp) is dropped: its connection is closed and
// its pending wait forgotten, and nothing else changes. That covers a length prefix over the
// limit, an unknown op, a field that runs past its frame, and a second request sent before the
// reply to the first was read (the client never does that, and refusing it bounds what one
// connection can make the server buffer). An add to a key that holds no counter is a caller's
// mistake, not a broken client: it gets an error reply and stays connected.
#include "dist/store_server.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dist/store_protocol.hpp"
#include "kiln/error.hpp"

namespace kiln::dist {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
// What one client may send per poll round before the others get their turn.
constexpr std::size_t kReadBudget = 1024 * 1024;
// How long a stopping server still serves the clients it has (Loop::run).
constexpr std::chrono::seconds kDrainGrace{5};

struct Client {
  net::Fd fd;
  std::vector<std::uint8_t> in;   // received, not yet a whole frame
  std::vector<std::uint8_t> out;  // replies not yet written
  std::size_t out_sent = 0;
  // A get or wait that waits: how many of its keys are still missing (0: none waits).
  std::size_t missing = 0;
  bool waiting_get = false;
  std::string get_key;
  bool dead = false;

  bool busy() const { return missing > 0 || out_sent < out.size(); }
};

// The state of the server thread: only that thread touches it.
class Loop {
 public:
  Loop(int listen_fd, int wake_fd) : listen_fd_(listen_fd), wake_fd_(wake_fd) {}
  void run();

 private:
  void accept_all();
  bool read_from(std::uint64_t id, Client& c);
  bool serve_frames(std::uint64_t id, Client& c);
  bool serve(std::uint64_t id, Client& c, wire::Request& req);
  void add(Client& c, const std::string& key, std::int64_t delta);
  void key_set(const std::string& key);
  bool flush(Client& c);
  static void reply(Client& c, wire::Status status, std::span<const std::uint8_t> payload = {});

  int listen_fd_, wake_fd_;
  std::map<std::uint64_t, Client> clients_;  // by an id never reused, so stale waiters are harmless
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::string, std::vector<std::uint8_t>> data_;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiters_;  // key -> waiting clients
};

// Once the destructor asks it to stop, the loop drains: it accepts no one new and serves the
// clients it has until each has left or waits for a key that no one is left to set, or until
// kDrainGrace. Rank 0 leaves its store as soon as its own last barrier releases it, and the rank
// that released it, or another released in the same round, may not have sent its last request yet
// (seen under AddressSanitizer in CI, 2026-12-07: a rank's wait for a barrier's key arrived after
// the store had closed).
void Loop::run() {
  using Clock = std::chrono::steady_clock;
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;
  std::optional<Clock::time_point> drain_until;
  for (;;) {
    if (drain_until) {
      const bool stuck = std::ranges::all_of(clients_, [](const auto& entry) {
        return entry.second.missing > 0 && entry.second.out_sent == entry.second.out.size();
      });
      if (stuck || Clock::now() >= *drain_until) return;  // closes every connection left
      fds.clear();
    } else {
      fds.assign({{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    }
    const std::size_t first_client = fds.size();
    ids.clear();
    for (const auto& [id, c] : clients_) {
      fds.push_back(
          {c.fd.get(), static_cast<short>(POLLIN | (c.out_sent < c.out.size() ? POLLOUT : 0)), 0});
      ids.push_back(id);
    }
    int wait_ms = -1;  // forever, until the destructor's wake-up
    if (drain_until) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*drain_until - Clock::now());
      wait_ms = static_cast<int>(std::max<std::int64_t>(left.count(), 0));
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot serve: returning closes every connection, which clients report
    }
    if (!drain_until && fds[0].revents) {
      drain_until = Clock::now() + kDrainGrace;
      continue;
    }
    if (!drain_until && (fds[1].revents & POLLIN)) accept_all();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      // POLLHUP and POLLERR too: the read then finds the end of stream or the error.
      if (!fds[first_client + i].revents) continue;
      Client& c = clients_.at(ids[i]);
      try {
        if (!c.dead && !read_from(ids[i], c)) c.dead = true;
      } catch (const std::exception&) {
        c.dead = true;  // out of memory for this client's request: drop it, keep serving others
      }
    }
    // Replies from this round, to the sender and to the waiters a set or add released.
    for (auto& [id, c] : clients_)
      if (!c.dead && c.out_sent < c.out.size() && !flush(c)) c.dead = true;
    std::erase_if(clients_, [](const auto& entry) { return entry.second.dead; });
  }
}

void Loop::accept_all() {
  for (;;) {
    net::Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    // EAGAIN: none left. Anything else is retried next round: a connection reset before it was
    // accepted is gone by then; out of descriptors (EMFILE), the thread spins until one frees,
    // which a job with far fewer ranks than the limit never meets.
    if (!fd) return;
    net::set_nodelay(fd.get());
    clients_[next_id_++].fd = std::move(fd);
  }
}

// Reads what the client sent and serves its whole frames; false when it must be dropped.
bool Loop::read_from(std::uint64_t id, Client& c) {
  std::size_t budget = kReadBudget;
  while (budget > 0) {
    const std::size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    const ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) return false;  // the client closed: its waits go with it
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    budget -= std::min(budget, static_cast<std::size_t>(n));
    if (!serve_frames(id, c)) return false;
  }
  return true;
}

bool Loop::serve_frames(std::uint64_t id, Client& c) {
  std::size_t pos = 0;
  while (pos < c.in.size()) {
    if (c.busy()) return false;  // a request before the last reply was read
    if (c.in.size() - pos < wire::kLengthBytes) break;
    const std::uint32_t len = wire::get_u32(c.in.data() + pos);
    if (len == 0 || len > wire::kMaxFrameBytes) return false;
    if (c.in.size() - pos - wire::kLengthBytes < len) break;
    std::string why;
    auto req = wire::decode_request({c.in.data() + pos + wire::kLengthBytes, len}, why);
    if (!req || !serve(id, c, *req)) return false;
    pos += wire::kLengthBytes + len;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
  return true;
}

bool Loop::serve(std::uint64_t id, Client& c, wire::Request& req) {
  switch (req.op) {
    case wire::Op::set:
      data_[req.keys[0]] = std::move(req.value);
      reply(c, wire::Status::ok);
      key_set(req.keys[0]);
      return true;
    case wire::Op::get: {
      const auto it = data_.find(req.keys[0]);
      if (it != data_.end()) {
        reply(c, wire::Status::ok, it->second);
      } else {
        c.missing = 1;
        c.waiting_get = true;
        c.get_key = req.keys[0];
        waiters_[req.keys[0]].push_back(id);
      }
      return true;
    }
    case wire::Op::add:
      add(c, req.keys[0], req.delta);
      return true;
    case wire::Op::wait: {
      // Each missing key counted once, however often the request names it.
      std::vector<std::string>& keys = req.keys;
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      for (const std::string& k : keys)
        if (!data_.contains(k)) {
          ++c.missing;
          waiters_[k].push_back(id);
        }
      if (c.missing == 0) reply(c, wire::Status::ok);
      return true;
    }
  }
  return false;
}

// Counters are kept as decimal text, as torch's store keeps them, so that get() of a counter reads
// as a number.
void Loop::add(Client& c, const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  std::vector<std::uint8_t>& stored = data_[key];
  if (!stored.empty()) {
    const char* first = reinterpret_cast<const char*>(stored.data());
    const char* last = first + stored.size();
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || ptr != last) {
      const std::string msg = fmt::format(
          "add to key '{}': it holds a value of {} bytes that is not a counter (a decimal integer)",
          key, stored.size());
      reply(c, wire::Status::error,
            {reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size()});
      return;
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    const std::string msg =
        fmt::format("add to key '{}': {} + {} overflows a 64-bit counter", key, value, delta);
    reply(c, wire::Status::error, {reinterpret_cast<const std::uint8_t*>(msg.data()), msg.size()});
    return;
  }
  const std::string text = std::to_string(value);
  stored.assign(text.begin(), text.end());
  std::vector<std::uint8_t> payload;
  wire::put_i64(payload, value);
  reply(c, wire::Status::ok, payload);
  key_set(key);
}

// Releases the gets and waits that were missing `key`.
void Loop::key_set(const std::string& key) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<std::uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (const std::uint64_t id : ids) {
    const auto c = clients_.find(id);
    if (c == clients_.end() || c->second.dead || c->second.missing == 0) continue;
    Client& waiter = c->second;
    if (--waiter.missing > 0) continue;
    if (waiter.waiting_get) {
      waiter.waiting_get = false;
      reply(waiter, wire::Status::ok, data_.at(waiter.get_key));
    } else {
      reply(waiter, wire::Status::ok);
    }
  }
}

void Loop::reply(Client& c, wire::Status status, std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> frame = wire::encode_reply(status, payload);
  if (c.out_sent == c.out.size()) {
    c.out = std::move(frame);
    c.out_sent = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
}

// Writes what the socket takes now; the rest waits for POLLOUT. False when the client is gone.
bool Loop::flush(Client& c) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  c.out.clear();
  c.out_sent = 0;
  return true;
}

}  // namespace

StoreServer::StoreServer(const std::string& host, int port) {
  std::string error;
  listen_ = net::listen_on(host, port, error);
  if (!listen_)
    throw DistError(fmt::format(
        "TcpStore: rank 0 cannot listen on {}:{}: {} (is MASTER_PORT taken by another job, or "
        "MASTER_ADDR not an address of this host?)",
        host, port, error));
  port_ = net::local_port(listen_.get());
  wake_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw DistError(fmt::format("TcpStore: eventfd failed: {}", std::strerror(errno)));
  thread_ = std::thread([this] {
    try {
      Loop(listen_.get(), wake_.get()).run();
    } catch (const std::exception&) {
      // Nothing to report to: ending the loop closes every connection, which clients report.
    }
  });
}

StoreServer::~StoreServer() {
  const std::uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  thread_.join();
}

}  // namespace kiln::dist
