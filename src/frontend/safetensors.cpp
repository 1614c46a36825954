// kiln::save / kiln::load: the safetensors format (include/kiln/checkpoint.hpp).
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, then the data. The header
// maps each name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data) and
// may hold "__metadata__", a map of strings. What Python's `safetensors` (0.8) writes, which this
// writer reproduces byte for byte: tensors ordered by dtype, widest first (F32, I32, BF16, F16,
// BOOL for kiln's), then by name; the JSON compact, keys in that order, "__metadata__" first and
// only when there is metadata; strings escaped as serde_json does; N padded with spaces to a
// multiple of 8. The reader accepts what safetensors accepts: a header of at most 100 MB, data
// ranges that tile the data exactly from 0 to the end of the file, sizes that match the shapes.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/tensor_impl.hpp"
#include "kiln/checkpoint.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace {

// safetensors' names and order (its Dtype enum: the larger sorts first in a file).
struct StDtype {
  DType dtype;
  const char* name;
  int order;
};
constexpr StDtype kStDtypes[] = {{DType::f32, "F32", 11},
                                 {DType::i32, "I32", 9},
                                 {DType::bf16, "BF16", 8},
                                 {DType::f16, "F16", 7},
                                 {DType::boolean, "BOOL", 0}};

const StDtype& st_dtype(DType t) {
  for (const StDtype& s : kStDtypes)
    if (s.dtype == t) return s;
  throw DTypeError(fmt::format("safetensors: no name for dtype {}", dtype_name(t)));
}

// The header may hold at most this many bytes, as safetensors allows.
constexpr std::uint64_t kMaxHeader = 100'000'000;
// Objects and arrays nest at most this deep in a valid header ({ name: { shape: [ ] } }).
constexpr int kMaxDepth = 3;

// A JSON string as serde_json writes it, which is what nlohmann's dump writes too: quotes,
// backslash and control characters escaped (\b \f \n \r \t, others \u00xx), UTF-8 as is. A
// string that is not UTF-8 cannot be written (Python's file could not hold it either).
void append_json_string(std::string& out, const std::string& s) {
  try {
    out += nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throw ValueError(
        fmt::format("save: \"{}\" is not UTF-8, which safetensors names and metadata "
                    "must be",
                    s));
  }
}

[[noreturn]] void malformed(const std::string& what, const std::string& why) {
  throw ValueError(fmt::format("{}: not a valid safetensors file: {}", what, why));
}

// Rejects a header nested deeper than a valid one can be before it is parsed (the parser
// recurses), counting brackets outside strings.
void check_depth(const char* p, std::size_t n, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = p[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) malformed(what, "the header nests deeper than a valid one");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

std::uint64_t unsigned_value(const nlohmann::json& v, const std::string& what,
                             const std::string& field) {
  if (!v.is_number_unsigned()) malformed(what, field + " is not a non-negative integer");
  return v.get<std::uint64_t>();
}

struct Entry {
  std::string name;
  DType dtype;
  Dims shape;
  std::uint64_t begin, end;
};

Entry parse_entry(const std::string& name, const nlohmann::json& v, const std::string& what) {
  const std::string where = "tensor \"" + name + "\"";
  if (!v.is_object()) malformed(what, where + " is not an object");
  for (const auto& [key, _] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      malformed(what, fmt::format("{} has an unknown field \"{}\"", where, key));
  }
  if (!v.contains("dtype") || !v["dtype"].is_string()) malformed(what, where + " has no dtype");
  const std::string st = v["dtype"].get<std::string>();
  const StDtype* found = nullptr;
  for (const StDtype& s : kStDtypes)
    if (st == s.name) found = &s;
  if (!found) {
    throw DTypeError(
        fmt::format("{}: {} has dtype {}, which kiln does not have (it has F32, I32, "
                    "BF16, F16, BOOL)",
                    what, where, st));
  }
  if (!v.contains("shape") || !v["shape"].is_array()) malformed(what, where + " has no shape");
  Entry e{name, found->dtype, {}, 0, 0};
  std::uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    const std::uint64_t extent = unsigned_value(d, what, where + "'s shape");
    if (extent > static_cast<std::uint64_t>(INT64_MAX) ||
        (extent != 0 && numel > static_cast<std::uint64_t>(INT64_MAX) / extent))
      malformed(what, where + "'s shape has more elements than a tensor can");
    numel *= extent;
    e.shape.push_back(static_cast<std::int64_t>(extent));
  }
  const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2) malformed(what, where + " has no data_offsets pair");
  e.begin = unsigned_value(off[0], what, where + "'s data_offsets");
  e.end = unsigned_value(off[1], what, where + "'s data_offsets");
  if (e.begin > e.end) malformed(what, where + "'s data_offsets run backwards");
  const std::uint64_t size = dtype_size(e.dtype);
  if (numel > UINT64_MAX / size || e.end - e.begin != numel * size) {
    malformed(what, fmt::format("{} has {} bytes of data, its shape {} of {} needs {}", where,
                                e.end - e.begin, format_dims(e.shape), st, numel * size));
  }
  return e;
}

}  // namespace

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : tensors_) out.push_back(name);
  return out;
}

