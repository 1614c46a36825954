#include "store/store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/runtime_config.hpp"
#include "store/location.hpp"
#include "store/schema.hpp"
#include "store/sqlite.hpp"

namespace kiln::store {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kIdentityColumns = "device, cc, driver, cuda, cublas, nvrtc, kiln, build";
constexpr const char* kIdentityMatch =
    "device = ?1 AND cc = ?2 AND driver = ?3 AND cuda = ?4 AND cublas = ?5 AND nvrtc = ?6 AND "
    "kiln = ?7 AND build = ?8";
constexpr int kIdentityFields = 8;  // the first parameter after the identity is ?9

void bind_identity(sql::Statement& st, const Identity& id) {
  st.bind(1, id.device)
      .bind(2, id.compute_capability)
      .bind(3, id.driver)
      .bind(4, id.cuda_runtime)
      .bind(5, id.cublas)
      .bind(6, id.nvrtc)
      .bind(7, id.kiln_version)
      .bind(8, id.build);
}

// The identity in columns first..first+7 of the current row.
Identity read_identity(const sql::Statement& st, int first) {
  Identity id;
  id.device = st.text(first);
  id.compute_capability = st.text(first + 1);
  id.driver = st.text(first + 2);
  id.cuda_runtime = st.text(first + 3);
  id.cublas = st.text(first + 4);
  id.nvrtc = st.text(first + 5);
  id.kiln_version = st.text(first + 6);
  id.build = st.text(first + 7);
  return id;
}

// detail::hash_bytes as 16 hex digits: an index only, the source is compared whole on a lookup.
std::string hash_source(std::string_view s) {
  return fmt::format("{:016x}", detail::hash_bytes(s));
}

std::int64_t now_seconds() { return static_cast<std::int64_t>(std::time(nullptr)); }

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

// The file's inode number, 0 when it does not exist.
ino_t inode_of(const fs::path& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? st.st_ino : 0;
}

bool is_busy(int code) { return code == SQLITE_BUSY || code == SQLITE_LOCKED; }
bool is_corrupt(int code) { return code == SQLITE_CORRUPT || code == SQLITE_NOTADB; }

// Whether a warning of the default sink (stderr) is the first of its kind for its directory in
// this process: a process may open several Stores of one directory (a `kiln` command's own and
// the process's), and the promise is one warning per process. Never destroyed, as
// process_store(): a warning may come from a thread at exit.
bool first_in_process(const std::string& key) {
  static auto* const mu = new std::mutex;
  static auto* const seen = new std::set<std::string>;
  std::lock_guard lock(*mu);
  return seen->insert(key).second;
}

// Why this process may not write `path`, as the system says it ("/x: Permission denied",
// "/x: Read-only file system"), or empty. SQLite's own message can name a later, irrelevant
// failure: for a file it cannot create, that of its read-only retry ("No such file or
// directory").
std::string write_denied(const fs::path& path) {
  if (::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0 || errno == ENOENT) return {};
  return path.string() + ": " + std::strerror(errno);
}

}  // namespace

const char* table_name(Table t) { return t == Table::tune ? "tune" : "kernels"; }

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::persistent:
      return "persistent";
    case Mode::read_only:
      return "read-only";
    case Mode::memory:
      break;
  }
  return "memory-only";
}

std::string Identity::describe() const {
  return fmt::format("{} (cc {}), driver {}, CUDA {}, cuBLAS {}, NVRTC {}, kiln {}, build {}",
                     device, compute_capability, driver, cuda_runtime, cublas, nvrtc, kiln_version,
                     build);
}

struct Store::Impl {
  Options opt;
  std::mutex mu;
  fs::path dir;
  fs::path file;  // the database file asked for; in use unless mode is memory
  sql::Database db;
  Mode mode = Mode::memory;
  std::string why;                    // why not persistent
  std::set<std::string> warned;       // the kinds of warning given
  std::vector<std::string> messages;  // and their text

  explicit Impl(Options o) : opt(std::move(o)) { open(); }

  int busy_ms() const {
    return static_cast<int>(std::clamp<std::int64_t>(opt.busy_wait.count(), 0, 1 << 30));
  }

  void warn_once(const std::string& kind, const std::string& msg) {
    if (!warned.insert(kind).second) return;
    messages.push_back(msg);
    if (opt.warn) {
      opt.warn(msg);
    } else if (first_in_process(kind + '\n' + dir.string())) {
      detail::log_line("store", "warning: " + msg);
    }
  }

  void trace(const std::string& msg) const {
    if (detail::log_enabled("store")) detail::log_line("store", msg);
  }

