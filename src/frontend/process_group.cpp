// kiln::dist's process group (include/kiln/process_group.hpp): the launch environment, the
// rendezvous store and the backend's communicator of this process, made once and kept until
// destroy_process_group().
//
// The group is never destroyed at exit on its own: a communicator torn down by a static
// destructor would run after CUDA's own teardown has begun. A program that ends without
// destroy_process_group() leaves its transport to the operating system, as PyTorch warns of.
#include "frontend/process_group.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/tcp_store.hpp"
#include "frontend/ops_common.hpp"
#include "kiln/error.hpp"
#include "kiln/process_group.hpp"

namespace kiln::dist {
namespace {

// The store key of the communicator's id, which rank 0 makes and every other rank reads.
constexpr const char* kIdKey = "kiln/communicator_id";

std::mutex group_mutex;
detail::ProcessGroupState* the_group = nullptr;  // see the file comment: never freed at exit

[[noreturn]] void no_group(const char* op) {
  throw DistError(
      fmt::format("{}: no process group; call kiln::dist::init_process_group(device) first", op));
}

}  // namespace

namespace detail {

ProcessGroupState& group(const char* op) {
  std::lock_guard lock(group_mutex);
  if (!the_group) no_group(op);
  return *the_group;
}

}  // namespace detail

void init_process_group(Device device, const ProcessGroupOptions& options) {
  std::lock_guard lock(group_mutex);
  if (the_group)
    throw DistError(
        "init_process_group: this process has a process group already; call "
        "destroy_process_group() first");
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds))
    throw ValueError(fmt::format("init_process_group: timeout_seconds must be positive, got {}",
                                 options.timeout_seconds));
  const LaunchEnv env = launch_env();
  kiln::detail::Backend& be = kiln::detail::backend_of(device);
  auto state = std::make_unique<detail::ProcessGroupState>(
      detail::ProcessGroupState{device, env, nullptr, nullptr});
  std::vector<std::byte> id;
  if (env.world_size > 1) {
    const auto timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(std::ceil(options.timeout_seconds * 1000)));
    state->store = std::make_unique<TcpStore>(env, timeout);
    if (env.rank == 0) {
      id = be.communicator_id();
      state->store->set(kIdKey,
                        std::span(reinterpret_cast<const std::uint8_t*>(id.data()), id.size()));
    } else {
      const TcpStore::Bytes bytes = state->store->get(kIdKey);
      id.resize(bytes.size());
      std::memcpy(id.data(), bytes.data(), bytes.size());
    }
  } else {
    id = be.communicator_id();
  }
  state->comm = be.communicator(id, env.rank, env.world_size, options.timeout_seconds);
  the_group = state.release();
}

bool is_initialized() {
  std::lock_guard lock(group_mutex);
  return the_group != nullptr;
}

void destroy_process_group() {
  std::unique_ptr<detail::ProcessGroupState> state;
  {
    std::lock_guard lock(group_mutex);
    if (!the_group) no_group("destroy_process_group");
    state.reset(the_group);
    the_group = nullptr;
  }
  // Every rank's last collective is queued before any rank's store closes (rank 0's closes with
  // it), and the device has run them before the communicator goes.
  if (state->store) state->store->barrier();
  state->device.sync();
}

int rank() { return detail::group("rank").env.rank; }
int world_size() { return detail::group("world_size").env.world_size; }
Device group_device() { return detail::group("group_device").device; }

void barrier() {
  detail::ProcessGroupState& g = detail::group("barrier");
  if (g.store) g.store->barrier();
}

}  // namespace kiln::dist