void Checkpoint::put(const std::string& name, detail::Handle h) {
  if (name == "__metadata__")
    throw ValueError("Checkpoint: \"__metadata__\" is the format's own key, not a tensor name");
  st_dtype(detail::dtype(h));  // every dtype kiln has has a name; a new one must get one
  tensors_[name] = std::move(h);
}

const detail::Handle& Checkpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw IndexError(fmt::format("Checkpoint: no tensor named \"{}\"", name));
  return it->second;
}

DType Checkpoint::dtype(const std::string& name) const { return detail::dtype(find(name)); }
Dims Checkpoint::shape(const std::string& name) const { return detail::shape(find(name)); }

std::vector<std::byte> to_safetensors(const Checkpoint& c) {
  std::vector<std::pair<std::string, const detail::Handle*>> order;
  for (const std::string& name : c.names()) order.emplace_back(name, &c.find(name));
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return st_dtype(detail::dtype(*a.second)).order > st_dtype(detail::dtype(*b.second)).order;
  });
  std::string header = "{";
  if (!c.metadata().empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : c.metadata()) {
      if (!first) header += ',';
      first = false;
      append_json_string(header, k);
      header += ':';
      append_json_string(header, v);
    }
    header += "},";
  }
  std::uint64_t offset = 0;
  for (const auto& [name, h] : order) {
    const Dims shape = detail::shape(*h);
    const std::uint64_t bytes =
        static_cast<std::uint64_t>(detail::numel(*h)) * dtype_size(detail::dtype(*h));
    append_json_string(header, name);
    header += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}},",
                          st_dtype(detail::dtype(*h)).name, fmt::join(shape, ","), offset,
                          offset + bytes);
    offset += bytes;
  }
  if (header.size() > 1) header.pop_back();  // the last comma
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + header.size() + offset);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::byte* data = out.data() + 8 + header.size();
  for (const auto& [name, h] : order) {
    const DType t = detail::dtype(*h);
    const std::size_t bytes = static_cast<std::size_t>(detail::numel(*h)) * dtype_size(t);
    if (bytes) detail::read(*h, data, t);
    data += bytes;
  }
  return out;
}

Checkpoint from_safetensors(const std::byte* bytes, std::size_t size, Device device,
                            const std::string& what) {
  if (size < 8) malformed(what, fmt::format("{} bytes, shorter than the header length", size));
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  if (n > kMaxHeader)
    malformed(what, fmt::format("a header length of {} bytes (at most {})", n, kMaxHeader));
  if (n > size - 8) {
    malformed(what, fmt::format("a header of {} bytes in a file of {} bytes", n, size));
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  check_depth(header, static_cast<std::size_t>(n), what);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, header + n);
  } catch (const nlohmann::json::exception& e) {
    malformed(what, std::string("the header is not JSON: ") + e.what());
  }
  if (!j.is_object()) malformed(what, "the header is not a JSON object");
  Checkpoint c;
  std::vector<Entry> entries;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) malformed(what, "__metadata__ is not an object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) malformed(what, "__metadata__[\"" + mk + "\"] is not a string");
        c.metadata()[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, v, what));
  }
  // The ranges must tile the data exactly: no overlap, no gap, nothing after the last.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t data_size = size - 8 - n;
  std::uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin != at) {
      malformed(what, fmt::format("tensor \"{}\" starts at data byte {}, expected {} (ranges "
                                  "overlap or leave a gap)",
                                  e.name, e.begin, at));
    }
    if (e.end > data_size) {
      malformed(what, fmt::format("tensor \"{}\" ends at data byte {}, past the {} bytes of data",
                                  e.name, e.end, data_size));
    }
    at = e.end;
  }
  if (at != data_size) {
    malformed(what, fmt::format("{} bytes of data, the tensors cover {}", data_size, at));
  }
  const std::byte* data = bytes + 8 + n;
  for (const Entry& e : entries) {
    const std::byte* p = data + e.begin;
    const std::size_t count = static_cast<std::size_t>(detail::numel(e.shape));
    std::vector<std::uint8_t> normalised;
    if (e.dtype == DType::boolean) {  // kiln's bools are 0 or 1; safetensors' any nonzero byte
      normalised.resize(count);
      for (std::size_t i = 0; i < count; ++i) normalised[i] = p[i] != std::byte{0};
      p = reinterpret_cast<const std::byte*>(normalised.data());
    }
    c.put(e.name, detail::from_data(p, count, e.dtype, e.shape, device));
  }
  return c;
}

void save(const std::filesystem::path& path, const Checkpoint& c) {
  const std::vector<std::byte> bytes = to_safetensors(c);
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw ValueError(fmt::format("save: cannot write {}", tmp.string()));
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    if (!f.flush()) throw ValueError(fmt::format("save: writing {} failed", tmp.string()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw ValueError(fmt::format("save: cannot replace {}: {}", path.string(), ec.message()));
  }
}

Checkpoint load(const std::filesystem::path& path, Device device) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw ValueError(fmt::format("load: cannot open {}", path.string()));
  const std::streamoff size = f.tellg();
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::max<std::streamoff>(size, 0)));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw ValueError(fmt::format("load: reading {} failed", path.string()));
  return from_safetensors(bytes.data(), bytes.size(), device, path.string());
}

}  // namespace kiln
