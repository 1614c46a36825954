// The autotuner: for one tune key, which of an op's candidate implementations is fastest.
//
// An op (first: matmul on CUDA) describes a problem by a tune key (tune_key.hpp) and offers its
// candidates, ranked (for matmul: the cuBLASLt heuristic's order, kiln's own kernels last), the
// first of them its default. The tuner answers from memory, then from the store, and only on a
// miss times them, one key at a time per lane (a GPU), so candidates are never timed against
// each other. Per candidate: a warm-up run, then samples timed by the op's Bench (CUDA events,
// caches flushed before each); its figure is the median. The output of a candidate must agree
// with the first valid candidate's (the reference) within the op's bound, else it is dropped.
// The default is kept unless another candidate's median is more than `margin` faster.
//
// Two policies (docs/autotune.md, "How candidates are timed"):
//   - first_call (the default): the first call of a problem the store does not know must not
//     cost seconds. The whole call, from Request::started, is bounded by max(bound_floor,
//     bound_factor x the reference's median): no candidate, sample or check is started that
//     would not end inside it, the reference's first sample apart. Few samples; a candidate
//     stops once its fastest sample is slower than give_up x the best median; only a candidate
//     that would become the best is checked. A candidate that needs compiling (Candidate::
//     prepare) joins only when it is ready; otherwise its compile is started in the background
//     and the tuning goes on without it.
//   - exhaustive (`kiln tune --exhaustive`): every candidate, compiled first, each checked after
//     its warm-up, then timed between min_samples and max_samples times (stopping at
//     min_samples once its share of sample_seconds is spent), no bound on the whole.
// The choice is kept in memory and written to the records (the store) as soon as it is made, so
// a process that exits later keeps it. Tuning longer than half a second prints one progress
// line on stderr, updated in place on a terminal (or one line per candidate with KILN_LOG=tune).
//
// The tuner never runs the chosen candidate for the op: the op runs its choice afterwards, so
// its output is always the chosen candidate's result.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tune {

struct Candidate {
  std::string name;           // readable: "cublasLt algo 21 (tile 128x128, split-K 1)"
  std::string value;          // how the op restores this choice later (kept in the store)
  std::function<void()> run;  // queues one run that writes the op's output; may throw
  // For a candidate that must be compiled before it runs (kiln's own kernels): whether it is
  // ready to run without compiling. With wait, compiles it first (and may throw as run does);
  // without, starts its compile in the background when it is not ready and returns at once.
  // Empty: always ready.
  std::function<bool(bool wait)> prepare;
};

using Clock = std::chrono::steady_clock;

// How an op's device times and checks a candidate.
class Bench {
 public:
  virtual ~Bench() = default;
  // The seconds one run of `c` takes (caches cold), waiting for it.
  virtual double time(const Candidate& c) = 0;
  // Keeps the output the last run wrote as the reference for agrees().
  virtual void keep_reference() = 0;
  // Whether the output the last run wrote agrees with the reference within the op's bound;
  // if not, says by how much in `why`.
  virtual bool agrees(std::string& why) = 0;
  // About how many seconds the next agrees() will take, from what the bench has measured so far
  // (a check downloads and compares whole outputs); 0 when it cannot tell.
  virtual double agrees_estimate() const { return 0; }
  // The clock the bound of a first call is kept by (a fake bench's may be its own).
  virtual Clock::time_point now() const { return Clock::now(); }
};

// Where tuned choices outlive the process (the store, src/store/); absent when persistence is
// compiled out or switched off.
class Records {
 public:
  virtual ~Records() = default;
  struct Row {
    std::string value, name;
    double seconds = 0;
  };
  virtual std::optional<Row> load(const std::string& key) = 0;
  virtual void save(const std::string& key, const Row& row, const std::string& shape) = 0;
  // Every key the records hold, for an op that ranks its candidates by what neighbouring keys
  // chose; none unless overridden.
  virtual std::vector<std::string> keys() { return {}; }
};

