// Indexed datasets: round trip, every corruption a clear error naming the
// file and offset, atomic writes; `prepare` on text; the Markov source's
// entropy and determinism.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/data/dataset.hpp"
#include "core/data/dataset_record.hpp"
#include "core/data/prepare.hpp"
#include "core/data/sample_index.hpp"
#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"
#include "tests/test_util.hpp"

namespace fs = std::filesystem;

namespace trident {

std::string slurp(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Which dataset blend sample k of weights {3, 1} comes from: a (true) or b.
bool order_of_two(uint64_t k) {
  static const auto order = blend_order({0.75, 0.25}, 400);
  return order[k] == 0;
}

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

// The record names its tokenizer by kind; a kind prepare never writes is
// refused with the file and the key, not carried on as a string.
TEST_F(Data, ARecordOfAnUnknownTokenizerKindIsRefused) {
  const std::string txt = path("in.txt");
  std::ofstream(txt) << "One paragraph.\n\nAnother one.\n\nA third.\n\nAnd a fourth.\n";
  launch::prepare({{txt}, path("k"), "char", 0.25});
  const launch::DatasetRecord rec = launch::read_dataset_record(path("k_train"));
  ASSERT_TRUE(rec.tokenizer.has_value());
  EXPECT_EQ(*rec.tokenizer, TokenizerKind::chars);
  std::string meta = slurp(path("k.meta.json"));
  const size_t at = meta.find("\"char\"");
  ASSERT_NE(at, std::string::npos) << meta;
  meta.replace(at, 6, "\"wordpiece\"");
  std::ofstream(path("k.meta.json")) << meta;
  try {
    launch::read_dataset_record(path("k_train"));
    ADD_FAILURE() << "a record of an unknown tokenizer kind was read";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("k.meta.json: key 'tokenizer.kind': expected byte | char | hf-bpe | sentencepiece, found "
                        "'wordpiece'"),
              std::string::npos)
        << what;
  }
}

TEST_F(Data, PrepareByteAndChar) {
  std::string txt = path("in.txt");
  std::ofstream(txt) << "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\nFirst:\nYou are all resolved.\n\n"
                        "Second:\nWe know't.\n";
  launch::PrepareOptions o{{txt}, path("sh"), "byte", 0.25};
  launch::prepare(o);
  // an existing dataset is not replaced without --force
  const std::string before = slurp(path("sh_train.bin"));
  std::ofstream(txt) << "Other text.\n\nMore.\n\nAnd more.\n\nEnd.\n";
  try {
    launch::prepare(o);
    ADD_FAILURE() << "an existing dataset was replaced";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pass --force to replace it"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(path("sh_train.bin")), before);
  o.force = true;
  launch::prepare(o);
  EXPECT_NE(slurp(path("sh_train.bin")), before);
  std::ofstream(txt) << "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\nFirst:\nYou are all resolved.\n\n"
                        "Second:\nWe know't.\n";
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

// A dataset whose tokens are their own positions in the concatenated stream
// (i32), in documents of 1..49 tokens: a sample's tokens say where it came from.
std::string write_positions(const std::string& prefix, int64_t docs, uint64_t seed) {
  IndexedDatasetWriter w(prefix, TokenDType::i32);
  int32_t next = 0;
  uint64_t x = seed;
  for (int64_t d = 0; d < docs; ++d) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::vector<int32_t> doc(size_t(1 + (x >> 33) % 49));
    for (auto& t : doc) t = next++;
    w.add_sequence(doc.data(), int64_t(doc.size()));
    w.end_document();
  }
  w.finish();
  return prefix;
}

// Every token of the split is a target exactly once per epoch, bar the
// first of the epoch's stream and the tail shorter than a sample; samples
// are consecutive seq_len + 1 windows over whole shuffled documents; each
// epoch has its own order.
TEST_F(Data, SampleIndexUsesEveryTokenOncePerEpoch) {
  const std::string p = write_positions(path("pos"), 300, 7);
  IndexedDataset d(p);
  const int64_t seq = 16;
  SampleIndex idx(d, 1234, seq, 3 * ((d.num_tokens() - 1) / seq), IndexBuild{});
  const int64_t S = idx.samples_per_epoch();
  ASSERT_EQ(S, (d.num_tokens() - 1) / seq);
  ASSERT_EQ(idx.epochs(), 3);
  std::vector<int32_t> sample(size_t(seq + 1));
  std::vector<std::vector<int32_t>> first_targets(3);
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<int> seen(size_t(d.num_tokens()), 0);
    for (int64_t j = 0; j < S; ++j) {
      idx.sample(uint64_t(e * S + j), sample.data());
      for (int64_t t = 1; t <= seq; ++t) ++seen[size_t(sample[size_t(t)])];
      if (j < 8) first_targets[size_t(e)].push_back(sample[1]);
      // within a document the tokens are consecutive positions
      for (int64_t t = 1; t <= seq; ++t)
        if (sample[size_t(t)] != sample[size_t(t - 1)] + 1) {
          // a document boundary: the previous token ended a document, this one starts one
          bool starts = false;
          for (int64_t k = 0; k < d.num_documents() && !starts; ++k) starts = d.doc_offset(k) == sample[size_t(t)];
          ASSERT_TRUE(starts) << "epoch " << e << " sample " << j << " jumps into the middle of a document";
        }
    }
    int64_t once = 0, missing = 0;
    for (int c : seen) {
      ASSERT_LE(c, 1) << "a token is a target twice in epoch " << e;
      once += c, missing += c == 0;
    }
    EXPECT_EQ(once, S * seq);
    EXPECT_LE(missing, seq) << "epoch " << e << ": more than the first token and the tail left out";
  }
  EXPECT_NE(first_targets[0], first_targets[1]) << "epochs share their order";
  EXPECT_NE(first_targets[1], first_targets[2]);
}

// The batch of step s is a pure function of (seed, k): a second index
// (loaded from the cache), and one built for more epochs, give the same
// samples; a cache that no longer matches its data is rebuilt, and said so.
TEST_F(Data, SampleIndexIsCachedPureAndRebuiltOnChange) {
  const std::string p = write_positions(path("pos"), 200, 11);
  std::vector<int32_t> a(17), b(17);
  std::vector<std::vector<int32_t>> first;
  {
    IndexedDataset d(p);
    SampleIndex built(d, 5, 16, 50, IndexBuild{});
    EXPECT_FALSE(built.loaded_from_cache());
    ASSERT_TRUE(fs::exists(built.path())) << built.path();
    SampleIndex cached(d, 5, 16, 50, IndexBuild{});
    EXPECT_TRUE(cached.loaded_from_cache());
    SampleIndex longer(d, 5, 16, 5 * built.samples_per_epoch(), IndexBuild{});
    EXPECT_NE(longer.path(), built.path());
    SampleIndex other_seed(d, 6, 16, 50, IndexBuild{});
    int differ = 0;
    for (uint64_t k = 0; k < uint64_t(built.samples_per_epoch()); ++k) {
      built.sample(k, a.data()), cached.sample(k, b.data());
      ASSERT_EQ(a, b) << "sample " << k;
      longer.sample(k, b.data());
      ASSERT_EQ(a, b) << "sample " << k << " of the longer index";
      other_seed.sample(k, b.data());
      differ += a != b;
      first.push_back(a);
    }
    EXPECT_GT(differ, 0);
  }
  // new data under the same prefix: the cache is stale
  write_positions(p, 200, 12);
  IndexedDataset d2(p);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  SampleIndex rebuilt(d2, 5, 16, 50, IndexBuild{});
  const std::string log = testing::internal::GetCapturedStdout() + testing::internal::GetCapturedStderr();
  EXPECT_FALSE(rebuilt.loaded_from_cache());
  EXPECT_NE(log.find("rebuilding"), std::string::npos) << log;
  rebuilt.sample(0, a.data());
  for (int64_t t = 1; t < 17; ++t) ASSERT_LT(a[size_t(t)], d2.num_tokens());
}

// Blends: at every prefix of the run each dataset's share of the samples is
// within one sample of its weight; the sampler draws from the datasets in
// that order and counts them.
TEST_F(Data, BlendSharesMatchWeightsAtEveryPrefix) {
  const std::vector<double> w = {0.5, 0.3, 0.2};
  const auto order = blend_order(w, 10000);
  std::vector<int64_t> c(3, 0);
  for (size_t k = 0; k < order.size(); ++k) {
    ++c[order[k]];
    for (size_t i = 0; i < 3; ++i)
      ASSERT_LE(std::abs(double(c[i]) - w[i] * double(k + 1)), 1.0) << "dataset " << i << " after " << k + 1;
  }
  // through the sampler: tokens say which dataset a sample came from
  const std::string a = write_positions(path("a"), 100, 1), b = write_positions(path("b"), 100, 2);
  DatasetSpec spec;
  spec.train = {{a, 3}, {b, 1}};
  spec.sample_len = 9, spec.seed = 3, spec.train_samples = 400;
  auto sampler = make_dataset_sampler(spec, IndexBuild{});
  EXPECT_EQ(sampler->train_samples_per_source(400), (std::vector<int64_t>{300, 100}));
  EXPECT_EQ(sampler->train_samples_per_source(4), (std::vector<int64_t>{3, 1}));
  IndexedDataset da(a);
  SampleIndex ia(da, 3, 8, 300, IndexBuild{});
  std::vector<int32_t> s(9), t(9);
  int64_t from_a = 0;
  for (uint64_t k = 0; k < 400; ++k) {
    sampler->sample(k, false, 9, s.data());
    if (order_of_two(k)) {
      ia.sample(uint64_t(from_a++), t.data());
      ASSERT_EQ(s, t) << "blend sample " << k << " is not dataset a's next sample";
    }
  }
  EXPECT_EQ(from_a, 300);
}

// JSONL over several files (a glob), gzip- and zstd-compressed, gives the
// same dataset as the plain files, whatever the number of workers; a bad
// line is an error naming FILE:LINE, or counted with --skip-bad-lines;
// nothing is left behind on failure.
TEST_F(Data, PrepareJsonlCompressedGlobsAndBadLines) {
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += "{\"text\": \"document " + std::to_string(i) + " \\u00e9t\\u00e9\", \"n\": 1}\n";
  std::ofstream(path("a.jsonl")) << text;
  std::ofstream(path("b.jsonl")) << "\n" << text;  // a blank line is skipped
  ASSERT_EQ(
      std::system(
          ("gzip -k " + path("a.jsonl") + " && zstd -q " + path("b.jsonl") + " -o " + path("b.jsonl.zst")).c_str()),
      0);
  launch::PrepareOptions o;
  o.inputs = {path("a.jsonl"), path("b.jsonl")}, o.out = path("plain"), o.tokenizer = "byte", o.valid_fraction = 0.1;
  launch::prepare(o);
  o.inputs = {path("a.jsonl.gz"), path("b.jsonl.zst")}, o.out = path("packed"), o.workers = 3;
  launch::prepare(o);
  o.inputs = {path("*.jsonl")}, o.out = path("globbed"), o.workers = 2;
  launch::prepare(o);
  for (const char* split : {"_train", "_valid"})
    for (const char* ext : {".bin", ".idx"}) {
      EXPECT_EQ(slurp(path("plain") + split + ext), slurp(path("packed") + split + ext)) << split << ext;
      EXPECT_EQ(slurp(path("plain") + split + ext), slurp(path("globbed") + split + ext)) << split << ext;
    }
  IndexedDataset tr(path("plain_train")), va(path("plain_valid"));
  EXPECT_EQ(tr.num_documents() + va.num_documents(), 6000);
  EXPECT_EQ(va.num_documents(), 600);
  const auto meta = nlohmann::json::parse(slurp(path("plain.meta.json")));
  EXPECT_EQ(meta["splits"]["valid"]["documents"], 600);
  EXPECT_EQ(meta["tokenizer"]["kind"], "byte");

  std::ofstream(path("bad.jsonl"))
      << "{\"text\": \"ok\"}\n{\"text\": 3}\nnot json\n{\"body\": \"x\"}\n{\"text\": \"fine\"}\n";
  o.inputs = {path("bad.jsonl")}, o.out = path("bad"), o.valid_fraction = 0;
  try {
    launch::prepare(o);
    FAIL() << "a bad line was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: 'text' is number, expected a string"), std::string::npos)
        << e.what();
  }
  for (auto& f : fs::directory_iterator(dir_))
    EXPECT_EQ(f.path().filename().string().rfind("bad", 0) == 0 && f.path().filename() != "bad.jsonl", false)
        << f.path() << " left behind";
  o.skip_bad_lines = true;
  launch::prepare(o);
  EXPECT_EQ(IndexedDataset(path("bad_train")).num_documents(), 2);
  EXPECT_EQ(nlohmann::json::parse(slurp(path("bad.meta.json")))["bad_lines_skipped"], 3);
}

