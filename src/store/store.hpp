// kiln's persistent store: tuned choices and compiled kernels that survive the process.
//
// One SQLite database in WAL mode (docs/store.md), shared by every kiln process of the user.
// Every row carries the Identity of the device, software and build that produced it; a lookup
// matches the whole identity, so a row of another device, driver, kiln version or build is never
// returned.
//
// The store never throws and never fails the caller's computation: a busy database is waited
// for, a corrupt one (or one whose tables are not kiln's) is moved aside and rebuilt, a file that
// can be read but not written is read (writes are skipped), and a directory or disk that cannot
// be used turns the store memory-only (rows then live for this process alone). A file that is
// not kiln's is never written, not even opened for writing. Each of these is told once per
// process on stderr (kiln's log, topic "store"). A caller that promised its user a write (`kiln
// tune`) learns whether it reached the file from what put_tune, put_kernel and clear return.
// Thread-safe.
//
// Built only with -DKILN_PERSISTENCE=ON (KILN_WITH_PERSISTENCE); callers guard their use of it
// with `#if KILN_WITH_PERSISTENCE` and ask process_store() at run time.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/config.hpp"

namespace kiln::store {

// The schema of the tables below; a file of another schema is rebuilt (older) or left alone
// (newer: this process goes memory-only rather than destroy a newer kiln's rows). Schema 2 added
// the build column.
inline constexpr int kSchemaVersion = 2;

// The revision of kiln's sources this build was compiled from: a hash of every file under src/
// and include/ (16 hex digits), made at build time (cmake/KilnSourceHash.cmake), so that it
// changes whenever a kernel or the tuner's candidates change, with or without git.
std::string build_revision();

// What a stored result depends on beyond its key: filled by the backend that produced it (the
// CUDA backend from cudaGetDeviceProperties, cudaDriverGetVersion, cublasLtGetVersion,
// nvrtcVersion...). Free text, compared exactly; an empty field matches only an empty field.
struct Identity {
  std::string device;              // "NVIDIA H200"
  std::string compute_capability;  // "9.0"
  std::string driver;              // CUDA driver version, "13.0"
  std::string cuda_runtime;        // "13.0"
  std::string cublas;              // "13.1.0"
  std::string nvrtc;               // "13.0"
  std::string kiln_version = kiln::version();
  std::string build = build_revision();  // rows of another build's kernels never match

  bool operator==(const Identity&) const = default;
  // One line for listings: "NVIDIA H200 (cc 9.0), driver 13.0, CUDA 13.0, ..., build 1a2b..."
  std::string describe() const;
};

// A tuner's choice for one tune key.
struct TuneResult {
  std::string value;   // the chosen candidate as the tuner serialised it (bytes, any content)
  std::string name;    // its readable name, for listings ("cublasLt algo 21, split-K 2")
  std::string shape;   // the exact problem that was timed ("f32 1000x1024x1030 nn highest")
  double seconds = 0;  // its measured median time
};

// What a compiled kernel depends on besides the Identity (whose nvrtc field is the compiler's
// version). The store keys on a hash of the source and keeps the source itself, which a lookup
// compares whole: two sources of one hash can never be given each other's binary.
struct KernelKey {
  std::string_view source;  // the full CUDA C source
  std::string arch;         // "sm_90"
  std::string options;      // the NVRTC options, joined in a fixed order
};

enum class Table { tune, kernels };
const char* table_name(Table t);  // "tune", "kernels"

// One row, as listings show it.
struct Entry {
  Table table = Table::tune;
  Identity identity;
  std::string key;           // the tune key, or "<source hash> <arch> <options>"
  std::string name;          // the candidate's name, or the kernel's label
  std::string shape;         // tune rows: the exact shape timed
  double seconds = 0;        // tune rows: the measured time
  std::int64_t bytes = 0;    // the size of the value or of the binary
  std::int64_t created = 0;  // when it was written, seconds since 1970
};

// Rows and bytes of one identity (bytes: values and binaries, not SQLite's own overhead).
struct Usage {
  Identity identity;
  std::int64_t tune_entries = 0;
  std::int64_t kernel_entries = 0;
  std::int64_t bytes = 0;
};

struct Options {
  // The store's directory (created when absent); empty: cache_directory(current_environment()).
  std::filesystem::path dir;
  // 0: no limit. Otherwise a write that would grow the database past this many bytes is treated
  // as a full disk: dropped from the file, kept in memory, one warning.
  std::int64_t max_bytes = 0;
  // How long a call waits for other processes' locks before it gives up (a write is then
  // dropped, a read misses, one warning). Writes are short, so this is only reached by a
  // process that holds the database locked for a long time.
  std::chrono::milliseconds busy_wait{20000};
  // Where warnings go; empty: kiln's log on stderr ("kiln[store]: warning: ...").
  std::function<void(const std::string&)> warn;
};

// Where the rows are.
enum class Mode {
  persistent,  // read from and written to the file
  read_only,   // read from the file, which cannot be written (a read-only file, directory or
               // file system, or a disk too full to open it for writing): writes are skipped
  memory,      // no usable file: rows live in this process only
};
const char* mode_name(Mode m);  // "persistent", "read-only", "memory-only"

// What became of a write (put_tune, put_kernel, clear).
struct Written {
  bool durable = false;  // it reached the file
  std::string why;       // when not: "cannot write /x/kiln.db (... database or disk is full)"
  explicit operator bool() const { return durable; }
};

class Store {
 public:
  explicit Store(Options options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  std::optional<TuneResult> get_tune(const Identity& id, std::string_view key);
  // Replaces the row of (id, key) if there is one.
  Written put_tune(const Identity& id, std::string_view key, const TuneResult& result);

  std::optional<std::vector<char>> get_kernel(const Identity& id, const KernelKey& key);
  // `label` is kept for listings (the kernel's source name).
  Written put_kernel(const Identity& id, const KernelKey& key, const std::vector<char>& binary,
                     std::string_view label = {});

  // Rows of `table`, of one identity or (nullopt) of all, ordered by identity and key.
  std::vector<Entry> list(Table table, const std::optional<Identity>& only = std::nullopt);
  // One Usage per identity with rows, current or stale.
  std::vector<Usage> usage();
  // Removes every row (of one table), of every identity, and gives the freed pages back to the
  // file system (VACUUM; when that fails, the rows are removed all the same, with a warning).
  Written clear();
  Written clear(Table table);

  // The directory asked for (even when it could not be used) and the database file in use
  // (empty while memory-only).
  std::filesystem::path directory() const;
  std::filesystem::path file() const;
  Mode mode() const;
  // Whether rows reach the disk now (mode() is persistent); when not, why() says why ("cannot
  // create the store directory /x (Not a directory)"), else it is empty.
  bool persistent() const;
  std::string why() const;
  // The warnings this store gave (each once), in order: what `kiln doctor` found.
  std::vector<std::string> warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's store at the default directory, opened at its first use; nullptr while
// persistence is switched off (KILN_PERSISTENCE=0 in the environment, or Config::persistence).
Store* process_store();

}  // namespace kiln::store
