// The launch environment's parser, apart from the process environment, so that tests can give it
// any set of variables without touching the real one.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "kiln/dist.hpp"

namespace kiln::dist {

// A variable's value, or nullopt when it is not set (an empty value is set, and invalid).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// launch_env() over `lookup` instead of std::getenv: the same rules and errors.
LaunchEnv launch_env_from(const EnvLookup& lookup);

}  // namespace kiln::dist
