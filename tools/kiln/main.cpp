// The `kiln` command: `kiln bench`, `kiln doctor`, `kiln tune`, `kiln info`, `kiln launch`,
// `kiln --version`.
//
// Exit status: 0 on success; 2 for an error kiln raised (a kiln::Error, printed as
// "kiln: <message>"); 1 from `kiln doctor` when a performance feature is lost; 3 when a benchmark's
// result failed its check; 1 for anything unexpected; CLI11's own codes for a bad command line.
// `kiln bench` in several processes exits with the status of the first process that failed (1 when
// one was killed by a signal). `kiln launch` exits with its ranks' status (launch.hpp).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench.hpp"
#include "bench_processes.hpp"
#include "compare.hpp"
#include "doctor.hpp"
#include "kiln/kiln.hpp"
#include "launch.hpp"
#include "table.hpp"
#include "tune.hpp"

namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void run_info() {
  fmt::print("kiln {}\n\ndevices:\n", kiln::version());
  std::vector<std::vector<std::string>> rows{{"name", "present", "backend / why absent"}};
  const std::vector<kiln::DeviceInfo> devices = kiln::devices();
  for (const kiln::DeviceInfo& d : devices) {
    rows.push_back({d.name, yes_no(d.present), d.present ? d.backend_name : d.reason});
  }
  kiln::cli::print_table(rows, "  ");

  fmt::print("\nwhat each backend reports:\n");
  rows = {{"device", "part", "name", "value"}};
  for (const kiln::DeviceInfo& d : devices)
    for (const kiln::DeviceInfo::Fact& f : d.facts)
      rows.push_back({d.name, f.part, f.name, f.value});
  kiln::cli::print_table(rows, "  ");

  fmt::print("\nfeatures:\n");
  rows = {{"name", "compiled", "live", "why"}};
  for (const kiln::FeatureState& f : kiln::features()) {
    rows.push_back({f.name, yes_no(f.compiled), yes_no(f.live), f.why});
  }
  kiln::cli::print_table(rows, "  ");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: a C++ tensor library whose performance features you can see"};
  // A callback, so that the library is asked for its version only when --version is given.
  app.set_version_flag("--version", [] { return "kiln " + kiln::version(); });
  app.require_subcommand(1);

  kiln::cli::BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench",
      "Time the seed workloads (chain8 2048x2048, matmul 1024x1024, f32) on each device, in two "
      "fresh processes: the second's first calls read what the first stored; --compare: under "
      "each configuration of the features, as a table of ratios to default");
  bench_cmd->add_option("--device", bench.device, "cpu, cuda, or all present devices")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}))
      ->capture_default_str();
  kiln::cli::CompareOptions compare;
  CLI::Option* runs_opt =
      bench_cmd
          ->add_option(
              "--runs", bench.runs,
              fmt::format("Timed calls after the first (with --compare: {})", compare.runs))
          ->check(CLI::Range(1, 1000000))
          ->capture_default_str();
  bench_cmd->add_flag("--json", bench.json, "Print one JSON object instead of text lines");
  bench_cmd
      ->add_option("--new-shape-side", bench.new_shape_side,
                   "Side of the square matmul of the CUDA rows \"first call of a new shape\" "
                   "(measured in a process of its own on an empty temporary store)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{16384}))
      ->capture_default_str();
  CLI::Option* processes_opt =
      bench_cmd
          ->add_option("--processes", bench.processes,
                       "Fresh processes that run the workloads one after the other, sharing the "
                       "store, so that a later one's first calls show what the store saves; 1: "
                       "this process runs them")
          ->check(CLI::Range(1, 16))
          ->capture_default_str();
  // Hidden (empty group): how run_bench_processes starts each of its processes.
  CLI::Option* one_process_opt = bench_cmd->add_flag("--one-process", bench.one_process)->group("");
  bench_cmd->add_option("--report-fd", bench.report_fd)->group("");
  CLI::Option* new_shape_opt =
      bench_cmd->add_flag("--new-shape", bench.new_shape)->group("")->needs(one_process_opt);
  bench_cmd
      ->add_flag(
          "--train", bench.train,
          "Time training steps instead: an MLP step (every device) and a GPT-2 small step "
          "(B=16, T=1024, AdamW; TF32 and bf16 autocast; CUDA), with tokens/s, MFU and peak memory")
      ->excludes(new_shape_opt);
  bool compare_flag = false;
  CLI::Option* compare_opt = bench_cmd->add_flag(
      "--compare", compare_flag,
      "Run the workloads under each configuration (default, each feature off alone through its "
      "KILN_* variable, all off), each in a fresh process, alternated over --rounds on one "
      "temporary store, and print a table of the minimum over rounds and its ratio to default");
  compare_opt->excludes(processes_opt)->excludes(one_process_opt);
  bench_cmd
      ->add_option("--rounds", compare.rounds,
                   "--compare: rounds, each running every configuration once")
      ->check(CLI::Range(1, 1000))
      ->needs(compare_opt)
      ->capture_default_str();
  bench_cmd
      ->add_option("--plot", compare.plot,
                   "--compare: also draw the table as a grouped bar chart, in this SVG file")
      ->needs(compare_opt);
  bench_cmd
      ->add_option("--configs", compare.configs,
                   "--compare: only these configurations, comma-separated (default always "
                   "runs): default, fusion-off, autotune-off, persistence-off, threads-off, "
                   "simd-off, all-off")
      ->delimiter(',')
      ->needs(compare_opt);

  kiln::cli::TuneOptions tune;
  CLI::App* tune_cmd = app.add_subcommand(
      "tune", "Fill the store with tuned matmul choices ahead of time, list it, or clear it");
  CLI::Option* matmul_opt =
      tune_cmd->add_option("--matmul", tune.matmul,
                           "Problems to tune, MxNxK[,MxNxK...]: one matmul of each on random "
                           "operands, its choice written to the store");
  tune_cmd->add_option("--precision", tune.precision, "float32 matmul precision (high: TF32)")
      ->check(CLI::IsMember({"highest", "high"}))
      ->needs(matmul_opt)
      ->capture_default_str();
  tune_cmd->add_option("--device", tune.device, "cuda or cuda:N")
      ->needs(matmul_opt)
      ->capture_default_str();
  tune_cmd->add_option("--batch", tune.batch, "B of out[B, M, N] = a[B, M, K] @ b[B, K, N]")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 31))
      ->needs(matmul_opt)
      ->capture_default_str();
  tune_cmd
      ->add_option("--layout", tune.layout,
                   "a's and b's layout: N as stored, T a transposed view of a stored transpose")
      ->check(CLI::IsMember({"NN", "NT", "TN", "TT"}))
      ->needs(matmul_opt)
      ->capture_default_str();
  tune_cmd
      ->add_option("--dtype", tune.dtype,
                   "The operands' and the output's dtype (--precision is for f32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->needs(matmul_opt)
      ->capture_default_str();
  tune_cmd
      ->add_flag("--bias", tune.bias,
                 "Tune the product as a linear layer runs it: a bias of N added in the same pass "
                 "(cuBLASLt's bias epilogue, a tune key of its own)")
      ->needs(matmul_opt);
  tune_cmd
      ->add_flag("--exhaustive", tune.exhaustive,
                 "Time every candidate (cuBLASLt's 16 and kiln's own kernels, compiled first) "
                 "with more samples and no time bound, also for problems the store has")
      ->needs(matmul_opt);
  CLI::Option* list_opt = tune_cmd->add_flag(
      "--list", tune.list, "Print the store's rows by identity (stale ones marked) and its path");
  CLI::Option* clear_opt = tune_cmd->add_flag("--clear", tune.clear, "Remove the store's rows");
  tune_cmd->add_option("--table", tune.table, "--list / --clear: only this table")
      ->check(CLI::IsMember({"tune", "kernels"}));
  list_opt->excludes(clear_opt)->excludes(matmul_opt);
  clear_opt->excludes(matmul_opt);

  kiln::cli::DoctorOptions doctor;
  CLI::App* doctor_cmd = app.add_subcommand(
      "doctor",
      "Report the devices, every feature's state, the store, the BLAS, the SIMD target and the "
      "library versions; then what is lost, what it costs and how to fix it. Exit status 1 when "
      "a performance feature is lost by accident");
  doctor_cmd->add_flag("--json", doctor.json, "Print one JSON object instead of the report");
  doctor_cmd->add_flag("--strict", doctor.strict,
                       "Exit 1 also for a feature lost on purpose (compiled out with "
                       "KILN_QUIET_FEATURES, switched off at run time): for CI");

  CLI::App* info_cmd =
      app.add_subcommand("info", "Print kiln's version, the devices and the features");

  kiln::cli::LaunchOptions launch;
  CLI::App* launch_cmd = app.add_subcommand(
      "launch",
      "Start a program once per GPU, as torchrun does: RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set for kiln::dist; signals forwarded; when "
      "one rank fails, the others are stopped. Usage: kiln launch -n N [options] program args...");
  launch_cmd->add_option("-n,--nproc-per-node", launch.nproc, "Processes on this node")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  launch_cmd->add_option("--nnodes", launch.nnodes, "Nodes in all")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  launch_cmd->add_option("--node-rank", launch.node_rank, "This node's rank, 0 to --nnodes - 1")
      ->capture_default_str();
  launch_cmd->add_option("--master-addr", launch.master_addr,
                         "Address of node 0, where rank 0 hosts the rendezvous (default "
                         "127.0.0.1; required with --nnodes > 1)");
  launch_cmd->add_option("--master-port", launch.master_port,
                         "Its port (default: a free port on one node, 29500 on several)");
  launch_cmd
      ->add_option("--grace", launch.grace_seconds,
                   "Seconds between SIGTERM and SIGKILL for the ranks left when one fails")
      ->capture_default_str();
  // Everything from the program on is the program's, options included.
  launch_cmd->prefix_command();

  CLI11_PARSE(app, argc, argv);

  try {
    kiln::config();  // a bad KILN_* value fails every command, even one that runs no op
    if (*bench_cmd && compare_flag) {
      compare.device = bench.device;
      compare.json = bench.json;
      compare.train = bench.train;
      if (runs_opt->count() > 0) compare.runs = bench.runs;
      return kiln::cli::run_compare(compare);
    }
    if (*bench_cmd) {
      if (bench.one_process || bench.processes == 1) {
        kiln::cli::run_bench(bench);
      } else {
        return kiln::cli::run_bench_processes(bench);
      }
    }
    if (*tune_cmd) kiln::cli::run_tune(tune);
    if (*info_cmd) run_info();
    if (*launch_cmd) {
      launch.command = launch_cmd->remaining();
      return kiln::cli::run_launch(launch);
    }
    if (*doctor_cmd) return kiln::cli::run_doctor(doctor);
  } catch (const kiln::InternalError& e) {  // a kiln bug, reported as one
    fmt::print(stderr, "kiln: internal error (a kiln bug): {}\n", e.what());
    return 1;
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: {}\n", e.what());
    return 2;
  } catch (const kiln::cli::CheckError& e) {
    fmt::print(stderr, "kiln: bench: wrong result, timings discarded: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {  // a bug or the system (out of memory), not the user
    fmt::print(stderr, "kiln: unexpected error: {}\n", e.what());
    return 1;
  }
  return 0;
}
