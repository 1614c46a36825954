#include "store/schema.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "store/store.hpp"

namespace kiln::store::schema {
namespace fs = std::filesystem;

namespace {

// Rowid tables with a primary-key index: the kernel rows hold binaries of tens of kilobytes,
// which SQLite advises against in WITHOUT ROWID tables. The identity columns come first, in the
// order of Identity's fields.
constexpr const char* kCreateTables = R"sql(
DROP TABLE IF EXISTS kiln_tune;
DROP TABLE IF EXISTS kiln_kernels;
CREATE TABLE kiln_tune (
  device TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL, cuda TEXT NOT NULL,
  cublas TEXT NOT NULL, nvrtc TEXT NOT NULL, kiln TEXT NOT NULL, build TEXT NOT NULL,
  key TEXT NOT NULL,
  value BLOB NOT NULL, name TEXT NOT NULL, shape TEXT NOT NULL, seconds REAL NOT NULL,
  created INTEGER NOT NULL,
  PRIMARY KEY (device, cc, driver, cuda, cublas, nvrtc, kiln, build, key));
CREATE TABLE kiln_kernels (
  device TEXT NOT NULL, cc TEXT NOT NULL, driver TEXT NOT NULL, cuda TEXT NOT NULL,
  cublas TEXT NOT NULL, nvrtc TEXT NOT NULL, kiln TEXT NOT NULL, build TEXT NOT NULL,
  source_hash TEXT NOT NULL, arch TEXT NOT NULL, options TEXT NOT NULL,
  source TEXT NOT NULL, label TEXT NOT NULL, binary BLOB NOT NULL, created INTEGER NOT NULL,
  PRIMARY KEY (device, cc, driver, cuda, cublas, nvrtc, kiln, build, source_hash, arch, options));
)sql";

constexpr const char* kTables[] = {"kiln_tune", "kiln_kernels"};

// A big-endian 32-bit signed integer, as SQLite keeps the header's fields.
std::int64_t be32(const unsigned char* p) {
  const std::uint32_t u = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                          (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
  return static_cast<std::int32_t>(u);
}

// Another application's id, or a schema this kiln cannot read: never written. A file without an
// id but with a user_version was made by an application that sets only the latter (kiln sets
// both in one transaction).
void check_ids(std::int64_t app, std::int64_t version, const fs::path& file) {
  if (app != 0 && app != kApplicationId)
    throw Foreign(fmt::format("{} is not a kiln store (application_id {:#x})", file.string(), app));
  if (app == 0 && version != 0) {
    throw Foreign(fmt::format("{} is not a kiln store (no application_id, user_version {})",
                              file.string(), version));
  }
  if (version > kSchemaVersion) {
    throw Foreign(fmt::format("{} was written by a newer kiln (schema {}, this kiln reads {})",
                              file.string(), version, kSchemaVersion));
  }
}

// A database without an application id holding tables of its own is another application's
// (kiln sets its id when it creates its tables). Their names are not repeated: they are the
// other application's text, unfit for a terminal unescaped.
void check_table_names(sql::Database& db, const fs::path& file) {
  const std::int64_t n = db.query_int(
      "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
      "ESCAPE '\\' AND name NOT IN ('kiln_tune', 'kiln_kernels')");
  if (n > 0) {
    throw Foreign(
        fmt::format("{} is not a kiln store (no application_id, and {} tables of "
                    "another application)",
                    file.string(), n));
  }
}

// One line per column of kiln's tables in `db`: "kiln_tune.build TEXT NOT NULL, key column 8".
std::vector<std::string> layout(sql::Database& db) {
  std::vector<std::string> out;
  for (const char* table : kTables) {
    sql::Statement st(db, fmt::format("SELECT name, type, \"notnull\", pk FROM "
                                      "pragma_table_info('{}')",
                                      table));
    while (st.step()) {
      out.push_back(fmt::format(
          "{}.{} {}{}{}", table, st.text(0), st.text(1), st.integer(2) ? " NOT NULL" : "",
          st.integer(3) ? fmt::format(", key column {}", st.integer(3)) : ""));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The layout kCreateTables makes, from a database in memory: one text for the tables, so that
// the check never disagrees with what kiln creates.
const std::vector<std::string>& expected_layout() {
  static const std::vector<std::string> expected = [] {
    sql::Database mem = sql::Database::open(":memory:", 0);
    mem.exec(kCreateTables);
    return layout(mem);
  }();
  return expected;
}

// Why the tables of `db` are not kiln's, or empty when they are.
std::string mismatch(sql::Database& db) {
  const std::vector<std::string>& want = expected_layout();
  const std::vector<std::string> have = layout(db);
  for (const char* table : kTables) {
    const std::string prefix = std::string(table) + ".";
    const bool any = std::any_of(have.begin(), have.end(),
                                 [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
    if (!any) return fmt::format("no table {}", table);
  }
  for (const std::string& c : want) {
    if (!std::binary_search(have.begin(), have.end(), c))
      return fmt::format("no column {} (or a different one of that name)", c);
  }
  for (const std::string& c : have) {
    if (!std::binary_search(want.begin(), want.end(), c))
      return fmt::format("a column kiln does not make: {}", c);
  }
  return {};
}

void throw_mismatch(const fs::path& file, const std::string& why) {
  throw Mismatch(
      fmt::format("{} has kiln's application_id and schema {} but not kiln's tables ({})",
                  file.string(), kSchemaVersion, why));
}

}  // namespace

Header read_header(const fs::path& file) {
  Header h;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      h.kind = Header::Kind::unreadable;
      h.why = std::strerror(errno);
    }
    return h;
  }
  unsigned char b[100];
  std::size_t n = 0;
  while (n < sizeof b) {
    const ssize_t got = ::read(fd, b + n, sizeof b - n);
    if (got > 0) {
      n += static_cast<std::size_t>(got);
    } else if (got == 0 || errno != EINTR) {
      if (got < 0) {
        h.kind = Header::Kind::unreadable;  // EISDIR: kiln.db is a directory
        h.why = std::strerror(errno);
      }
      break;
    }
  }
  ::close(fd);
  if (h.kind == Header::Kind::unreadable || n == 0) return h;  // an empty file: SQLite's new one
  if (n < sizeof b || std::memcmp(b, "SQLite format 3", 16) != 0) {
    h.kind = Header::Kind::not_sqlite;
    return h;
  }
  h.kind = Header::Kind::sqlite;
  h.user_version = be32(b + 60);
  h.application_id = be32(b + 68);
  return h;
}

void check_before_opening(const Header& h, const fs::path& file) {
  if (h.kind != Header::Kind::sqlite) return;
  check_ids(h.application_id, h.user_version, file);
  if (h.application_id != 0) return;
  try {
    sql::Database d = sql::Database::open_immutable(file.string());
    check_table_names(d, file);
  } catch (const sql::Error&) {
    // Not readable this way (a damaged file, or a page torn by a writer's checkpoint): the same
    // check under the write lock (init) decides, before anything is written.
  }
}

void init(sql::Database& db, const fs::path& file) {
  db.exec("BEGIN IMMEDIATE");
  try {
    const std::int64_t app = db.query_int("PRAGMA application_id");
    const std::int64_t version = db.query_int("PRAGMA user_version");
    check_ids(app, version, file);
    if (app == 0) check_table_names(db, file);
    if (app == 0 || version < kSchemaVersion) {
      // A new file, or an older schema's, whose rows were produced by an older kiln that no
      // lookup of this one matches anyway: nothing is lost by starting again.
      db.exec(kCreateTables);
      db.exec(fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {};", kApplicationId,
                          kSchemaVersion)
                  .c_str());
    } else if (const std::string why = mismatch(db); !why.empty()) {
      throw_mismatch(file, why);
    }
    db.exec("COMMIT");
  } catch (...) {
    db.rollback();
    throw;
  }
}

void verify(sql::Database& db, const fs::path& file) {
  const std::int64_t app = db.query_int("PRAGMA application_id");
  const std::int64_t version = db.query_int("PRAGMA user_version");
  check_ids(app, version, file);
  if (app != kApplicationId || version != kSchemaVersion) {
    throw Mismatch(
        fmt::format("{} is not a kiln store of schema {} (application_id {:#x}, schema {})",
                    file.string(), kSchemaVersion, app, version));
  }
  if (const std::string why = mismatch(db); !why.empty()) throw_mismatch(file, why);
}

}  // namespace kiln::store::schema
