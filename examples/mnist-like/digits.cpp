// load_digits (digits.hpp): gzgets line by line, 65 comma-separated integers each.
#include "digits.hpp"

#include <zlib.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

Digits load_digits(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file)
    throw std::runtime_error("cannot open " + path +
                             " (install it with: apt-get install python3-sklearn)");
  Digits d;
  char line[1024];
  for (int n = 1; gzgets(file.get(), line, sizeof line) != nullptr; ++n) {
    const char* p = line;
    for (int i = 0; i < 65; ++i) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      const bool in_range = i < 64 ? (v >= 0 && v <= 16) : (v >= 0 && v <= 9);
      if (end == p || !in_range || (i < 64 && *end != ','))
        throw std::runtime_error(path + ": line " + std::to_string(n) + " is not 65 values");
      if (i < 64)
        d.pixels.push_back(static_cast<float>(v) / 16.0f);
      else
        d.labels.push_back(static_cast<std::int32_t>(v));
      p = end + 1;
    }
  }
  if (d.size() == 0) throw std::runtime_error(path + ": no samples");
  return d;
}