// Every input byte is accounted for: documents and tokens in = documents and
// tokens out (train + valid + skipped, with reasons), for inputs whose last,
// first or only document is larger than every internal buffer (1 MiB reads,
// 1 MiB encoding batches, 256 KiB gzip buffer), over 1-3 workers and every
// input format; each document comes back byte for byte, in its split.
TEST_F(Data, PrepareAccountsForEveryDocumentAndToken) {
  std::string big;  // 2.5 MiB, single newlines only (one text paragraph, one line)
  for (size_t i = 0; big.size() < (5u << 19); ++i) big += (i % 97 == 96) ? ' ' : char('a' + (i * 7) % 26);
  const std::vector<std::string> small = {"first small document", "second one", "", "the third, after an empty one"};
  std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"last", {small[0], small[1], small[2], small[3], big}},
      {"first", {big, small[0], small[1], small[3]}},
      {"only", {big}},
      {"two_big", {big, big + "b"}}};
  struct Format {
    std::string ext, compress;
    bool lines;
  };
  const std::vector<Format> formats = {{"txt", "", false},       {"txt", "", true},        {"jsonl", "", false},
                                       {"jsonl", "gzip", false}, {"jsonl", "zstd", false}, {"txt", "zstd", false}};
  int cases = 0;
  for (const auto& [layout, docs] : layouts)
    for (const Format& f : formats) {
      const bool jsonl = f.ext == "jsonl";
      std::string input = path(layout + "." + f.ext);
      {
        std::ofstream out(input, std::ios::binary);
        for (const auto& d : docs) {
          if (jsonl)
            out << nlohmann::json({{"text", d}}).dump() << "\n";
          else if (f.lines)
            out << d << "\n";
          else if (!d.empty())
            out << d << "\n\n";
        }
      }
      if (f.compress == "gzip") {
        ASSERT_EQ(std::system(("gzip -f " + input).c_str()), 0);
        input += ".gz";
      } else if (f.compress == "zstd") {
        ASSERT_EQ(std::system(("zstd -q -f --rm " + input + " -o " + input + ".zst").c_str()), 0);
        input += ".zst";
      }
      // what prepare must find: documents as the format defines them
      std::vector<std::string> want;
      for (const auto& d : docs) {
        if (!jsonl && d.empty()) continue;  // text: no paragraph; lines: a blank line is no document
        want.push_back(jsonl || f.lines ? d : d + "\n\n");
      }
      int64_t want_tokens = 0, want_empty = 0;
      for (const auto& d : want) want_tokens += int64_t(d.size()), want_empty += d.empty();
      for (int workers = 1; workers <= 3; ++workers) {
        const std::string what =
            fmt::format("{} {}{} {}, {} worker(s)", layout, f.ext, f.lines ? " (lines)" : "", f.compress, workers);
        launch::PrepareOptions o;
        o.inputs = {input}, o.out = path("acc"), o.tokenizer = "byte", o.eod_token = "none", o.force = true;
        o.valid_fraction = want.size() > 2 ? 0.25 : 0, o.workers = workers, o.doc_per_line = f.lines;
        launch::prepare(o);
        const auto meta = nlohmann::json::parse(slurp(path("acc.meta.json")));
        const auto& sp = meta["splits"];
        EXPECT_EQ(meta["documents_read"], int64_t(want.size())) << what;
        EXPECT_EQ(meta["tokens"], want_tokens) << what;
        EXPECT_EQ(meta["skipped"]["empty_documents"], want_empty) << what;
        EXPECT_EQ(sp["train"]["documents"].get<int64_t>() + sp["valid"]["documents"].get<int64_t>() +
                      meta["skipped"]["empty_documents"].get<int64_t>() + meta["skipped"]["bad_lines"].get<int64_t>(),
                  int64_t(want.size()))
            << what;
        EXPECT_EQ(sp["train"]["tokens"].get<int64_t>() + sp["valid"]["tokens"].get<int64_t>(), want_tokens) << what;
        // byte for byte, each document in the split its index puts it in
        IndexedDataset tr(path("acc_train"));
        std::optional<IndexedDataset> va;
        if (o.valid_fraction > 0) va.emplace(path("acc_valid"));
        int64_t next[2] = {0, 0};
        for (size_t i = 0; i < want.size(); ++i) {
          const bool valid = std::floor(double(i + 1) * o.valid_fraction) > std::floor(double(i) * o.valid_fraction);
          if (want[i].empty()) continue;
          const IndexedDataset& d = valid ? *va : tr;
          const int64_t k = next[valid]++;
          ASSERT_LT(k, d.num_documents()) << what << ": document " << i << " is missing";
          std::vector<int32_t> ids(size_t(d.doc_tokens(k)));
          d.read(d.doc_offset(k), int64_t(ids.size()), ids.data());
          const std::string got(ids.begin(), ids.end());
          EXPECT_TRUE(got == want[i]) << what << ": document " << i << " differs (" << got.size() << " vs "
                                      << want[i].size() << " bytes)";
        }
        EXPECT_EQ(next[0], tr.num_documents()) << what;
        if (va) EXPECT_EQ(next[1], va->num_documents()) << what;
        ++cases;
      }
    }
  EXPECT_EQ(cases, 4 * 6 * 3);
}

