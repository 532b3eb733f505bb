// safetensors I/O: the reader reads a file written by the reference
// implementation (tests/model/reference/tiny.safetensors, from the `safetensors`
// package: tests/model/reference/make_safetensors.py), the writer's files read back
// bit for bit, every kind of damage is an InputError naming the file, the
// tensor and the offset, and a failed write leaves the old file untouched.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"

namespace trident {

namespace fs = std::filesystem;

const std::string kReference = std::string(TRIDENT_SOURCE_DIR) + "/tests/model/reference/tiny.safetensors";

std::string error_of(const std::string& path) {
  try {
    SafetensorsReader r(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A file with this header (padded to keep the data 8-aligned) and data bytes.
std::string with_header(const std::string& header, const std::string& data) {
  std::string h = header;
  while ((8 + h.size()) % 8) h += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint64_t(h.size()) >> (8 * i));
  return out + h + data;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("trident_safetensors_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  fs::path dir;
};

TEST_F(Safetensors, ReadsTheReferenceImplementationsFile) {
  SafetensorsReader r(kReference);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("step"), "7");
  ASSERT_EQ(r.entries().size(), 5u);
  EXPECT_EQ(r.at("a.weight").shape, (Shape{2, 3}));
  float a[6];
  r.read("a.weight", a);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a[i], 0.5f * float(i));
  uint16_t b[4];
  r.read("b", b);
  EXPECT_EQ(b[0], 0x3f80);  // bf16 1.0
  EXPECT_EQ(b[1], 0xc000);  // -2.0
  int32_t c[5];
  r.read("c", c);
  EXPECT_EQ(c[4], 4);
  double d[2];
  r.read("d", d);
  EXPECT_EQ(d[1], -7.5);
  EXPECT_EQ(r.at("e").dtype, DType::f16);
  float part[2];
  r.read_range("a.weight", 3, 2, part);  // elements 3 and 4
  EXPECT_EQ(part[0], 1.5f);
  EXPECT_EQ(part[1], 2.0f);
}

TEST_F(Safetensors, WriteThenReadIsExact) {
  std::vector<float> w = {1.5f, -2.25f, 3e-8f, 4e8f, 0.f, -0.f};
  std::vector<int32_t> ids = {7, -1, 123456};
  std::vector<double> x = {1.0 / 3.0};
  const uint32_t crc = write_safetensors(file("t.safetensors"),
                                         {{"model.w", DType::f32, {2, 3}, w.data()},
                                          {"ids", DType::i32, {3}, ids.data()},
                                          {"x \"quoted\\", DType::f64, {1, 1}, x.data()}},
                                         {{"step", "12"}, {"recipe", "a: {b: 1}"}});
  SafetensorsReader r(file("t.safetensors"));
  std::vector<float> w2(6);
  r.read("model.w", w2.data());
  EXPECT_EQ(0, std::memcmp(w.data(), w2.data(), sizeof(float) * 6));
  double x2 = 0;
  r.read("x \"quoted\\", &x2);
  EXPECT_EQ(x2, x[0]);
  EXPECT_EQ(r.metadata().at("recipe"), "a: {b: 1}");
  EXPECT_FALSE(fs::exists(file("t.safetensors.tmp")));
  // the data section starts 8-byte aligned
  const std::string bytes = bytes_of(file("t.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  // the checksum computed while writing is the file's
  EXPECT_EQ(crc, crc32c(bytes.data(), bytes.size()));
  EXPECT_EQ(crc, crc32c_file(file("t.safetensors")));
}

TEST_F(Safetensors, Crc32cKnownValues) {  // RFC 3720 check value and test vectors
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  // the running form over pieces equals the whole
  const std::string text = "Trident checkpoints are checked end to end";
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < text.size(); i += 5)
    c = crc32c_update(c, text.data() + i, std::min<size_t>(5, text.size() - i));
  EXPECT_EQ(c ^ 0xFFFFFFFFu, crc32c(text.data(), text.size()));
}

TEST_F(Safetensors, DamageIsAClearError) {
  const std::string good = bytes_of(kReference);
  struct Case {
    std::string name, bytes;
    std::vector<std::string> fragments;
  };
  const std::string t = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::vector<Case> cases = {
      {"empty", "", {"expected at least the 8-byte header length", "found a file of 0 bytes"}},
      {"truncated", good.substr(0, good.size() - 3), {"the file is truncated"}},
      {"trailing", good + "xyz", {"trailing bytes after the last tensor"}},
      {"huge header", std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", {"header length", "at offset 0"}},
      {"not json", with_header("{\"t\": [1, 2", "12345678"), {"is not valid JSON"}},
      {"unknown dtype",
       with_header("{\"t\":{\"dtype\":\"I8\",\"shape\":[8],\"data_offsets\":[0,8]}}", "12345678"),
       {"tensor 't'", "dtype expected one of", "found 'I8'"}},
      {"shape vs bytes",
       with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "12345678"),
       {"tensor 't'", "hold 8 bytes, expected 12"}},
      {"hole",
       with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "12345678"),
       {"tensor 't' starts at data offset 4, expected 0", "a hole"}},
      {"overlap",
       with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   "12345678"),
       {"starts at data offset 4, expected 8", "overlaps"}},
      {"missing field",
       with_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", "12345678"),
       {"tensor 't'", "data_offsets"}},
      {"good", with_header(t, "12345678"), {"no error"}},
  };
  for (const auto& c : cases) {
    put(file("bad.safetensors"), c.bytes);
    const std::string msg = error_of(file("bad.safetensors"));
    for (const auto& f : c.fragments) EXPECT_NE(msg.find(f), std::string::npos) << c.name << ": " << msg;
    if (c.name != "good") EXPECT_NE(msg.find(file("bad.safetensors")), std::string::npos) << c.name << ": " << msg;
  }
  SafetensorsReader r(kReference);
  try {
    r.read("nope", nullptr);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor named 'nope'"), std::string::npos);
  }
}

TEST_F(Safetensors, FailedWriteLeavesTheOldFile) {
  std::vector<float> v = {1, 2, 3};
  write_safetensors(file("keep.safetensors"), {{"v", DType::f32, {3}, v.data()}});
  const std::string before = bytes_of(file("keep.safetensors"));
  // a write into a missing directory fails before touching anything
  EXPECT_THROW(write_safetensors(file("nodir/x.safetensors"), {{"v", DType::f32, {3}, v.data()}}), Error);
  EXPECT_EQ(bytes_of(file("keep.safetensors")), before);
  // a disk that fills up, simulated by a file size limit (write fails with
  // EFBIG where a full disk gives ENOSPC): the writer removes its temporary
  std::vector<float> big(1 << 20, 1.0f);
  struct rlimit old;
  getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit lim = old;
  lim.rlim_cur = 1 << 16;
  signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &lim);
  EXPECT_THROW(write_safetensors(file("keep.safetensors"), {{"big", DType::f32, {1 << 20}, big.data()}}), Error);
  setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(bytes_of(file("keep.safetensors")), before) << "the previous file is intact";
  EXPECT_FALSE(fs::exists(file("keep.safetensors.tmp"))) << "no partial output left behind";
}

}  // namespace trident

namespace trident {
TEST(DType, HalfAndBfloat16ToFloat) {  // what import reads from F16 / BF16 files
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);               // largest half
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)) && f16_to_f32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)) && f16_to_f32(0x8000) == 0.0f);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
}
}  // namespace trident
