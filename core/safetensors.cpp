// safetensors reader and atomic writer (see safetensors.hpp).
#include "core/safetensors.hpp"

#include "core/atomic_file.hpp"
#include "core/crc32c.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace trident {

namespace {

constexpr int64_t kMaxHeader = int64_t(100) << 20;  // the reference implementation's limit

DType parse_dtype(const std::string& path, const std::string& name, const std::string& s) {
  if (s == "F32") return DType::f32;
  if (s == "F64") return DType::f64;
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "I32") return DType::i32;
  if (s == "U8") return DType::u8;
  if (s == "F8_E4M3") return DType::f8_e4m3;
  fail_input("{}: tensor '{}': dtype expected one of F32, F64, BF16, F16, I32, U8, F8_E4M3, found '{}'", path, name, s);
}

// Reads exactly n bytes at offset, or fails naming what was being read.
void pread_all(int fd, void* dst, int64_t n, int64_t offset, const std::string& path, const std::string& what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, size_t(n), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail_input("{}: {}: expected {} more bytes at offset {}, found {}", path, what, n, offset,
                 got < 0 ? std::strerror(errno) : "end of file");
    p += got, n -= got, offset += got;
  }
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string json_quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u8:
      return "U8";
    case DType::f8_e4m3:
      return "F8_E4M3";
  }
  return "?";
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  Fd f{::open(path_.c_str(), O_RDONLY)};
  if (f.fd < 0) fail_input("{}: cannot open ({})", path_, std::strerror(errno));
  const int64_t size = int64_t(::lseek(f.fd, 0, SEEK_END));
  if (size < 8) fail_input("{}: expected at least the 8-byte header length, found a file of {} bytes", path_, size);
  uint8_t len_bytes[8];
  pread_all(f.fd, len_bytes, 8, 0, path_, "header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > uint64_t(kMaxHeader) || int64_t(n) > size - 8)
    fail_input("{}: header length {} at offset 0 exceeds the file ({} bytes) or the {} byte limit", path_, n, size,
               kMaxHeader);
  std::string header(size_t(n), '\0');
  pread_all(f.fd, header.data(), int64_t(n), 8, path_, "header");
  data_start_ = 8 + int64_t(n);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: header (bytes 8..{}) is not valid JSON: {}", path_, data_start_, e.what());
  }
  if (!root.is_object()) fail_input("{}: header: expected a JSON object, found {}", path_, root.type_name());
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail_input("{}: __metadata__: expected an object of strings", path_);
      for (const auto& [k, m] : v.items()) {
        if (!m.is_string()) fail_input("{}: __metadata__.{}: expected a string, found {}", path_, k, m.type_name());
        metadata_[k] = m.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail_input("{}: tensor '{}': expected {{\"dtype\", \"shape\", \"data_offsets\"}}", path_, name);
    SafetensorsEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) fail_input("{}: tensor '{}': dtype: expected a string", path_, name);
    e.dtype = parse_dtype(path_, name, v["dtype"].get<std::string>());
    const auto& shape = v["shape"];
    const auto& offsets = v["data_offsets"];
    if (!shape.is_array() || !offsets.is_array() || offsets.size() != 2)
      fail_input("{}: tensor '{}': expected a shape list and two data_offsets", path_, name);
    auto integer = [&, &name = e.name](const nlohmann::json& x) {
      if (!x.is_number_integer()) fail_input("{}: tensor '{}': shape and data_offsets must be integers", path_, name);
      return x.get<int64_t>();
    };
    for (const auto& d : shape) {
      const int64_t x = integer(d);
      if (x < 0) fail_input("{}: tensor '{}': negative dimension {}", path_, name, x);
      e.shape.push_back(x);
    }
    e.begin = integer(offsets[0]);
    e.end = integer(offsets[1]);
    const int64_t bytes = shape_numel(e.shape) * int64_t(dtype_size(e.dtype));
    if (e.begin < 0 || e.end < e.begin || e.end - e.begin != bytes)
      fail_input("{}: tensor '{}': data_offsets [{}, {}] hold {} bytes, expected {} for {} {}", path_, name, e.begin,
                 e.end, e.end - e.begin, bytes, safetensors_dtype(e.dtype), fmt::join(e.shape, "x"));
    if (contains(name)) fail_input("{}: tensor '{}' appears twice in the header", path_, name);
    entries_.push_back(std::move(e));
  }
  // the tensors tile the data section exactly
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  int64_t at = 0;
  for (const auto* e : by_offset) {
    if (e->begin != at)
      fail_input("{}: tensor '{}' starts at data offset {}, expected {} ({})", path_, e->name, e->begin, at,
                 e->begin > at ? "a hole before it" : "it overlaps the previous tensor");
    at = e->end;
  }
  const int64_t data = size - data_start_;
  if (data != at)
    fail_input("{}: data section of {} bytes (from offset {}), the header's tensors cover {}: {}", path_, data,
               data_start_, at, data < at ? "the file is truncated" : "trailing bytes after the last tensor");
  std::swap(fd_, f.fd);  // valid: keep it open for the reads
}

bool SafetensorsReader::contains(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
}

const SafetensorsEntry& SafetensorsReader::at(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e;
  fail_input("{}: no tensor named '{}' ({} tensors in the file)", path_, name, entries_.size());
}

void SafetensorsReader::read(const std::string& name, void* dst) const {
  const auto& e = at(name);
  read_range(name, 0, shape_numel(e.shape), dst);
}

void SafetensorsReader::read_range(const std::string& name, int64_t first, int64_t count, void* dst) const {
  const auto& e = at(name);
  const int64_t es = int64_t(dtype_size(e.dtype));
  if (first < 0 || count < 0 || (first + count) * es > e.end - e.begin)
    fail_input("{}: tensor '{}': elements [{}, {}) outside its {} elements", path_, name, first, first + count,
               (e.end - e.begin) / es);
  pread_all(fd_, dst, count * es, data_start_ + e.begin + first * es, path_, "tensor '" + name + "'");
}

uint32_t write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t bytes = shape_numel(t.shape) * int64_t(dtype_size(t.dtype));
    h[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header += ' ';  // data section 8-byte aligned, as the reference writer does
  AtomicFile f(path);
  uint32_t crc = 0xFFFFFFFFu;
  auto write_all = [&](const void* src, int64_t n) {
    crc = crc32c_update(crc, static_cast<const char*>(src), size_t(n));
    f.write(src, n);
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  write_all(len, 8);
  write_all(header.data(), int64_t(header.size()));
  for (const auto& t : tensors) write_all(t.data, shape_numel(t.shape) * int64_t(dtype_size(t.dtype)));
  f.commit();
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace trident
