// `kiln bench --compare` as a user runs it: the built binary (KILN_CLI), small (--device cpu
// --rounds 1 --runs 2), its table, its JSON, its SVG plot and its errors. The configurations
// whose feature is compiled out (KILN_WITH_*) must be skipped and said so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln_command.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using kt::has;
using kt::occurrences;
using kt::Outcome;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs the kiln binary with kiln's switches unset (--compare sets its own; its store is a
// temporary directory of its own), stdout and stderr to files in `dir`.
Outcome run_kiln(const fs::path& dir, const std::vector<std::string>& args) {
  // Nothing but --compare's own store should be touched: any other would land here.
  return kt::run_kiln(dir, args, {"KILN_CACHE_DIR=" + (dir / "outer-store").string()});
}

// The configurations this build can run, by the options the test target was built with.
struct Expected {
  std::vector<std::string> run, skipped;
};

Expected expected_configurations() {
  Expected e;
  e.run.emplace_back("default");
  int compiled = 0;
  auto feature = [&](const char* name, bool on) {
    (on ? e.run : e.skipped).push_back(std::string(name) + " off");
    compiled += on ? 1 : 0;
  };
  feature("fusion", KILN_WITH_FUSION);
  feature("autotune", KILN_WITH_AUTOTUNE);
  feature("persistence", KILN_WITH_PERSISTENCE);
  feature("threads", KILN_WITH_THREADS);
  feature("simd", KILN_WITH_SIMD);
  feature("cudnn", KILN_WITH_CUDNN);
  (compiled > 0 ? e.run : e.skipped).emplace_back("all off");
  return e;
}

// One full comparison (text and plot) and one JSON comparison, each run once for the suite: the
// processes are the slow part.
class CliCompare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<kt::TempDir>("kiln-cli-compare");
    svg_path_ = dir_->path() / "compare.svg";
    const fs::path text_dir = dir_->path() / "text", json_dir = dir_->path() / "json";
    fs::create_directories(text_dir);
    fs::create_directories(json_dir);
    text_ = new Outcome(run_kiln(text_dir, {"bench", "--compare", "--device", "cpu", "--rounds",
                                            "1", "--runs", "2", "--plot", svg_path_.string()}));
    // A subset, to keep it short: the JSON's shape does not depend on how many.
    json_ =
        new Outcome(run_kiln(json_dir, {"bench", "--compare", "--device", "cpu", "--rounds", "2",
                                        "--runs", "2", "--json", "--configs", "default,all-off"}));
  }
  static void TearDownTestSuite() {
    delete text_;
    delete json_;
    text_ = json_ = nullptr;
    dir_.reset();
  }
  static std::unique_ptr<kt::TempDir> dir_;
  static fs::path svg_path_;
  static Outcome* text_;
  static Outcome* json_;
};

std::unique_ptr<kt::TempDir> CliCompare::dir_;
fs::path CliCompare::svg_path_;
Outcome* CliCompare::text_ = nullptr;
Outcome* CliCompare::json_ = nullptr;

// The table's header line: the one above its first row.
std::string header_line(const std::string& out) {
  const std::vector<std::string> lines = lines_of(out);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].rfind("chain8 cpu ", 0) == 0) return lines[i - 1];
  }
  return "";
}

