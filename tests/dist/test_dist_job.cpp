// A whole job on the CPU: `kiln launch` starts tests/helpers/dist_worker.cpp as its ranks, which
// meet at rank 0's store through launch_env(), as the process group will. Then the two ways a job
// must not hang: rank 0 gone (the others fail at once) and a rank that never comes (the others
// fail at the store's timeout), each ending the job with the first failure's status.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../kiln_command.hpp"
#include "../sibling_program.hpp"
#include "../temp_dir.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Job {
  kt::Outcome outcome;
  double seconds = 0;
};

Job launch(int ranks, const std::string& mode, int timeout_ms) {
  const kt::TempDir dir("kiln-dist-job");
  const std::vector<std::string> args{"launch",
                                      "-n",
                                      std::to_string(ranks),
                                      kt::sibling_program(KILN_DIST_WORKER),
                                      mode,
                                      std::to_string(timeout_ms)};
  const auto start = Clock::now();
  Job job{kt::run_kiln(dir.path(), args, {}), 0};
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return job;
}

TEST(DistJob, EveryRankMeetsEveryOtherAtTheStore) {
  const Job job = launch(4, "meet", 20000);
  ASSERT_EQ(job.outcome.status, 0) << job.outcome;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(kt::has(job.outcome.out, "rank " + std::to_string(rank) + " of 4 met 4 ranks\n"))
        << job.outcome;
  }
}

TEST(DistJob, RanksFailAtOnceWhenRankZeroIsGone) {
  const Job job = launch(3, "leave-early", 30000);
  EXPECT_EQ(job.outcome.status, 3) << job.outcome;
  EXPECT_TRUE(kt::has(job.outcome.err, "closed the connection; rank 0 may have exited"))
      << job.outcome;
  EXPECT_LT(job.seconds, 15) << "the ranks waited for the timeout\n" << job.outcome;
}

TEST(DistJob, ARankThatNeverComesEndsTheJobAtTheTimeout) {
  const Job job = launch(3, "absent", 1000);
  EXPECT_EQ(job.outcome.status, 3) << job.outcome;
  // Ranks 0 and 1 time out at about the same moment. Rank 0's store goes down with it, so rank 1
  // may see the store close before its own deadline, and `kiln launch` may stop rank 0 before its
  // message is out (seen once, H100, 2026-12-07, beside three other test shards): either message
  // says the job ended at the timeout.
  EXPECT_TRUE(kt::has(job.outcome.err, "timed out after") ||
              kt::has(job.outcome.err, "closed the connection; rank 0 may have exited"))
      << job.outcome;
  EXPECT_GE(job.seconds, 0.9) << "the job ended before the timeout\n" << job.outcome;
  EXPECT_LT(job.seconds, 15) << job.outcome;
}

}  // namespace
