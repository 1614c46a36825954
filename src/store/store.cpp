#include "store/store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/log.hpp"
#include "core/runtime_config.hpp"
#include "store/location.hpp"
#include "store/sqlite.hpp"

namespace kiln::store {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// PRAGMA application_id of every kiln store ("kiln" in ASCII): a database that carries another
// application's id is somebody else's file, never rebuilt or written.
constexpr std::int64_t kApplicationId = 0x6b696c6e;

// Rowid tables with a primary-key index: the kernel rows hold binaries of tens of kilobytes,
// which SQLite advises against in WITHOUT ROWID tables.
constexpr const char* kCreateTables = R"sql(
DROP TABLE IF EXISTS kiln_tune;
DROP TABLE IF EXISTS kiln_kernels;
CREATE TABLE kiln_tune (
  device TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL, cuda TEXT NOT NULL,
  cublas TEXT NOT NULL, nvrtc TEXT NOT NULL, kiln TEXT NOT NULL,
  key TEXT NOT NULL,
  value BLOB NOT NULL, name TEXT NOT NULL, shape TEXT NOT NULL, seconds REAL NOT NULL,
  created INTEGER NOT NULL,
  PRIMARY KEY (device, cc, driver, cuda, cublas, nvrtc, kiln, key));
CREATE TABLE kiln_kernels (
  device TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL, cuda TEXT NOT NULL,
  cublas TEXT NOT NULL, nvrtc TEXT NOT NULL, kiln TEXT NOT NULL,
  source_hash TEXT NOT NULL, arch TEXT NOT NULL, options TEXT NOT NULL,
  source TEXT NOT NULL, label TEXT NOT NULL, binary BLOB NOT NULL, created INTEGER NOT NULL,
  PRIMARY KEY (device, cc, driver, cuda, cublas, nvrtc, kiln, source_hash, arch, options));
)sql";

constexpr const char* kIdentityColumns = "device, cc, driver, cuda, cublas, nvrtc, kiln";
constexpr const char* kIdentityMatch =
    "device = ?1 AND cc = ?2 AND driver = ?3 AND cuda = ?4 AND cublas = ?5 AND nvrtc = ?6 AND "
    "kiln = ?7";

void bind_identity(sql::Statement& st, const Identity& id) {
  st.bind(1, id.device)
      .bind(2, id.compute_capability)
      .bind(3, id.driver)
      .bind(4, id.cuda_runtime)
      .bind(5, id.cublas)
      .bind(6, id.nvrtc)
      .bind(7, id.kiln_version);
}

// The identity in columns first..first+6 of the current row.
Identity read_identity(const sql::Statement& st, int first) {
  Identity id;
  id.device = st.text(first);
  id.compute_capability = st.text(first + 1);
  id.driver = st.text(first + 2);
  id.cuda_runtime = st.text(first + 3);
  id.cublas = st.text(first + 4);
  id.nvrtc = st.text(first + 5);
  id.kiln_version = st.text(first + 6);
  return id;
}

// 64-bit FNV-1a as 16 hex digits: an index only, the source is compared whole on a lookup.
std::string hash_source(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::int64_t now_seconds() { return static_cast<std::int64_t>(std::time(nullptr)); }

// A database that is not this kiln's to write: another application's, or a newer schema's.
class NotOurs : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ends the open transaction after a failed statement. A failing ROLLBACK means SQLite already
// rolled back (it does so itself after SQLITE_FULL and some I/O errors), so its error is moot.
void rollback(sql::Database& db) {
  if (!db.in_transaction()) return;
  try {
    db.exec("ROLLBACK");
  } catch (const sql::Error&) {
  }
}

// Creates the tables of a new (or older-schema) database, inside one write transaction so that
// processes opening a fresh file at the same moment create them once. Throws NotOurs for a
// database this kiln must leave alone.
void init_schema(sql::Database& db, const fs::path& file) {
  db.exec("BEGIN IMMEDIATE");
  try {
    const std::int64_t app = db.query_int("PRAGMA application_id");
    const std::int64_t version = db.query_int("PRAGMA user_version");
    if (app != 0 && app != kApplicationId) {
      throw NotOurs(
          fmt::format("{} is not a kiln store (application_id {:#x})", file.string(), app));
    }
    if (version > kSchemaVersion) {
      throw NotOurs(fmt::format("{} was written by a newer kiln (schema {}, this kiln reads {})",
                                file.string(), version, kSchemaVersion));
    }
    if (version < kSchemaVersion) {
      // An older schema's rows were produced by an older kiln, whose identity no lookup of this
      // one matches anyway: nothing is lost by starting again.
      db.exec(kCreateTables);
      db.exec(fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {};", kApplicationId,
                          kSchemaVersion)
                  .c_str());
    }
    db.exec("COMMIT");
  } catch (...) {
    rollback(db);
    throw;
  }
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  char buf[32];
  if (localtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm) == 0)
    return std::to_string(t);
  return buf;
}

