#include "bench_processes.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dispatch/diagnostics.hpp"
#include "json.hpp"
#include "kiln/kiln.hpp"

extern char** environ;

namespace kiln::cli {
namespace {

// The fd on which a child writes its first-call figures (BenchOptions::report_fd).
constexpr int kReportFd = 3;

// The store the processes share, as its header line shows it.
struct StoreState {
  std::string where;  // "/home/u/.cache/kiln/kiln.db", or why there is none
  bool persistent = false;
  std::string why;                   // when not persistent
  std::optional<std::int64_t> rows;  // tune rows and kernels of every identity
};

std::string feature_why(const char* name) {
  for (const FeatureState& f : features()) {
    if (f.name == name) return f.live ? "" : f.why;
  }
  return std::string(name) + " is not among kiln::features()";
}

// Asked again before each process: the earlier ones have added rows.
StoreState store_state() {
  StoreState s;
  if (const std::string off = feature_why("persistence"); !off.empty()) {
    s.where = "off, " + off;
    s.why = off;
    return s;
  }
  // Without statuses: comparing identities would start CUDA in this process, whose job is only
  // to start the processes that run the workloads.
  const diagnostics::StoreReport r = diagnostics::process_store_report(/*statuses=*/false);
  if (r.location.mode != diagnostics::StoreMode::closed) {
    s.persistent = r.location.mode == diagnostics::StoreMode::persistent;
    s.why = r.location.why;
    s.where = s.persistent ? r.location.file : fmt::format("memory-only, {}", s.why);
    std::int64_t rows = 0;
    for (const diagnostics::StoreUsage& u : r.usage) rows += u.tune_rows + u.kernels;
    s.rows = rows;
    return s;
  }
  s.where = "off";
  s.why = "kiln::store::process_store() gave no store";
  return s;
}

std::string header(int i, int n, const StoreState& s) {
  if (!s.persistent) return fmt::format("process {} of {} (store: {})", i, n, s.where);
  return fmt::format("process {} of {} (store: {}, {} entries before)", i, n, s.where, *s.rows);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

// The lines run_bench writes on its report_fd (bench.hpp lists the fields).
std::vector<WorkloadReport> parse_report(const std::string& text) {
  constexpr std::size_t kFields = 11;
  std::vector<WorkloadReport> calls;
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split(line, '\t');
    if (f.size() != kFields) {
      throw std::runtime_error(
          fmt::format("bench: a process reported '{}' ({} fields expected)", line, kFields));
    }
    try {
      calls.push_back({f[0], f[1], f[2], std::stod(f[3]), std::stoll(f[4]), std::stod(f[5]),
                       std::stoll(f[6]), std::stod(f[7]), std::stod(f[8]), std::stod(f[9]),
                       std::stoi(f[10])});
    } catch (const std::logic_error&) {  // std::invalid_argument, std::out_of_range
      throw std::runtime_error(fmt::format("bench: a process reported '{}': not a number", line));
    }
  }
  return calls;
}

std::string describe(const WorkloadReport& c) {
  std::string s = format_duration(c.first_s);
  if (c.compiled > 0) {
    s +=
        fmt::format(" (compiled {} kernels in {})", c.compiled, format_duration(c.compile_seconds));
  }
  if (c.loaded > 0) {
    s += fmt::format(" (loaded {} kernels from the store in {})", c.loaded,
                     format_duration(c.load_seconds));
  }
  return s;
}

// A pipe whose ends are closed in every child, at fds the child's dup2 targets (0 to 3) cannot
// be: dup2 onto its own fd would keep close-on-exec set.
std::pair<int, int> make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(fmt::format("bench: pipe: {}", std::strerror(errno)));
  }
  for (int& fd : fds) {
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    if (moved < 0) throw std::runtime_error(fmt::format("bench: fcntl: {}", std::strerror(errno)));
    close(fd);
    fd = moved;
  }
  return {fds[0], fds[1]};
}

struct ChildResult {
  int status = 0;      // waitpid's
  std::string output;  // what it wrote on the pipe: its report, or its stdout when captured
};

