// `kiln launch -n N program args...`: one process per GPU, as torchrun starts them. Each process
// gets the variables kiln::dist::launch_env() reads (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; and GROUP_RANK, the node's rank), in its own process
// group, so that the launcher alone decides what reaches it:
//   - SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to every rank's group;
//   - when one rank fails (a non-zero status or a signal), the others get SIGTERM, and SIGKILL
//     after --grace seconds, so that no rank waits forever on a peer that is gone;
//   - the launcher's status is the first failure's (its exit status, 128 + its signal), else
//     128 + the signal the launcher was sent, else 0.
// A second host joins with --nnodes, --node-rank and --master-addr (docs/distributed.md).
#pragma once

#include <string>
#include <vector>

namespace kiln::cli {

struct LaunchOptions {
  int nproc = 1;                     // processes on this node (-n)
  int nnodes = 1;                    // nodes in all
  int node_rank = 0;                 // this node's rank among them
  std::string master_addr;           // rank 0's host; empty: 127.0.0.1, on one node only
  int master_port = 0;               // 0: a free port of this host, on one node only (else 29500)
  double grace_seconds = 10;         // from SIGTERM to SIGKILL for the ranks left after a failure
  std::vector<std::string> command;  // the program (looked up in PATH) and its arguments
};

// Starts the ranks and waits for all of them; returns the launcher's exit status. Throws
// kiln::ValueError for options that contradict each other, kiln::DistError when a rank cannot be
// started (the ranks already running are killed first).
int run_launch(const LaunchOptions& options);

}  // namespace kiln::cli
