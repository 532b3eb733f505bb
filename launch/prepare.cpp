// `trident prepare`: text file -> Megatron indexed datasets PREFIX_train and
// PREFIX_valid (+ PREFIX.vocab.json for the char tokenizer).
// Documents are paragraphs (separated by blank lines); the last
// valid_fraction of the documents form the valid split. byte: token = byte
// value (vocab 256). char: token = index of the Unicode code point in the
// sorted set of code points of the file (invalid UTF-8 is an error naming the
// byte offset). Outputs appear only when complete (temporary names, renamed).
#include <unistd.h>

#include <sys/stat.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/dataset.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/safetensors.hpp"
#include "launch/prepare.hpp"
#include "launch/tokenizer.hpp"

namespace trident::launch {
using trident::Error;
using trident::fail_input;
namespace {

// Progress on a terminal: bytes done, rate, ETA; one line per ~2 s otherwise.
class Progress {
 public:
  explicit Progress(int64_t total)
      : total_(total), tty_(isatty(fileno(stderr))), t0_(std::chrono::steady_clock::now()) {}
  void update(int64_t done, bool final = false) {
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (!final && el - last_ < (tty_ ? 0.2 : 2.0)) return;
    last_ = el;
    double rate = el > 0 ? double(done) / el : 0;
    double eta = rate > 0 ? double(total_ - done) / rate : 0;
    std::string line =
        fmt::format("prepare: {:.1f}/{:.1f} MiB ({:.0f}%) | {:.1f} MiB/s | eta {}", double(done) / (1 << 20),
                    double(total_) / (1 << 20), total_ ? 100.0 * double(done) / double(total_) : 100.0,
                    rate / (1 << 20), log::format_duration(eta));
    if (tty_)
      fmt::print(stderr, "\r{}{}", line, final ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
  }

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_;
  double last_ = -1e9;
};

}  // namespace

void prepare(const PrepareOptions& o) {
  if (o.input.empty()) fail_input("prepare: missing --input FILE.txt");
  if (o.out.empty()) fail_input("prepare: missing --out PREFIX");
  if (o.tokenizer != "byte" && o.tokenizer != "char")
    fail_input("prepare: --tokenizer: expected byte or char, found '{}'", o.tokenizer);
  if (!(o.valid_fraction >= 0 && o.valid_fraction < 1))
    fail_input("prepare: --valid-fraction: expected a number in [0, 1), found {}", o.valid_fraction);
  std::ifstream in(o.input, std::ios::binary);
  if (!in) fail_input("{}: cannot open input ({})", o.input, std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) fail_input("{}: input is empty", o.input);
  std::string dir = o.out.find('/') == std::string::npos ? "." : o.out.substr(0, o.out.rfind('/'));
  struct stat st {};
  if (!dir.empty() && (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
    fail_input("prepare: --out {}: directory '{}' does not exist", o.out, dir);

  // Tokens per byte of input, and document boundaries (paragraphs).
  std::vector<int32_t> tokens;
  std::vector<uint32_t> vocab;
  if (o.tokenizer == "byte") {
    for (size_t i = 0; i < text.size(); ++i) tokens.push_back(static_cast<unsigned char>(text[i]));
  } else {
    std::vector<uint32_t> cps = decode_utf8(text, o.input);
    std::map<uint32_t, int32_t> ids;
    for (uint32_t c : cps) ids[c] = 0;
    for (auto& [c, id] : ids) id = int32_t(vocab.size()), vocab.push_back(c);
    for (uint32_t c : cps) tokens.push_back(ids[c]);
  }
  // Document ends: after each "\n\n" run (in tokens: newline is byte/char 10).
  auto newline = o.tokenizer == "byte" ? 10 : -1;
  if (o.tokenizer == "char")
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i] == 10) newline = int32_t(i);
  std::vector<std::pair<int64_t, int64_t>> docs;
  int64_t start = 0;
  for (int64_t i = 1; i < int64_t(tokens.size()); ++i)
    if (tokens[size_t(i)] == newline && tokens[size_t(i - 1)] == newline) {
      docs.push_back({start, i + 1});
      start = i + 1;
    }
  if (start < int64_t(tokens.size())) docs.push_back({start, int64_t(tokens.size())});
  int64_t n_valid = int64_t(double(docs.size()) * o.valid_fraction + 0.5);
  if (o.valid_fraction > 0 && n_valid == 0) n_valid = 1;
  if (n_valid >= int64_t(docs.size()))
    fail_input("{}: {} document(s) cannot be split with --valid-fraction {}", o.input, docs.size(), o.valid_fraction);

  Progress progress(int64_t(text.size()));
  const int64_t bytes_per_token =
      std::max<int64_t>(1, int64_t(text.size()) / std::max<int64_t>(1, int64_t(tokens.size())));
  IndexedDatasetWriter train(o.out + "_train", TokenDType::u16), valid(o.out + "_valid", TokenDType::u16);
  int64_t done = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    IndexedDatasetWriter& w = int64_t(d) < int64_t(docs.size()) - n_valid ? train : valid;
    w.add_sequence(tokens.data() + docs[d].first, docs[d].second - docs[d].first);
    w.end_document();
    done += (docs[d].second - docs[d].first) * bytes_per_token;
    progress.update(std::min<int64_t>(done, int64_t(text.size())));
  }
  train.finish();
  valid.finish();
  if (o.tokenizer == "char") {  // written last: its presence means the datasets are complete
    nlohmann::json pieces = nlohmann::json::array();
    for (const auto& cp : vocab) pieces.push_back(encode_utf8(cp));
    write_file_atomic(o.out + ".vocab.json",
                      pieces.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  progress.update(int64_t(text.size()), true);
  int64_t vocab_size = o.tokenizer == "byte" ? 256 : int64_t(vocab.size());
  log::info("prepare: {} tokens in {} documents -> {}_train ({} docs), {}_valid ({} docs) | vocab {} ({})",
            tokens.size(), docs.size(), o.out, int64_t(docs.size()) - n_valid, o.out, n_valid, vocab_size, o.tokenizer);
}

}  // namespace trident::launch
