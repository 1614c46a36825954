// The rendezvous store (docs/distributed.md), as torch's TCPStore: rank 0 runs the server
// (store_server.hpp) and every rank, rank 0 included, is a client over TCP. The process group
// exchanges NCCL's unique id through it and runs its barriers on it.
//
// Every call that waits (the connect, get, wait, barrier, and set and add too, should the server
// hang) is bounded by the store's timeout and then throws DistError naming the operation, the
// key, the store's address, the rank and the timeout. After a timeout the connection is closed,
// since its late reply would answer the next request, and the next call connects again. A server
// that went away (rank 0 exited) makes the waiting call and every later one throw at once.
//
// A store serves one call at a time: calls from several threads take turns, so a thread waiting
// in get() holds up the others; a thread that must set what another waits for needs a store of
// its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dist/socket.hpp"
#include "kiln/dist.hpp"

namespace kiln::dist {

class StoreServer;

class TcpStore {
 public:
  using Bytes = std::vector<std::uint8_t>;

  // Rank 0 starts the server on host:port (port 0: an ephemeral port, see port()); then every
  // rank connects to host:port, retrying until `timeout` while the server is not up yet.
  TcpStore(std::string host, int port, int rank, int world_size, std::chrono::milliseconds timeout);
  // The store of a launched job: rank 0's at MASTER_ADDR:MASTER_PORT.
  TcpStore(const LaunchEnv& env, std::chrono::milliseconds timeout);
  // Closes the connection; on rank 0 also stops the server, so ranks still using the store see
  // it close (a job ends with a barrier so that rank 0 leaves last).
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Stores `value` (any bytes, at most 64 MiB) under `key` (at most 4 KiB), replacing any.
  void set(const std::string& key, std::span<const std::uint8_t> value);
  // The value of `key`, waiting until some rank sets it.
  Bytes get(const std::string& key);
  // Adds `delta` to the counter `key` (0 when absent), atomically among all ranks; returns the
  // new value. get() of a counter reads it as decimal text.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Returns once every key is set.
  void wait(const std::vector<std::string>& keys);
  // Returns once all world_size ranks have called barrier() as many times as this one.
  void barrier();

 private:
  // Sends a request frame and returns its reply's payload; `what` names the call for messages.
  Bytes request(std::span<const std::uint8_t> frame, const std::string& what,
                net::Clock::time_point deadline);
  void connect(net::Clock::time_point deadline);
  std::string address() const;

  std::string host_;
  int port_;
  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<StoreServer> server_;  // rank 0's
  std::mutex mutex_;                     // one request on the connection at a time
  net::Fd socket_;                       // empty after a timeout, until the next call reconnects
  bool closed_ = false;                  // the server went away: every call fails at once
  std::atomic<std::uint64_t> barrier_generation_{0};
};

}  // namespace kiln::dist
