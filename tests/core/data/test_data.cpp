// Indexed datasets: round trip, every corruption a clear error naming the
// file and offset, atomic writes; sample indexes and blends; the Markov source's
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
#include "tests/core/data/data_fixture.hpp"
#include "tests/test_util.hpp"

namespace fs = std::filesystem;

namespace trident {

// Which dataset blend sample k of weights {3, 1} comes from: a (true) or b.
bool order_of_two(uint64_t k) {
  static const auto order = data::blend_order({0.75, 0.25}, 400);
  return order[k] == 0;
}

TEST_F(Data, RoundTrip) {
  for (data::TokenDType dt :
       {data::TokenDType::u8, data::TokenDType::u16, data::TokenDType::i32, data::TokenDType::i64}) {
    std::string p = write_sample(dt);
    data::IndexedDataset d(p);
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
    data::IndexedDatasetWriter w(path("partial"), data::TokenDType::u16);
    std::vector<int32_t> a = {1, 2};
    w.add_sequence(a.data(), 2);
  }  // destroyed without finish(), as after an exception
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A record whose splits lack the one asked for (an edited or older record)
// reads with no id bound for it, never past the end of the JSON object (the
// fuzzer's heap-use-after-free input, tests/fuzz/regressions/dataset_record).
TEST_F(Data, ARecordWithoutTheSplitAskedForHasNoIdBound) {
  std::ofstream(path("s.meta.json"))
      << R"({"splits": {"train": {"max_id": 51}}, "tokenizer": {"kind": "char", "vocab": 52}})";
  EXPECT_EQ(data::read_dataset_record(path("s_train")).max_id, 51);
  EXPECT_EQ(data::read_dataset_record(path("s_valid")).max_id, -1);
  std::ofstream(path("s.meta.json")) << R"({"splits": 3, "tokenizer": {"kind": "char", "vocab": 52}})";
  EXPECT_EQ(data::read_dataset_record(path("s_valid")).max_id, -1);
}

// The record names its tokenizer by kind; a kind prepare never writes is
// refused with the file and the key, not carried on as a string.
TEST_F(Data, ARecordOfAnUnknownTokenizerKindIsRefused) {
  const std::string txt = path("in.txt");
  std::ofstream(txt) << "One paragraph.\n\nAnother one.\n\nA third.\n\nAnd a fourth.\n";
  data::prepare({{txt}, path("k"), "char", 0.25});
  const data::DatasetRecord rec = data::read_dataset_record(path("k_train"));
  ASSERT_TRUE(rec.tokenizer.has_value());
  EXPECT_EQ(*rec.tokenizer, TokenizerKind::chars);
  std::string meta = slurp(path("k.meta.json"));
  const size_t at = meta.find("\"char\"");
  ASSERT_NE(at, std::string::npos) << meta;
  meta.replace(at, 6, "\"wordpiece\"");
  std::ofstream(path("k.meta.json")) << meta;
  try {
    data::read_dataset_record(path("k_train"));
    ADD_FAILURE() << "a record of an unknown tokenizer kind was read";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("k.meta.json: key 'tokenizer.kind': expected byte | char | hf-bpe | sentencepiece, found "
                        "'wordpiece'"),
              std::string::npos)
        << what;
  }
}

// A dataset whose tokens are their own positions in the concatenated stream
// (i32), in documents of 1..49 tokens: a sample's tokens say where it came from.
std::string write_positions(const std::string& prefix, int64_t docs, uint64_t seed) {
  data::IndexedDatasetWriter w(prefix, data::TokenDType::i32);
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
  data::IndexedDataset d(p);
  const int64_t seq = 16;
  data::SampleIndex idx(d, 1234, seq, 3 * ((d.num_tokens() - 1) / seq), data::IndexBuild{});
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
    data::IndexedDataset d(p);
    data::SampleIndex built(d, 5, 16, 50, data::IndexBuild{});
    EXPECT_FALSE(built.loaded_from_cache());
    ASSERT_TRUE(fs::exists(built.path())) << built.path();
    data::SampleIndex cached(d, 5, 16, 50, data::IndexBuild{});
    EXPECT_TRUE(cached.loaded_from_cache());
    data::SampleIndex longer(d, 5, 16, 5 * built.samples_per_epoch(), data::IndexBuild{});
    EXPECT_NE(longer.path(), built.path());
    data::SampleIndex other_seed(d, 6, 16, 50, data::IndexBuild{});
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
  data::IndexedDataset d2(p);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  data::SampleIndex rebuilt(d2, 5, 16, 50, data::IndexBuild{});
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
  const auto order = data::blend_order(w, 10000);
  std::vector<int64_t> c(3, 0);
  for (size_t k = 0; k < order.size(); ++k) {
    ++c[order[k]];
    for (size_t i = 0; i < 3; ++i)
      ASSERT_LE(std::abs(double(c[i]) - w[i] * double(k + 1)), 1.0) << "dataset " << i << " after " << k + 1;
  }
  // through the sampler: tokens say which dataset a sample came from
  const std::string a = write_positions(path("a"), 100, 1), b = write_positions(path("b"), 100, 2);
  data::DatasetSpec spec;
  spec.train = {{a, 3}, {b, 1}};
  spec.sample_len = 9, spec.seed = 3, spec.train_samples = 400;
  auto sampler = data::make_dataset_sampler(spec, data::IndexBuild{});
  EXPECT_EQ(sampler->train_samples_per_source(400), (std::vector<int64_t>{300, 100}));
  EXPECT_EQ(sampler->train_samples_per_source(4), (std::vector<int64_t>{3, 1}));
  data::IndexedDataset da(a);
  data::SampleIndex ia(da, 3, 8, 300, data::IndexBuild{});
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

TEST(Markov, EntropyAndDeterminism) {
  data::MarkovSource src(32, 2, 4, 0.7, 1);
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
