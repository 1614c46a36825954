// The launch environment (kiln/dist.hpp). Values are parsed strictly: a launcher writes plain
// decimal integers, so anything else ("1 ", "+1", "0x1", "2.0") is a mistake of a hand-written
// script, and reporting it beats reading a prefix and joining the wrong job. A partial set of
// variables is an error too, never a silent job of one: a rank that wrongly believed it was alone
// would train on its own while the others wait for it at the first rendezvous.
#include "dist/launch_env.hpp"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "kiln/error.hpp"

namespace kiln::dist {
namespace {

constexpr std::array<const char*, 6> kVariables{
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

// `value` of variable `name` as an integer in [lo, hi]; `expected` says the range in words.
int parse_int(const char* name, const std::string& value, long long lo, long long hi,
              const std::string& expected) {
  long long v = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec == std::errc::invalid_argument || ptr != end)
    throw DistError(fmt::format("launch environment: {}=\"{}\" is not an integer; expected {}",
                                name, value, expected));
  if (ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw DistError(fmt::format("launch environment: {}=\"{}\" is out of range; expected {}", name,
                                value, expected));
  return static_cast<int>(v);
}

}  // namespace

LaunchEnv launch_env_from(const EnvLookup& lookup) {
  std::string set_names;  // the variables that are set, for the messages
  for (const char* name : kVariables)
    if (lookup(name)) set_names += (set_names.empty() ? "" : ", ") + std::string(name);
  if (set_names.empty()) return {};

  LaunchEnv env;
  const auto rank = lookup("RANK"), world_size = lookup("WORLD_SIZE");
  for (const auto& [name, value] : {std::pair{"RANK", &rank}, std::pair{"WORLD_SIZE", &world_size}})
    if (!*value)
      throw DistError(fmt::format(
          "launch environment: {} is not set, but {} {}; a launcher (torchrun, `kiln launch`) "
          "sets RANK and WORLD_SIZE together, and a single process sets none of RANK, WORLD_SIZE, "
          "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
          name, set_names, set_names.find(',') == std::string::npos ? "is" : "are"));

  const int max_int = std::numeric_limits<int>::max();
  env.world_size = parse_int("WORLD_SIZE", *world_size, 1, max_int, "an integer >= 1");
  env.rank = parse_int(
      "RANK", *rank, 0, env.world_size - 1,
      fmt::format("an integer in [0, {}) (WORLD_SIZE={})", env.world_size, env.world_size));

  // One host unless told otherwise: then every rank is local and local ranks are global ranks.
  env.local_world_size = env.world_size;
  if (const auto v = lookup("LOCAL_WORLD_SIZE"))
    env.local_world_size = parse_int("LOCAL_WORLD_SIZE", *v, 1, env.world_size,
                                     fmt::format("an integer in [1, {}] (at most WORLD_SIZE={})",
                                                 env.world_size, env.world_size));
  if (const auto v = lookup("LOCAL_RANK")) {
    env.local_rank = parse_int("LOCAL_RANK", *v, 0, env.local_world_size - 1,
                               fmt::format("an integer in [0, {}) (LOCAL_WORLD_SIZE={})",
                                           env.local_world_size, env.local_world_size));
  } else if (env.rank >= env.local_world_size) {
    throw DistError(fmt::format(
        "launch environment: LOCAL_RANK is not set, so it defaults to RANK={}, which is not below "
        "LOCAL_WORLD_SIZE={}; set LOCAL_RANK as torchrun and `kiln launch` do",
        env.rank, env.local_world_size));
  } else {
    env.local_rank = env.rank;
  }

  // Every rank must find rank 0's store; only a job of one has nobody else to agree with.
  const auto addr = lookup("MASTER_ADDR"), port = lookup("MASTER_PORT");
  for (const auto& [name, value] :
       {std::pair{"MASTER_ADDR", &addr}, std::pair{"MASTER_PORT", &port}})
    if (!*value && env.world_size > 1)
      throw DistError(fmt::format(
          "launch environment: {} is not set; with WORLD_SIZE={} every rank needs the address "
          "and port of rank 0's store (MASTER_ADDR, MASTER_PORT)",
          name, env.world_size));
  if (addr) {
    if (addr->empty() || addr->find_first_of(" \t\r\n") != std::string::npos)
      throw DistError(fmt::format(
          "launch environment: MASTER_ADDR=\"{}\" is not valid; expected a host name or an IP "
          "address, without spaces",
          *addr));
    env.master_addr = *addr;
  }
  if (port) env.master_port = parse_int("MASTER_PORT", *port, 1, 65535, "a port in 1..65535");
  return env;
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (!value) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace kiln::dist
