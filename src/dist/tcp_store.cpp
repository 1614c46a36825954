// The rendezvous store's client (tcp_store.hpp).
#include "dist/tcp_store.hpp"

#include <fmt/format.h>

#include <cstring>

#include "dist/store_protocol.hpp"
#include "dist/store_server.hpp"
#include "kiln/error.hpp"

namespace kiln::dist {
namespace {

std::string describe(std::chrono::milliseconds t) {
  const auto ms = t.count();
  return ms >= 10000 && ms % 1000 == 0 ? fmt::format("{} s", ms / 1000) : fmt::format("{} ms", ms);
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i)
    s += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  if (keys.size() > 8) s += fmt::format(" and {} more", keys.size() - 8);
  return s;
}

void check_key(const char* op, const std::string& key) {
  if (key.size() > wire::kMaxKeyBytes)
    throw DistError(fmt::format("TcpStore: {}: a key of {} bytes is over the limit of {}", op,
                                key.size(), wire::kMaxKeyBytes));
}

}  // namespace

TcpStore::TcpStore(std::string host, int port, int rank, int world_size,
                   std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), rank_(rank), world_size_(world_size), timeout_(timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw DistError(fmt::format("TcpStore: rank {} is not in [0, {}) (world_size {})", rank,
                                world_size, world_size));
  if (port < 0 || port > 65535 || (port == 0 && rank != 0))
    throw DistError(
        fmt::format("TcpStore: port {} is not valid for rank {}: expected 1..65535 "
                    "(0, an ephemeral port, only on rank 0)",
                    port, rank));
  if (host_.empty()) throw DistError("TcpStore: the store's host is empty");
  if (timeout <= std::chrono::milliseconds::zero())
    throw DistError(
        fmt::format("TcpStore: the timeout must be positive, got {}", describe(timeout)));
  const auto deadline = net::deadline_after(timeout_);
  if (rank == 0) {
    server_ = std::make_unique<StoreServer>(host_, port);
    port_ = server_->port();
  }
  connect(deadline);
}

TcpStore::TcpStore(const LaunchEnv& env, std::chrono::milliseconds timeout)
    : TcpStore(env.master_addr, env.master_port, env.rank, env.world_size, timeout) {}

TcpStore::~TcpStore() {
  socket_.reset();  // first, so that the server sees this client leave before it stops
  server_.reset();
}

std::string TcpStore::address() const { return fmt::format("{}:{}", host_, port_); }

void TcpStore::connect(net::Clock::time_point deadline) {
  std::string last_error;
  socket_ = net::connect_until(host_, port_, deadline, last_error);
  if (!socket_)
    throw DistError(fmt::format(
        "TcpStore: connect from rank {} to the store at {} timed out after {} (last error: {}); "
        "is rank 0 running, and do all ranks have the same MASTER_ADDR and MASTER_PORT?",
        rank_, address(), describe(timeout_), last_error));
}

TcpStore::Bytes TcpStore::request(std::span<const std::uint8_t> frame, const std::string& what,
                                  net::Clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  const auto closed = [&](int error) {
    return DistError(fmt::format(
        "TcpStore: {} failed: the store at {} closed the connection; rank 0 may have exited "
        "(rank {}{}{})",
        what, address(), rank_, error ? ", " : "", error ? std::strerror(error) : ""));
  };
  if (closed_) throw closed(0);
  if (!socket_) connect(deadline);

  const auto check = [&](net::IoResult r) {
    if (r.status == net::IoStatus::ok) return;
    socket_.reset();  // a late reply must not answer the next request; the next call reconnects
    if (r.status == net::IoStatus::closed) {
      closed_ = true;
      throw closed(r.error);
    }
    throw DistError(fmt::format(
        "TcpStore: {} timed out after {} (rank {}, store at {}); a rank may have failed, or be "
        "slower than the timeout allows",
        what, describe(timeout_), rank_, address()));
  };
  check(net::send_all(socket_.get(), frame, deadline));
  std::uint8_t header[wire::kLengthBytes + 1];
  check(net::recv_exact(socket_.get(), header, deadline));
  const std::uint32_t len = wire::get_u32(header);
  if (len == 0 || len > 1 + wire::kMaxValueBytes) {
    socket_.reset();
    closed_ = true;
    throw DistError(
        fmt::format("TcpStore: {}: the store at {} sent a malformed reply (length {}); "
                    "is something other than a kiln store listening there? (rank {})",
                    what, address(), len, rank_));
  }
  Bytes payload(len - 1);
  check(net::recv_exact(socket_.get(), payload, deadline));
  if (header[wire::kLengthBytes] != static_cast<std::uint8_t>(wire::Status::ok))
    throw DistError(fmt::format("TcpStore: {} (rank {}, store at {})",
                                std::string(payload.begin(), payload.end()), rank_, address()));
  return payload;
}

