// TensorBoard event files (see tensorboard.hpp).
#include "launch/train/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/crc32c.hpp"
#include "core/error.hpp"

namespace trident::launch {

namespace fs = std::filesystem;

namespace {

// Protocol buffer wire format: the fields these messages use.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(char((v & 0x7F) | 0x80)), v >>= 7;
  out.push_back(char(v));
}
void key(std::string& out, int field, int wire) { varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
void fixed64(std::string& out, int field, double v) {
  key(out, field, 1);
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  for (int i = 0; i < 8; ++i) out.push_back(char(bits >> (8 * i)));
}
void fixed32(std::string& out, int field, float v) {
  key(out, field, 5);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  for (int i = 0; i < 4; ++i) out.push_back(char(bits >> (8 * i)));
}
void bytes(std::string& out, int field, const std::string& b) {
  key(out, field, 2);
  varint(out, b.size());
  out += b;
}
void int64(std::string& out, int field, int64_t v) {
  key(out, field, 0);
  varint(out, uint64_t(v));
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(int64_t step, const std::string* version, const std::string* summary) {
  std::string e;
  fixed64(e, 1, now_s());
  int64(e, 2, step);
  if (version) bytes(e, 3, *version);
  if (summary) bytes(e, 5, *summary);
  return e;
}

void flatten(TensorBoardWriter& w, const std::string& tag, int64_t step, const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(w, tag + "/" + k, step, x);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) flatten(w, fmt::format("{}/{}", tag, i), step, v[i]);
  } else if (v.is_boolean()) {
    w.scalar(tag, step, v.get<bool>() ? 1.0 : 0.0);
  } else if (v.is_number()) {
    w.scalar(tag, step, v.get<double>());
  }
}

}  // namespace

uint32_t tensorboard_masked_crc(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, double flush_every_s) : flush_every_s_(flush_every_s) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail_input("log.tensorboard: cannot create directory '{}' ({})", dir, ec ? ec.message() : "not a directory");
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  // a new file per process start: seconds (TensorBoard orders files by them), host, PID, microseconds
  const double t = now_s();
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}.{}.trident", int64_t(t), host, getpid(),
                                       int64_t(t * 1e6) % 1000000))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) fail_input("log.tensorboard: cannot create '{}' ({})", path_, std::strerror(errno));
  const std::string version = "brain.Event:2";
  write_event(event(0, &version, nullptr));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) flush(), std::fclose(file_);
}

void TensorBoardWriter::write_event(const std::string& e) {
  char header[12];
  const uint64_t n = e.size();
  for (int i = 0; i < 8; ++i) header[i] = char(n >> (8 * i));
  const uint32_t len_crc = tensorboard_masked_crc(header, 8), data_crc = tensorboard_masked_crc(e.data(), e.size());
  for (int i = 0; i < 4; ++i) header[8 + i] = char(len_crc >> (8 * i));
  char footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = char(data_crc >> (8 * i));
  std::fwrite(header, 1, sizeof header, file_);
  std::fwrite(e.data(), 1, e.size(), file_);
  std::fwrite(footer, 1, sizeof footer, file_);
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count() >= flush_every_s_) flush();
}

void TensorBoardWriter::flush() {
  std::fflush(file_);
  last_flush_ = std::chrono::steady_clock::now();
}

bool TensorBoardWriter::ok() {
  flush();
  return !std::ferror(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  // Summary { repeated Value value = 1; } Value { string tag = 1; float simple_value = 2; }
  std::string v, s;
  bytes(v, 1, tag);
  fixed32(v, 2, float(value));
  bytes(s, 1, v);
  write_event(event(step, nullptr, &s));
}

void TensorBoardWriter::text(const std::string& tag, int64_t step, const std::string& text) {
  // Value { tag = 1; metadata = 9 { plugin_data = 1 { plugin_name = 1: "text" } };
  //         tensor = 8 { dtype = 1: DT_STRING (7); tensor_shape = 2: {}; string_val = 8 } }
  std::string plugin, metadata, tensor, shape, v, s;
  bytes(plugin, 1, "text");
  bytes(metadata, 1, plugin);
  int64(tensor, 1, 7);
  bytes(tensor, 2, shape);
  bytes(tensor, 8, text);
  bytes(v, 1, tag);
  bytes(v, 8, tensor);
  bytes(v, 9, metadata);
  bytes(s, 1, v);
  write_event(event(step, nullptr, &s));
}

void TensorBoardWriter::metrics(const nlohmann::ordered_json& record) {
  if (!record.contains("type") || !record.contains("step") || !record["step"].is_number()) return;
  const std::string type = record["type"].get<std::string>();
  const int64_t step = record["step"].get<int64_t>();
  for (const auto& [k, x] : record.items())
    if (k != "type" && k != "step" && k != "time") flatten(*this, type + "/" + k, step, x);  // the clock: no curve
}

}  // namespace trident::launch
