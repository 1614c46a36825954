// kiln's tables in the store's SQLite file: making them, and telling a file that is kiln's from
// one that is not. The first look at a file writes nothing: a database that turns out to be
// another application's must be byte-identical after kiln looked at it, with no -wal or -shm
// beside it (docs/store.md, "The faults it survives").
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "store/sqlite.hpp"

namespace kiln::store::schema {

// PRAGMA application_id of every kiln store ("kiln" in ASCII).
inline constexpr std::int64_t kApplicationId = 0x6b696c6e;

// A database that is not this kiln's to write: another application's, or a newer kiln's. It is
// left as it is.
class Foreign : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file with kiln's application id and this schema version whose tables are not kiln's (a table
// or a column missing or different): handled as a corrupt file, moved aside and rebuilt.
class Mismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the first 100 bytes of a file say, read with read(2): no lock, no journal, no write.
struct Header {
  enum class Kind {
    absent,      // no file, or an empty one: a new store
    unreadable,  // exists but cannot be read (`why` says why)
    not_sqlite,  // too short or without SQLite's magic: handled as a corrupt store
    sqlite,
  } kind = Kind::absent;
  std::int64_t application_id = 0;
  std::int64_t user_version = 0;
  std::string why;
};
Header read_header(const std::filesystem::path& file);

// Throws Foreign for a database that the header shows is not this kiln's to write (another
// application id, a newer schema) or, for one without an application id, whose table names (read
// through an immutable open, which takes no lock and writes nothing) are not kiln's. Called before
// the file is opened for writing.
void check_before_opening(const Header& h, const std::filesystem::path& file);

// Brings a database open for writing to kiln's tables inside one write transaction, so that
// processes opening a fresh file at the same moment create them once: creates them in a new file
// (or one of an older schema), checks them in a file of this schema. Throws Foreign or Mismatch.
void init(sql::Database& db, const std::filesystem::path& file);

// Reads only: throws Foreign or Mismatch (an older schema too) unless `db` is a kiln store of this
// schema with kiln's tables.
void verify(sql::Database& db, const std::filesystem::path& file);

}  // namespace kiln::store::schema
