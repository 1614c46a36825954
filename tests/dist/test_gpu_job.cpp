// Whole jobs over every GPU of the machine: `kiln launch -n <GPUs>` starts
// tests/helpers/gpu_rank.cpp as the ranks, each on its own GPU through NCCL. Every collective of
// every dtype against a float64 host reference, nn::DataParallel's replicas equal to each other
// and to one process trained on the whole global batch, and (with two GPUs or more) a rank that
// leaves mid-job ending the others at the group's timeout through the watchdog. One GPU runs a
// job of one; no GPU (CI) skips.
#include <gtest/gtest.h>

#if defined(KILN_GPU_RANK)

#include <chrono>
#include <string>
#include <vector>

#include "../kiln_command.hpp"
#include "../require_cuda.hpp"
#include "../sibling_program.hpp"
#include "../temp_dir.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int gpus() {
  std::string why;
  return kiln::cuda::device_count(&why);
}

struct Job {
  kt::Outcome outcome;
  double seconds = 0;
};

Job launch(int ranks, const std::string& mode) {
  const kt::TempDir dir("kiln-gpu-job");
  const std::vector<std::string> args{"launch", "-n", std::to_string(ranks),
                                      kt::sibling_program(KILN_GPU_RANK), mode};
  const auto start = Clock::now();
  Job job{kt::run_kiln(dir.path(), args, {}), 0};
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return job;
}

void expect_every_rank_passed(const Job& job, int n, const std::string& mode) {
  ASSERT_EQ(job.outcome.status, 0) << job.outcome;
  for (int rank = 0; rank < n; ++rank)
    EXPECT_TRUE(kt::has(job.outcome.out, "rank " + std::to_string(rank) + " of " +
                                             std::to_string(n) + ": " + mode + " passed\n"))
        << job.outcome;
}

TEST(GpuJob, EveryCollectiveMatchesTheHostReferenceOnEveryRank) {
  KILN_REQUIRE_CUDA();
  expect_every_rank_passed(launch(gpus(), "collectives"), gpus(), "collectives");
}

TEST(GpuJob, DataParallelReplicasAreEqualAndMatchOneProcessOnTheWholeBatch) {
  KILN_REQUIRE_CUDA();
  expect_every_rank_passed(launch(gpus(), "ddp"), gpus(), "ddp");
}

TEST(GpuJob, ARankThatLeavesMidJobEndsTheOthersAtTheTimeout) {
  KILN_REQUIRE_CUDA();
  if (gpus() < 2) GTEST_SKIP() << "needs two GPUs: a job of one has no peer to lose";
  const Job job = launch(gpus(), "die");
  EXPECT_EQ(job.outcome.status, 1) << job.outcome;
  EXPECT_TRUE(kt::has(job.outcome.err, "DistError: rank 0 of")) << job.outcome;
  EXPECT_TRUE(kt::has(job.outcome.err, "all_reduce")) << job.outcome;
  EXPECT_LT(job.seconds, 30) << "the watchdog's timeout is 5 s\n" << job.outcome;
}

}  // namespace

#endif
