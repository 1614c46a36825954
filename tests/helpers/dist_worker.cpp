// One rank of a job that `kiln launch` starts, for tests/dist/test_dist_job.cpp: it meets the
// other ranks at the rendezvous store (launch_env() and TcpStore, as the process group will) and
// prints what it saw. `dist_worker MODE TIMEOUT_MS`, MODE one of:
//   meet         every rank sets its key, reads every rank's and passes a barrier;
//   leave-early  as meet, but rank 0 leaves (status 0) before the barrier, taking the store with
//                it: the others must fail at once, not at the timeout;
//   absent       as meet, but the last rank never comes: the others' barrier times out.
// Status 0, or 3 with the error on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/tcp_store.hpp"
#include "kiln/dist.hpp"
#include "kiln/error.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dist_worker meet|leave-early|absent TIMEOUT_MS\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::chrono::milliseconds timeout(std::atoll(argv[2]));
  int rank = -1;
  try {
    const kiln::dist::LaunchEnv env = kiln::dist::launch_env();
    rank = env.rank;
    if (mode == "absent" && rank == env.world_size - 1) return 0;
    kiln::dist::TcpStore store(env, timeout);
    const std::string pid = std::to_string(getpid());
    store.set("rank/" + std::to_string(rank), std::vector<std::uint8_t>(pid.begin(), pid.end()));
    int met = 0;
    for (int r = 0; r < env.world_size && !(mode == "absent" && r == env.world_size - 1); ++r) {
      store.get("rank/" + std::to_string(r));
      ++met;
    }
    if (mode == "leave-early" && rank == 0) return 0;
    store.barrier();
    std::printf("rank %d of %d met %d ranks\n", rank, env.world_size, met);
    std::fflush(stdout);
    store.barrier();  // (so that rank 0, whose store this is, leaves last)
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 3;
  }
  return 0;
}