// Tokenizer files: a token id past 2^24 is refused naming $.model.vocab and
// the bound (not a vocabulary of 2 billion entries); two tokens with one id
// (ambiguous decoding) are refused naming both.
TEST_F(Data, TokenizerIdsAreBoundedAndUnique) {
  auto tokenizer = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0, extra = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      vocab[launch::encode_utf8(printable ? uint32_t(b) : uint32_t(256 + extra++))] = b;
    }
    nlohmann::json t = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"decoder", {{"type", "ByteLevel"}}}};
    edit(t);
    std::ofstream(path("tok.json")) << t.dump();
    try {
      launch::Tokenizer::from_file(path("tok.json"));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(tokenizer([](nlohmann::json&) {}), "accepted");
  std::string e = tokenizer([](nlohmann::json& t) { t["model"]["vocab"]["<sparse>"] = 2000000000; });
  EXPECT_NE(e.find("$.model.vocab.<sparse>: expected a token id in [0, 16777216), found 2000000000"), std::string::npos)
      << e;
  e = tokenizer([](nlohmann::json& t) { t["model"]["vocab"]["<dup>"] = 65; });
  EXPECT_NE(e.find("$.model.vocab: tokens '"), std::string::npos) << e;
  EXPECT_NE(e.find("both have id 65 (decoding would be ambiguous)"), std::string::npos) << e;
  EXPECT_NE(e.find("<dup>"), std::string::npos) << e;
  e = tokenizer([](nlohmann::json& t) {
    t["added_tokens"] = {{{"id", 300}, {"content", "<a>"}, {"special", true}},
                         {{"id", 300}, {"content", "<b>"}, {"special", true}}};
  });
  EXPECT_NE(e.find("added tokens '<a>' and '<b>' both have id 300"), std::string::npos) << e;
  e = tokenizer([](nlohmann::json& t) { t["added_tokens"] = {{{"id", -1}, {"content", "<a>"}, {"special", true}}}; });
  EXPECT_NE(e.find("$.added_tokens[0].id: expected a token id in [0, 16777216), found -1"), std::string::npos) << e;
}