  // Why this process may not write the store ("/x: Permission denied"), or empty.
  std::string denied() const {
    std::string d = write_denied(file);
    return d.empty() ? write_denied(dir) : d;
  }

  // Opens the file for writing and brings it to this kiln's schema; throws sql::Error,
  // schema::Foreign or schema::Mismatch. Only for a file that schema::check_before_opening
  // passed: the journal mode below is a write.
  sql::Database open_file() const {
    sql::Database d = sql::Database::open(file.string(), busy_ms());
    // SQLite opens a write-protected file read-only without a word; kiln would then fail on
    // every write, so it says so now (and reads it through open_read_only).
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
    schema::init(d, file);
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
      if (!copied) schema::init(mem, ":memory:");
    } catch (const std::exception& e) {
      // Not even memory: every call becomes a miss or a no-op.
      trace(std::string("memory-only store failed: ") + e.what());
      mem.close();
    }
    db = std::move(mem);
    mode = Mode::memory;
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

  // The file is kiln's but cannot be opened for writing (`reason`): reads it as it is, skips
  // every write. When it cannot be read either, memory-only.
  void open_read_only(const std::string& reason) {
    try {
      sql::Database d = sql::Database::open_immutable(file.string());
      schema::verify(d, file);
      db = std::move(d);
      mode = Mode::read_only;
      why = file.string() + " cannot be written (" + reason + ")";
      warn_once("read-only", why +
                                 ": its tuned choices and kernels are read, new ones are not "
                                 "written");
      trace("opened " + file.string() + " read-only");
    } catch (const std::exception& e) {
      use_memory_warn("directory",
                      "cannot use the store directory " + dir.string() + " (" + reason +
                          "; reading " + file.string() + " read-only failed too: " + e.what() + ")",
                      false);
    }
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
    // Whose file it is, before anything could write to it.
    const schema::Header h = schema::read_header(file);
    if (h.kind == schema::Header::Kind::unreadable) {
      use_memory_warn("directory", "cannot read " + file.string() + " (" + h.why + ")", false);
      return;
    }
    try {
      schema::check_before_opening(h, file);
    } catch (const schema::Foreign& e) {
      use_memory_warn("foreign", std::string(e.what()) + ", left as it is", false);
      return;
    }
    const auto deadline = Clock::now() + opt.busy_wait;
    for (int attempt = 0;; ++attempt) {
      const ino_t inode = inode_of(file);
      try {
        db = open_file();
        mode = Mode::persistent;
        trace("opened " + file.string());
        return;
      } catch (const schema::Foreign& e) {
        use_memory_warn("foreign", std::string(e.what()) + ", left as it is", false);
        return;
      } catch (const schema::Mismatch& e) {
        recover(e.what());
        return;
      } catch (const sql::Error& e) {
        // Opening a fresh file may meet another process switching it to WAL or creating the
        // tables; that is worth waiting for. So is an I/O error while the file was replaced or
        // is gone: another process moved a corrupt file aside under us (recover) and starts anew.
        const bool moved_away = e.primary() == SQLITE_IOERR && inode_of(file) != inode;
        if ((is_busy(e.primary()) || moved_away) && Clock::now() < deadline) {
          backoff(attempt);
          continue;
        }
        if (is_corrupt(e.primary())) {
          recover(file.string() + " was corrupt (" + e.what() + ")");
          return;
        }
        const std::string d = denied();
        const std::string reason = d.empty() ? e.what() : d;
        const bool ours = h.kind == schema::Header::Kind::sqlite &&
                          h.application_id == schema::kApplicationId &&
                          h.user_version == kSchemaVersion;
        if (ours) {
          open_read_only(reason);
        } else {
          use_memory_warn("directory",
                          "cannot use the store directory " + dir.string() + " (" + reason + ")",
                          false);
        }
        return;
      }
    }
  }

