#include "tune/tuner.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "core/log.hpp"
#include "kiln/error.hpp"

namespace kiln::tune {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string format_seconds(double s) {
  return s < 1e-3 ? fmt::format("{:.1f} us", s * 1e6) : fmt::format("{:.2f} ms", s * 1e3);
}

// The one progress line of a tuning that lasts: silent for its first half second, then updated
// in place on a terminal; with KILN_LOG=tune one log line per candidate instead, terminal or not.
class Progress {
 public:
  explicit Progress(const Request& r)
      : request_(r),
        start_(Clock::now()),
        log_(detail::log_enabled("tune")),
        tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() {
    if (shown_) std::fputc('\n', stderr);
  }

  // After candidate `done` (1-based), whose trial is `last`.
  void update(std::size_t done, const Trial& last, const Trial* best) {
    const std::string best_text =
        best ? fmt::format("{} {}", best->name, format_seconds(best->median)) : "none";
    if (log_) {
      const std::string result =
          last.status == Trial::Status::timed
              ? fmt::format("{} (median of {})", format_seconds(last.median), last.samples)
              : fmt::format("{}: {}", last.status == Trial::Status::failed ? "failed" : "disagreed",
                            last.why);
      detail::log_line(
          "tune", fmt::format("{}: candidate {} of {}, {}: {}; best so far {}", request_.key, done,
                              request_.candidates.size(), last.name, result, best_text));
    } else if (tty_ && Clock::now() - start_ > std::chrono::milliseconds(500)) {
      std::fprintf(stderr, "\r\033[Kkiln: tuning %s (%s): candidate %zu of %zu, best so far %s",
                   request_.key.c_str(), request_.shape.c_str(), done, request_.candidates.size(),
                   best_text.c_str());
      std::fflush(stderr);
      shown_ = true;
    }
  }

 private:
  const Request& request_;
  Clock::time_point start_;
  bool log_, tty_, shown_ = false;
};

}  // namespace

struct Tuner::Impl {
  Policy policy;
  std::mutex mu;                         // the maps below
  std::map<std::string, Choice> memory;  // by lane + key
  std::set<std::string> forgotten;       // lane + key: tune again, not from the records
  std::map<std::string, std::unique_ptr<std::mutex>> lanes;

  std::mutex& lane(const std::string& name) {
    std::lock_guard lock(mu);
    auto& m = lanes[name];
    if (!m) m = std::make_unique<std::mutex>();
    return *m;
  }
  std::optional<Choice> remembered(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = memory.find(id);
    if (it == memory.end()) return std::nullopt;
    Choice c = it->second;
    c.source = Choice::Source::memory;
    c.trials.clear();
    return c;
  }
  void remember(const std::string& id, const Choice& c) {
    std::lock_guard lock(mu);
    memory[id] = c;
  }

  std::optional<Choice> known(const std::string& id, const Request& r);
  Choice tune(const Request& r);
};

Choice Tuner::Impl::tune(const Request& r) {
  Bench& bench = *r.bench;
  Progress progress(r);
  const double share = policy.budget_seconds / static_cast<double>(r.candidates.size());
  std::vector<Trial> trials;
  bool have_reference = false;
  int best = -1;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    Trial t;
    t.name = c.name;
    try {
      bench.time(c);  // the warm-up, whose output is checked
      if (!have_reference) {
        bench.keep_reference();
        have_reference = true;
      } else if (std::string why; !bench.agrees(why)) {
        t.status = Trial::Status::disagreed;
        t.why = why;
      }
      if (t.status == Trial::Status::timed) {
        std::vector<double> samples;
        const auto start = Clock::now();
        while (static_cast<int>(samples.size()) < policy.max_samples) {
          samples.push_back(bench.time(c));
          const double spent = std::chrono::duration<double>(Clock::now() - start).count();
          if (static_cast<int>(samples.size()) >= policy.min_samples && spent > share) break;
        }
        t.samples = static_cast<int>(samples.size());
        t.median = median(samples);
      }
    } catch (const std::exception& e) {
      t.status = Trial::Status::failed;
      t.why = e.what();
    }
    if (t.status == Trial::Status::timed && (best < 0 || t.median < trials[best].median))
      best = static_cast<int>(i);
    trials.push_back(std::move(t));
    progress.update(i + 1, trials.back(), best >= 0 ? &trials[best] : nullptr);
  }
  if (best < 0) {
    std::string whys;
    for (const Trial& t : trials) whys += fmt::format("\n  {}: {}", t.name, t.why);
    throw Error(fmt::format("tune {}: no candidate ran and agreed:{}", r.key, whys));
  }
  // The default stays unless another is clearly faster: timing noise must not flip choices.
  if (best != 0 && trials[0].status == Trial::Status::timed &&
      trials[best].median >= trials[0].median * (1 - policy.margin)) {
    best = 0;
  }
  Choice choice;
  choice.value = r.candidates[best].value;
  choice.name = r.candidates[best].name;
  choice.seconds = trials[best].median;
  choice.source = Choice::Source::tuned;
  choice.index = best;
  choice.trials = std::move(trials);
  return choice;
}

Tuner::Tuner(Policy policy) : impl_(std::make_unique<Impl>()) { impl_->policy = policy; }
Tuner::~Tuner() = default;

std::optional<Choice> Tuner::Impl::known(const std::string& id, const Request& r) {
  if (auto c = remembered(id)) return c;
  {
    std::lock_guard lock(mu);
    if (forgotten.count(id)) return std::nullopt;
  }
  if (!r.records) return std::nullopt;
  auto row = r.records->load(r.key);
  if (!row) return std::nullopt;
  Choice c;
  c.value = row->value;
  c.name = row->name;
  c.seconds = row->seconds;
  c.source = Choice::Source::store;
  remember(id, c);
  return c;
}

std::optional<Choice> Tuner::known(const Request& r) {
  return impl_->known(r.lane + " " + r.key, r);
}

Choice Tuner::choose(const Request& r) {
  if (r.candidates.empty()) throw Error(fmt::format("tune {}: no candidates", r.key));
  if (!r.bench) throw Error(fmt::format("tune {}: no bench to time the candidates", r.key));
  const std::string id = r.lane + " " + r.key;
  if (auto c = impl_->remembered(id)) return *c;
  std::lock_guard lane(impl_->lane(r.lane));    // one key at a time per GPU
  if (auto c = impl_->known(id, r)) return *c;  // (tuned by another thread meanwhile, or stored)
  {
    std::lock_guard lock(impl_->mu);
    impl_->forgotten.erase(id);
  }
  Choice c = impl_->tune(r);
  impl_->remember(id, c);
  if (r.records) r.records->save(r.key, {c.value, c.name, c.seconds}, r.shape);
  if (detail::log_enabled("tune")) {
    detail::log_line("tune", fmt::format("{} ({}): chose {}, {}", r.key, r.shape, c.name,
                                         format_seconds(c.seconds)));
  }
  return c;
}

void Tuner::forget(const std::string& lane, const std::string& key) {
  std::lock_guard lock(impl_->mu);
  impl_->memory.erase(lane + " " + key);
  impl_->forgotten.insert(lane + " " + key);
}

Tuner& process_tuner() {
  static Tuner* t = new Tuner;  // never destroyed: ops may tune from static destructors' time
  return *t;
}

}  // namespace kiln::tune
