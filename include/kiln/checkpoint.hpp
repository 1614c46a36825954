// kiln::Checkpoint: named tensors kept in a safetensors file, the format PyTorch and Hugging Face
// users already have. kiln::save writes the bytes Python's `safetensors` writes for the same
// tensors and metadata (tensors sorted by dtype, widest first, then by name; the JSON header
// compact and padded with spaces to a multiple of 8 bytes; metadata keys sorted), so a file
// round-trips between kiln and PyTorch. kiln::load reads one, checking everything its header
// claims against the file before a byte of data is read; a malformed file is a ValueError
// naming the file and what is wrong, never a crash or a read out of bounds.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/shape.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

class Checkpoint {
 public:
  // Adds (or replaces) a tensor under `name`; the file stores its values in row-major order.
  template <std::size_t D>
  void add(const std::string& name, const Tensor<D>& t) {
    put(name, t.handle("Checkpoint::add"));
  }
  // The tensor under `name` as a Tensor<D>, on the device the checkpoint was loaded to.
  // IndexError when there is none, ShapeError when its rank is not D.
  template <std::size_t D>
  Tensor<D> get(const std::string& name) const {
    return Tensor<D>(find(name));
  }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Names in sorted order.
  std::vector<std::string> names() const;
  DType dtype(const std::string& name) const;
  Dims shape(const std::string& name) const;

  // The file's free-form string metadata (safetensors' "__metadata__"), e.g. {"format": "pt"}.
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Internal (the handles the front end's ops take).
  void put(const std::string& name, detail::Handle h);
  const detail::Handle& find(const std::string& name) const;

 private:
  std::map<std::string, detail::Handle> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes c to `path` as a safetensors file (replacing it; written to a temporary file beside it
// and renamed, so a reader never sees half a file). Waits for the tensors' devices.
void save(const std::filesystem::path& path, const Checkpoint& c);
// Reads a safetensors file; its tensors are placed on `device`.
Checkpoint load(const std::filesystem::path& path, Device device = Device::cpu());

// The same as bytes (what save writes, what load reads).
std::vector<std::byte> to_safetensors(const Checkpoint& c);
Checkpoint from_safetensors(const std::byte* data, std::size_t size, Device device = Device::cpu(),
                            const std::string& what = "safetensors data");

}  // namespace kiln
