// The `kiln` command as a user runs it, for the CLI tests: the built binary (KILN_CLI, or its
// copy beside the test binary), its exit status, stdout and stderr; start_program runs any other
// program built beside the tests the same way.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sibling_program.hpp"

extern char** environ;

namespace kt {

struct Outcome {
  int status = -1;  // the exit status; -1 when killed by a signal
  int signal = 0;   // the signal that killed it, if one did
  std::string out, err;
  std::string args;  // for failure messages
};

inline std::ostream& operator<<(std::ostream& os, const Outcome& r) {
  return os << "kiln " << r.args << " -> status " << r.status << " (signal " << r.signal
            << ")\n--- stdout:\n"
            << r.out << "--- stderr:\n"
            << r.err;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

inline std::size_t occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Whether `text` (less one trailing newline) is one JSON object or array whose braces and
// brackets balance outside strings: a crude check that it parses, closing only at its end.
inline bool is_one_json_value(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (depth < 0 || (depth == 0 && i + 1 != text.size())) return false;
  }
  return depth == 0 && !text.empty();
}

// Starts `program` (a path) with `args` in this process's environment less kiln's switches
// (KILN_* but KILN_TEST_*) and less the variables `env` sets, plus the `env` entries
// ("NAME=VALUE"). stdout and stderr go to files in `dir`, so nothing can block. finish_kiln
// waits for it.
inline pid_t start_program(const std::string& program, const std::filesystem::path& dir,
                           const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    if (s.rfind("KILN_", 0) == 0 && s.rfind("KILN_TEST_", 0) != 0) continue;
    const std::string name = s.substr(0, s.find('=') + 1);
    bool replaced = false;
    for (const std::string& e2 : env) replaced = replaced || e2.rfind(name, 0) == 0;
    if (!replaced) envs.push_back(s);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const std::vector<char*> argv = null_terminated(argv_s), envp = null_terminated(envs);

  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  return pid;
}

// start_program for the kiln binary.
inline pid_t start_kiln(const std::filesystem::path& dir, const std::vector<std::string>& args,
                        const std::vector<std::string>& env) {
  return start_program(sibling_program(KILN_CLI), dir, args, env);
}

// Waits for the kiln process `pid` that start_kiln(dir, args, ...) started.
inline Outcome finish_kiln(pid_t pid, const std::filesystem::path& dir,
                           const std::vector<std::string>& args) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  Outcome r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = slurp(dir / "stdout");
  r.err = slurp(dir / "stderr");
  for (const auto& a : args) r.args += (r.args.empty() ? "" : " ") + a;
  return r;
}

// start_kiln, then finish_kiln.
inline Outcome run_kiln(const std::filesystem::path& dir, const std::vector<std::string>& args,
                        const std::vector<std::string>& env) {
  return finish_kiln(start_kiln(dir, args, env), dir, args);
}

}  // namespace kt
