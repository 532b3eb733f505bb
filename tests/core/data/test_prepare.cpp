// `prepare`: text, JSONL and compressed inputs into indexed datasets, every
// document and token accounted for, bad input refused; the tokenizers' ids.
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

TEST_F(Data, PrepareByteAndChar) {
  std::string txt = path("in.txt");
  std::ofstream(txt) << "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\nFirst:\nYou are all resolved.\n\n"
                        "Second:\nWe know't.\n";
  data::PrepareOptions o{{txt}, path("sh"), "byte", 0.25};
  data::prepare(o);
  // an existing dataset is not replaced without --force
  const std::string before = slurp(path("sh_train.bin"));
  std::ofstream(txt) << "Other text.\n\nMore.\n\nAnd more.\n\nEnd.\n";
  try {
    data::prepare(o);
    ADD_FAILURE() << "an existing dataset was replaced";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pass --force to replace it"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(path("sh_train.bin")), before);
  o.force = true;
  data::prepare(o);
  EXPECT_NE(slurp(path("sh_train.bin")), before);
  std::ofstream(txt) << "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\nFirst:\nYou are all resolved.\n\n"
                        "Second:\nWe know't.\n";
  data::prepare(o);
  data::IndexedDataset tr(path("sh_train")), va(path("sh_valid"));
  EXPECT_EQ(tr.num_documents(), 3);
  EXPECT_EQ(va.num_documents(), 1);
  EXPECT_EQ(tr.token(0), 'F');
  EXPECT_EQ(tr.num_tokens() + va.num_tokens(), int64_t(fs::file_size(txt)));
  o.tokenizer = "char", o.out = path("shc");
  data::prepare(o);
  data::IndexedDataset trc(path("shc_train"));
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
  data::PrepareOptions o{{bad}, path("x"), "char", 0.1};
  try {
    data::prepare(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 3: invalid UTF-8"), std::string::npos) << e.what();
  }
  o.inputs = {path("missing.txt")};
  EXPECT_THROW(data::prepare(o), InputError);
  o.inputs = {bad}, o.tokenizer = "bpe";
  EXPECT_THROW(data::prepare(o), InputError);
  // nothing was left behind
  for (auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename(), "bad.txt");
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
  data::PrepareOptions o;
  o.inputs = {path("a.jsonl"), path("b.jsonl")}, o.out = path("plain"), o.tokenizer = "byte", o.valid_fraction = 0.1;
  data::prepare(o);
  o.inputs = {path("a.jsonl.gz"), path("b.jsonl.zst")}, o.out = path("packed"), o.workers = 3;
  data::prepare(o);
  o.inputs = {path("*.jsonl")}, o.out = path("globbed"), o.workers = 2;
  data::prepare(o);
  for (const char* split : {"_train", "_valid"})
    for (const char* ext : {".bin", ".idx"}) {
      EXPECT_EQ(slurp(path("plain") + split + ext), slurp(path("packed") + split + ext)) << split << ext;
      EXPECT_EQ(slurp(path("plain") + split + ext), slurp(path("globbed") + split + ext)) << split << ext;
    }
  data::IndexedDataset tr(path("plain_train")), va(path("plain_valid"));
  EXPECT_EQ(tr.num_documents() + va.num_documents(), 6000);
  EXPECT_EQ(va.num_documents(), 600);
  const auto meta = nlohmann::json::parse(slurp(path("plain.meta.json")));
  EXPECT_EQ(meta["splits"]["valid"]["documents"], 600);
  EXPECT_EQ(meta["tokenizer"]["kind"], "byte");

  std::ofstream(path("bad.jsonl"))
      << "{\"text\": \"ok\"}\n{\"text\": 3}\nnot json\n{\"body\": \"x\"}\n{\"text\": \"fine\"}\n";
  o.inputs = {path("bad.jsonl")}, o.out = path("bad"), o.valid_fraction = 0;
  try {
    data::prepare(o);
    FAIL() << "a bad line was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: 'text' is number, expected a string"), std::string::npos)
        << e.what();
  }
  for (auto& f : fs::directory_iterator(dir_))
    EXPECT_EQ(f.path().filename().string().rfind("bad", 0) == 0 && f.path().filename() != "bad.jsonl", false)
        << f.path() << " left behind";
  o.skip_bad_lines = true;
  data::prepare(o);
  EXPECT_EQ(data::IndexedDataset(path("bad_train")).num_documents(), 2);
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
        data::PrepareOptions o;
        o.inputs = {input}, o.out = path("acc"), o.tokenizer = "byte", o.eod_token = "none", o.force = true;
        o.valid_fraction = want.size() > 2 ? 0.25 : 0, o.workers = workers, o.doc_per_line = f.lines;
        data::prepare(o);
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
        data::IndexedDataset tr(path("acc_train"));
        std::optional<data::IndexedDataset> va;
        if (o.valid_fraction > 0) va.emplace(path("acc_valid"));
        int64_t next[2] = {0, 0};
        for (size_t i = 0; i < want.size(); ++i) {
          const bool valid = std::floor(double(i + 1) * o.valid_fraction) > std::floor(double(i) * o.valid_fraction);
          if (want[i].empty()) continue;
          const data::IndexedDataset& d = valid ? *va : tr;
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
      vocab[data::encode_utf8(printable ? uint32_t(b) : uint32_t(256 + extra++))] = b;
    }
    nlohmann::json t = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"decoder", {{"type", "ByteLevel"}}}};
    edit(t);
    std::ofstream(path("tok.json")) << t.dump();
    try {
      data::Tokenizer::from_file(path("tok.json"));
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
    vocab[data::encode_utf8(cp)] = b;
  }
  for (int i = 256; i < 70000; ++i) vocab["<extra_" + std::to_string(i) + ">"] = i;
  nlohmann::json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"decoder", {{"type", "ByteLevel"}}},
                        {"added_tokens", {{{"id", 69999}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  std::ofstream(path("big.json")) << tok.dump();
  std::ofstream(path("in.txt")) << "Hi there.\n\nAgain!\n";
  data::PrepareOptions o;
  o.inputs = {path("in.txt")}, o.out = path("big"), o.tokenizer = path("big.json"), o.valid_fraction = 0;
  data::prepare(o);
  data::IndexedDataset d(path("big_train"));
  EXPECT_EQ(d.dtype(), data::TokenDType::i32);
  EXPECT_EQ(d.token(0), 'H');
  EXPECT_EQ(d.token(d.doc_offset(1) - 1), 69999) << "EOD after the first document";
  EXPECT_EQ(nlohmann::json::parse(slurp(path("big.meta.json")))["dtype"], "i32");
}

}  // namespace trident
