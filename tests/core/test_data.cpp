// Indexed datasets: round trip, every corruption a clear error naming the
// file and offset, atomic writes; `prepare` on text; the Markov source's
// entropy and determinism.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dataset.hpp"
#include "core/error.hpp"
#include "launch/prepare.hpp"
#include "launch/trainer.hpp"
#include "tests/test_util.hpp"

namespace fs = std::filesystem;

namespace trident {

class Data : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident_data_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }

  std::string write_sample(TokenDType dt = TokenDType::u16) {
    std::string prefix = path("ds");
    IndexedDatasetWriter w(prefix, dt);
    std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7}, c = {250, 9, 10};
    w.add_sequence(a.data(), 5);
    w.end_document();
    w.add_sequence(b.data(), 2);
    w.add_sequence(c.data(), 3);
    w.end_document();
    w.finish();
    return prefix;
  }
  std::string error_opening(const std::string& prefix) {
    try {
      IndexedDataset d(prefix);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }
  void patch(const std::string& file, size_t offset, const std::vector<uint8_t>& bytes) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(offset));
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  fs::path dir_;
};

TEST_F(Data, RoundTrip) {
  for (TokenDType dt : {TokenDType::u8, TokenDType::u16, TokenDType::i32, TokenDType::i64}) {
    std::string p = write_sample(dt);
    IndexedDataset d(p);
    EXPECT_EQ(d.num_sequences(), 3);
    EXPECT_EQ(d.num_documents(), 2);
    EXPECT_EQ(d.num_tokens(), 10);
    EXPECT_EQ(d.sizes(), (std::vector<int32_t>{5, 2, 3}));
    EXPECT_EQ(d.doc_index(), (std::vector<int64_t>{0, 1, 3}));
    std::vector<int32_t> all(10);
    d.read(0, 10, all.data());
    EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 250, 9, 10}));
    EXPECT_EQ(d.max_token(), 250);
    EXPECT_FALSE(fs::exists(p + ".bin.tmp"));
  }
}

TEST_F(Data, MegatronHeaderLayout) {
  std::string p = write_sample();
  std::ifstream f(p + ".idx", std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(b.size(), 9 + 8 + 1 + 8 + 8 + 3 * 4 + 3 * 8 + 3 * 8u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 7), "MMIDIDX");
  EXPECT_EQ(b[9], 1);   // version, little-endian u64
  EXPECT_EQ(b[17], 8);  // dtype code uint16
  EXPECT_EQ(b[18], 3);  // sequence count
  EXPECT_EQ(b[26], 3);  // document index entries (docs + 1)
}

