// The process group's state, shared by src/frontend/process_group.cpp (which makes it) and
// src/frontend/collective.cpp (which queues collectives on its communicator).
#pragma once

#include <memory>

#include "backend/backend.hpp"
#include "dist/tcp_store.hpp"
#include "kiln/device.hpp"
#include "kiln/dist.hpp"

namespace kiln::dist::detail {

struct ProcessGroupState {
  Device device;
  LaunchEnv env;
  std::unique_ptr<TcpStore> store;  // null in a group of one, which needs no rendezvous
  std::unique_ptr<kiln::detail::Communicator> comm;
};

// This process's group; DistError naming `op` when there is none.
ProcessGroupState& group(const char* op);

}  // namespace kiln::dist::detail