TEST_F(CliCompare, TableHasEveryCompiledConfigurationAndOneRatioAtDefault) {
  const Outcome& r = *text_;
  ASSERT_EQ(r.status, 0) << r;
  const Expected e = expected_configurations();
  const std::string header = header_line(r.out);
  ASSERT_FALSE(header.empty()) << r;
  for (const std::string& c : e.run) EXPECT_TRUE(has(header, c)) << c << "\n" << r;
  for (const std::string& c : e.skipped) {
    EXPECT_FALSE(has(header, c)) << c << "\n" << r;
    EXPECT_TRUE(has(r.out, "skipped: " + c + " (")) << c << "\n" << r;
  }
  // The default column's cells: the second column of each row; every one is 1.00x.
  const std::size_t default_at = header.find("default");
  int rows = 0;
  for (const char* row : {"chain8 cpu", "matmul cpu", "first chain8 cpu", "first matmul cpu"}) {
    std::string line;
    for (const std::string& l : lines_of(r.out)) {
      if (l.rfind(std::string(row) + " ", 0) == 0) line = l;
    }
    ASSERT_FALSE(line.empty()) << row << "\n" << r;
    ASSERT_GT(line.size(), default_at) << row << "\n" << r;
    // Cells are left-aligned under their header: the default cell starts where "default" does.
    const std::string cell = line.substr(default_at, line.find(')', default_at) + 1 - default_at);
    EXPECT_TRUE(has(cell, " (1.00x)")) << row << ": '" << cell << "'\n" << r;
    // One cell per configuration, each "<time> (<ratio>x)".
    EXPECT_EQ(occurrences(line, "x)"), e.run.size()) << row << "\n" << r;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
  EXPECT_TRUE(has(r.out, "store: a fresh directory")) << r;
  EXPECT_TRUE(has(r.out, "removed at the end")) << r;
  // The store directory is gone.
  const std::string store_line = [&] {
    for (const std::string& l : lines_of(r.out))
      if (l.rfind("store: ", 0) == 0) return l;
    return std::string();
  }();
  const std::size_t open = store_line.find('('), close = store_line.find(')');
  ASSERT_NE(open, std::string::npos) << r;
  EXPECT_FALSE(fs::exists(store_line.substr(open + 1, close - open - 1))) << store_line;
  // And its processes used that store, never the one the environment named.
  EXPECT_FALSE(fs::exists(dir_->path() / "text" / "outer-store")) << r;
}

TEST_F(CliCompare, PlotIsAnSvgWithOneBarPerCell) {
  const Outcome& r = *text_;
  ASSERT_EQ(r.status, 0) << r;
  ASSERT_TRUE(fs::exists(svg_path_)) << r;
  const std::string svg = kt::slurp(svg_path_);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << svg.substr(0, 200);
  EXPECT_TRUE(has(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"")) << svg.substr(0, 300);
  EXPECT_TRUE(has(svg, "</svg>"));
  const std::size_t configs = expected_configurations().run.size();
  // chain8, matmul, chain8 bf16, matmul bf16, and their first calls, on the CPU.
  constexpr std::size_t kRows = 8;
  EXPECT_EQ(occurrences(svg, "<rect class=\"bar\""), kRows * configs);
  EXPECT_EQ(occurrences(svg, "<rect class=\"legend\""), configs);
  EXPECT_TRUE(has(svg, "log2")) << "the axis says its scale";
  EXPECT_TRUE(has(svg, "dispatch&lt;")) << "the title names the backend, escaped";
  for (const std::string& c : expected_configurations().run) {
    EXPECT_TRUE(has(svg, ">" + c + "</text>")) << c;
  }
}

TEST_F(CliCompare, JsonIsOneObjectWithTheRowsAndConfigurations) {
  const Outcome& r = *json_;
  ASSERT_EQ(r.status, 0) << r;
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  ASSERT_FALSE(out.empty()) << r;
  EXPECT_EQ(out.front(), '{') << r;
  EXPECT_EQ(out.back(), '}') << r;
  EXPECT_EQ(occurrences(out, "\n"), 0u) << "one line: " << r;
  for (const char* key :
       {"\"kiln_version\"", "\"configurations\"", "\"rows\"", "\"store\"", "\"skipped\"",
        "\"rounds\": 2", "\"runs\": 2", "\"ratio\": 1,", "\"metric\": \"first\"",
        "\"metric\": \"min\"", "\"label\": \"first matmul cpu\"", "\"name\": \"default\""}) {
    EXPECT_TRUE(has(out, key)) << key << "\n" << r;
  }
  // A configuration that ran has an environment; a skipped one a reason.
  const bool all_off = expected_configurations().run.size() > 1;
  EXPECT_EQ(has(out, "\"name\": \"all off\", \"environment\""), all_off) << r;
  EXPECT_EQ(has(out, "\"name\": \"all off\", \"why\""), !all_off) << r;
  EXPECT_FALSE(has(out, "\"name\": \"fusion off\", \"environment\"")) << "not asked for\n" << r;
  EXPECT_TRUE(kt::is_one_json_value(out)) << r;
}

class CliCompareErrors : public ::testing::Test {
 protected:
  kt::TempDir tmp_{"kiln-cli-compare"};
};

TEST_F(CliCompareErrors, BadOptionsFailWithAClearMessage) {
  const Outcome zero = run_kiln(tmp_.path(), {"bench", "--compare", "--rounds", "0"});
  EXPECT_NE(zero.status, 0) << zero;
  EXPECT_TRUE(has(zero.err, "--rounds")) << zero;

  const Outcome unknown = run_kiln(tmp_.path(), {"bench", "--compare", "--configs", "turbo-off"});
  EXPECT_EQ(unknown.status, 2) << unknown;
  EXPECT_TRUE(has(unknown.err, "unknown configuration 'turbo-off'")) << unknown;
  EXPECT_TRUE(has(unknown.err, "fusion off")) << "lists the valid ones\n" << unknown;

  const Outcome rounds_alone = run_kiln(tmp_.path(), {"bench", "--rounds", "2"});
  EXPECT_NE(rounds_alone.status, 0) << rounds_alone;
  EXPECT_TRUE(has(rounds_alone.err, "--compare")) << rounds_alone;

  const fs::path bad = tmp_.path() / "no-such-dir" / "f.svg";
  const Outcome plot = run_kiln(tmp_.path(), {"bench", "--compare", "--plot", bad.string()});
  EXPECT_EQ(plot.status, 2) << plot;
  EXPECT_TRUE(has(plot.err, "cannot write")) << plot;
  EXPECT_FALSE(has(plot.err, "priming")) << "fails before running anything\n" << plot;
}

// SIGTERM while it runs: no further process starts, its temporary store goes, and kiln dies of
// the signal. (TMPDIR points its temporary directory into this test's own.)
TEST_F(CliCompareErrors, AnInterruptRemovesTheTemporaryStore) {
  const std::vector<std::string> args{"bench", "--compare", "--device", "cpu", "--runs", "50"};
  const pid_t pid = kt::start_kiln(tmp_.path(), args, {"TMPDIR=" + tmp_.path().string()});
  auto store_dirs = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(tmp_.path()))
      n += e.path().filename().string().rfind("kiln-compare-", 0) == 0;
    return n;
  };
  for (int i = 0; i < 600 && store_dirs() == 0; ++i) usleep(50'000);
  EXPECT_EQ(store_dirs(), 1) << "no temporary store appeared within 30 s";
  kill(pid, SIGTERM);
  const Outcome r = kt::finish_kiln(pid, tmp_.path(), args);
  EXPECT_EQ(r.signal, SIGTERM) << r;
  EXPECT_TRUE(has(r.err, "interrupted by signal")) << r;
  EXPECT_EQ(store_dirs(), 0) << r;
}

}  // namespace