TEST_F(Data, BadMagic) {
  std::string p = write_sample();
  patch(p + ".idx", 0, {'X'});
  std::string e = error_opening(p);
  EXPECT_NE(e.find(p + ".idx: bad magic at offset 0"), std::string::npos) << e;
}
TEST_F(Data, BadVersion) {
  std::string p = write_sample();
  patch(p + ".idx", 9, {2});
  EXPECT_NE(error_opening(p).find("offset 9: expected version 1, found 2"), std::string::npos) << error_opening(p);
}
TEST_F(Data, BadDtype) {
  std::string p = write_sample();
  patch(p + ".idx", 17, {7});
  EXPECT_NE(error_opening(p).find("offset 17: expected token dtype code"), std::string::npos);
  EXPECT_NE(error_opening(p).find("found 7"), std::string::npos);
}
TEST_F(Data, TruncatedIndex) {
  std::string p = write_sample();
  fs::resize_file(p + ".idx", 40);
  std::string e = error_opening(p);
  EXPECT_NE(e.find("truncated index at offset 34"), std::string::npos) << e;
}
TEST_F(Data, TruncatedBin) {
  std::string p = write_sample();
  fs::resize_file(p + ".bin", 15);
  std::string e = error_opening(p);
  EXPECT_NE(e.find(p + ".bin: expected 20 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("found 15 bytes"), std::string::npos) << e;
}
TEST_F(Data, BadPointer) {
  std::string p = write_sample();
  patch(p + ".idx", 34 + 12 + 8, {99});  // second pointer
  std::string e = error_opening(p);
  EXPECT_NE(e.find("sequence 1 pointer: expected byte offset 10, found 99"), std::string::npos) << e;
}
TEST_F(Data, TrailingBytes) {
  std::string p = write_sample();
  std::ofstream(p + ".idx", std::ios::app | std::ios::binary) << "junk";
  EXPECT_NE(error_opening(p).find("4 unexpected trailing bytes"), std::string::npos);
}
TEST_F(Data, MissingFiles) { EXPECT_NE(error_opening(path("nope")).find("nope.idx: cannot open"), std::string::npos); }

TEST_F(Data, UnfinishedWriterLeavesNothing) {
  {
    IndexedDatasetWriter w(path("partial"), TokenDType::u16);
    std::vector<int32_t> a = {1, 2};
    w.add_sequence(a.data(), 2);
  }  // destroyed without finish(), as after an exception
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(Data, PrepareByteAndChar) {
  std::string txt = path("in.txt");
  std::ofstream(txt) << "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\nFirst:\nYou are all resolved.\n\n"
                        "Second:\nWe know't.\n";
  launch::PrepareOptions o{{txt}, path("sh"), "byte", 0.25};
  launch::prepare(o);
  IndexedDataset tr(path("sh_train")), va(path("sh_valid"));
  EXPECT_EQ(tr.num_documents(), 3);
  EXPECT_EQ(va.num_documents(), 1);
  EXPECT_EQ(tr.token(0), 'F');
  EXPECT_EQ(tr.num_tokens() + va.num_tokens(), int64_t(fs::file_size(txt)));
  o.tokenizer = "char", o.out = path("shc");
  launch::prepare(o);
  IndexedDataset trc(path("shc_train"));
  std::ifstream v(path("shc.vocab.json"));
  std::string vocab((std::istreambuf_iterator<char>(v)), std::istreambuf_iterator<char>());
  // a JSON list of one-character strings; newline is the smallest code point
  const auto pieces = nlohmann::json::parse(vocab);
  ASSERT_TRUE(pieces.is_array());
  EXPECT_EQ(pieces.at(0).get<std::string>(), "\n");
  EXPECT_LT(trc.max_token(), 40);
}

TEST_F(Data, PrepareRejectsBadInput) {
  std::string bad = path("bad.txt");
  std::ofstream(bad, std::ios::binary) << "ok\n\xff\xfe";
  launch::PrepareOptions o{{bad}, path("x"), "char", 0.1};
  try {
    launch::prepare(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 3: invalid UTF-8"), std::string::npos) << e.what();
  }
  o.inputs = {path("missing.txt")};
  EXPECT_THROW(launch::prepare(o), InputError);
  o.inputs = {bad}, o.tokenizer = "bpe";
  EXPECT_THROW(launch::prepare(o), InputError);
  // nothing was left behind
  for (auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename(), "bad.txt");
}

TEST(Markov, EntropyAndDeterminism) {
  MarkovSource src(32, 2, 4, 0.7, 1);
  double z = 1 + std::exp(-0.7) + std::exp(-1.4) + std::exp(-2.1), h = 0;
  for (int j = 0; j < 4; ++j) h -= std::exp(-0.7 * j) / z * std::log(std::exp(-0.7 * j) / z);
  EXPECT_NEAR(src.entropy_rate(), h, 1e-12);
  EXPECT_LT(src.entropy_rate(), 0.5 * std::log(32.0));
  std::vector<int32_t> a(65), b(65), c(65);
  src.sample(42, 0, 65, a.data());
  src.sample(42, 0, 65, b.data());
  src.sample(43, 0, 65, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // empirical next-token statistics match p: count which successor was taken
  std::vector<double> counts(4, 0);
  double total = 0, nll = 0;
  for (uint64_t i = 0; i < 300; ++i) {
    src.sample(i, 1, 65, a.data());
    for (int t = 2; t < 65; ++t) {
      for (int j = 0; j < 4; ++j)
        if (src.successor(a.data() + t - 2, j) == a[size_t(t)]) {
          counts[size_t(j)] += 1, nll -= std::log(src.probs()[size_t(j)]);
          break;
        }
      total += 1;
    }
  }
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(counts[size_t(j)] / total, src.probs()[size_t(j)], 0.02) << j;
  EXPECT_NEAR(nll / total, src.entropy_rate(), 0.03);
}

}  // namespace trident