struct Policy {
  int min_samples = 3;
  int max_samples = 3;
  double sample_seconds = 0.2;  // for the key's samples beyond min_samples, shared by candidates
  double margin = 0.05;         // another candidate must beat the default by more than this
  // The bound on the whole call: max(bound_floor, bound_factor x the reference's median)
  // seconds from Request::started; bound_floor 0: no bound.
  double bound_floor = 0.3;
  double bound_factor = 20;
  // Kept inside the bound, with the reference's median, for what follows the tuning: the
  // records' write and the op's run of its choice.
  double after_tuning = 0.01;
  double give_up = 1.5;    // a candidate stops when its fastest sample is this x the best median;
                           // 0: never
  bool check_all = false;  // check every candidate after its warm-up, not only a winner
  bool wait_for_compiles = false;  // compile candidates that need it before timing starts

  // The first call of a problem the store does not know (the process tuner's default).
  static Policy first_call() { return {}; }
  // `kiln tune`: the first call's policy, with kiln's own kernels compiled first.
  static Policy offline() {
    Policy p;
    p.wait_for_compiles = true;
    return p;
  }
  // `kiln tune --exhaustive`: every candidate, more samples, no bound.
  static Policy exhaustive() {
    Policy p;
    p.min_samples = 5;
    p.max_samples = 25;
    p.margin = 0.02;
    p.bound_floor = 0;
    p.give_up = 0;
    p.check_all = true;
    p.wait_for_compiles = true;
    return p;
  }
};

struct Request {
  std::string lane;   // one tuning at a time per lane: "cuda:0"
  std::string key;    // the tune key (bucketed: tune_key.hpp)
  std::string shape;  // the exact problem, for listings ("f32 1000x1024x1030 NN highest")
  std::vector<Candidate> candidates;  // [0]: the default; best ranked first
  Bench* bench = nullptr;
  Records* records = nullptr;  // nullptr: memory only
  // When the op's call began (its set-up counts against a first call's bound); unset: when
  // the tuning begins.
  std::optional<Clock::time_point> started;
};

// What one candidate's tuning found.
struct Trial {
  std::string name;
  // skipped: not timed to the end (the bound was reached, or it was not compiled yet), or timed
  // but not checked, so it cannot be chosen; why says which.
  enum class Status { timed, failed, disagreed, skipped } status = Status::timed;
  std::string why;  // failed / disagreed / skipped: the error, the disagreement, the reason
  int samples = 0;
  double median = 0;         // seconds; 0 when it has no samples
  bool gave_up = false;      // timed: stopped early, slower than the best by Policy::give_up
  double spent_seconds = 0;  // on the host clock: its warm-up, samples and check
};

struct Choice {
  std::string value, name;
  double seconds = 0;  // the chosen candidate's median when it was tuned
  enum class Source { tuned, memory, store } source = Source::tuned;
  int index = 0;              // tuned: the chosen candidate's position in the request
  std::vector<Trial> trials;  // tuned: every candidate, in request order
  bool complete = true;       // tuned: no candidate was skipped
};

class Tuner {
 public:
  explicit Tuner(Policy policy = Policy::first_call());
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  // The choice for request.key, from memory, the records or by timing the candidates. Throws
  // kiln::Error when no candidate runs and agrees.
  Choice choose(const Request& request);
  // The choice for request.key if memory or the records have one (nothing is timed; the
  // request's candidates and bench may be empty), else nothing.
  std::optional<Choice> known(const Request& request);
  // Drops key's choice (one from the records that no longer applies to this problem, say): the
  // next choose() of it times the candidates again, without asking the records.
  void forget(const std::string& lane, const std::string& key);

  // The policy of the tunings that start from now on (`kiln tune` sets offline or exhaustive).
  Policy policy() const;
  void set_policy(const Policy& policy);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's tuner (Policy::first_call() unless set_policy changes it), as the ops use it.
Tuner& process_tuner();

}  // namespace kiln::tune
