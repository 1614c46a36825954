#include "launch.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/error.hpp"

extern char** environ;

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kDefaultPort = 29500;  // torchrun's

// A port of this host nobody listens on now: bound as port 0, read back, closed. Another program
// may take it before rank 0 binds it; a launch on one node without --master-port accepts that
// race (as torchrun's --standalone does) so that two launches on one host never collide on a
// fixed port.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw DistError(fmt::format("launch: no socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) == 0;
  const int error = errno;
  close(fd);
  if (!ok)
    throw DistError(fmt::format("launch: no free port on this host: {}", std::strerror(error)));
  return ntohs(a.sin_port);
}

// This process's environment with `set` replacing (or adding) its variables.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (std::none_of(set.begin(), set.end(), [&](const auto& s) { return s.first == name; }))
      env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> null_terminated(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

// The launcher's status for a rank's: its exit status, or 128 + its signal, as a shell says it.
int shell_status(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// The forwarded signals and SIGCHLD, blocked while the launcher runs and taken with sigtimedwait,
// so that none arrives between two checks; the mask before is restored at the end.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGCHLD);
    for (int s : kForwarded) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, &before_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  const sigset_t& set() const { return set_; }

 private:
  sigset_t set_, before_;
};

struct Rank {
  int rank = 0;
  pid_t pid = 0;  // also its process group's id
  bool running = true;
};

class Launch {
 public:
  explicit Launch(const LaunchOptions& o) : o_(o) {}

  int run() {
    const std::string addr = o_.master_addr.empty() ? "127.0.0.1" : o_.master_addr;
    const int port = o_.master_port != 0 ? o_.master_port
                     : o_.nnodes == 1    ? free_port()
                                         : kDefaultPort;
    BlockedSignals blocked;
    for (int local = 0; local < o_.nproc; ++local) {
      const int rank = o_.node_rank * o_.nproc + local;
      std::vector<std::string> env =
          environment_with({{"RANK", std::to_string(rank)},
                            {"WORLD_SIZE", std::to_string(o_.nnodes * o_.nproc)},
                            {"LOCAL_RANK", std::to_string(local)},
                            {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
                            {"GROUP_RANK", std::to_string(o_.node_rank)},
                            {"MASTER_ADDR", addr},
                            {"MASTER_PORT", std::to_string(port)}});
      start(rank, env);
    }
    wait_all(blocked.set());
    if (first_failure_) return *first_failure_;
    return signalled_ != 0 ? 128 + signalled_ : 0;
  }

 private:
  // Starts one rank in a process group of its own, with the default disposition and no mask for
  // the signals the launcher handles. A rank that cannot start kills those already running.
  void start(int rank, std::vector<std::string>& env) {
    std::vector<std::string> args = o_.command;
    const std::vector<char*> argv = null_terminated(args), envp = null_terminated(env);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : kForwarded) sigaddset(&defaults, s);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      // (SIGKILL: a rank that has only just started has nothing to save, and one deaf to SIGTERM
      // must not keep the launcher waiting here.)
      signal_all(SIGKILL);
      for (Rank& r : ranks_) waitpid(r.pid, nullptr, 0);
      throw DistError(fmt::format("launch: cannot start '{}' as rank {}: {}", o_.command.front(),
                                  rank, std::strerror(rc)));
    }
    ranks_.push_back({rank, pid});
  }

  void signal_all(int sig) {
    for (const Rank& r : ranks_)
      if (r.running) kill(-r.pid, sig);
  }

  int running() const {
    return static_cast<int>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
  }

  // Reaps the ranks that ended; the first that failed stops the others.
  void reap() {
    for (Rank& r : ranks_) {
      int status = 0;
      if (!r.running || waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed || first_failure_) continue;
      first_failure_ = shell_status(status);
      const int left = running();
      std::fprintf(stderr, "kiln launch: rank %d (pid %d) %s", r.rank, static_cast<int>(r.pid),
                   describe(status).c_str());
      if (left > 0) {
        std::fprintf(stderr, "; stopping the other %d rank%s\n", left, left == 1 ? "" : "s");
        signal_all(SIGTERM);
        kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o_.grace_seconds));
      } else {
        std::fputc('\n', stderr);
      }
    }
  }

  void wait_all(const sigset_t& wanted) {
    for (reap(); running() > 0; reap()) {
      // At most 100 ms at a time: a SIGCHLD that did not queue is still seen by the next reap.
      auto wait = std::chrono::milliseconds(100);
      if (kill_at_) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now());
        wait = std::clamp(left, std::chrono::milliseconds(0), wait);
      }
      const timespec ts{0, static_cast<long>(wait.count()) * 1000000L};
      const int sig = sigtimedwait(&wanted, nullptr, &ts);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        if (signalled_ == 0) signalled_ = sig;
        signal_all(sig);
      }
      if (kill_at_ && Clock::now() >= *kill_at_) {
        std::fprintf(stderr,
                     "kiln launch: %d rank%s still running %g s after SIGTERM; sending SIGKILL\n",
                     running(), running() == 1 ? "" : "s", o_.grace_seconds);
        signal_all(SIGKILL);
        kill_at_.reset();
      }
    }
  }

  const LaunchOptions& o_;
  std::vector<Rank> ranks_;
  std::optional<int> first_failure_;
  int signalled_ = 0;
  std::optional<Clock::time_point> kill_at_;
};

}  // namespace

int run_launch(const LaunchOptions& o) {
  if (o.command.empty())
    throw ValueError("launch: no program to start (kiln launch -n N program args...)");
  if (o.nproc < 1) throw ValueError(fmt::format("launch: -n must be at least 1, got {}", o.nproc));
  if (o.nnodes < 1)
    throw ValueError(fmt::format("launch: --nnodes must be at least 1, got {}", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ValueError(fmt::format("launch: --node-rank {} is not a rank of {} node{} (0 to {})",
                                 o.node_rank, o.nnodes, o.nnodes == 1 ? "" : "s", o.nnodes - 1));
  if (o.nnodes > 1 && o.master_addr.empty())
    throw ValueError(fmt::format(
        "launch: --nnodes {} needs --master-addr, the address of node 0 that every node reaches",
        o.nnodes));
  if (o.master_port < 0 || o.master_port > 65535)
    throw ValueError(
        fmt::format("launch: --master-port {} is not a port (1 to 65535)", o.master_port));
  if (!(o.grace_seconds >= 0))
    throw ValueError(fmt::format("launch: --grace must be at least 0 s, got {}", o.grace_seconds));
  return Launch(o).run();
}

}  // namespace kiln::cli
