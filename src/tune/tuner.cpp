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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
      std::string result;
      switch (last.status) {
        case Trial::Status::timed:
          result = fmt::format("{} (median of {}{})", format_seconds(last.median), last.samples,
                               last.gave_up ? ", gave up: slower than the best" : "");
          break;
        case Trial::Status::failed:
          result = "failed: " + last.why;
          break;
        case Trial::Status::disagreed:
          result = "disagreed: " + last.why;
          break;
        case Trial::Status::skipped:
          result = "skipped: " + last.why;
          break;
      }
      detail::log_line(
          "tune", fmt::format("{}: candidate {} of {}, {}: {}; {} spent; best so far {}",
                              request_.key, done, request_.candidates.size(), last.name, result,
                              format_seconds(last.spent_seconds), best_text));
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

// One tuning under one policy (tuner.hpp describes both).
class Tuning {
 public:
  Tuning(const Request& r, const Policy& p)
      : r_(r), p_(p), bench_(*r.bench), progress_(r), trials_(r.candidates.size()) {}

  Choice run() {
    const std::size_t n = r_.candidates.size();
    std::vector<bool> ready(n, true);
    for (std::size_t i = 0; i < n; ++i) {
      trials_[i].name = r_.candidates[i].name;
      // Compiles start now, so that they run while the others are timed (or, offline, end
      // before any timing starts).
      if (r_.candidates[i].prepare) ready[i] = prepare(i, p_.wait_for_compiles);
    }
    start_ = p_.wait_for_compiles || !r_.started ? bench_.now() : *r_.started;
    for (std::size_t i = 0; i < n; ++i) {
      Trial& t = trials_[i];
      if (t.status == Trial::Status::timed) {
        const auto t0 = bench_.now();
        if (!ready[i]) ready[i] = prepare(i, false);  // (its compile may have ended meanwhile)
        if (t.status != Trial::Status::timed) {
          // (its compile failed)
        } else if (!ready[i]) {
          skip(t,
               "not compiled yet (its compile runs in the background; `kiln tune` compiles "
               "it first)");
        } else if (reference_ >= 0 && !fits(per_candidate_)) {
          skip(t, bound_reached());
        } else {
          try_candidate(i);
        }
        t.spent_seconds = seconds(bench_.now() - t0);
      }
      progress_.update(i + 1, t, best_ >= 0 ? &trials_[best_] : nullptr);
    }
    return choice();
  }

 private:
  // Whether `cost` more seconds, and the op's own run of its choice after the tuning, still end
  // inside the bound of the call.
  bool fits(double cost) const {
    if (p_.bound_floor <= 0) return true;
    return seconds(bench_.now() - start_) + cost + reserve_ <= budget_;
  }
  std::string bound_reached() const {
    return fmt::format(
        "the first call's bound of {} was reached (`kiln tune --exhaustive` "
        "times every candidate)",
        format_seconds(budget_));
  }
  void skip(Trial& t, std::string why) {
    t.status = Trial::Status::skipped;
    t.why = std::move(why);
  }
  bool prepare(std::size_t i, bool wait) {
    try {
      return r_.candidates[i].prepare(wait);
    } catch (const std::exception& e) {
      trials_[i].status = Trial::Status::failed;
      trials_[i].why = e.what();
      return false;
    }
  }
  bool check(Trial& t) {
    if (std::string why; !bench_.agrees(why)) {
      t.status = Trial::Status::disagreed;
      t.why = why;
      return false;
    }
    return true;
  }
  // Whether a candidate of this median would be chosen over the best so far: faster than it,
  // and faster than the default by more than the margin (timing noise must not flip choices).
  bool wins(double m) const {
    if (best_ < 0) return true;
    if (m >= trials_[best_].median) return false;
    return trials_[0].status != Trial::Status::timed || trials_[0].samples == 0 ||
           m < trials_[0].median * (1 - p_.margin);
  }

