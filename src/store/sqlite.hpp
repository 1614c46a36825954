// RAII over SQLite's C API: a connection, a prepared statement, and one exception type that
// carries SQLite's result code, so that the store can tell "busy" from "corrupt" from "full".
// Every call that can fail is checked; the only results left unchecked are those of the
// destructors' close/finalize, which repeat an error already reported by the failing call.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::store::sql {

// A failed SQLite call: the extended result code, what was being done, and SQLite's message.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }
  int primary() const { return code_ & 0xff; }  // SQLITE_BUSY, SQLITE_CORRUPT, ...

 private:
  int code_;
};

class Database {
 public:
  Database() = default;
  // Opens `path` (created when absent; ":memory:" is a private in-memory database), with
  // extended result codes and `busy_ms` of waiting on other connections' locks.
  static Database open(const std::string& path, int busy_ms);
  // Opens `path` read-only as an immutable file (SQLite's immutable=1): no lock is taken and no
  // journal, -wal or -shm is read or made, so that a file in a read-only directory or on a
  // read-only file system can be read, and that looking at a file cannot change it. Rows another
  // process writes meanwhile may not be seen.
  static Database open_immutable(const std::string& path);
  Database(Database&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Database& operator=(Database&& o) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database() { close(); }

  void close();
  explicit operator bool() const { return db_ != nullptr; }
  sqlite3* get() const { return db_; }

  // Runs SQL that returns no rows (several statements allowed).
  void exec(const char* sql);
  // Runs a statement whose first row's first column is the answer ("PRAGMA user_version").
  std::int64_t query_int(const char* sql);
  std::string query_text(const char* sql);
  // Whether a transaction is open (BEGIN without COMMIT/ROLLBACK yet).
  bool in_transaction() const { return db_ && !sqlite3_get_autocommit(db_); }
  // Ends the open transaction, if any, after a failed statement. A failing ROLLBACK means SQLite
  // already rolled back (it does so itself after SQLITE_FULL and some I/O errors), so its error
  // is moot.
  void rollback() noexcept;
  // Throws Error(rc) naming `what` and the connection's message unless rc is SQLITE_OK.
  void check(int rc, std::string_view what) const;

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(st_); }

  // Parameters are numbered from 1, as in SQL's ?1.
  Statement& bind(int i, std::string_view text);
  Statement& bind_blob(int i, const void* data, std::size_t n);
  Statement& bind(int i, double v);
  Statement& bind(int i, std::int64_t v);
  Statement& bind_null(int i);
  // true: a row is ready to read; false: the statement is done.
  bool step();
  // Runs a statement that returns no rows.
  void run() {
    while (step()) {
    }
  }

  // Columns are numbered from 0.
  std::string text(int col) const;
  std::vector<char> blob(int col) const;
  double real(int col) const { return sqlite3_column_double(st_, col); }
  std::int64_t integer(int col) const { return sqlite3_column_int64(st_, col); }

 private:
  Database& db_;
  sqlite3_stmt* st_ = nullptr;
};

}  // namespace kiln::store::sql
