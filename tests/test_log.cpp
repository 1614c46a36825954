// KILN_LOG: an unknown topic is an error that lists the valid ones (in the library and from
// every `kiln` command); fusion:summary prints one summary at exit; a fused group's trace header
// counts exactly what is listed under it. The program traced is tests/helpers/log_program.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "kiln/error.hpp"
#include "kiln_command.hpp"
#include "require_cuda.hpp"
#include "temp_dir.hpp"

namespace {

using kiln::detail::kLogTopics;
using kiln::detail::parse_log_topics;
using kt::has;
using kt::Outcome;

const std::string kValidTopics =
    "expected a comma-separated list of: fusion, fusion:summary, graphs, profile, store, tune, all";

unsigned bit(std::string_view topic) {
  for (std::size_t i = 0; i < kLogTopics.size(); ++i)
    if (kLogTopics[i] == topic) return 1u << i;
  ADD_FAILURE() << topic << " is not in kLogTopics";
  return 0;
}

TEST(LogTopics, ParseNamesTheTopics) {
  for (std::string_view t : kLogTopics) EXPECT_EQ(parse_log_topics(t), bit(t)) << t;
  EXPECT_EQ(parse_log_topics(""), 0u);
  EXPECT_EQ(parse_log_topics(","), 0u);
  EXPECT_EQ(parse_log_topics(" tune , fusion:summary,"), bit("tune") | bit("fusion:summary"));
  EXPECT_EQ(parse_log_topics("fusion,fusion"), bit("fusion"));
  EXPECT_EQ(parse_log_topics("all"), (1u << kLogTopics.size()) - 1);
  EXPECT_EQ(parse_log_topics("store,all"), (1u << kLogTopics.size()) - 1);
}

TEST(LogTopics, UnknownTopicIsAnErrorListingTheValidOnes) {
  const std::vector<std::pair<std::string, std::string>> cases{{"fusoin", "fusoin"},
                                                               {"fusion,fusoin", "fusoin"},
                                                               {"tune, summary", "summary"},
                                                               {"FUSION", "FUSION"},
                                                               {"fusion:summry", "fusion:summry"}};
  for (const auto& [value, bad] : cases) {
    try {
      parse_log_topics(value);
      ADD_FAILURE() << value << " was accepted";
    } catch (const kiln::ValueError& e) {
      EXPECT_EQ(std::string(e.what()),
                "KILN_LOG=" + value + ": '" + bad + "' is not a topic; " + kValidTopics);
    }
  }
  // The message lists every topic the code can log.
  for (std::string_view t : kLogTopics) EXPECT_TRUE(has(kValidTopics, std::string(t))) << t;
}

// kiln_log_program `what` with `env`, in a fresh directory.
class LogProgram : public ::testing::Test {
 protected:
  kt::TempDir tmp_{"kiln-log"};
  Outcome run(const std::string& what, const std::vector<std::string>& env) {
    const std::vector<std::string> args{what};
    return kt::finish_kiln(
        kt::start_program(kt::sibling_program(KILN_LOG_PROGRAM), tmp_.path(), args, env),
        tmp_.path(), args);
  }
};

TEST_F(LogProgram, UnknownTopicIsAnErrorAtTheFirstKilnCall) {
  const Outcome r = run("chain8", {"KILN_LOG=fusion,fusoin"});
  EXPECT_EQ(r.status, 2) << r;
  EXPECT_TRUE(has(
      r.err, "ValueError: KILN_LOG=fusion,fusoin: 'fusoin' is not a topic; " + kValidTopics + "\n"))
      << r;
  EXPECT_FALSE(has(r.err, "done")) << r;
  EXPECT_FALSE(has(r.err, "kiln[")) << r;
}

#if KILN_WITH_FUSION
// chain8 four times over 256x256 f32, each result read: four groups of the 8 ops of one plan,
// each reading x (256 KiB) and writing z (256 KiB); the 7 intermediates of each stay in
// registers.
const std::string kChain8Summary =
    "32 ops recorded; 4 groups run (0 of them reductions with the open group as their prologue); "
    "0 groups closed with no result left to write\n"
    "  ops per group: min 8, mean 8.0, max 8; groups by ops: 5-8: 4\n"
    "  plans: 3 cached, 1 new; kernels compiled: 0 (0.00 s), loaded from the store: 0\n"
    "  memory: 1.0 MiB read, 1.0 MiB written (4 results); 28 intermediates (7.0 MiB) never "
    "written; 0 recorded ops not needed by any written result";

TEST_F(LogProgram, SummaryIsPrintedOnceAtExit) {
  const Outcome r = run("chain8", {"KILN_LOG=fusion:summary"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_EQ(r.out, kChain8Summary) << "kiln::fusion_summary() on demand\n" << r;
  EXPECT_EQ(r.err, "done\nkiln[fusion:summary]: " + kChain8Summary + "\n") << r;
}

// KILN_LOG=profile on the GPU: at exit, the device time of the generated kernel and of the
// cuBLASLt matmul, each named, one call each.
TEST_F(LogProgram, ProfilePrintsTheDeviceTimePerKernelAtExit) {
  KILN_REQUIRE_CUDA();
  const Outcome r = run("matmul-cuda", {"KILN_LOG=profile"});
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(has(r.err, "done\nkiln[profile]: device time per kernel, ")) << r;
  EXPECT_TRUE(has(r.err, "cublasLt matmul f32 256x256x256")) << r;
  EXPECT_TRUE(has(r.err, "kiln_")) << r;  // the fused chain's kernel, by its generated name
  const Outcome quiet = run("matmul-cuda", {});
  ASSERT_EQ(quiet.status, 0) << quiet;
  EXPECT_FALSE(has(quiet.err, "kiln[profile]")) << quiet;
}

TEST_F(LogProgram, SummaryOnlyWhenAsked) {
  const Outcome quiet = run("chain8", {});
  ASSERT_EQ(quiet.status, 0) << quiet;
  EXPECT_EQ(quiet.err, "done\n") << quiet;
  const Outcome trace = run("chain8", {"KILN_LOG=fusion"});
  ASSERT_EQ(trace.status, 0) << trace;
  EXPECT_EQ(kt::occurrences(trace.err, "kiln[fusion]: cpu: group of 8 ops"), 4u) << trace;
  EXPECT_FALSE(has(trace.err, "kiln[fusion:summary]")) << trace;
  const Outcome all = run("chain8", {"KILN_LOG=all"});
  ASSERT_EQ(all.status, 0) << all;
  EXPECT_EQ(kt::occurrences(all.err, "kiln[fusion]: cpu: group of 8 ops"), 4u) << all;
  EXPECT_TRUE(has(all.err, "done\nkiln[fusion:summary]: " + kChain8Summary + "\n")) << all;
}

// One trace entry: its header line and the lines listed under it.
struct Entry {
  std::string header;
  std::vector<std::string> listed;
};

std::vector<Entry> entries(const std::string& err) {
  std::vector<Entry> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("kiln[fusion]: ", 0) == 0)
      out.push_back({line, {}});
    else if (!out.empty() && line.rfind("  ", 0) == 0)
      out.back().listed.push_back(line);
  }
  return out;
}

// The integer right before `word` in s ("3 inputs" -> 3), or -1 when there is none.
int number_before(const std::string& s, const std::string& word) {
  const auto at = s.find(word);
  if (at == std::string::npos) return -1;
  auto from = at;
  while (from > 0 && std::isdigit(static_cast<unsigned char>(s[from - 1]))) --from;
  return from == at ? -1 : std::stoi(s.substr(from, at - from));
}

// The integer right after `word` in s ("group of 3" -> 3), or -1 when there is none.
int number_after(const std::string& s, const std::string& word) {
  const auto at = s.find(word);
  if (at == std::string::npos) return -1;
  const auto from = at + word.size();
  auto end = from;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  return end == from ? -1 : std::stoi(s.substr(from, end - from));
}

int count_if_has(const std::vector<std::string>& lines, const std::string& what) {
  int n = 0;
  for (const auto& l : lines) n += has(l, what);
  return n;
}

TEST_F(LogProgram, GroupHeadersCountTheOpsListedUnderThem) {
  const Outcome r = run("mixed", {"KILN_LOG=fusion"});
  ASSERT_EQ(r.status, 0) << r;
  int checked = 0;
  for (const Entry& e : entries(r.err)) {
    if (has(e.header, "closed with no result left to write")) {
      EXPECT_TRUE(e.listed.empty()) << e.header;
      continue;
    }
    const int ops_said =
        std::max(number_after(e.header, "group of "), number_after(e.header, "a prologue of "));
    ASSERT_GE(ops_said, 0) << e.header;
    const int inputs = count_if_has(e.listed, " = input "),
              scalars = count_if_has(e.listed, " = scalar ");
    int outputs = -1;
    for (const auto& l : e.listed)
      if (l.rfind("  outputs:", 0) == 0) outputs = kt::occurrences(l, "%");
    const int ops = static_cast<int>(e.listed.size()) - 1 - inputs - scalars;
    EXPECT_EQ(ops_said, ops) << e.header;
    EXPECT_EQ(number_before(e.header, " inputs"), inputs) << e.header;
    EXPECT_EQ(number_before(e.header, " scalars"), scalars) << e.header;
    if (const int said = number_before(e.header, " outputs"); said >= 0) {
      EXPECT_EQ(said, outputs) << e.header;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 4) << r;
  // The program's cases, each seen: clamp's two ops, the mixed-dtype add's cast, a prologue cut
  // from a larger group, the dropped sin and x * x, and the group nobody held.
  EXPECT_TRUE(has(r.err, "= maximum f32") && has(r.err, "= minimum f32")) << r;
  EXPECT_TRUE(has(r.err, "= cast f32")) << r;
  EXPECT_TRUE(has(r.err, "sum over dim 1 of [256, 256] with a prologue of 1 ops")) << r;
  EXPECT_TRUE(has(r.err, "plan new; 2 more recorded ops not needed by its outputs")) << r;
  EXPECT_TRUE(has(r.err,
                  "cpu: group of 2 recorded ops over [256, 256] closed with no result left "
                  "to write: nothing runs"))
      << r;
}
#endif

// Every command checks the environment first, so a bad KILN_LOG fails even one that runs no op.
TEST(LogCli, UnknownTopicFailsEveryCommand) {
  kt::TempDir tmp("kiln-log-cli");
  const std::vector<std::string> env{"KILN_LOG=fusoin",
                                     "KILN_CACHE_DIR=" + (tmp.path() / "store").string()};
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"info"},
                                             {"doctor"},
                                             {"tune", "--list"},
                                             {"tune", "--clear"},
                                             {"bench", "--device", "cpu", "--runs", "1"}}) {
    const Outcome r = kt::run_kiln(tmp.path(), args, env);
    EXPECT_EQ(r.status, 2) << r;
    EXPECT_EQ(r.err, "kiln: KILN_LOG=fusoin: 'fusoin' is not a topic; " + kValidTopics + "\n") << r;
  }
  const Outcome ok = kt::run_kiln(tmp.path(), {"info"}, {"KILN_LOG=all"});
  EXPECT_EQ(ok.status, 0) << ok;
}

}  // namespace
