// The autotuner: for one tune key, which of an op's candidate implementations is fastest.
//
// An op (first: matmul on CUDA) describes a problem by a tune key (tune_key.hpp) and offers its
// candidates, the first of them its default (for matmul, the cuBLASLt heuristic's first
// choice). The tuner answers from memory, then from the store, and only on a miss times them:
//   - one key at a time per lane (a GPU), so candidates are never timed against each other;
//   - per candidate: a warm-up run, which must not throw and whose output must agree with the
//     first valid candidate's within the op's bound (else the candidate is dropped); then
//     samples timed by the op's Bench (CUDA events, caches flushed before each) until
//     max_samples, or min_samples once the candidate's share of the key's time budget is
//     spent; its figure is the median;
//   - the default is kept unless another candidate's median is more than `margin` (2%) faster.
// The choice is kept in memory and written to the store. Tuning longer than half a second
// prints one progress line on stderr, updated in place on a terminal (or one line per
// candidate with KILN_LOG=tune).
//
// The tuner never runs the chosen candidate for the op: the op runs its choice afterwards, so
// its output is always the chosen candidate's result.
#pragma once

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
};

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
};

struct Policy {
  int min_samples = 5;
  int max_samples = 25;
  double budget_seconds = 0.2;  // for the key, shared among its candidates
  double margin = 0.02;         // another candidate must beat the default by more than this
};

struct Request {
  std::string lane;   // one tuning at a time per lane: "cuda:0"
  std::string key;    // the tune key (bucketed: tune_key.hpp)
  std::string shape;  // the exact problem, for listings ("f32 1000x1024x1030 NN highest")
  std::vector<Candidate> candidates;  // [0]: the default
  Bench* bench = nullptr;
  Records* records = nullptr;  // nullptr: memory only
};

// What one candidate's tuning found.
struct Trial {
  std::string name;
  enum class Status { timed, failed, disagreed } status = Status::timed;
  std::string why;  // failed / disagreed: the error or the disagreement
  int samples = 0;
  double median = 0;  // seconds
};

struct Choice {
  std::string value, name;
  double seconds = 0;  // the chosen candidate's median when it was tuned
  enum class Source { tuned, memory, store } source = Source::tuned;
  int index = 0;              // tuned: the chosen candidate's position in the request
  std::vector<Trial> trials;  // tuned: every candidate, in request order
};

class Tuner {
 public:
  explicit Tuner(Policy policy = {});
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's tuner (default Policy), as the ops use it.
Tuner& process_tuner();

}  // namespace kiln::tune