// Waits a little before another try at a busy database: a few milliseconds, growing, jittered
// so that processes that collided do not collide again in step.
void backoff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int cap = 1 << std::min(attempt, 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(1 + static_cast<int>(rng() % cap)));
}

bool is_busy(int code) { return code == SQLITE_BUSY || code == SQLITE_LOCKED; }
bool is_corrupt(int code) { return code == SQLITE_CORRUPT || code == SQLITE_NOTADB; }

}  // namespace

const char* table_name(Table t) { return t == Table::tune ? "tune" : "kernels"; }

std::string Identity::describe() const {
  return fmt::format("{} (cc {}), driver {}, CUDA {}, cuBLAS {}, NVRTC {}, kiln {}", device,
                     compute_capability, driver, cuda_runtime, cublas, nvrtc, kiln_version);
}

struct Store::Impl {
  Options opt;
  std::mutex mu;
  fs::path dir;
  fs::path file;  // the database file asked for; in use while on_disk
  sql::Database db;
  bool on_disk = false;
  std::string why;
  std::set<std::string> warned;

  explicit Impl(Options o) : opt(std::move(o)) { open(); }

  int busy_ms() const {
    return static_cast<int>(std::clamp<std::int64_t>(opt.busy_wait.count(), 0, 1 << 30));
  }

  void warn_once(const std::string& kind, const std::string& msg) {
    if (!warned.insert(kind).second) return;
    if (opt.warn)
      opt.warn(msg);
    else
      detail::log_line("store", "warning: " + msg);
  }

  void trace(const std::string& msg) const {
    if (detail::log_enabled("store")) detail::log_line("store", msg);
  }

  // Opens the file and brings it to this kiln's schema; throws sql::Error or NotOurs.
  sql::Database open_file() const {
    sql::Database d = sql::Database::open(file.string(), busy_ms());
    // SQLite opens a write-protected file read-only without a word; kiln would then fail on
    // every write, so it says so now.
    if (sqlite3_db_readonly(d.get(), "main") == 1)
      throw sql::Error(SQLITE_READONLY, file.string() + " is read-only");
    const std::string mode = d.query_text("PRAGMA journal_mode = WAL");
    // WAL needs shared memory, which some network file systems lack; the rollback journal that
    // SQLite keeps then is slower with several processes but as safe.
    if (mode != "wal") trace(file.string() + ": journal mode " + mode + " (WAL refused)");
    // In WAL mode NORMAL never corrupts the file; a power cut may lose the last rows, which a
    // cache can measure again.
    d.exec("PRAGMA synchronous = NORMAL");
    if (opt.max_bytes > 0) {
      const std::int64_t page = d.query_int("PRAGMA page_size");
      const std::int64_t pages = std::max<std::int64_t>(1, opt.max_bytes / page);
      d.query_int(fmt::format("PRAGMA max_page_count = {}", pages).c_str());
    }
    init_schema(d, file);
    return d;
  }

  // Switches to an in-memory database for the rest of this Store's life. With keep_rows, the
  // rows of the file come along, so that lookups keep hitting what was there.
  void use_memory(const std::string& reason, bool keep_rows) {
    sql::Database mem;
    try {
      mem = sql::Database::open(":memory:", 0);
      bool copied = false;
      if (keep_rows && db) {
        try {
          copy_into(mem);
          copied = true;
        } catch (const sql::Error& e) {
          trace("memory-only: the rows of " + file.string() + " could not be copied: " + e.what());
        }
      }
      if (!copied) init_schema(mem, ":memory:");
    } catch (const std::exception& e) {
      // Not even memory: every call becomes a miss or a no-op.
      trace(std::string("memory-only store failed: ") + e.what());
      mem.close();
    }
    db = std::move(mem);
    on_disk = false;
    why = reason;
    trace("memory-only: " + reason);
  }

