#include "store/sqlite.hpp"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

namespace kiln::store::sql {

Database Database::open(const std::string& path, int busy_ms) {
  sqlite3* raw = nullptr;
  // NOMUTEX: the store serialises its own calls, so SQLite's per-connection mutex is redundant.
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  // SQLite hands back a connection even when the open fails (for its message); own it first.
  Database db(raw);
  if (raw == nullptr) throw Error(SQLITE_NOMEM, "sqlite3_open_v2 " + path + ": out of memory");
  db.check(rc, "open " + path);
  db.check(sqlite3_extended_result_codes(raw, 1), "sqlite3_extended_result_codes");
  db.check(sqlite3_busy_timeout(raw, busy_ms), "sqlite3_busy_timeout");
  return db;
}

Database Database::open_immutable(const std::string& path) {
  // A URI names the file: "file://" and an absolute path, with the characters a URI gives a
  // meaning to escaped.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) throw Error(SQLITE_CANTOPEN, "open " + path + " (read-only): " + ec.message());
  std::string uri = "file://";
  for (const char c : absolute.string()) {
    if (c == '%' || c == '?' || c == '#') {
      uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      uri += c;
    }
  }
  uri += "?immutable=1";
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(uri.c_str(), &raw, flags, nullptr);
  Database db(raw);
  if (raw == nullptr) throw Error(SQLITE_NOMEM, "sqlite3_open_v2 " + path + ": out of memory");
  db.check(rc, "open " + path + " (read-only)");
  db.check(sqlite3_extended_result_codes(raw, 1), "sqlite3_extended_result_codes");
  return db;
}

Database& Database::operator=(Database&& o) noexcept {
  if (this != &o) {
    close();
    db_ = o.db_;
    o.db_ = nullptr;
  }
  return *this;
}

void Database::close() {
  // close_v2 defers the close until the last statement is finalized; it cannot fail for a
  // valid handle, and there is nobody to report to in a destructor.
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
}

void Database::rollback() noexcept {
  if (!in_transaction()) return;
  try {
    exec("ROLLBACK");
  } catch (const Error&) {
  }
}

void Database::check(int rc, std::string_view what) const {
  if (rc == SQLITE_OK) return;
  std::string msg(what);
  msg += ": ";
  // The connection's message is about the last call on it; for an open that failed before a
  // connection existed, the code's generic text is all there is.
  msg += db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  // For a file that cannot be opened or written, the system's reason is the useful part.
  const int primary = rc & 0xff;
  if (db_ && (primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR || primary == SQLITE_FULL ||
              primary == SQLITE_READONLY)) {
    if (const int e = sqlite3_system_errno(db_); e != 0)
      msg += std::string(" (") + std::strerror(e) + ")";
  }
  throw Error(rc, msg);
}

void Database::exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return;
  std::string msg = std::string(sql) + ": " + (err ? err : sqlite3_errstr(rc));
  sqlite3_free(err);
  throw Error(sqlite3_extended_errcode(db_), msg);
}

std::int64_t Database::query_int(const char* sql) {
  Statement st(*this, sql);
  if (!st.step()) throw Error(SQLITE_ERROR, std::string(sql) + ": returned no row");
  return st.integer(0);
}

std::string Database::query_text(const char* sql) {
  Statement st(*this, sql);
  if (!st.step()) throw Error(SQLITE_ERROR, std::string(sql) + ": returned no row");
  return st.text(0);
}

Statement::Statement(Database& db, std::string_view sql) : db_(db) {
  if (sql.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error(SQLITE_TOOBIG, "prepare: statement too long");
  db.check(sqlite3_prepare_v2(db.get(), sql.data(), static_cast<int>(sql.size()), &st_, nullptr),
           "prepare " + std::string(sql));
}

Statement& Statement::bind(int i, std::string_view text) {
  // An empty view may carry a null pointer, which SQLite would bind as NULL, not as "".
  const char* p = text.data() ? text.data() : "";
  db_.check(sqlite3_bind_text64(st_, i, p, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
            "bind text");
  return *this;
}

Statement& Statement::bind_blob(int i, const void* data, std::size_t n) {
  // A zero-length blob from a null pointer would bind NULL; "" keeps it a blob.
  db_.check(sqlite3_bind_blob64(st_, i, n ? data : "", n, SQLITE_TRANSIENT), "bind blob");
  return *this;
}

Statement& Statement::bind(int i, double v) {
  db_.check(sqlite3_bind_double(st_, i, v), "bind real");
  return *this;
}

Statement& Statement::bind(int i, std::int64_t v) {
  db_.check(sqlite3_bind_int64(st_, i, v), "bind integer");
  return *this;
}

Statement& Statement::bind_null(int i) {
  db_.check(sqlite3_bind_null(st_, i), "bind null");
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // The statement's text would only bury the reason in a warning the user reads; a read or a
  // write is what matters there.
  db_.check(rc, sqlite3_stmt_readonly(st_) ? "read" : "write");
  return false;  // SQLITE_OK is no result of step; were it one, the statement would be done
}

std::string Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
  const int n = sqlite3_column_bytes(st_, col);
  if (p == nullptr && sqlite3_errcode(db_.get()) == SQLITE_NOMEM)
    throw Error(SQLITE_NOMEM, "column text: out of memory");
  return p ? std::string(p, static_cast<std::size_t>(n)) : std::string();
}

std::vector<char> Statement::blob(int col) const {
  const auto* p = static_cast<const char*>(sqlite3_column_blob(st_, col));
  const int n = sqlite3_column_bytes(st_, col);
  if (p == nullptr && n > 0) throw Error(SQLITE_NOMEM, "column blob: out of memory");
  return p ? std::vector<char>(p, p + n) : std::vector<char>();
}

}  // namespace kiln::store::sql
