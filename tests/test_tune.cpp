// The tuner's logic (src/tune/) with fake candidates on the CPU and a fake clock: bucketing and
// keys; under both policies, selection, dropping candidates that throw or disagree; the first
// call's bound, early giving up, checks of winners only, candidates not compiled yet; the
// exhaustive policy's margin and samples; memory and records, forgetting, and one tuning at a
// time per lane.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <stdexcept>
#include <thread>

#include "kiln/config.hpp"
#include "kiln/error.hpp"
#include "tune/tune_key.hpp"
#include "tune/tuner.hpp"
#if KILN_WITH_PERSISTENCE
#include <signal.h>

#include "store/store.hpp"
#include "store_worker.hpp"
#include "temp_dir.hpp"
#include "tune/store_records.hpp"
#endif

namespace {

using kiln::tune::Bench;
using kiln::tune::Candidate;
using kiln::tune::Choice;
using kiln::tune::Policy;
using kiln::tune::Records;
using kiln::tune::Request;
using kiln::tune::Trial;
using kiln::tune::Tuner;

TEST(TuneKey, BucketsToTheNextPowerOfTwo) {
  EXPECT_EQ(kiln::tune::bucket(0), 0);
  EXPECT_EQ(kiln::tune::bucket(1), 1);
  EXPECT_EQ(kiln::tune::bucket(2), 2);
  EXPECT_EQ(kiln::tune::bucket(3), 4);
  EXPECT_EQ(kiln::tune::bucket(1000), 1024);
  EXPECT_EQ(kiln::tune::bucket(1024), 1024);
  EXPECT_EQ(kiln::tune::bucket(1025), 2048);
  EXPECT_EQ(kiln::tune::bucket((std::int64_t{1} << 40) + 1), std::int64_t{1} << 41);
  EXPECT_THROW(kiln::tune::bucket(-1), kiln::ValueError);
}

TEST(TuneKey, NearbyMatmulsShareAKeyAndKeepTheirExactShape) {
  kiln::tune::MatmulProblem a{"f32", "highest", 'N', 'T', 1, 1000, 1000, 1000, ""};
  kiln::tune::MatmulProblem b{"f32", "highest", 'N', 'T', 1, 1024, 1024, 1024, ""};
  EXPECT_EQ(kiln::tune::matmul_key(a), kiln::tune::matmul_key(b));
  EXPECT_EQ(kiln::tune::matmul_key(a), "matmul f32 highest NT b1 m1024 n1024 k1024");
  EXPECT_NE(kiln::tune::matmul_shape(a), kiln::tune::matmul_shape(b));
  EXPECT_EQ(kiln::tune::matmul_shape(a), "f32 [1, 1000, 1000] x [1, 1000, 1000] NT highest");
  auto c = b;
  c.m = 1025;
  EXPECT_NE(kiln::tune::matmul_key(c), kiln::tune::matmul_key(b));
  auto d = b;
  d.precision = "high";
  EXPECT_NE(kiln::tune::matmul_key(d), kiln::tune::matmul_key(b));
  auto e = b;
  e.op_b = 'N';
  EXPECT_NE(kiln::tune::matmul_key(e), kiln::tune::matmul_key(b));
  auto f = b;
  f.batch = 3;
  EXPECT_EQ(kiln::tune::matmul_key(f), "matmul f32 highest NT b4 m1024 n1024 k1024");
}

TEST(TuneKey, AMatmulKeyParsesBackToItsBucketedProblem) {
  const kiln::tune::MatmulProblem p{"f32", "high", 'T', 'N', 3, 1000, 64, 5, ""};
  const auto q = kiln::tune::parse_matmul_key(kiln::tune::matmul_key(p));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->dtype, "f32");
  EXPECT_EQ(q->precision, "high");
  EXPECT_EQ(q->op_a, 'T');
  EXPECT_EQ(q->op_b, 'N');
  EXPECT_EQ(q->batch, 4);
  EXPECT_EQ(q->m, 1024);
  EXPECT_EQ(q->n, 64);
  EXPECT_EQ(q->k, 8);
  for (const char* other :
       {"", "matmul", "matmul f32 highest NN b1 m2 n2", "conv f32 high NN b1 m1 n1 k1",
        "matmul f32 highest NNN b1 m1 n1 k1", "matmul f32 highest NN b1 m3 n4 k4",
        "matmul f32 highest NN b1 m4 n4 k4 x"})
    EXPECT_FALSE(kiln::tune::parse_matmul_key(other).has_value()) << other;
}