  // Copies every row of the open database into `to` (SQLite's online backup).
  void copy_into(sql::Database& to) {
    sqlite3_backup* b = sqlite3_backup_init(to.get(), "main", db.get(), "main");
    if (b == nullptr) to.check(sqlite3_errcode(to.get()), "backup init");
    int rc = SQLITE_OK;
    for (int attempt = 0; attempt < 50; ++attempt) {
      rc = sqlite3_backup_step(b, -1);
      if (!is_busy(rc)) break;
      backoff(attempt);
    }
    const int fin = sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) throw sql::Error(rc, std::string("backup: ") + sqlite3_errstr(rc));
    to.check(fin, "backup finish");
  }

  void use_memory_warn(const std::string& kind, const std::string& reason, bool keep_rows) {
    warn_once(kind, reason +
                        "; tuned choices and compiled kernels are kept in memory for this "
                        "process only");
    use_memory(reason, keep_rows);
  }

  void open() {
    dir = opt.dir.empty() ? cache_directory(current_environment()) : opt.dir;
    if (dir.empty()) {
      use_memory_warn("directory", "no directory for the store (HOME is unset; set KILN_CACHE_DIR)",
                      false);
      return;
    }
    file = dir / kFileName;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      use_memory_warn(
          "directory",
          "cannot create the store directory " + dir.string() + " (" + ec.message() + ")", false);
      return;
    }
    const auto deadline = Clock::now() + opt.busy_wait;
    for (int attempt = 0;; ++attempt) {
      try {
        db = open_file();
        on_disk = true;
        trace("opened " + file.string());
        return;
      } catch (const NotOurs& e) {
        use_memory_warn("foreign", std::string(e.what()) + ", left as it is", false);
        return;
      } catch (const sql::Error& e) {
        // Opening a fresh file may meet another process switching it to WAL or creating the
        // tables; that is worth waiting for.
        if (is_busy(e.primary()) && Clock::now() < deadline) {
          backoff(attempt);
          continue;
        }
        if (is_corrupt(e.primary())) {
          recover(e);
          return;
        }
        use_memory_warn("directory",
                        "cannot use the store directory " + dir.string() + " (" + e.what() + ")",
                        false);
        return;
      }
    }
  }

  // The open file was found corrupt: moves it aside and starts a new one. Processes that meet
  // the same corrupt file at once take turns under a lock on the directory, and each checks the
  // file again first: only the first moves it, the others open the rebuilt one.
  void recover(const sql::Error& seen) {
    db.close();
    on_disk = false;
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      use_memory_warn("corrupt",
                      file.string() + " is corrupt (" + seen.what() + ") and " + dir.string() +
                          " cannot be opened (" + std::strerror(errno) + ")",
                      false);
      return;
    }
    int rc;
    while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    // Without the lock (a file system that has none) the worst case is that two processes both
    // move a file aside; each still ends with a working store.
    if (rc != 0) trace(dir.string() + ": no lock for the rebuild (" + std::strerror(errno) + ")");
    recover_locked(seen);
    if (rc == 0) ::flock(fd, LOCK_UN);  // closing the descriptor releases it too
    ::close(fd);
  }

  void recover_locked(const sql::Error& seen) {
    try {
      sql::Database d = open_file();
      if (d.query_text("PRAGMA quick_check") == "ok") {
        db = std::move(d);
        on_disk = true;
        trace(file.string() + " was rebuilt by another process");
        return;
      }
    } catch (const NotOurs& e) {
      use_memory_warn("foreign", std::string(e.what()) + ", left as it is", false);
      return;
    } catch (const sql::Error& e) {
      if (!is_corrupt(e.primary())) {
        use_memory_warn("directory", "cannot use " + file.string() + " (" + e.what() + ")", false);
        return;
      }
    }
    const std::string aside =
        file.string() + ".corrupt-" + timestamp() + "-" + std::to_string(::getpid());
    if (std::rename(file.c_str(), aside.c_str()) != 0 && errno != ENOENT) {
      use_memory_warn("corrupt",
                      file.string() + " is corrupt (" + seen.what() + ") and cannot be moved (" +
                          std::strerror(errno) + ")",
                      false);
      return;
    }
    // The journal files belong to the old file: left in place, they would be read as the new
    // file's. Moving them fails harmlessly when they do not exist.
    for (const char* suffix : {"-wal", "-shm"}) {
      const std::string from = file.string() + suffix;
      if (std::rename(from.c_str(), (aside + suffix).c_str()) != 0 && errno != ENOENT)
        trace("cannot move " + from + " aside: " + std::strerror(errno));
    }
    try {
      db = open_file();
      on_disk = true;
    } catch (const std::exception& e) {
      use_memory_warn("corrupt",
                      file.string() + " was corrupt (" + seen.what() + "), moved to " + aside +
                          ", and a new one cannot be created (" + e.what() + ")",
                      false);
      return;
    }
    warn_once("corrupt", file.string() + " was corrupt (" + seen.what() + "): moved to " + aside +
                             " and started again; tuned choices and kernels will be measured and "
                             "compiled again");
  }

  // Runs `body` on the database, in a write transaction when `write`, and deals with every
  // failure: waits out busy locks, rebuilds a corrupt file once, and turns memory-only when the
  // file cannot be written (the body then runs again on memory). Returns whether it ran.
  template <class F>
  bool run(const char* what, bool write, F&& body) {
    const auto deadline = Clock::now() + opt.busy_wait;
    bool rebuilt = false;
    for (int attempt = 0;; ++attempt) {
      if (!db) return false;
      try {
        if (write) db.exec("BEGIN IMMEDIATE");
        body(db);
        if (write) db.exec("COMMIT");
        return true;
      } catch (const sql::Error& e) {
        rollback(db);
        const int code = e.primary();
        if (is_busy(code)) {
          if (Clock::now() < deadline) {
            backoff(attempt);
            continue;
          }
          warn_once("busy", fmt::format("{}: waited {} ms for other processes, {} dropped ({})",
                                        file.string(), opt.busy_wait.count(), what, e.what()));
          return false;
        }
        if (!on_disk) {
          warn_once("memory",
                    std::string("in-memory store: ") + what + " failed (" + e.what() + ")");
          return false;
        }
        if (is_corrupt(code) && !rebuilt) {
          rebuilt = true;
          recover(e);
          continue;
        }
        // A full disk, an I/O error, a file made read-only, or corruption again right after a
        // rebuild: the file is of no more use to this process. What it holds is copied to
        // memory (reads of it still work when its disk is full) and the call runs again there.
        const char* kind = code == SQLITE_FULL ? "full" : "write";
        use_memory_warn(kind, "cannot write " + file.string() + " (" + e.what() + ")", true);
      }
    }
  }
};

