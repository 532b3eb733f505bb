// safetensors files (the Hugging Face format): an 8-byte little-endian
// header length N, N bytes of JSON header, then the data section. The header
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets into the data section) and may hold "__metadata__", a map of
// strings. Data is little-endian, row-major, and the tensors cover the data
// section exactly (no holes, no overlaps).
//
// Reading validates all of that up front: a file that is truncated, has a
// bad header, an unknown dtype, a shape that disagrees with its byte range,
// overlapping or missing bytes, or trailing garbage fails with an InputError
// naming the file, the tensor and the offset, expected and found.
// Writing is atomic: a temporary file in the same directory, fsynced, then
// renamed over the target (and the directory fsynced), so a crash leaves the
// old file or the new one, never a mix. A failed write (disk full) removes
// the temporary and throws; the target is untouched.
// Supported dtypes: F32, F64, BF16, F16, I32, and U8 and F8_E4M3 (quantized checkpoints) (Trident's DType).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"

namespace trident {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  int64_t begin = 0, end = 0;  // bytes, relative to the data section
};

class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);  // validates the whole layout; keeps the file open
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& at(const std::string& name) const;  // InputError when missing
  // Copies the tensor's bytes (entry.end - entry.begin) into dst.
  void read(const std::string& name, void* dst) const;
  // Elements [first, first + count) of the flattened tensor.
  void read_range(const std::string& name, int64_t first, int64_t count, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsInput {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;  // numel(shape) elements
};

// Writes `tensors` (in this order) and `metadata` to `path` atomically.
// Returns the CRC-32C of the file's bytes (computed as they are written).
uint32_t write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

// s as a JSON string literal, quotes included (headers, checkpoint indexes).
std::string json_quote(const std::string& s);

// "F32", "BF16", ... <-> DType (InputError for a dtype Trident does not use).
const char* safetensors_dtype(DType t);

}  // namespace trident