TEST(TuneKey, AnEpilogueIsPartOfTheKeyAndParsesBack) {
  const kiln::tune::MatmulProblem p{"bf16", "highest", 'N', 'T', 1, 16384, 3072, 768, "gelu_bias"};
  EXPECT_EQ(kiln::tune::matmul_key(p), "matmul bf16 highest NT b1 m16384 n4096 k1024 gelu_bias");
  auto plain = p;
  plain.epilogue = "";
  EXPECT_NE(kiln::tune::matmul_key(plain), kiln::tune::matmul_key(p));
  const auto q = kiln::tune::parse_matmul_key(kiln::tune::matmul_key(p));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->epilogue, "gelu_bias");
  // A neighbour must have the same epilogue.
  const std::vector<std::string> keys{"matmul bf16 highest NT b1 m8192 n4096 k1024",
                                      "matmul bf16 highest NT b1 m8192 n4096 k1024 gelu_bias"};
  EXPECT_EQ(kiln::tune::neighbouring_matmul_keys(kiln::tune::matmul_key(p), keys),
            (std::vector<std::string>{keys[1]}));
  EXPECT_FALSE(
      kiln::tune::parse_matmul_key("matmul bf16 highest NT b1 m8 n8 k8 swish").has_value());
}

TEST(TuneKey, NeighbouringKeysAreOnePowerOfTwoAwayNearestFirst) {
  const std::string here = "matmul f32 high NT b1 m1024 n1024 k1024";
  const std::vector<std::string> keys{
      "matmul f32 high NT b1 m2048 n2048 k512",     // 3 steps
      "matmul f32 high NT b1 m4096 n1024 k1024",    // m two steps away: not a neighbour
      "matmul f32 highest NT b1 m1024 n1024 k512",  // another precision
      "matmul f32 high NN b1 m1024 n1024 k512",     // another layout
      "matmul f32 high NT b2 m1024 n1024 k512",     // another batch
      here,                                         // itself
      "conv f32 high NT b1 m1024 n1024 k1024",      // not a matmul key
      "matmul f32 high NT b1 m1024 n512 k1024",     // 1 step
      "matmul f32 high NT b1 m512 n512 k1024",      // 2 steps
      "matmul f32 high NT b1 m1024 n1024 k2048",    // 1 step
  };
  EXPECT_EQ(
      kiln::tune::neighbouring_matmul_keys(here, keys),
      (std::vector<std::string>{
          "matmul f32 high NT b1 m1024 n512 k1024", "matmul f32 high NT b1 m1024 n1024 k2048",
          "matmul f32 high NT b1 m512 n512 k1024", "matmul f32 high NT b1 m2048 n2048 k512"}));
  EXPECT_TRUE(kiln::tune::neighbouring_matmul_keys("not a key", keys).empty());
}

// Candidates that write a number as their "output" and take a scripted time.
struct FakeOp {
  struct Spec {
    double seconds;
    double output = 1.0;  // what the candidate computes; 1.0 is right
    bool throws = false;
  };
  explicit FakeOp(std::vector<Spec> s) : specs(std::move(s)) {}
  std::vector<Spec> specs;
  double output = 0, reference = 0;
  std::map<std::string, int> runs;  // by candidate name
  std::atomic<int> inside{0}, overlaps{0};

  std::vector<Candidate> candidates() {
    std::vector<Candidate> out;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::string name = fmt::format("c{}", i);
      out.push_back({name,
                     "value of " + name,
                     [this, i, name] {
                       ++runs[name];
                       if (specs[i].throws) throw std::runtime_error("no kernel for this shape");
                       output = specs[i].output;
                     },
                     {}});
    }
    return out;
  }
};

