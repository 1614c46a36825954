// The tuner's logic (src/tune/) with fake candidates on the CPU: bucketing and keys, selection
// with the 2% margin, dropping candidates that throw or disagree, the time budget, memory and
// records, forgetting, and one tuning at a time per lane.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <stdexcept>
#include <thread>

#include "kiln/error.hpp"
#include "tune/tune_key.hpp"
#include "tune/tuner.hpp"

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
  kiln::tune::MatmulProblem a{"f32", "highest", 'N', 'T', 1, 1000, 1000, 1000};
  kiln::tune::MatmulProblem b{"f32", "highest", 'N', 'T', 1, 1024, 1024, 1024};
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
  const kiln::tune::MatmulProblem p{"f32", "high", 'T', 'N', 3, 1000, 64, 5};
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
      out.push_back({name, "value of " + name, [this, i, name] {
                       ++runs[name];
                       if (specs[i].throws) throw std::runtime_error("no kernel for this shape");
                       output = specs[i].output;
                     }});
    }
    return out;
  }
};

class FakeBench final : public Bench {
 public:
  explicit FakeBench(FakeOp& op) : op_(op) {}
  double time(const Candidate& c) override {
    if (op_.inside.fetch_add(1) != 0) op_.overlaps.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    c.run();
    op_.inside.fetch_sub(1);
    ++calls;
    return op_.specs[std::stoi(c.name.substr(1))].seconds;
  }
  void keep_reference() override { op_.reference = op_.output; }
  bool agrees(std::string& why) override {
    if (op_.output == op_.reference) return true;
    why = "differs from the reference by " + std::to_string(op_.output - op_.reference);
    return false;
  }
  int calls = 0;

 private:
  FakeOp& op_;
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
          records};
}

TEST(Tuner, ChoosesTheFastestAndReportsEveryCandidate) {
  FakeOp op({{5e-5}, {4e-5}, {3e-5}, {6e-5}});
  FakeBench bench(op);
  Tuner tuner;
  const Choice c = tuner.choose(request(op, bench));
  EXPECT_EQ(c.name, "c2");
  EXPECT_EQ(c.value, "value of c2");
  EXPECT_EQ(c.index, 2);
  EXPECT_DOUBLE_EQ(c.seconds, 3e-5);
  EXPECT_EQ(c.source, Choice::Source::tuned);
  ASSERT_EQ(c.trials.size(), 4u);
  for (const Trial& t : c.trials) {
    EXPECT_EQ(t.status, Trial::Status::timed) << t.name;
    EXPECT_GE(t.samples, Policy{}.min_samples) << t.name;
    EXPECT_LE(t.samples, Policy{}.max_samples) << t.name;
  }
}

TEST(Tuner, KeepsTheDefaultUnlessAnotherIsMoreThanTwoPercentFaster) {
  {
    FakeOp op({{100e-6}, {98.5e-6}});  // 1.5% faster: noise, the default stays
    FakeBench bench(op);
    EXPECT_EQ(Tuner().choose(request(op, bench)).name, "c0");
  }
  {
    FakeOp op({{100e-6}, {97e-6}});  // 3% faster: taken
    FakeBench bench(op);
    EXPECT_EQ(Tuner().choose(request(op, bench)).name, "c1");
  }
}

TEST(Tuner, DropsCandidatesThatThrowOrDisagree) {
  FakeOp op({{5e-5}, {1e-5, 1.0, true}, {2e-5, 1.5}, {4e-5}});
  FakeBench bench(op);
  const Choice c = Tuner().choose(request(op, bench));
  EXPECT_EQ(c.name, "c3");  // c1 and c2 are faster, but one throws and one is wrong
  EXPECT_EQ(c.trials[1].status, Trial::Status::failed);
  EXPECT_NE(c.trials[1].why.find("no kernel for this shape"), std::string::npos);
  EXPECT_EQ(c.trials[2].status, Trial::Status::disagreed);
  EXPECT_NE(c.trials[2].why.find("differs from the reference"), std::string::npos);
  EXPECT_EQ(op.runs["c2"], 1);  // a wrong candidate is not timed past its warm-up
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

TEST(Tuner, TheBudgetBoundsTheSamples) {
  FakeOp op({{5e-5}, {4e-5}});
  {
    FakeBench bench(op);
    Policy p;
    p.budget_seconds = 0;  // spent at once: min_samples each
    const Choice c = Tuner(p).choose(request(op, bench));
    for (const Trial& t : c.trials) EXPECT_EQ(t.samples, p.min_samples);
    EXPECT_EQ(bench.calls, 2 * (1 + p.min_samples));  // a warm-up and the samples each
  }
  {
    FakeBench bench(op);
    Policy p;
    p.budget_seconds = 60;  // never spent: max_samples each
    const Choice c = Tuner(p).choose(request(op, bench));
    for (const Trial& t : c.trials) EXPECT_EQ(t.samples, p.max_samples);
  }
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
  EXPECT_EQ(bench.calls, 2 * (1 + Policy{}.max_samples));
}

TEST(Tuner, TunesOneKeyAtATimePerLane) {
  FakeOp op({{5e-5}, {4e-5}, {3e-5}});
  FakeBench bench(op);
  Policy p;
  p.budget_seconds = 0;  // min_samples each, so the count below is exact
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

}  // namespace