Store::Store(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Store::~Store() = default;

std::optional<TuneResult> Store::get_tune(const Identity& id, std::string_view key) {
  std::lock_guard lock(impl_->mu);
  std::optional<TuneResult> out;
  impl_->run("tune lookup", false, [&](sql::Database& db) {
    out.reset();
    sql::Statement st(db, fmt::format("SELECT value, name, shape, seconds FROM kiln_tune "
                                      "WHERE {} AND key = ?8",
                                      kIdentityMatch));
    bind_identity(st, id);
    st.bind(8, key);
    if (st.step()) {
      const std::vector<char> v = st.blob(0);
      out = TuneResult{std::string(v.begin(), v.end()), st.text(1), st.text(2), st.real(3)};
    }
  });
  return out;
}

void Store::put_tune(const Identity& id, std::string_view key, const TuneResult& r) {
  std::lock_guard lock(impl_->mu);
  impl_->run("tune write", true, [&](sql::Database& db) {
    sql::Statement st(
        db, fmt::format("INSERT OR REPLACE INTO kiln_tune ({}, key, value, name, shape, seconds, "
                        "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                        kIdentityColumns));
    bind_identity(st, id);
    st.bind(8, key)
        .bind_blob(9, r.value.data(), r.value.size())
        .bind(10, r.name)
        .bind(11, r.shape)
        .bind(12, r.seconds)
        .bind(13, now_seconds());
    st.run();
  });
}

std::optional<std::vector<char>> Store::get_kernel(const Identity& id, const KernelKey& key) {
  std::lock_guard lock(impl_->mu);
  std::optional<std::vector<char>> out;
  impl_->run("kernel lookup", false, [&](sql::Database& db) {
    out.reset();
    sql::Statement st(db, fmt::format("SELECT source, binary FROM kiln_kernels WHERE {} AND "
                                      "source_hash = ?8 AND arch = ?9 AND options = ?10",
                                      kIdentityMatch));
    bind_identity(st, id);
    st.bind(8, hash_source(key.source)).bind(9, key.arch).bind(10, key.options);
    if (st.step() && st.text(0) == key.source) out = st.blob(1);
  });
  return out;
}

void Store::put_kernel(const Identity& id, const KernelKey& key, const std::vector<char>& binary,
                       std::string_view label) {
  std::lock_guard lock(impl_->mu);
  impl_->run("kernel write", true, [&](sql::Database& db) {
    sql::Statement st(db, fmt::format("INSERT OR REPLACE INTO kiln_kernels ({}, source_hash, "
                                      "arch, options, source, label, binary, created) VALUES "
                                      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                                      "?14)",
                                      kIdentityColumns));
    bind_identity(st, id);
    st.bind(8, hash_source(key.source))
        .bind(9, key.arch)
        .bind(10, key.options)
        .bind(11, key.source)
        .bind(12, label)
        .bind_blob(13, binary.data(), binary.size())
        .bind(14, now_seconds());
    st.run();
  });
}

std::vector<Entry> Store::list(Table table, const std::optional<Identity>& only) {
  std::lock_guard lock(impl_->mu);
  std::vector<Entry> out;
  impl_->run("listing", false, [&](sql::Database& db) {
    out.clear();
    const char* columns =
        table == Table::tune
            ? "key, name, shape, seconds, length(value), created FROM kiln_tune"
            : "source_hash || ' ' || arch || ' ' || options, label, '', 0.0, length(binary), "
              "created FROM kiln_kernels";
    sql::Statement st(
        db, fmt::format("SELECT {}, {} {} ORDER BY {}, 8", kIdentityColumns, columns,
                        only ? fmt::format("WHERE {}", kIdentityMatch) : "", kIdentityColumns));
    if (only) bind_identity(st, *only);
    while (st.step()) {
      Entry e;
      e.table = table;
      e.identity = read_identity(st, 0);
      e.key = st.text(7);
      e.name = st.text(8);
      e.shape = st.text(9);
      e.seconds = st.real(10);
      e.bytes = st.integer(11);
      e.created = st.integer(12);
      out.push_back(std::move(e));
    }
  });
  return out;
}

std::vector<Usage> Store::usage() {
  std::lock_guard lock(impl_->mu);
  std::vector<Usage> out;
  impl_->run("usage", false, [&](sql::Database& db) {
    out.clear();
    for (Table t : {Table::tune, Table::kernels}) {
      sql::Statement st(
          db, fmt::format("SELECT {0}, count(*), total(length({1})) FROM {2} GROUP BY {0}",
                          kIdentityColumns, t == Table::tune ? "value" : "binary",
                          t == Table::tune ? "kiln_tune" : "kiln_kernels"));
      while (st.step()) {
        Identity id = read_identity(st, 0);
        auto it =
            std::find_if(out.begin(), out.end(), [&](const Usage& u) { return u.identity == id; });
        if (it == out.end()) it = out.insert(out.end(), Usage{std::move(id)});
        (t == Table::tune ? it->tune_entries : it->kernel_entries) += st.integer(7);
        it->bytes += static_cast<std::int64_t>(st.real(8));
      }
    }
  });
  return out;
}

void Store::clear() {
  std::lock_guard lock(impl_->mu);
  impl_->run("clear", true, [](sql::Database& db) {
    db.exec("DELETE FROM kiln_tune; DELETE FROM kiln_kernels;");
  });
  impl_->run("vacuum", false, [](sql::Database& db) { db.exec("VACUUM"); });
}

void Store::clear(Table table) {
  std::lock_guard lock(impl_->mu);
  impl_->run("clear", true, [&](sql::Database& db) {
    db.exec(table == Table::tune ? "DELETE FROM kiln_tune" : "DELETE FROM kiln_kernels");
  });
  impl_->run("vacuum", false, [](sql::Database& db) { db.exec("VACUUM"); });
}

fs::path Store::directory() const {
  std::lock_guard lock(impl_->mu);
  return impl_->dir;
}

fs::path Store::file() const {
  std::lock_guard lock(impl_->mu);
  return impl_->on_disk ? impl_->file : fs::path();
}

bool Store::persistent() const {
  std::lock_guard lock(impl_->mu);
  return impl_->on_disk;
}

std::string Store::why() const {
  std::lock_guard lock(impl_->mu);
  return impl_->on_disk ? std::string() : impl_->why;
}

Store* process_store() {
  if (!detail::persistence_live()) return nullptr;
  // Never destroyed: kernel caches and tuners may reach it from threads and static destructors
  // at exit, and committed rows are safe in the file without a close.
  static Store* const s = new Store();
  return s;
}

}  // namespace kiln::store