// Runs `args` as /proc/self/exe in `envp` (null-terminated), its stdout ours, the pipe's or
// /dev/null's, its report fd the pipe unless stdout is, reading the pipe until the child closes
// it, then waiting for the child.
ChildResult run_child(const std::vector<std::string>& args, ChildStdout out, char* const* envp) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto [read_end, write_end] = make_pipe();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, write_end, out == ChildStdout::capture ? 1 : kReportFd);
  if (out == ChildStdout::discard) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  std::fflush(stdout);  // the child may write to the same file: our lines first
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  close(write_end);
  if (rc != 0) {
    close(read_end);
    throw std::runtime_error(
        fmt::format("bench: cannot start /proc/self/exe: {}", std::strerror(rc)));
  }
  ChildResult r;
  char buf[4096];
  for (;;) {
    const ssize_t got = read(read_end, buf, sizeof buf);
    if (got > 0) {
      r.output.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(read_end);
  while (waitpid(pid, &r.status, 0) < 0) {
    if (errno != EINTR) {
      throw std::runtime_error(fmt::format("bench: waitpid: {}", std::strerror(errno)));
    }
  }
  return r;
}

void print_summary(const std::vector<std::vector<WorkloadReport>>& runs) {
  fmt::print("\nfirst call, process 1 to {}:\n", runs.size());
  for (const WorkloadReport& first : runs.front()) {
    std::string line = fmt::format("  {} {}: ", first.device, first.workload);
    for (std::size_t p = 0; p < runs.size(); ++p) {
      const WorkloadReport* match = nullptr;
      for (const WorkloadReport& c : runs[p]) {
        if (c.device == first.device && c.workload == first.workload) match = &c;
      }
      line += (p == 0 ? "" : " -> ") + (match ? describe(*match) : std::string("(not run)"));
    }
    fmt::print("{}\n", line);
  }
}

}  // namespace

BenchChild run_bench_child(const BenchOptions& options, ChildStdout out,
                           const std::vector<std::string>* env) {
  std::vector<std::string> args{"kiln",
                                "bench",
                                "--one-process",
                                "--device",
                                options.device,
                                "--runs",
                                std::to_string(options.runs)};
  if (options.json) args.emplace_back("--json");
  if (options.new_shape) args.emplace_back("--new-shape");
  if (options.train) args.emplace_back("--train");
  if (options.new_shape_side != BenchOptions{}.new_shape_side)
    args.insert(args.end(), {"--new-shape-side", std::to_string(options.new_shape_side)});
  if (out != ChildStdout::capture) {
    args.insert(args.end(), {"--report-fd", std::to_string(kReportFd)});
  }
  std::vector<char*> envp;
  if (env != nullptr) {
    for (const std::string& e : *env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  const ChildResult r = run_child(args, out, env != nullptr ? envp.data() : environ);
  BenchChild child;
  child.status = r.status;
  if (out == ChildStdout::capture) {
    child.stdout_text = r.output;
  } else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
    child.report = parse_report(r.output);
  }
  return child;
}

int child_failure(const BenchChild& child, const std::string& what) {
  if (WIFEXITED(child.status)) {
    const int code = WEXITSTATUS(child.status);
    if (code != 0) fmt::print(stderr, "kiln: bench: {} exited with status {}\n", what, code);
    return code;
  }
  const int sig = WIFSIGNALED(child.status) ? WTERMSIG(child.status) : 0;
  fmt::print(stderr, "kiln: bench: {} was killed by signal {} ({})\n", what, sig, strsignal(sig));
  return 1;
}

int run_bench_processes(const BenchOptions& options) {
  const int n = options.processes;
  std::vector<std::vector<WorkloadReport>> runs;
  std::vector<std::string> objects;
  StoreState state;
  for (int i = 1; i <= n; ++i) {
    state = store_state();
    if (!options.json) {
      fmt::print("{}{}\n", i == 1 ? "" : "\n", header(i, n, state));
    } else {
      objects.push_back(fmt::format("{{\"process\": {}, \"store_entries_before\": {}, \"report\": ",
                                    i, state.rows ? std::to_string(*state.rows) : "null"));
    }
    const BenchChild r =
        run_bench_child(options, options.json ? ChildStdout::capture : ChildStdout::inherit);
    if (const int code = child_failure(r, fmt::format("process {} of {}", i, n)); code != 0) {
      return code;
    }
    if (options.json) {
      std::string report = r.stdout_text;
      while (!report.empty() && (report.back() == '\n' || report.back() == ' ')) report.pop_back();
      if (report.empty() || report.front() != '{' || report.back() != '}') {
        throw std::runtime_error(
            fmt::format("bench: process {} of {} printed no JSON object: '{}'", i, n, report));
      }
      objects.back() += report + "}";
    } else {
      runs.push_back(r.report);
    }
  }

  if (options.json) {
    std::string list;
    for (const std::string& o : objects) list += (list.empty() ? "" : ", ") + o;
    fmt::print(
        "{{\"kiln_version\": {}, \"store\": {{\"where\": {}, \"persistent\": {}, "
        "\"why\": {}}}, \"processes\": [{}]}}\n",
        json_string(version()), json_string(state.where), state.persistent, json_string(state.why),
        list);
    return 0;
  }
  print_summary(runs);
  if (!state.persistent) {
    fmt::print("the store is not in use ({}): every process compiled and tuned again\n", state.why);
  }
  return 0;
}

}  // namespace kiln::cli