void TcpStore::set(const std::string& key, std::span<const std::uint8_t> value) {
  check_key("set", key);
  if (value.size() > wire::kMaxValueBytes)
    throw DistError(
        fmt::format("TcpStore: set of key '{}': a value of {} bytes is over the limit "
                    "of {}",
                    key, value.size(), wire::kMaxValueBytes));
  request(wire::encode_set(key, value), fmt::format("set of key '{}'", key),
          net::deadline_after(timeout_));
}

TcpStore::Bytes TcpStore::get(const std::string& key) {
  check_key("get", key);
  return request(wire::encode_get(key), fmt::format("get of key '{}'", key),
                 net::deadline_after(timeout_));
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  check_key("add", key);
  const Bytes reply = request(wire::encode_add(key, delta), fmt::format("add to key '{}'", key),
                              net::deadline_after(timeout_));
  if (reply.size() != 8)
    throw DistError(
        fmt::format("TcpStore: add to key '{}': the store at {} replied with {} bytes, "
                    "not a counter",
                    key, address(), reply.size()));
  return wire::get_i64(reply.data());
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  std::size_t bytes = 1 + 4;
  for (const std::string& k : keys) {
    check_key("wait", k);
    bytes += 4 + k.size();
  }
  if (bytes > wire::kMaxFrameBytes)
    throw DistError(
        fmt::format("TcpStore: wait for {} keys: the request of {} bytes is over the "
                    "limit of {}",
                    keys.size(), bytes, wire::kMaxFrameBytes));
  request(wire::encode_wait(keys), fmt::format("wait for keys {}", quoted_keys(keys)),
          net::deadline_after(timeout_));
}

// A counter per generation: each rank adds one to the generation's counter, the last to arrive
// sets its "done" key, and every other rank waits for that key. Generations are counted per store,
// so they agree as long as every rank calls barrier() equally often; the keys stay in the store (a
// few bytes per barrier).
void TcpStore::barrier() {
  const std::uint64_t generation = barrier_generation_++;
  const std::string arrived_key = fmt::format("kiln/barrier/{}/arrived", generation);
  const std::string done_key = fmt::format("kiln/barrier/{}/done", generation);
  const auto deadline = net::deadline_after(timeout_);
  const std::string arriving = fmt::format("barrier {} (rank {} arriving)", generation, rank_);

  const Bytes reply = request(wire::encode_add(arrived_key, 1), arriving, deadline);
  const std::int64_t arrived = reply.size() == 8 ? wire::get_i64(reply.data()) : -1;
  if (arrived < 1 || arrived > world_size_)
    throw DistError(fmt::format(
        "TcpStore: barrier {}: rank {} arrived as number {} of {}; do two processes share a "
        "rank, or do ranks call barrier() unequally often? (store at {})",
        generation, rank_, arrived, world_size_, address()));
  const std::string waiting =
      fmt::format("barrier {} (rank {} arrived as number {} of {}; waiting on key '{}')",
                  generation, rank_, arrived, world_size_, done_key);
  // The last to arrive releases the others and is done: no request of its own follows, so a
  // rank 0 released by it may leave (and take the store with it) at once. The server answers the
  // set and every waiter in one round, before it can see rank 0's store close.
  if (arrived == world_size_) {
    request(wire::encode_set(done_key, {}), waiting, deadline);
    return;
  }
  request(wire::encode_wait({done_key}), waiting, deadline);
}

}  // namespace kiln::dist
