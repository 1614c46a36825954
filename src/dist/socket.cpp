// TCP over POSIX sockets with deadlines (socket.hpp).
#include "dist/socket.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "kiln/error.hpp"

namespace kiln::dist::net {
namespace {

// Milliseconds left until `deadline`, rounded up so that a wait never ends just short of it and
// spins; 0 once it has passed.
int millis_until(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

// Waits until `fd` is ready for `events` (or has an error or hang-up for the next call to
// report); false at the deadline. Polls at least once, so that a socket that is ready is seen
// even when the deadline has just passed.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const int ms = millis_until(deadline);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR)
      throw DistError(fmt::format("poll on a store socket failed: {}", std::strerror(errno)));
    if (n == 0 && ms == 0) return false;
  }
}

std::string resolver_error(int rc) {
  return rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
}

using AddrList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

AddrList resolve(const std::string& host, int port, int flags, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) {
    error = fmt::format("cannot resolve {}: {}", host, resolver_error(rc));
    return {nullptr, &::freeaddrinfo};
  }
  return {list, &::freeaddrinfo};
}

// One round of connecting to each address host:port resolves to.
Fd try_connect(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  const AddrList list = resolve(host, port, 0, error);
  for (const addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      error = std::strerror(errno);
      continue;
    }
    // A non-blocking connect (or one a signal interrupted) goes on in the background: its
    // outcome is the socket's SO_ERROR once it is writable.
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        error = std::strerror(errno);
        continue;
      }
      if (!wait_ready(fd.get(), POLLOUT, deadline)) {
        // Keep the reason an earlier attempt gave (refused, unreachable): it says more.
        if (error.empty()) error = "no connection attempt finished";
        return {};
      }
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      if (so_error != 0) {
        error = std::strerror(so_error);
        continue;
      }
    }
    set_nodelay(fd.get());
    return fd;
  }
  return {};
}

}  // namespace

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  const auto room =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= room ? Clock::time_point::max() : now + timeout;
}

void Fd::reset() noexcept {
  // Not retried on EINTR: Linux releases the descriptor even then, and a retry could close a
  // descriptor another thread has just been given.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

IoResult send_all(int fd, std::span<const std::uint8_t> data, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return {IoStatus::timeout};
    } else {
      return {IoStatus::closed, n < 0 ? errno : 0};
    }
  }
  return {};
}

IoResult recv_exact(int fd, std::span<std::uint8_t> data, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::recv(fd, data.data() + done, data.size() - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      return {IoStatus::closed, 0};
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return {IoStatus::timeout};
    } else {
      return {IoStatus::closed, errno};
    }
  }
  return {};
}

Fd listen_on(const std::string& host, int port, std::string& error) {
  const AddrList list = resolve(host, port, AI_PASSIVE, error);
  for (const addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    const int one = 1;
    if (!fd || ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      error = std::strerror(errno);
      continue;
    }
    return fd;
  }
  return {};
}

int local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

Fd connect_until(const std::string& host, int port, Clock::time_point deadline,
                 std::string& last_error) {
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    if (Fd fd = try_connect(host, port, deadline, last_error)) return fd;
    const auto now = Clock::now();
    if (now >= deadline) return {};
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace kiln::dist::net
