// TCP over POSIX sockets for the rendezvous store: an owned descriptor, listening, connecting with
// retries, and reading and writing whole buffers before a deadline. Sockets are non-blocking and
// every wait is a poll() bounded by the deadline, so no call here can hang; EINTR is retried and
// writes pass MSG_NOSIGNAL, so a peer that went away is an error result, never a SIGPIPE.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace kiln::dist::net {

using Clock = std::chrono::steady_clock;

// Now plus `timeout`, saturating instead of overflowing for a huge one.
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

// An owned file descriptor, closed once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// How a read or write with a deadline ended. `closed`: the peer closed the connection or reset
// it (error is the errno, 0 for an orderly end of stream).
enum class IoStatus { ok, timeout, closed };
struct IoResult {
  IoStatus status = IoStatus::ok;
  int error = 0;
};

// Writes all of `data`, or reports why not by `deadline`.
IoResult send_all(int fd, std::span<const std::uint8_t> data, Clock::time_point deadline);
// Reads exactly data.size() bytes, or reports why not by `deadline`.
IoResult recv_exact(int fd, std::span<std::uint8_t> data, Clock::time_point deadline);

// A non-blocking socket listening on host:port with SO_REUSEADDR (so a restarted job can bind the
// port while the last one's connections linger in TIME_WAIT); port 0 picks an ephemeral port.
// Returns an empty Fd and sets `error` on failure.
Fd listen_on(const std::string& host, int port, std::string& error);
// The local port a socket is bound to.
int local_port(int fd);

// A non-blocking connection to host:port with TCP_NODELAY (the store's messages are small
// requests that wait for their answer), retried with a growing back-off (10 ms to 200 ms) while
// the address does not resolve or nobody listens yet, since rank 0 may start after the others.
// Returns an empty Fd at `deadline`, with the last failure in `last_error`.
Fd connect_until(const std::string& host, int port, Clock::time_point deadline,
                 std::string& last_error);

// Sets TCP_NODELAY (on a socket the server accepted); a failure only costs latency.
void set_nodelay(int fd);

}  // namespace kiln::dist::net
