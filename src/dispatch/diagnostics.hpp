// What the `kiln` command (tools/kiln/) reads of kiln's insides: the CPU backend's BLAS and SIMD
// facts, the CUDA libraries' versions, the store (where it is, its rows, clearing it) and
// tuning matmuls ahead of time. It lives in dispatch, the composition root, because only this
// layer sees every backend, the store and the tuner; the command includes this header and the
// public ones, and its include path reaches nothing else (CMakeLists.txt), so it never names a
// backend, store or tuner type.
//
// Plain values only: strings, numbers, vectors. A feature compiled out is answered at run time
// (a `built` flag, an empty list, an Error that says so), so that the command holds no
// `#if KILN_WITH_*`. The command formats and prints; nothing here prints.
//
// Text that comes from the store (identities, keys, names) is returned as stored: anybody's
// bytes, which the command makes safe before it reaches a terminal.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::diagnostics {

// ---- the build, the CPU backend, CUDA (diagnostics_host.cpp) ----

// Whether the build acknowledged its compiled-out performance features (-DKILN_QUIET_FEATURES=ON,
// as the minimal preset does): `kiln doctor` then reports them as lost on purpose.
bool quiet_build();

struct CpuReport {
  // The SIMD targets compiled in that this CPU supports, best first ("avx2"), whatever the cap;
  // empty when SIMD is compiled out.
  std::vector<std::string> simd_targets;
  int threads = 1;               // kiln's CPU loops (oneTBB); 1 when threads are off
  std::string blas;              // the CBLAS and its build, or "none: cannot load ..."
  std::string blas_core;         // its kernels for this CPU where it says ("Haswell"), else ""
  std::string blas_core_origin;  // who chose them (kiln, OPENBLAS_CORETYPE, the BLAS itself)
  int blas_threads = 1;          // the threads the BLAS reports now
};

// kiln sets the BLAS's thread count per product (1 for small ones): asked after a CPU matmul
// large enough to be threaded, blas_threads is what CPU matmul really runs on.
CpuReport cpu_report();

struct CudaReport {
  bool built = false;                          // the CUDA backend is compiled in
  std::string runtime, driver, nvrtc, cublas;  // "13.0", ...; cuBLASLt's "13.1.0"; empty unbuilt
  std::string nccl;   // "2.28.9 (libnccl.so.2)" or "absent: <why>" (kiln::dist's transport)
  std::string cudnn;  // "9.19.0 (libcudnn.so.9)", "absent: <why>" or "off: <why>" (attention)
};

CudaReport cuda_report();

// ---- the store (diagnostics_store.cpp) ----

enum class StoreMode {
  closed,      // no store was opened (persistence off or compiled out)
  persistent,  // read from and written to the file
  read_only,   // read from the file, writes skipped
  memory,      // no usable file: rows live in the process only
};

// "persistent", "read-only", "memory-only"; "" for closed.
const char* store_mode_name(StoreMode mode);

struct StoreLocation {
  bool built = false;  // persistence is compiled in
  StoreMode mode = StoreMode::closed;
  std::string directory;  // asked for (even when it could not be used)
  std::string file;       // the database in use; empty while memory-only or closed
  std::string why;        // why it is not persistent; empty when it is
  std::string build;      // this build's revision, which its rows carry; "" unbuilt
};

// The rows of one identity (device, software and build) and their bytes.
struct StoreUsage {
  std::string identity;  // described on one line: "NVIDIA H200 (cc 9.0), driver 13.0, ..."
  // Whether this machine's kiln reads its rows: "current (cuda:0)", "stale: another device,
  // version or build", "not compared: no CUDA device present"; empty when not asked.
  std::string status;
  std::int64_t tune_rows = 0, kernels = 0, bytes = 0;
};

struct StoreReport {
  StoreLocation location;
  std::vector<StoreUsage> usage;      // one per identity with rows
  std::vector<std::string> warnings;  // what opening and reading it found, each once, in order
};