// Times candidates on a clock of its own: a run advances it by the candidate's scripted seconds,
// a check by check_seconds, so the tuner's bound is tested without real time passing.
class FakeBench final : public Bench {
 public:
  explicit FakeBench(FakeOp& op) : op_(op) {}
  double time(const Candidate& c) override {
    if (op_.inside.fetch_add(1) != 0) op_.overlaps.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    c.run();
    op_.inside.fetch_sub(1);
    ++calls;
    const double s = op_.specs[std::stoi(c.name.substr(1))].seconds;
    advance(s);
    return s;
  }
  void keep_reference() override { op_.reference = op_.output; }
  bool agrees(std::string& why) override {
    ++checks;
    advance(check_seconds);
    if (op_.output == op_.reference) return true;
    why = "differs from the reference by " + std::to_string(op_.output - op_.reference);
    return false;
  }
  double agrees_estimate() const override { return check_estimate; }
  kiln::tune::Clock::time_point now() const override { return epoch() + ticks_; }

  // The time the fake clock started at.
  static kiln::tune::Clock::time_point epoch() { return kiln::tune::Clock::time_point{}; }
  double elapsed() const { return std::chrono::duration<double>(ticks_).count(); }
  void advance(double seconds) {
    ticks_ += std::chrono::duration_cast<kiln::tune::Clock::duration>(
        std::chrono::duration<double>(seconds));
  }

  int calls = 0, checks = 0;
  double check_seconds = 0, check_estimate = 0;

 private:
  FakeOp& op_;
  kiln::tune::Clock::duration ticks_{0};
};

class FakeRecords final : public Records {
 public:
  std::optional<Row> load(const std::string& key) override {
    ++loads;
    auto it = rows.find(key);
    if (it == rows.end()) return std::nullopt;
    return it->second;
  }
  void save(const std::string& key, const Row& row, const std::string& shape) override {
    rows[key] = row;
    shapes[key] = shape;
  }
  std::map<std::string, Row> rows;
  std::map<std::string, std::string> shapes;
  int loads = 0;
};

Request request(FakeOp& op, Bench& bench, Records* records = nullptr) {
  return {"fake:0",
          "matmul f32 highest NN b1 m8 n8 k8",
          "f32 [1, 8, 8] x [1, 8, 8] NN highest",
          op.candidates(),
          &bench,
          records,
          std::nullopt};
}

int count(const Choice& c, Trial::Status s) {
  return static_cast<int>(std::count_if(c.trials.begin(), c.trials.end(),
                                        [s](const Trial& t) { return t.status == s; }));
}

// ---- what both policies do ----

TEST(Tuner, ChoosesTheFastestAndReportsEveryCandidate) {
  for (const Policy& p : {Policy::first_call(), Policy::exhaustive()}) {
    FakeOp op({{5e-5}, {4e-5}, {3e-5}, {6e-5}});
    FakeBench bench(op);
    const Choice c = Tuner(p).choose(request(op, bench));
    EXPECT_EQ(c.name, "c2");
    EXPECT_EQ(c.value, "value of c2");
    EXPECT_EQ(c.index, 2);
    EXPECT_DOUBLE_EQ(c.seconds, 3e-5);
    EXPECT_EQ(c.source, Choice::Source::tuned);
    EXPECT_TRUE(c.complete);
    ASSERT_EQ(c.trials.size(), 4u);
    for (const Trial& t : c.trials) {
      EXPECT_EQ(t.status, Trial::Status::timed) << t.name;
      EXPECT_LE(t.samples, p.max_samples) << t.name;
      EXPECT_GE(t.samples, t.gave_up ? 1 : p.min_samples) << t.name;
    }
  }
}

TEST(Tuner, DropsCandidatesThatThrowOrDisagree) {
  for (const Policy& p : {Policy::first_call(), Policy::exhaustive()}) {
    FakeOp op({{5e-5}, {1e-5, 1.0, true}, {2e-5, 1.5}, {4e-5}});
    FakeBench bench(op);
    const Choice c = Tuner(p).choose(request(op, bench));
    EXPECT_EQ(c.name, "c3");  // c1 and c2 are faster, but one throws and one is wrong
    EXPECT_EQ(c.trials[1].status, Trial::Status::failed);
    EXPECT_NE(c.trials[1].why.find("no kernel for this shape"), std::string::npos);
    EXPECT_EQ(c.trials[2].status, Trial::Status::disagreed);
    EXPECT_NE(c.trials[2].why.find("differs from the reference"), std::string::npos);
    // Exhaustive: a wrong candidate is not timed past its warm-up; a first call checks only a
    // candidate that would win, after its samples.
    EXPECT_EQ(op.runs["c2"], p.check_all ? 1 : 1 + p.max_samples);
  }
}