// A vocabulary over 65536 entries is stored as i32 (u16 otherwise): a
// byte-level tokenizer.json with 70,000 tokens and no merges.
TEST_F(Data, PrepareStoresLargeVocabulariesAsInt32) {
  nlohmann::json vocab = nlohmann::json::object();
  std::string mapped;
  for (int b = 0, extra = 0; b < 256; ++b) {  // GPT-2's byte -> character mapping
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
    vocab[launch::encode_utf8(cp)] = b;
  }
  for (int i = 256; i < 70000; ++i) vocab["<extra_" + std::to_string(i) + ">"] = i;
  nlohmann::json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"decoder", {{"type", "ByteLevel"}}},
                        {"added_tokens", {{{"id", 69999}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  std::ofstream(path("big.json")) << tok.dump();
  std::ofstream(path("in.txt")) << "Hi there.\n\nAgain!\n";
  launch::PrepareOptions o;
  o.inputs = {path("in.txt")}, o.out = path("big"), o.tokenizer = path("big.json"), o.valid_fraction = 0;
  launch::prepare(o);
  IndexedDataset d(path("big_train"));
  EXPECT_EQ(d.dtype(), TokenDType::i32);
  EXPECT_EQ(d.token(0), 'H');
  EXPECT_EQ(d.token(d.doc_offset(1) - 1), 69999) << "EOD after the first document";
  EXPECT_EQ(nlohmann::json::parse(slurp(path("big.meta.json")))["dtype"], "i32");
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