// The process's store, opened at first use while persistence is live; closed (with the
// directory it would use) when persistence is off or compiled out. `statuses`: compare each
// identity with the present CUDA devices' (which starts CUDA in this process); else the
// statuses are left empty.
StoreReport process_store_report(bool statuses);

// A store of its own at `directory` (what another process left there), without statuses or
// warnings; closed, saying why, when persistence is compiled out.
StoreReport store_report_at(const std::string& directory);

// The tables of the store, for listing and clearing.
enum class StoreTables { both, tune, kernels };

// One row, as listings show it.
struct StoreRow {
  std::string key;           // the tune key, or "<source hash> <arch> <options>"
  std::string name;          // the chosen candidate, or the kernel's label
  std::string shape;         // tune rows: the exact problem timed
  double seconds = 0;        // tune rows: its measured time
  std::int64_t bytes = 0;    // the value's or the binary's size
  std::int64_t created = 0;  // when it was written, seconds since 1970
};

struct StoreIdentityRows {
  StoreUsage usage;  // with its status
  // The rows of the tables asked for, each read only when the identity has rows there.
  std::vector<StoreRow> tune, kernels;
};

struct StoreListing {
  StoreLocation location;
  std::vector<StoreIdentityRows> identities;  // every identity with rows, asked-for tables or not
};

// list_store and clear_store work on the command's store (`kiln tune --list` / `--clear`): the
// process's while persistence is live, else one of their own at the same directory, so that the
// command shows the store that processes with persistence on use. Both throw kiln::Error when
// persistence is compiled out.
StoreListing list_store(StoreTables tables);

struct StoreClearing {
  StoreLocation location;
  bool removed = false;  // the removal reached the file
  std::string why;       // when not: why the store is not persistent, or why the write failed
  // What the cleared tables held before (zero for a table not asked for).
  std::int64_t tune_rows = 0, tune_bytes = 0, kernels = 0, kernel_bytes = 0;
};

// Removes the rows of `tables`, of every identity; only from a persistent store (a memory-only or
// read-only one is left as it is, `removed` false).
StoreClearing clear_store(StoreTables tables);

// ---- tuning ahead of time (diagnostics_tune.cpp) ----

// A matmul out[B, m, n] = a[B, m, k] @ b[B, k, n] of f32, bf16 or f16 operands, with a linear
// layer's bias added in the same pass when `bias` (the key of cuBLASLt's bias epilogue).
struct MatmulProblem {
  std::string precision = "highest";    // "highest" or "high" (of an f32 product)
  char layout_a = 'N', layout_b = 'N';  // N: as stored, T: a transposed view
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  std::string dtype = "f32";  // "f32", "bf16" or "f16"
  bool bias = false;          // the bias epilogue of a linear layer (batch 1)
};

struct MatmulTuned {
  std::string key;              // the problem's tune key
  std::vector<StoreRow> fresh;  // tune rows the call wrote or changed, by key
  std::optional<StoreRow> row;  // the key's row after the call (with or without fresh rows)
};

// `kiln tune --matmul`: the process's tuner and store, set to tune one CUDA device ahead of time
// (an exhaustive or an offline policy). Lives for one command; the tuner keeps its policy after.
class MatmulTuning {
 public:
  // Throws kiln::Error when the build has no CUDA autotune with persistence, when persistence is
  // off in this process, or when the store cannot be written (the choices would be lost);
  // DeviceError when the device is absent.
  MatmulTuning(int cuda_index, bool exhaustive);
  ~MatmulTuning();
  MatmulTuning(const MatmulTuning&) = delete;
  MatmulTuning& operator=(const MatmulTuning&) = delete;

  const std::string& store_file() const;
  const std::string& identity() const;  // the device's store identity, described

  // Tunes `problem` by calling `run`, which runs one matmul of it on the device and waits:
  // under an exhaustive policy its key is first forgotten (once per key in this session), so
  // that it is timed again. Throws ValueError for a problem that is not one (a precision other
  // than highest or high, a layout other than N or T, an extent below 1), and kiln::Error when
  // the store stopped being writable, so that its choice did not reach the file.
  MatmulTuned tune(const MatmulProblem& problem, const std::function<void()>& run);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::diagnostics