TEST(Tuner, AFailingDefaultLeavesTheOthersToCompete) {
  FakeOp op({{1e-5, 1.0, true}, {5e-5}, {4e-5}});
  FakeBench bench(op);
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_EQ(c.name, "c2");  // c1 became the reference; c2 agrees with it and is faster
}

TEST(Tuner, ThrowsWhenNoCandidateRuns) {
  FakeOp op({{1e-5, 1.0, true}, {1e-5, 1.0, true}});
  FakeBench bench(op);
  try {
    Tuner().choose(request(op, bench));
    FAIL() << "expected kiln::Error";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no candidate ran"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c1: no kernel for this shape"), std::string::npos);
  }
  Request empty = request(op, bench);
  empty.candidates.clear();
  EXPECT_THROW(Tuner().choose(empty), kiln::Error);
}

// ---- the first call's policy ----

TEST(Tuner, AFirstCallKeepsTheDefaultUnlessAnotherIsMoreThanFivePercentFaster) {
  {
    FakeOp op({{100e-6}, {96e-6}});  // 4% faster: noise after 3 samples, the default stays
    FakeBench bench(op);
    const Choice c = Tuner().choose(request(op, bench));
    EXPECT_EQ(c.name, "c0");
    EXPECT_EQ(bench.checks, 0);  // a candidate that cannot be chosen is never checked
  }
  {
    FakeOp op({{100e-6}, {94e-6}});  // 6% faster: taken
    FakeBench bench(op);
    EXPECT_EQ(Tuner().choose(request(op, bench)).name, "c1");
    EXPECT_EQ(bench.checks, 1);
  }
}

TEST(Tuner, AFirstCallEndsInsideItsBound) {
  // The reference takes 10 ms a run: the bound is the floor, 0.3 s. Forty candidates as fast as
  // it would take 1.6 s.
  FakeOp op(std::vector<FakeOp::Spec>(40, {10e-3}));
  FakeBench bench(op);
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_EQ(c.name, "c0");
  EXPECT_FALSE(c.complete);
  // The tuning, the op's run of its choice and what else follows end inside the bound.
  EXPECT_LE(bench.elapsed() + c.seconds + Policy::first_call().after_tuning, 0.3 + 1e-9);
  EXPECT_GT(bench.elapsed(), 0.25);  // and it used the bound
  const int timed = count(c, Trial::Status::timed), skipped = count(c, Trial::Status::skipped);
  EXPECT_EQ(timed + skipped, 40);
  EXPECT_GT(skipped, 20);
  for (std::size_t i = 0; i < c.trials.size(); ++i) {
    const Trial& t = c.trials[i];
    if (t.status != Trial::Status::skipped) continue;
    EXPECT_NE(t.why.find("bound of 300.00 ms was reached"), std::string::npos) << t.why;
    EXPECT_EQ(t.samples, 0);
    EXPECT_EQ(op.runs[t.name], 0) << t.name;  // never started
    if (i + 1 < c.trials.size()) {
      EXPECT_EQ(c.trials[i + 1].status, Trial::Status::skipped);
    }
  }
}

TEST(Tuner, AFirstCallsBoundIsTwentyTimesTheDefaultWhenThatIsLonger) {
  FakeOp op(std::vector<FakeOp::Spec>(40, {50e-3}));  // 20 x 50 ms = 1 s
  FakeBench bench(op);
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_LE(bench.elapsed() + c.seconds + Policy::first_call().after_tuning, 1.0 + 1e-9);
  EXPECT_GT(bench.elapsed(), 0.8);
  EXPECT_FALSE(c.complete);
  EXPECT_NE(c.trials.back().why.find("bound of 1000.00 ms"), std::string::npos);
}

TEST(Tuner, AFirstCallCountsWhatTheCallSpentBeforeTheTuning) {
  FakeOp op({{10e-3}, {1e-3}, {1e-3}});
  FakeBench bench(op);
  Request r = request(op, bench);
  r.started = FakeBench::epoch() - std::chrono::milliseconds(290);  // its set-up took 290 ms
  const Choice c = Tuner().choose(r);
  // The default runs anyway (the op needs a choice), once timed; nothing else fits.
  EXPECT_EQ(c.name, "c0");
  EXPECT_EQ(c.trials[0].samples, 1);
  EXPECT_EQ(c.trials[1].status, Trial::Status::skipped);
  EXPECT_EQ(c.trials[2].status, Trial::Status::skipped);
  EXPECT_EQ(op.runs["c1"], 0);
  EXPECT_FALSE(c.complete);
}