  // The open file was found corrupt or not kiln's (`problem` says how): moves it aside and
  // starts a new one. Processes that meet the same file at once take turns under a lock on the
  // directory, and each checks the file again first: only the first moves it, the others open
  // the rebuilt one.
  void recover(const std::string& problem) {
    db.close();
    mode = Mode::memory;
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      use_memory_warn(
          "corrupt",
          problem + " and " + dir.string() + " cannot be opened (" + std::strerror(errno) + ")",
          false);
      return;
    }
    int rc;
    while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    // Without the lock (a file system that has none) the worst case is that two processes both
    // move a file aside; each still ends with a working store.
    if (rc != 0) trace(dir.string() + ": no lock for the rebuild (" + std::strerror(errno) + ")");
    recover_locked(problem);
    if (rc == 0) ::flock(fd, LOCK_UN);  // closing the descriptor releases it too
    ::close(fd);
  }

  void recover_locked(const std::string& problem) {
    try {
      sql::Database d = open_file();
      if (d.query_text("PRAGMA quick_check") == "ok") {
        db = std::move(d);
        mode = Mode::persistent;
        trace(file.string() + " was rebuilt by another process");
        return;
      }
    } catch (const schema::Foreign& e) {
      use_memory_warn("foreign", std::string(e.what()) + ", left as it is", false);
      return;
    } catch (const schema::Mismatch&) {
      // Still not kiln's tables: moved aside below.
    } catch (const sql::Error& e) {
      if (!is_corrupt(e.primary())) {
        use_memory_warn("directory", "cannot use " + file.string() + " (" + e.what() + ")", false);
        return;
      }
    }
    const std::string aside =
        file.string() + ".corrupt-" + timestamp() + "-" + std::to_string(::getpid());
    if (std::rename(file.c_str(), aside.c_str()) != 0 && errno != ENOENT) {
      use_memory_warn("corrupt", problem + " and cannot be moved (" + std::strerror(errno) + ")",
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
      mode = Mode::persistent;
    } catch (const std::exception& e) {
      use_memory_warn(
          "corrupt",
          problem + ", moved to " + aside + ", and a new one cannot be created (" + e.what() + ")",
          false);
      return;
    }
    warn_once("corrupt", problem + ": moved to " + aside +
                             " and started again; tuned choices and kernels will be measured and "
                             "compiled again");
  }

  // Runs `body` on the database, in a write transaction when `write`, and deals with every
  // failure: waits out busy locks, rebuilds a corrupt file once, and turns memory-only when the
  // file cannot be written (the body then runs again on memory). A write to a read-only store
  // is skipped. Returns whether the body's writes reached the file, and if not why.
  template <class F>
  Written run(const char* what, bool write, F&& body) {
    const auto deadline = Clock::now() + opt.busy_wait;
    bool rebuilt = false;
    for (int attempt = 0;; ++attempt) {
      if (!db) return {false, why};
      if (write && mode == Mode::read_only) return {false, why};
      try {
        if (write) db.exec("BEGIN IMMEDIATE");
        body(db);
        if (write) db.exec("COMMIT");
        if (mode == Mode::memory) return {false, why};
        return {true, {}};
      } catch (const sql::Error& e) {
        db.rollback();
        const int code = e.primary();
        if (is_busy(code)) {
          if (Clock::now() < deadline) {
            backoff(attempt);
            continue;
          }
          const std::string msg =
              fmt::format("{}: waited {} ms for other processes, {} dropped ({})", file.string(),
                          opt.busy_wait.count(), what, e.what());
          warn_once("busy", msg);
          return {false, msg};
        }
        if (mode == Mode::memory) {
          const std::string msg =
              std::string("in-memory store: ") + what + " failed (" + e.what() + ")";
          warn_once("memory", msg);
          return {false, msg};
        }
        if (is_corrupt(code) && !rebuilt) {
          rebuilt = true;
          recover(file.string() + " was corrupt (" + e.what() + ")");
          continue;
        }
        // A full disk, an I/O error, a file made read-only, or corruption again right after a
        // rebuild: the file is of no more use to this process. What it holds is copied to
        // memory (reads of it still work when its disk is full) and the call runs again there.
        const char* kind = code == SQLITE_FULL ? "full" : "write";
        use_memory_warn(
            kind,
            (write ? "cannot write " : "cannot read ") + file.string() + " (" + e.what() + ")",
            true);
      }
    }
  }

  // Gives the pages of removed rows back to the file system. The rows are gone whether or not
  // it succeeds (it needs room for a copy of the file, which a full disk lacks). VACUUM writes
  // the new file into the WAL; the checkpoint moves it into the file and truncates the WAL now,
  // not at the last close, which the process's store never reaches.
  void vacuum() {
    if (mode != Mode::persistent) return;
    try {
      db.exec("VACUUM");
      db.query_int("PRAGMA wal_checkpoint(TRUNCATE)");
    } catch (const sql::Error& e) {
      warn_once("vacuum", "rows removed from " + file.string() +
                              ", but the space they held was not given back (" + e.what() + ")");
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
                                      "WHERE {} AND key = ?9",
                                      kIdentityMatch));
    bind_identity(st, id);
    st.bind(9, key);
    if (st.step()) {
      const std::vector<char> v = st.blob(0);
      out = TuneResult{std::string(v.begin(), v.end()), st.text(1), st.text(2), st.real(3)};
    }
  });
  return out;
}

