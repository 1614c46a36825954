// kiln::save_npy / kiln::load_npy (include/kiln/npy.hpp): NumPy's format 1.0. A file is the
// magic "\x93NUMPY", the version (1, 0), a little-endian u16 header length, then a Python dict
// literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces and a newline
// so that the data starts at a multiple of 64 bytes, then the data.
#include "kiln/npy.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/tensor_impl.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6, kPrefixLen = 10, kAlign = 64;
// numpy.save leaves room for the first dim to grow to this many digits.
constexpr std::size_t kGrowthDigits = 21;

struct NpyType {
  DType dtype;
  const char* descr;
};
constexpr NpyType kTypes[] = {
    {DType::f32, "<f4"}, {DType::i32, "<i4"}, {DType::f16, "<f2"}, {DType::boolean, "|b1"}};

[[noreturn]] void malformed(const std::filesystem::path& p, const std::string& why) {
  throw ValueError(fmt::format("load_npy: {} is not a valid .npy file: {}", p.string(), why));
}

// The dict numpy writes, as numpy writes it: keys sorted, repr of each value.
std::string header_of(const char* descr, const Dims& shape) {
  std::string s = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (", descr);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  }
  s += shape.size() == 1 ? ",), }" : "), }";
  if (!shape.empty()) s.append(kGrowthDigits - std::to_string(shape[0]).size(), ' ');
  const std::size_t pad = kAlign - (kPrefixLen + s.size() + 1) % kAlign;
  s.append(pad % kAlign, ' ');
  return s + '\n';
}

// A cursor over the header dict, strict about what numpy writes (and Python's literal syntax).
struct Parser {
  const std::string& s;
  const std::filesystem::path& path;
  std::size_t i = 0;

  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  }
  bool take(char c) {
    space();
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  void expect(char c) {
    if (!take(c)) malformed(path, fmt::format("expected '{}' at header byte {}", c, i));
  }
  std::string quoted() {
    space();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) malformed(path, "expected a string");
    const char q = s[i++];
    const std::size_t end = s.find(q, i);
    if (end == std::string::npos) malformed(path, "an unterminated string");
    std::string out = s.substr(i, end - i);
    i = end + 1;
    return out;
  }
  bool boolean() {
    space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::size_t n = std::strlen(word);
      if (s.compare(i, n, word) == 0) return i += n, value;
    }
    malformed(path, "fortran_order is not True or False");
  }
  Dims tuple() {
    expect('(');
    Dims out;
    while (!take(')')) {
      space();
      std::size_t j = i;
      std::int64_t v = 0;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') {
        if (v > (INT64_MAX - 9) / 10) malformed(path, "a dimension too large");
        v = v * 10 + (s[j++] - '0');
      }
      if (j == i) malformed(path, "a shape that is not a tuple of integers");
      i = j;
      out.push_back(v);
      if (!take(',')) {
        expect(')');
        break;
      }
    }
    return out;
  }
};

std::vector<char> read_all(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ValueError(fmt::format("load_npy: cannot open {}", path.string()));
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

void save_npy(const std::filesystem::path& path, const Handle& t) {
  const DType dt = dtype(t);
  const char* descr = nullptr;
  for (const NpyType& n : kTypes)
    if (n.dtype == dt) descr = n.descr;
  if (!descr) {
    throw DTypeError(
        fmt::format("save_npy: NumPy has no {}; save x.to(DType::f32) instead", dtype_name(dt)));
  }
  const std::string header = header_of(descr, shape(t));
  if (header.size() > 65535) throw ValueError("save_npy: the shape is too long for format 1.0");
  std::vector<char> data(static_cast<std::size_t>(numel(t)) * dtype_size(dt));
  if (!data.empty()) read(t, data.data(), dt);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw ValueError(fmt::format("save_npy: cannot write {}", path.string()));
  const char prefix[kPrefixLen] = {kMagic[0],
                                   kMagic[1],
                                   kMagic[2],
                                   kMagic[3],
                                   kMagic[4],
                                   kMagic[5],
                                   1,
                                   0,
                                   static_cast<char>(header.size() & 0xff),
                                   static_cast<char>(header.size() >> 8)};
  f.write(prefix, kPrefixLen);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f.flush()) throw ValueError(fmt::format("save_npy: writing {} failed", path.string()));
}