TEST(Tuner, AFirstCallGivesUpOnACandidateThatCannotWin) {
  FakeOp op({{10e-3}, {16e-3}, {12e-3}, {8e-3}});
  FakeBench bench(op);
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_EQ(c.name, "c3");
  EXPECT_TRUE(c.trials[1].gave_up);  // 16 ms > 1.5 x 10 ms after one sample
  EXPECT_EQ(c.trials[1].samples, 1);
  EXPECT_EQ(op.runs["c1"], 2);  // its warm-up and one sample
  EXPECT_FALSE(c.trials[2].gave_up);
  EXPECT_EQ(c.trials[2].samples, 3);
  EXPECT_EQ(c.trials[3].samples, 3);
  EXPECT_EQ(bench.checks, 1);  // c3 alone would have been chosen
  EXPECT_TRUE(c.complete);     // a candidate given up on was tried
}

TEST(Tuner, AFirstCallDoesNotChooseWhatItHadNoTimeToCheck) {
  FakeOp op({{10e-3}, {5e-3}});
  FakeBench bench(op);
  bench.check_estimate = 0.5;  // a check would overrun the bound
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_EQ(c.name, "c0");
  EXPECT_EQ(bench.checks, 0);
  EXPECT_EQ(c.trials[1].status, Trial::Status::skipped);
  EXPECT_NE(c.trials[1].why.find("no time was left"), std::string::npos) << c.trials[1].why;
  EXPECT_FALSE(c.complete);
}

// A candidate that must be compiled first: prepare() says whether it is, and counts how it
// was asked.
struct Compiled {
  bool ready = false;
  double compile_seconds = 1;  // what a compile advances the fake clock by
  int asked = 0, waited = 0;
  std::function<bool(bool)> prepare(FakeBench& bench) {
    return [this, &bench](bool wait) {
      ++asked;
      if (wait && !ready) {
        ++waited;
        bench.advance(compile_seconds);
        ready = true;
      }
      return ready;
    };
  }
};

TEST(Tuner, AFirstCallSkipsACandidateThatIsNotCompiled) {
  FakeOp op({{10e-3}, {9.8e-3}, {1e-3}});
  FakeBench bench(op);
  Compiled own;
  Request r = request(op, bench);
  r.candidates[2].prepare = own.prepare(bench);
  const Choice c = Tuner().choose(r);
  EXPECT_EQ(c.name, "c0");
  EXPECT_EQ(c.trials[2].status, Trial::Status::skipped);
  EXPECT_NE(c.trials[2].why.find("not compiled yet"), std::string::npos) << c.trials[2].why;
  EXPECT_EQ(op.runs["c2"], 0);
  EXPECT_EQ(own.waited, 0);  // never waited for: its compile was only started
  EXPECT_EQ(own.asked, 2);   // before the timing began (which starts it), and at its turn
  EXPECT_FALSE(c.complete);

  // Compiled meanwhile (in the background, or by an earlier process): it joins.
  FakeBench bench2(op);
  Compiled done;
  done.ready = true;
  Request r2 = request(op, bench2);
  r2.candidates[2].prepare = done.prepare(bench2);
  EXPECT_EQ(Tuner().choose(r2).name, "c2");
}

TEST(Tuner, OfflineCompilesFirstAndTheCompileIsOutsideTheBound) {
  FakeOp op({{10e-3}, {9e-3}, {1e-3}});
  FakeBench bench(op);
  Compiled own;  // a compile of 1 s, more than the bound
  Request r = request(op, bench);
  r.candidates[2].prepare = own.prepare(bench);
  const Choice c = Tuner(Policy::offline()).choose(r);
  EXPECT_EQ(own.waited, 1);
  EXPECT_EQ(c.name, "c2");
  EXPECT_TRUE(c.complete);
}

// ---- the exhaustive policy (`kiln tune --exhaustive`) ----

