// `kiln launch` as a user runs it: the ranks' environment, a failing rank stopping the others, a
// rank deaf to SIGTERM killed after the grace, signals forwarded, and bad command lines. The
// ranks are small shell scripts that write what they see into the test's directory.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kiln_command.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class CliLaunch : public ::testing::Test {
 protected:
  // `kiln launch <options> sh -c <script> <dir>`: the script sees the test's directory as $0.
  kt::Outcome launch(const std::vector<std::string>& options, const std::string& script) {
    return kt::run_kiln(dir_.path(), args(options, script), {});
  }
  std::vector<std::string> args(const std::vector<std::string>& options,
                                const std::string& script) const {
    std::vector<std::string> a{"launch"};
    a.insert(a.end(), options.begin(), options.end());
    a.insert(a.end(), {"sh", "-c", script, dir_.path().string()});
    return a;
  }
  std::string file(const std::string& name) const { return kt::slurp(dir_.path() / name); }
  bool exists(const std::string& name) const { return fs::exists(dir_.path() / name); }

  kt::TempDir dir_{"kiln-launch"};
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST_F(CliLaunch, EachRankSeesTorchrunsVariables) {
  const kt::Outcome r = launch(
      {"-n", "3"},
      R"(echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR" > "$0/rank$RANK"; echo "$MASTER_PORT" > "$0/port$RANK")");
  ASSERT_EQ(r.status, 0) << r;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(file("rank" + std::to_string(rank)),
              std::to_string(rank) + " 3 " + std::to_string(rank) + " 3 0 127.0.0.1\n")
        << r;
  }
  // One free port, the same for every rank.
  const std::string port = file("port0");
  EXPECT_EQ(file("port1"), port);
  EXPECT_EQ(file("port2"), port);
  const int p = std::stoi(port);
  EXPECT_GT(p, 0);
  EXPECT_LE(p, 65535);
}

TEST_F(CliLaunch, ASecondNodeNumbersItsRanksAfterTheFirstNodes) {
  const kt::Outcome r = launch(
      {"-n", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr", "10.1.2.3", "--master-port",
       "12345"},
      R"(echo "$RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT" > "$0/local$LOCAL_RANK")");
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_EQ(file("local0"), "2 6 0 1 10.1.2.3 12345\n") << r;
  EXPECT_EQ(file("local1"), "3 6 1 1 10.1.2.3 12345\n") << r;
}

TEST_F(CliLaunch, TheProgramsOwnOptionsAreItsOwn) {
  // -n and --help after the program belong to it, not to kiln.
  const kt::Outcome r =
      kt::run_kiln(dir_.path(),
                   {"launch", "-n", "1", "sh", "-c", R"(printf '%s\n' "$*" > "$0/args")",
                    dir_.path().string(), "-n", "5", "--help"},
                   {});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_EQ(file("args"), "-n 5 --help\n");
}

TEST_F(CliLaunch, AFailingRankStopsTheOthersAndGivesItsStatus) {
  const auto start = Clock::now();
  const kt::Outcome r = launch({"-n", "3"},
                               // (Rank 1 fails once the others have set their trap.)
                               R"(if [ "$RANK" = 1 ]; then
           while [ ! -e "$0/ready0" ] || [ ! -e "$0/ready2" ]; do sleep 0.02; done; exit 7
         fi
         trap 'echo stopped > "$0/stopped$RANK"; exit 0' TERM; touch "$0/ready$RANK"; sleep 60 & wait)");
  EXPECT_EQ(r.status, 7) << r;
  EXPECT_LT(seconds_since(start), 20) << r;
  EXPECT_TRUE(kt::has(r.err, "kiln launch: rank 1 (pid ")) << r;
  EXPECT_TRUE(kt::has(r.err, ") exited with status 7; stopping the other 2 ranks")) << r;
  EXPECT_EQ(file("stopped0"), "stopped\n") << r;
  EXPECT_EQ(file("stopped2"), "stopped\n") << r;
}

TEST_F(CliLaunch, ARankKilledByASignalGivesTheShellsStatus) {
  const kt::Outcome r =
      launch({"-n", "2"}, R"(if [ "$RANK" = 0 ]; then kill -KILL $$; fi; exit 0)");
  EXPECT_EQ(r.status, 128 + SIGKILL) << r;
  EXPECT_TRUE(kt::has(r.err, "rank 0 (pid ")) << r;
  EXPECT_TRUE(kt::has(r.err, "was killed by signal 9")) << r;
}

TEST_F(CliLaunch, ARankDeafToSigtermIsKilledAfterTheGrace) {
  const auto start = Clock::now();
  const kt::Outcome r = launch({"-n", "2", "--grace", "0.5"},
                               R"(if [ "$RANK" = 0 ]; then
                                    while [ ! -e "$0/ready1" ]; do sleep 0.02; done; exit 3
                                  fi
                                  trap '' TERM; touch "$0/ready1"; sleep 60)");
  EXPECT_EQ(r.status, 3) << r;
  EXPECT_LT(seconds_since(start), 20) << r;
  EXPECT_TRUE(kt::has(r.err, "1 rank still running 0.5 s after SIGTERM; sending SIGKILL")) << r;
}

TEST_F(CliLaunch, SigtermToTheLauncherReachesEveryRank) {
  const std::vector<std::string> a = args(
      {"-n", "2"},
      R"(trap 'echo got > "$0/term$RANK"; exit 0' TERM; touch "$0/ready$RANK"; sleep 60 & wait)");
  const pid_t pid = kt::start_kiln(dir_.path(), a, {});
  const auto start = Clock::now();
  while (!(exists("ready0") && exists("ready1")) && seconds_since(start) < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const kt::Outcome r = kt::finish_kiln(pid, dir_.path(), a);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r;
  EXPECT_EQ(file("term0"), "got\n") << r;
  EXPECT_EQ(file("term1"), "got\n") << r;
}

TEST_F(CliLaunch, BadCommandLinesAreRefusedWithAMessage) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"launch", "-n", "2"}, "no program to start"},
      {{"launch", "-n", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "true"},
       "--node-rank 2 is not a rank of 2 nodes (0 to 1)"},
      {{"launch", "-n", "2", "--nnodes", "2", "true"}, "--nnodes 2 needs --master-addr"},
      {{"launch", "-n", "1", "--master-port", "70000", "true"},
       "--master-port 70000 is not a port"},
      {{"launch", "-n", "1", "--grace", "-1", "true"}, "--grace must be at least 0 s"},
      {{"launch", "-n", "2", "/no/such/program"},
       "cannot start '/no/such/program' as rank 0: No such file or directory"},
  };
  for (const Case& c : cases) {
    const kt::Outcome r = kt::run_kiln(dir_.path(), c.args, {});
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_TRUE(kt::has(r.err, c.message)) << "expected: " << c.message << "\n" << r;
  }
  const kt::Outcome zero = kt::run_kiln(dir_.path(), {"launch", "-n", "0", "true"}, {});
  EXPECT_NE(zero.status, 0) << zero;
  EXPECT_TRUE(kt::has(zero.err, "-n")) << zero;
}

}  // namespace