Handle load_npy(const std::filesystem::path& path, Device device) {
  const std::vector<char> b = read_all(path);
  if (b.size() < kPrefixLen || std::memcmp(b.data(), kMagic, kMagicLen) != 0)
    malformed(path, "no .npy magic");
  if (b[6] != 1 || b[7] != 0)
    malformed(path, fmt::format("format {}.{} (kiln reads 1.0)", int{b[6]}, int{b[7]}));
  const std::size_t hlen = static_cast<unsigned char>(b[8]) |
                           (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
  if (kPrefixLen + hlen > b.size()) malformed(path, "the header runs past the end of the file");
  const std::string header(b.data() + kPrefixLen, hlen);
  Parser p{header, path};
  std::string descr;
  bool fortran = false, has_descr = false, has_order = false, has_shape = false;
  Dims dims;
  p.expect('{');
  while (!p.take('}')) {
    const std::string key = p.quoted();
    p.expect(':');
    if (key == "descr") {
      descr = p.quoted(), has_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean(), has_order = true;
    } else if (key == "shape") {
      dims = p.tuple(), has_shape = true;
    } else {
      malformed(path, "an unknown key '" + key + "'");
    }
    if (!p.take(',')) {
      p.expect('}');
      break;
    }
  }
  if (!has_descr || !has_order || !has_shape)
    malformed(path, "descr, fortran_order or shape missing");
  // The element type: one kiln has, or NumPy's 64-bit defaults, narrowed.
  DType dt = DType::f32;
  std::size_t item = 0;
  bool wide_float = false, wide_int = false;
  for (const NpyType& n : kTypes)
    if (descr == n.descr) dt = n.dtype, item = dtype_size(n.dtype);
  if (descr == "<f8") dt = DType::f32, item = 8, wide_float = true;
  if (descr == "<i8") dt = DType::i32, item = 8, wide_int = true;
  if (item == 0) {
    throw DTypeError(
        fmt::format("load_npy: {} holds '{}', which kiln does not read (it reads <f4, "
                    "<i4, <f2, |b1, <f8, <i8)",
                    path.string(), descr));
  }
  std::uint64_t n = 1;
  for (const std::int64_t d : dims) {
    if (d != 0 && n > static_cast<std::uint64_t>(INT64_MAX) / static_cast<std::uint64_t>(d))
      malformed(path, "a shape with more elements than a tensor can");
    n *= static_cast<std::uint64_t>(d);
  }
  const std::size_t data_at = kPrefixLen + hlen;
  if (n > (b.size() - data_at) / item || (b.size() - data_at) != n * item) {
    malformed(path, fmt::format("{} bytes of data, the shape {} of {} needs {}", b.size() - data_at,
                                format_dims(dims), descr, n * item));
  }
  const char* data = b.data() + data_at;
  std::vector<char> narrowed;
  if (wide_float || wide_int || dt == DType::boolean) {
    narrowed.resize(n * dtype_size(dt));
    for (std::uint64_t k = 0; k < n; ++k) {
      if (wide_float) {
        double v;
        std::memcpy(&v, data + 8 * k, 8);
        const float f = static_cast<float>(v);
        std::memcpy(narrowed.data() + 4 * k, &f, 4);
      } else if (wide_int) {
        std::int64_t v;
        std::memcpy(&v, data + 8 * k, 8);
        if (v < INT32_MIN || v > INT32_MAX) {
          throw ValueError(fmt::format("load_npy: {} holds {} at element {}, outside i32's range",
                                       path.string(), v, k));
        }
        const auto w = static_cast<std::int32_t>(v);
        std::memcpy(narrowed.data() + 4 * k, &w, 4);
      } else {
        narrowed[k] = data[k] != 0;
      }
    }
    data = narrowed.data();
  }
  if (!fortran) return from_data(data, n, dt, dims, device);
  // Fortran order: the data is the row-major array of the reversed shape, transposed.
  const Dims reversed(dims.rbegin(), dims.rend());
  std::vector<int> order(dims.size());
  for (std::size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int>(order.size() - 1 - d);
  return contiguous(permute(from_data(data, n, dt, reversed, device), order));
}

}  // namespace kiln::detail
