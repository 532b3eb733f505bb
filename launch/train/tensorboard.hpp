// TensorBoard event files (`log.tensorboard: DIR`), written from rank 0.
// The format: a file of records, each `uint64 length, uint32 masked CRC-32C
// of the length, data, uint32 masked CRC-32C of the data`, each data an
// `Event` protocol buffer (wall_time, step, file_version or a Summary of
// tagged values). The few messages needed are encoded here (varints and
// length-delimited fields): docs/metrics.md#tensorboard says why no protobuf
// library. Every process start writes a new file, so a resumed run appends
// one and TensorBoard joins them into one curve by step.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace trident::launch {

class TensorBoardWriter {
 public:
  // Creates DIR (and missing parents) and a new events file in it:
  // InputError naming the key and the directory when it cannot.
  explicit TensorBoardWriter(const std::string& dir, double flush_every_s = 5.0);
  ~TensorBoardWriter();  // flushes
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, int64_t step, double value);
  void text(const std::string& tag, int64_t step, const std::string& text);
  // Every number (and boolean, as 0 or 1) of a metrics record
  // (docs/metrics.md) as a scalar tagged TYPE/KEY[/SUBKEY...] at its "step";
  // null values (non-finite) are skipped.
  void metrics(const nlohmann::ordered_json& record);
  void flush();
  bool ok();  // flushed, and every write so far succeeded
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);  // an encoded Event: one record
  std::string path_;
  std::FILE* file_ = nullptr;
  double flush_every_s_;
  std::chrono::steady_clock::time_point last_flush_;
};

// The masked CRC-32C of the record format.
uint32_t tensorboard_masked_crc(const void* data, size_t n);

}  // namespace trident::launch