Written Store::put_tune(const Identity& id, std::string_view key, const TuneResult& r) {
  std::lock_guard lock(impl_->mu);
  return impl_->run("tune write", true, [&](sql::Database& db) {
    sql::Statement st(
        db, fmt::format("INSERT OR REPLACE INTO kiln_tune ({}, key, value, name, shape, seconds, "
                        "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                        "?14)",
                        kIdentityColumns));
    bind_identity(st, id);
    st.bind(9, key)
        .bind_blob(10, r.value.data(), r.value.size())
        .bind(11, r.name)
        .bind(12, r.shape)
        .bind(13, r.seconds)
        .bind(14, now_seconds());
    st.run();
  });
}

std::optional<std::vector<char>> Store::get_kernel(const Identity& id, const KernelKey& key) {
  std::lock_guard lock(impl_->mu);
  std::optional<std::vector<char>> out;
  impl_->run("kernel lookup", false, [&](sql::Database& db) {
    out.reset();
    sql::Statement st(db, fmt::format("SELECT source, binary FROM kiln_kernels WHERE {} AND "
                                      "source_hash = ?9 AND arch = ?10 AND options = ?11",
                                      kIdentityMatch));
    bind_identity(st, id);
    st.bind(9, hash_source(key.source)).bind(10, key.arch).bind(11, key.options);
    if (st.step() && st.text(0) == key.source) out = st.blob(1);
  });
  return out;
}

Written Store::put_kernel(const Identity& id, const KernelKey& key, const std::vector<char>& binary,
                          std::string_view label) {
  std::lock_guard lock(impl_->mu);
  return impl_->run("kernel write", true, [&](sql::Database& db) {
    sql::Statement st(db, fmt::format("INSERT OR REPLACE INTO kiln_kernels ({}, source_hash, "
                                      "arch, options, source, label, binary, created) VALUES "
                                      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                                      "?14, ?15)",
                                      kIdentityColumns));
    bind_identity(st, id);
    st.bind(9, hash_source(key.source))
        .bind(10, key.arch)
        .bind(11, key.options)
        .bind(12, key.source)
        .bind(13, label)
        .bind_blob(14, binary.data(), binary.size())
        .bind(15, now_seconds());
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
    sql::Statement st(db, fmt::format("SELECT {}, {} {} ORDER BY {}, {}", kIdentityColumns, columns,
                                      only ? fmt::format("WHERE {}", kIdentityMatch) : "",
                                      kIdentityColumns, kIdentityFields + 1));
    if (only) bind_identity(st, *only);
    while (st.step()) {
      Entry e;
      e.table = table;
      e.identity = read_identity(st, 0);
      e.key = st.text(kIdentityFields);
      e.name = st.text(kIdentityFields + 1);
      e.shape = st.text(kIdentityFields + 2);
      e.seconds = st.real(kIdentityFields + 3);
      e.bytes = st.integer(kIdentityFields + 4);
      e.created = st.integer(kIdentityFields + 5);
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
        (t == Table::tune ? it->tune_entries : it->kernel_entries) += st.integer(kIdentityFields);
        it->bytes += static_cast<std::int64_t>(st.real(kIdentityFields + 1));
      }
    }
  });
  return out;
}

Written Store::clear() {
  std::lock_guard lock(impl_->mu);
  Written w = impl_->run("clear", true, [](sql::Database& db) {
    db.exec("DELETE FROM kiln_tune; DELETE FROM kiln_kernels;");
  });
  if (w) impl_->vacuum();
  return w;
}

Written Store::clear(Table table) {
  std::lock_guard lock(impl_->mu);
  Written w = impl_->run("clear", true, [&](sql::Database& db) {
    db.exec(table == Table::tune ? "DELETE FROM kiln_tune" : "DELETE FROM kiln_kernels");
  });
  if (w) impl_->vacuum();
  return w;
}

fs::path Store::directory() const {
  std::lock_guard lock(impl_->mu);
  return impl_->dir;
}

fs::path Store::file() const {
  std::lock_guard lock(impl_->mu);
  return impl_->mode == Mode::memory ? fs::path() : impl_->file;
}

Mode Store::mode() const {
  std::lock_guard lock(impl_->mu);
  return impl_->mode;
}

bool Store::persistent() const { return mode() == Mode::persistent; }

std::string Store::why() const {
  std::lock_guard lock(impl_->mu);
  return impl_->mode == Mode::persistent ? std::string() : impl_->why;
}

std::vector<std::string> Store::warnings() const {
  std::lock_guard lock(impl_->mu);
  return impl_->messages;
}

Store* process_store() {
  if (!detail::persistence_live()) return nullptr;
  // Never destroyed: kernel caches and tuners may reach it from threads and static destructors
  // at exit, and committed rows are safe in the file without a close.
  static Store* const s = new Store();
  return s;
}

}  // namespace kiln::store
