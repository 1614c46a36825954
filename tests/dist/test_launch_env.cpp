// kiln::dist::launch_env (kiln/dist.hpp) over made-up environments: none set is a job of one, a
// torchrun set is read as is, local values default to global ones on one host, MASTER_* are
// required only beside another rank, and every missing or malformed value is a DistError that
// names the variable, its value and what was expected.
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <string>

#include "dist/launch_env.hpp"
#include "kiln/error.hpp"

namespace {

using kiln::DistError;
using kiln::dist::LaunchEnv;
using Vars = std::map<std::string, std::string>;

LaunchEnv read(const Vars& vars) {
  return kiln::dist::launch_env_from([&](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// A complete, valid set for a rank of a 2-host job of 8, which tests then spoil one variable of.
Vars two_hosts() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "10.0.0.7"},
          {"MASTER_PORT", "29400"}};
}

Vars with(Vars vars, const std::string& name, const std::string& value) {
  vars[name] = value;
  return vars;
}

Vars without(Vars vars, const std::string& name) {
  vars.erase(name);
  return vars;
}

// Expects DistError whose message contains every one of `parts`.
void expect_error(const Vars& vars, std::initializer_list<std::string> parts) {
  try {
    read(vars);
    ADD_FAILURE() << "no DistError";
  } catch (const DistError& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

TEST(LaunchEnv, NoneSetIsAJobOfOne) {
  const LaunchEnv env = read({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, ReadsTorchrunsVariables) {
  const LaunchEnv env = read(two_hosts());
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29400);
}

TEST(LaunchEnv, LocalValuesDefaultToGlobalOnes) {
  const LaunchEnv env = read(without(without(two_hosts(), "LOCAL_RANK"), "LOCAL_WORLD_SIZE"));
  EXPECT_EQ(env.local_rank, 5);
  EXPECT_EQ(env.local_world_size, 8);
  // LOCAL_WORLD_SIZE alone: LOCAL_RANK still defaults to RANK, and must fit.
  EXPECT_EQ(read(with(without(two_hosts(), "LOCAL_RANK"), "LOCAL_WORLD_SIZE", "6")).local_rank, 5);
  expect_error(without(two_hosts(), "LOCAL_RANK"),
               {"LOCAL_RANK is not set", "RANK=5", "LOCAL_WORLD_SIZE=4"});
  // LOCAL_RANK alone: LOCAL_WORLD_SIZE defaults to WORLD_SIZE.
  EXPECT_EQ(read(without(two_hosts(), "LOCAL_WORLD_SIZE")).local_world_size, 8);
}

TEST(LaunchEnv, WorldOfOneNeedsNoMaster) {
  const LaunchEnv env = read({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  // Given anyway, they are read (and checked).
  EXPECT_EQ(read({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "1234"}}).master_port, 1234);
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "0"}}, {"MASTER_PORT=\"0\""});
}

TEST(LaunchEnv, MasterIsRequiredBesideOtherRanks) {
  expect_error(without(two_hosts(), "MASTER_ADDR"), {"MASTER_ADDR is not set", "WORLD_SIZE=8"});
  expect_error(without(two_hosts(), "MASTER_PORT"), {"MASTER_PORT is not set", "WORLD_SIZE=8"});
}

TEST(LaunchEnv, RankAndWorldSizeComeTogether) {
  expect_error({{"RANK", "0"}}, {"WORLD_SIZE is not set", "RANK is"});
  expect_error({{"WORLD_SIZE", "2"}}, {"RANK is not set", "WORLD_SIZE is"});
  // Any one of the six makes this a launched process, which must know its rank.
  expect_error({{"MASTER_ADDR", "10.0.0.7"}}, {"RANK is not set", "MASTER_ADDR"});
  expect_error({{"LOCAL_RANK", "0"}, {"MASTER_PORT", "1"}},
               {"RANK is not set", "LOCAL_RANK, MASTER_PORT are"});
}

TEST(LaunchEnv, IntegersAreWholeAndDecimal) {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"})
    for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x1", "1.0", "one", "-"})
      expect_error(with(two_hosts(), name, bad),
                   {std::string(name) + "=\"" + bad + "\"", "is not an integer", "expected"});
}

TEST(LaunchEnv, ValuesMustBeInRange) {
  const auto check = [](const char* name, const char* value, const char* expected) {
    expect_error(with(two_hosts(), name, value),
                 {std::string(name) + "=\"" + value + "\"", "out of range", expected});
  };
  check("RANK", "8", "[0, 8)");
  check("RANK", "-1", "[0, 8)");
  check("RANK", "99999999999999999999", "[0, 8)");  // beyond 64 bits
  check("WORLD_SIZE", "0", ">= 1");
  check("WORLD_SIZE", "4294967297", ">= 1");  // beyond int
  check("LOCAL_RANK", "4", "[0, 4)");
  check("LOCAL_WORLD_SIZE", "0", "[1, 8]");
  check("LOCAL_WORLD_SIZE", "9", "[1, 8]");
  check("MASTER_PORT", "0", "1..65535");
  check("MASTER_PORT", "65536", "1..65535");
  // RANK's range follows WORLD_SIZE; a RANK that fits a larger world fails a smaller one.
  expect_error(with(two_hosts(), "WORLD_SIZE", "5"), {"RANK=\"5\"", "WORLD_SIZE=5"});
  EXPECT_EQ(read(with(two_hosts(), "MASTER_PORT", "65535")).master_port, 65535);
}

TEST(LaunchEnv, MasterAddrMustBeAnAddress) {
  expect_error(with(two_hosts(), "MASTER_ADDR", ""), {"MASTER_ADDR=\"\"", "host name"});
  expect_error(with(two_hosts(), "MASTER_ADDR", "node 1"), {"MASTER_ADDR=\"node 1\""});
  EXPECT_EQ(read(with(two_hosts(), "MASTER_ADDR", "node-1.cluster")).master_addr, "node-1.cluster");
}

// The public function reads the process environment (restored afterwards: nothing else in this
// test process reads these variables).
TEST(LaunchEnv, PublicFunctionReadsTheProcessEnvironment) {
  const Vars vars = two_hosts();
  std::map<std::string, std::optional<std::string>> saved;
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name.c_str());
    saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  const LaunchEnv env = kiln::dist::launch_env();
  for (const auto& [name, old] : saved) {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
}

}  // namespace
