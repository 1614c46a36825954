// Running tests/helpers/store_worker.cpp (KILN_STORE_WORKER) from a test: several at once on one
// store, or one in a mount namespace or under another user of its own.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sibling_program.hpp"

extern char** environ;

namespace kt {

struct Child {
  pid_t pid = -1;
  int in = -1;   // the child's stdin (write end), or -1
  int out = -1;  // the child's stdout (read end), or -1
};

// Starts the worker with `args`; `env` entries "NAME=VALUE" set a variable, "NAME" unsets it.
// With merge_stderr, the child's stderr goes where its stdout goes.
// posix_spawn, not fork: the test process may have threads (TBB, CUDA) that fork would leave
// half-copied, and the child runs a fresh executable anyway.
inline Child spawn_worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          bool pipe_in, bool pipe_out, bool merge_stderr = false) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    bool replaced = false;
    for (const auto& o : env) {
      const std::string name = o.substr(0, o.find('='));
      replaced |= s.compare(0, name.size() + 1, name + "=") == 0;
    }
    if (!replaced) envs.push_back(s);
  }
  for (const auto& o : env)
    if (o.find('=') != std::string::npos) envs.push_back(o);
  std::vector<std::string> argv_s{sibling_program(KILN_STORE_WORKER)};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  const std::vector<char*> argv = null_terminated(argv_s), envp = null_terminated(envs);

  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if ((pipe_in && pipe2(in, O_CLOEXEC) != 0) || (pipe_out && pipe2(out, O_CLOEXEC) != 0))
    throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (pipe_in) posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  if (pipe_out) posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  if (pipe_out && merge_stderr) posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  Child c;
  const int rc = posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (pipe_in) close(in[0]);
  if (pipe_out) close(out[1]);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  c.in = pipe_in ? in[1] : -1;
  c.out = pipe_out ? out[0] : -1;
  return c;
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fd);
  return out;
}

// The child's exit code, or 128 + the signal that killed it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs the worker with `args` (stdout and stderr together) to its end: its exit code and output.
inline std::pair<int, std::string> run_worker(const std::vector<std::string>& args,
                                              const std::vector<std::string>& env = {}) {
  Child c = spawn_worker(args, env, false, true, true);
  std::string out = read_all(c.out);
  return {wait_exit(c.pid), out};
}

}  // namespace kt