TEST(Tuner, ExhaustiveTimesEveryCandidateWithNoBound) {
  FakeOp op(std::vector<FakeOp::Spec>(20, {50e-3}));
  op.specs[19].seconds = 40e-3;
  FakeBench bench(op);
  Compiled own;
  Request r = request(op, bench);
  r.candidates[19].prepare = own.prepare(bench);
  const Choice c = Tuner(Policy::exhaustive()).choose(r);
  EXPECT_EQ(c.name, "c19");
  EXPECT_TRUE(c.complete);
  EXPECT_EQ(count(c, Trial::Status::timed), 20);
  EXPECT_EQ(own.waited, 1);
  for (const Trial& t : c.trials) EXPECT_EQ(t.samples, Policy::exhaustive().min_samples);
  EXPECT_EQ(bench.checks, 19);  // every candidate but the reference
}

TEST(Tuner, ExhaustiveKeepsTheDefaultUnlessAnotherIsMoreThanTwoPercentFaster) {
  {
    FakeOp op({{100e-6}, {98.5e-6}});  // 1.5% faster: noise, the default stays
    FakeBench bench(op);
    EXPECT_EQ(Tuner(Policy::exhaustive()).choose(request(op, bench)).name, "c0");
  }
  {
    FakeOp op({{100e-6}, {97e-6}});  // 3% faster: taken
    FakeBench bench(op);
    EXPECT_EQ(Tuner(Policy::exhaustive()).choose(request(op, bench)).name, "c1");
  }
}

TEST(Tuner, ExhaustiveSamplesBoundTheirShare) {
  FakeOp op({{5e-5}, {4e-5}});
  {
    FakeBench bench(op);
    Policy p = Policy::exhaustive();
    p.sample_seconds = 0;  // spent at once: min_samples each
    const Choice c = Tuner(p).choose(request(op, bench));
    for (const Trial& t : c.trials) EXPECT_EQ(t.samples, p.min_samples);
    EXPECT_EQ(bench.calls, 2 * (1 + p.min_samples));  // a warm-up and the samples each
  }
  {
    FakeBench bench(op);
    Policy p = Policy::exhaustive();
    p.sample_seconds = 60;  // never spent: max_samples each
    const Choice c = Tuner(p).choose(request(op, bench));
    for (const Trial& t : c.trials) EXPECT_EQ(t.samples, p.max_samples);
  }
}

TEST(Tuner, TheProcessTunersPolicyCanBeSet) {
  Tuner tuner;
  EXPECT_EQ(tuner.policy().bound_floor, Policy::first_call().bound_floor);
  EXPECT_FALSE(tuner.policy().wait_for_compiles);
  tuner.set_policy(Policy::exhaustive());
  EXPECT_EQ(tuner.policy().bound_floor, 0);
  EXPECT_EQ(tuner.policy().max_samples, Policy::exhaustive().max_samples);
  FakeOp op(std::vector<FakeOp::Spec>(40, {10e-3}));
  FakeBench bench(op);
  EXPECT_TRUE(tuner.choose(request(op, bench)).complete);  // no bound now
}

TEST(Tuner, AnswersFromMemoryThenFromTheRecords) {
  FakeOp op({{5e-5}, {3e-5}});
  FakeRecords records;
  {
    FakeBench bench(op);
    Tuner tuner;
    EXPECT_EQ(tuner.choose(request(op, bench, &records)).source, Choice::Source::tuned);
    const int calls = bench.calls;
    const Choice again = tuner.choose(request(op, bench, &records));
    EXPECT_EQ(again.source, Choice::Source::memory);
    EXPECT_EQ(again.name, "c1");
    EXPECT_EQ(bench.calls, calls);  // nothing timed
  }
  ASSERT_EQ(records.rows.count("matmul f32 highest NN b1 m8 n8 k8"), 1u);
  EXPECT_EQ(records.rows.begin()->second.value, "value of c1");
  EXPECT_EQ(records.shapes.begin()->second, "f32 [1, 8, 8] x [1, 8, 8] NN highest");
  {
    FakeBench bench(op);
    Tuner next_process;  // a new tuner: an empty memory, the same records
    const Choice c = next_process.choose(request(op, bench, &records));
    EXPECT_EQ(c.source, Choice::Source::store);
    EXPECT_EQ(c.value, "value of c1");
    EXPECT_DOUBLE_EQ(c.seconds, 3e-5);
    EXPECT_EQ(bench.calls, 0);
    // A stored choice that does not apply is forgotten and tuned again, not reloaded.
    next_process.forget("fake:0", "matmul f32 highest NN b1 m8 n8 k8");
    const int loads = records.loads;
    EXPECT_EQ(next_process.choose(request(op, bench, &records)).source, Choice::Source::tuned);
    EXPECT_EQ(records.loads, loads);
    EXPECT_GT(bench.calls, 0);
  }
}

