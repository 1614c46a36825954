// The rendezvous store's server, which rank 0 runs (tcp_store.hpp is the client every rank uses).
// One background thread serves every connection with poll(): a handful to a few thousand ranks
// send small requests, so one thread is enough and keeps the key table free of locks.
#pragma once

#include <string>
#include <thread>

#include "dist/socket.hpp"

namespace kiln::dist {

class StoreServer {
 public:
  // Listens on host:port (0: an ephemeral port, see port()) and starts serving; DistError when it
  // cannot listen (the port is taken, the host is not one of this machine's addresses).
  StoreServer(const std::string& host, int port);
  // Stops the thread and closes every connection, after serving for up to 5 s more the clients
  // that are still connected and not all waiting for keys no one is left to set: clients still
  // waiting then see the store close.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  net::Fd listen_;
  net::Fd wake_;  // an eventfd the destructor writes to end the thread's poll()
  int port_ = 0;
  std::thread thread_;
};

}  // namespace kiln::dist
