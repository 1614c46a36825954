// Distributed training (docs/distributed.md): where this process sits in a multi-process job.
//
// A launcher (torchrun, `kiln launch`) starts one process per GPU and tells each one its place
// through environment variables; launch_env() reads them. A process started by hand, with none of
// them set, is a job of one.
#pragma once

#include <string>

namespace kiln::dist {

struct LaunchEnv {
  int rank = 0;                           // RANK: this process among all of the job's, 0-based
  int world_size = 1;                     // WORLD_SIZE: processes in the job
  int local_rank = 0;                     // LOCAL_RANK: this process among its host's (its GPU)
  int local_world_size = 1;               // LOCAL_WORLD_SIZE: processes on this host
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR: the host of rank 0, which runs the store
  int master_port = 29500;                // MASTER_PORT: the port rank 0's store listens on
};

// The launch environment, from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT as torchrun sets them. None set: one process (the defaults above). Otherwise RANK
// and WORLD_SIZE are required; LOCAL_RANK defaults to RANK and LOCAL_WORLD_SIZE to WORLD_SIZE (one
// host); MASTER_ADDR and MASTER_PORT default only when WORLD_SIZE is 1. Each value must be a whole
// integer in range (0 <= RANK < WORLD_SIZE, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE, a
// port in 1..65535); a missing or bad one throws DistError naming the variable, its value and what
// was expected.
LaunchEnv launch_env();

}  // namespace kiln::dist