  void try_candidate(std::size_t i) {
    const Candidate& c = r_.candidates[i];
    Trial& t = trials_[i];
    const bool is_reference = reference_ < 0;
    try {
      const auto w0 = bench_.now();
      bench_.time(c);  // the warm-up (a first launch may load a module)
      const double warm_up = seconds(bench_.now() - w0);
      if (is_reference) {
        bench_.keep_reference();
      } else if (p_.check_all && !check(t)) {
        return;
      }
      std::vector<double> samples;
      const auto sampling = bench_.now();
      const double share = p_.sample_seconds / static_cast<double>(r_.candidates.size());
      double last = 0;
      while (static_cast<int>(samples.size()) < p_.max_samples) {
        if (!samples.empty() && !fits(last)) break;
        const auto s0 = bench_.now();
        samples.push_back(bench_.time(c));
        last = seconds(bench_.now() - s0);
        if (samples.size() == 1 && is_reference) per_candidate_ = warm_up + last;
        if (!is_reference && best_ >= 0 && p_.give_up > 0 &&
            *std::min_element(samples.begin(), samples.end()) >
                p_.give_up * trials_[best_].median) {
          t.gave_up = true;
          break;
        }
        if (static_cast<int>(samples.size()) >= p_.min_samples &&
            seconds(bench_.now() - sampling) > share)
          break;
      }
      t.samples = static_cast<int>(samples.size());
      t.median = median(samples);
      if (is_reference) {
        reference_ = best_ = static_cast<int>(i);
        budget_ = std::max(p_.bound_floor, p_.bound_factor * t.median);
        reserve_ = t.median + p_.after_tuning;
        return;
      }
      if (t.gave_up || !wins(t.median)) return;
      if (!p_.check_all) {
        if (!fits(bench_.agrees_estimate())) {
          skip(t, "timed, but no time was left in the first call's bound to check it");
          return;
        }
        if (!check(t)) return;
      }
      best_ = static_cast<int>(i);
    } catch (const std::exception& e) {
      t.status = Trial::Status::failed;
      t.why = e.what();
    }
  }

  Choice choice() {
    if (best_ < 0) {
      std::string whys;
      for (const Trial& t : trials_) whys += fmt::format("\n  {}: {}", t.name, t.why);
      throw Error(fmt::format("tune {}: no candidate ran and agreed:{}", r_.key, whys));
    }
    Choice c;
    c.value = r_.candidates[best_].value;
    c.name = r_.candidates[best_].name;
    c.seconds = trials_[best_].median;
    c.source = Choice::Source::tuned;
    c.index = best_;
    c.complete = std::none_of(trials_.begin(), trials_.end(),
                              [](const Trial& t) { return t.status == Trial::Status::skipped; });
    if (detail::log_enabled("tune")) {
      const auto timed = std::count_if(trials_.begin(), trials_.end(), [](const Trial& t) {
        return t.status == Trial::Status::timed;
      });
      detail::log_line(
          "tune",
          fmt::format("{}: {} of {} candidates timed{}, {} since the call began{}", r_.key, timed,
                      trials_.size(), c.complete ? "" : " (partial)",
                      format_seconds(seconds(bench_.now() - start_)),
                      p_.bound_floor > 0 ? fmt::format(" (bound {})", format_seconds(budget_))
                                         : std::string()));
    }
    c.trials = std::move(trials_);
    return c;
  }

  const Request& r_;
  const Policy p_;
  Bench& bench_;
  Progress progress_;
  std::vector<Trial> trials_;
  Clock::time_point start_;
  int reference_ = -1, best_ = -1;
  double per_candidate_ = 0;  // the reference's warm-up and first sample: what a new one costs
  double budget_ = p_.bound_floor;  // seconds from start_; max(floor, factor x the reference)
  double reserve_ = 0;              // for what follows the tuning (Policy::after_tuning)
};

}  // namespace

struct Tuner::Impl {
  mutable std::mutex mu;  // the members below
  Policy policy;
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
};

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
  if (r.candidates.empty()) throw InternalError(fmt::format("tune {}: no candidates", r.key));
  if (!r.bench) throw InternalError(fmt::format("tune {}: no bench to time the candidates", r.key));
  const std::string id = r.lane + " " + r.key;
  if (auto c = impl_->remembered(id)) return *c;
  std::lock_guard lane(impl_->lane(r.lane));    // one key at a time per GPU
  if (auto c = impl_->known(id, r)) return *c;  // (tuned by another thread meanwhile, or stored)
  {
    std::lock_guard lock(impl_->mu);
    impl_->forgotten.erase(id);
  }
  Choice c = Tuning(r, policy()).run();
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

Policy Tuner::policy() const {
  std::lock_guard lock(impl_->mu);
  return impl_->policy;
}

void Tuner::set_policy(const Policy& policy) {
  std::lock_guard lock(impl_->mu);
  impl_->policy = policy;
}

Tuner& process_tuner() {
  static Tuner* t = new Tuner;  // never destroyed: ops may tune from static destructors' time
  return *t;
}

}  // namespace kiln::tune