TEST(Tuner, KnownAnswersWithoutTiming) {
  FakeOp op({{5e-5}, {3e-5}});
  FakeRecords records;
  FakeBench bench(op);
  Request bare = request(op, bench, &records);
  bare.candidates.clear();  // known() needs neither candidates nor a bench
  bare.bench = nullptr;
  Tuner tuner;
  EXPECT_FALSE(tuner.known(bare));
  records.rows[bare.key] = {"value of c1", "c1", 3e-5};
  const auto c = tuner.known(bare);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source, Choice::Source::store);
  EXPECT_EQ(c->value, "value of c1");
  EXPECT_EQ(tuner.known(bare)->source, Choice::Source::memory);
  tuner.forget(bare.lane, bare.key);
  EXPECT_FALSE(tuner.known(bare));  // forgotten: only timing answers now
  EXPECT_EQ(tuner.choose(request(op, bench, &records)).source, Choice::Source::tuned);
  EXPECT_EQ(bench.calls, 2 * (1 + Policy::first_call().max_samples));
}

TEST(Tuner, TunesOneKeyAtATimePerLane) {
  FakeOp op({{5e-5}, {4e-5}, {3e-5}});
  FakeBench bench(op);
  const Policy p = Policy::first_call();  // (no candidate gives up: the count below is exact)
  Tuner tuner(p);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Request r = request(op, bench);
      r.key += fmt::format(" thread {}", t);  // different keys, one lane
      tuner.choose(r);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(op.overlaps.load(), 0);
  EXPECT_EQ(bench.calls, 4 * 3 * (1 + p.min_samples));
}

#if KILN_WITH_PERSISTENCE
// A process killed in the middle of tuning a key (tests/helpers/store_worker.cpp, "tune") keeps
// every key it tuned before, in a store that opens without complaint; the next process answers
// them from it without timing anything.
TEST(Tuner, AProcessKilledMidTuningKeepsWhatItChoseInAConsistentStore) {
  kt::TempDir dir("kiln-tune-killed");
  kt::Child child = kt::spawn_worker({"tune", dir.path().string(), "50"}, {}, false, true);
  std::string out;
  char buf[256];
  while (out.find("tuned tune-1\n") == std::string::npos) {
    const ssize_t n = read(child.out, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  // Each key takes about 0.2 s (four candidates, samples of 2 ms until 50 ms each): tune-2 is
  // under way.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  kill(child.pid, SIGKILL);
  out += kt::read_all(child.out);
  ASSERT_EQ(kt::wait_exit(child.pid), 128 + SIGKILL) << out;
  ASSERT_NE(out.find("tuned tune-1\n"), std::string::npos) << out;

  std::vector<std::string> warnings;
  kiln::store::Store store(
      {.dir = dir.path(), .warn = [&](const std::string& m) { warnings.push_back(m); }});
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  // The worker's identity (tests/helpers/store_worker.cpp).
  const kiln::store::Identity id{"Worker GPU", "9.0", "13.0", "13.0", "13.1.0", "13.0"};
  const auto rows = store.list(kiln::store::Table::tune, id);
  EXPECT_GE(rows.size(), 2u);
  EXPECT_LT(rows.size(), 50u);  // killed before the end
  for (const kiln::store::Entry& e : rows) {
    const auto row = store.get_tune(id, e.key);
    ASSERT_TRUE(row) << e.key;
    EXPECT_EQ(row->value, "v" + e.key.substr(5) + "-2") << e.key;  // whole, and the fastest
    EXPECT_EQ(row->name, "c2");
  }
  kiln::tune::StoreRecords records(store, id);
  FakeOp op(std::vector<FakeOp::Spec>{{1e-3}});
  FakeBench bench(op);
  for (const char* key : {"tune-0", "tune-1"}) {
    Request r = request(op, bench, &records);
    r.lane = "worker:0";
    r.key = key;
    const Choice c = Tuner().choose(r);
    EXPECT_EQ(c.source, Choice::Source::store) << key;
    EXPECT_EQ(c.value, std::string("v") + (key + 5) + "-2");
  }
  EXPECT_EQ(bench.calls, 0);
}
#endif

}  // namespace
