// `trident prepare` (see prepare.hpp, docs/data.md).
//
// The main thread reads documents (DocumentReader: bounded chunks), groups
// them in batches of about 1 MiB (PrepareOptions::buffer_bytes) and hands them to `workers` encoding
// threads; it writes finished batches in input order, so the output does not
// depend on the thread count. At most 2 x workers batches are in flight: the
// resident memory does not grow with the corpus.
// Document i goes to the valid split when floor((i+1) f) > floor(i f): an
// exact share f, spread evenly, decided without knowing the total.
#include "core/data/prepare.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/crc32c.hpp"
#include "core/data/dataset.hpp"
#include "core/data/dataset_record.hpp"
#include "core/data/documents.hpp"
#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::data {
using trident::Error;
using trident::fail_input;
namespace {

using Clock = std::chrono::steady_clock;

// Progress: bytes done, MB/s, tokens/s, ETA; on a terminal in place, else
// one line every ~2 s.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(fileno(stderr))), t0_(Clock::now()) {}
  void update(int64_t done, int64_t tokens, bool final = false) {
    double el = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (!final && el - last_ < (tty_ ? 0.2 : 2.0)) return;
    last_ = el;
    double rate = el > 0 ? double(done) / el : 0;
    double eta = rate > 0 ? double(std::max<int64_t>(0, total_ - done)) / rate : 0;
    std::string line = fmt::format("prepare: {:.1f}/{:.1f} MiB ({:.0f}%) | {:.1f} MB/s | {:.2f}M tokens/s | eta {}",
                                   double(done) / (1 << 20), double(total_) / (1 << 20),
                                   total_ ? std::min(100.0, 100.0 * double(done) / double(total_)) : 100.0, rate / 1e6,
                                   el > 0 ? double(tokens) / el / 1e6 : 0.0, log::format_duration(eta));
    if (tty_)
      fmt::print(stderr, "\r{}{}", line, final ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  int64_t total_;
  bool tty_;
  Clock::time_point t0_;
  double last_ = -1e9;
};

struct Batch {
  std::vector<Document> docs;
  std::vector<char> valid;      // per document: goes to the valid split
  std::vector<int32_t> tokens;  // all documents' tokens, back to back
  std::vector<int64_t> ends;    // per document: end offset in tokens
  std::exception_ptr error;
};

// Encoding threads; batches come back in the order they were submitted.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tok, const DocumentReader& reader, std::optional<int32_t> eod, int workers)
      : tok_(tok), reader_(reader), eod_(eod) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::unique_ptr<Batch> b) {
    {
      std::lock_guard<std::mutex> g(m_);
      todo_.emplace_back(submitted_++, std::move(b));
    }
    cv_.notify_one();
  }
  int64_t in_flight() const { return submitted_ - taken_; }
  std::unique_ptr<Batch> next() {  // waits for the oldest submitted batch
    std::unique_lock<std::mutex> g(m_);
    done_cv_.wait(g, [&] { return done_.count(taken_) > 0; });
    auto b = std::move(done_[taken_]);
    done_.erase(taken_++);
    if (b->error) std::rethrow_exception(b->error);
    return b;
  }

 private:
  void work() {
    for (;;) {
      std::pair<int64_t, std::unique_ptr<Batch>> job;
      {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return stop_ || !todo_.empty(); });
        if (stop_) return;
        job = std::move(todo_.front());
        todo_.pop_front();
      }
      Batch& b = *job.second;
      try {
        for (const Document& d : b.docs) {
          tok_.encode(d.text, b.tokens, reader_.where(d));
          if (eod_) b.tokens.push_back(*eod_);
          b.ends.push_back(int64_t(b.tokens.size()));
        }
      } catch (...) {
        b.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> g(m_);
        done_[job.first] = std::move(job.second);
      }
      done_cv_.notify_all();
    }
  }

  const Tokenizer& tok_;
  const DocumentReader& reader_;
  std::optional<int32_t> eod_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::pair<int64_t, std::unique_ptr<Batch>>> todo_;
  std::map<int64_t, std::unique_ptr<Batch>> done_;
  int64_t submitted_ = 0, taken_ = 0;
  bool stop_ = false;
};

DocumentFormat format_of(const std::vector<std::string>& files, bool doc_per_line) {
  auto is_jsonl = [](std::string f) {
    for (const char* z : {".gz", ".zst"})
      if (f.size() > std::strlen(z) && f.compare(f.size() - std::strlen(z), std::string::npos, z) == 0)
        f.resize(f.size() - std::strlen(z));
    return f.size() > 5 && (f.compare(f.size() - 6, 6, ".jsonl") == 0 || f.compare(f.size() - 5, 5, ".json") == 0);
  };
  const bool first = is_jsonl(files[0]);
  for (const auto& f : files)
    if (is_jsonl(f) != first)
      fail_input("prepare: inputs mix JSONL ({}) and text ({}); prepare them separately", first ? files[0] : f,
                 first ? f : files[0]);
  return first ? DocumentFormat::jsonl : doc_per_line ? DocumentFormat::lines : DocumentFormat::text;
}

std::string base_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

// The char tokenizer: the sorted code points of the whole corpus (a first pass).
std::unique_ptr<Tokenizer> char_tokenizer(DocumentReader& reader) {
  std::set<uint32_t> seen;
  Document d;
  while (reader.next(d))
    for (uint32_t cp : decode_utf8(d.text, reader.where(d))) seen.insert(cp);
  return std::make_unique<CharTokenizer>(std::vector<uint32_t>(seen.begin(), seen.end()));
}

std::optional<int32_t> choose_eod(const PrepareOptions& o, const Tokenizer& tok) {
  if (o.eod_token == "none") return std::nullopt;
  if (o.eod_token.empty()) return tok.eod();
  if (auto id = tok.token_id(o.eod_token)) return id;
  char* end = nullptr;
  long v = std::strtol(o.eod_token.c_str(), &end, 10);
  if (end && *end == 0 && v >= 0 && v < tok.vocab()) return int32_t(v);
  fail_input("prepare: --eod-token: expected a special token of the tokenizer, an id in [0, {}) or none, found '{}'",
             tok.vocab(), o.eod_token);
}

}  // namespace

void prepare(const PrepareOptions& o) {
  if (o.inputs.empty()) fail_input("prepare: missing --input FILE (text or JSONL, plain, .gz or .zst)");
  if (o.out.empty()) fail_input("prepare: missing --out PREFIX");
  if (!(o.valid_fraction >= 0 && o.valid_fraction < 1))
    fail_input("prepare: --valid-fraction: expected a number in [0, 1), found {}", o.valid_fraction);
  if (o.workers < 1 || o.workers > 1024)
    fail_input("prepare: --workers: expected an integer in [1, 1024], found {}", o.workers);
  if (std::filesystem::path(o.out).filename().empty() || std::filesystem::is_directory(o.out))
    fail_input(
        "prepare: --out {}: expected a dataset prefix (a directory and a name, like data/corpus), found a "
        "directory",
        o.out);
  std::string dir = std::filesystem::path(o.out).parent_path().string();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    fail_input("prepare: --out {}: directory '{}' does not exist", o.out, dir);
  if (const std::string why = unwritable_dir(dir.empty() ? "." : dir); !why.empty())
    fail_input("prepare: --out: expected a directory it can write, found '{}' ({})", dir.empty() ? "." : dir, why);
  if (!o.force) {  // an existing dataset is never replaced by accident
    std::vector<std::string> existing;
    for (const char* ext : {"_train.bin", "_train.idx", "_valid.bin", "_valid.idx", ".meta.json", ".tokenizer.json",
                            ".tokenizer.model", ".vocab.json"})
      if (std::filesystem::exists(o.out + ext)) existing.push_back(o.out + ext);
    if (!existing.empty())
      fail_input("prepare: --out {}: a dataset is already there ({}); pass --force to replace it", o.out,
                 fmt::join(existing, ", "));
  }
  const std::vector<std::string> files = expand_inputs(o.inputs);
  const DocumentFormat format = format_of(files, o.doc_per_line);
  DocumentReader reader(files, format, o.json_key, o.skip_bad_lines, o.buffer_bytes);

  // --tokenizer: a built-in kind (byte, char) or a tokenizer file
  const std::optional<TokenizerKind> builtin = parse_enum<TokenizerKind>(o.tokenizer);
  const bool from_file = !builtin || (*builtin != TokenizerKind::byte && *builtin != TokenizerKind::chars);
  std::unique_ptr<Tokenizer> tok;
  if (builtin == TokenizerKind::byte) {
    tok = Tokenizer::byte();
  } else if (builtin == TokenizerKind::chars) {
    DocumentReader first_pass(files, format, o.json_key, o.skip_bad_lines);
    tok = char_tokenizer(first_pass);
  } else if (std::filesystem::exists(o.tokenizer)) {
    tok = Tokenizer::from_file(o.tokenizer);
  } else {
    fail_input(
        "prepare: --tokenizer: expected byte, char or a tokenizer file (tokenizer.json, tokenizer.model), "
        "found '{}' (no such file)",
        o.tokenizer);
  }
  const std::optional<int32_t> eod = choose_eod(o, *tok);
  const TokenDType dtype = tok->vocab() <= 65536 ? TokenDType::u16 : TokenDType::i32;

  IndexedDatasetWriter train(o.out + "_train", dtype), valid(o.out + "_valid", dtype);
  int64_t max_id[2] = {-1, -1};
  Progress progress(reader.bytes_total());
  int64_t docs = 0, tokens = 0, empty_docs = 0;
  {
    EncodePool pool(*tok, reader, eod, o.workers);
    auto write = [&](const Batch& b) {
      int64_t begin = 0;
      for (size_t i = 0; i < b.docs.size(); ++i) {
        IndexedDatasetWriter& w = b.valid[i] ? valid : train;
        const int64_t n = b.ends[i] - begin;
        if (n > 0) {
          w.add_sequence(b.tokens.data() + begin, n);
          w.end_document();
          int64_t& m = max_id[b.valid[i] ? 1 : 0];
          m = std::max<int64_t>(m, *std::max_element(b.tokens.begin() + begin, b.tokens.begin() + b.ends[i]));
        } else {
          ++empty_docs;  // no tokens (an empty text and no EOD): nothing to train on
        }
        begin = b.ends[i];
      }
      tokens += int64_t(b.tokens.size());
      progress.update(reader.bytes_read(), tokens);
    };
    // Batches of about buffer_bytes (1 MiB); a document larger than that is a batch of its
    // own. Whatever is in flight when the input ends is written before the
    // splits are checked (the last batch is never left behind).
    auto batch = std::make_unique<Batch>();
    size_t bytes = 0;
    auto submit = [&] {
      pool.submit(std::move(batch));
      batch = std::make_unique<Batch>();
      bytes = 0;
    };
    for (Document d; reader.next(d);) {
      const double f = o.valid_fraction;
      batch->valid.push_back(std::floor(double(docs + 1) * f) > std::floor(double(docs) * f));
      bytes += d.text.size();
      batch->docs.push_back(std::move(d));
      ++docs;
      if (bytes >= o.buffer_bytes) {
        submit();
        while (pool.in_flight() >= 2 * o.workers) write(*pool.next());
      }
    }
    if (!batch->docs.empty()) submit();
    while (pool.in_flight() > 0) write(*pool.next());
  }
  if (train.num_documents() == 0)
    fail_input("{}: no training documents ({} document(s) with --valid-fraction {})", files[0], docs, o.valid_fraction);
  if (o.valid_fraction > 0 && valid.num_documents() == 0)
    fail_input("{}: {} document(s) leave none for the valid split with --valid-fraction {}", files[0], docs,
               o.valid_fraction);
  // Every document read is in a split or counted as skipped; every token in a split.
  if (train.num_documents() + valid.num_documents() + empty_docs != docs ||
      train.num_tokens() + valid.num_tokens() != tokens)
    throw Error(
        fmt::format("prepare: {} documents and {} tokens read, but train {} + valid {} + empty {} documents and "
                    "{} + {} tokens written (a bug)",
                    docs, tokens, train.num_documents(), valid.num_documents(), empty_docs, train.num_tokens(),
                    valid.num_tokens()));
  train.finish();
  valid.finish();

  // The tokenizer next to the data, then the record: its presence means complete.
  nlohmann::json rec;
  rec["tokenizer"] = {{"kind", enum_name(tok->kind())}, {"vocab", tok->vocab()}, {"eod", eod ? *eod : -1}};
  const std::string copy = tok->save_next_to(o.out, from_file ? o.tokenizer : "");
  if (!copy.empty()) {
    rec["tokenizer"]["file"] = base_name(copy);
    if (from_file) rec["tokenizer"]["source"] = o.tokenizer;
    rec["tokenizer"]["crc32c"] = crc32c_file(copy);
  }
  rec["dtype"] = dtype == TokenDType::u16 ? "u16" : "i32";
  rec["inputs"] = files;
  rec["bad_lines_skipped"] = reader.bad_lines();
  rec["documents_read"] = docs;
  rec["tokens"] = tokens;
  rec["skipped"] = {{"empty_documents", empty_docs}, {"bad_lines", reader.bad_lines()}};
  rec["splits"] = {
      {"train", {{"documents", train.num_documents()}, {"tokens", train.num_tokens()}, {"max_id", max_id[0]}}},
      {"valid", {{"documents", valid.num_documents()}, {"tokens", valid.num_tokens()}, {"max_id", max_id[1]}}}};
  write_file_atomic(o.out + ".meta.json", rec.dump(2) + "\n");
  progress.update(reader.bytes_total(), tokens, true);
  const double secs = progress.seconds();
  log::info(
      "prepare: {} tokens in {} documents -> {}_train ({} docs), {}_valid ({} docs) | {} tokenizer, vocab {}, "
      "{} | {:.2f}M tokens/s over {} worker(s){}{}",
      tokens, docs, o.out, train.num_documents(), o.out, valid.num_documents(), tok->kind(), tok->vocab(),
      rec["dtype"].get<std::string>(), secs > 0 ? double(tokens) / secs / 1e6 : 0.0, o.workers,
      reader.bad_lines() ? fmt::format(" | {} bad line(s) skipped", reader.bad_lines()) : "",
      empty_docs ? fmt::format(" | {} empty document(s) skipped", empty_docs) : "");
}

void inspect_dataset(const std::string& prefix) {
  std::vector<std::string> prefixes;
  if (std::filesystem::exists(prefix + ".idx"))
    prefixes.push_back(prefix);
  else
    for (const char* s : {"_train", "_valid"})
      if (std::filesystem::exists(prefix + s + ".idx")) prefixes.push_back(prefix + s);
  if (prefixes.empty()) fail_input("{}: no dataset ({}.idx, {}_train.idx)", prefix, prefix, prefix);
  for (const auto& p : prefixes) {
    IndexedDataset d(p);
    const DatasetRecord rec = read_dataset_record(p);
    check_tokenizer_copy(rec);
    const auto tok = Tokenizer::for_dataset(p);
    const char* dtype = d.dtype() == TokenDType::u16   ? "u16"
                        : d.dtype() == TokenDType::i32 ? "i32"
                        : d.dtype() == TokenDType::u8  ? "u8"
                                                       : "i64";
    fmt::print("{}: {} documents, {} tokens, dtype {}\n", p, d.num_documents(), d.num_tokens(), dtype);
    fmt::print("  tokenizer: {} (vocab {}{}){}\n", tok->kind(), tok->vocab(),
               rec.eod >= 0 ? fmt::format(", eod {}", rec.eod) : "",
               rec.tokenizer_file.empty() ? "" : fmt::format(", {}", rec.tokenizer_file));
    if (d.num_documents() > 0) {
      const int64_t begin = d.doc_index()[0], end = d.doc_index()[1];
      int64_t first = 0, n = 0;
      for (int64_t s = 0; s < begin; ++s) first += d.sizes()[size_t(s)];
      for (int64_t s = begin; s < end; ++s) n += d.sizes()[size_t(s)];
      std::vector<int32_t> ids(static_cast<size_t>(n));
      d.read(first, n, ids.data());
      fmt::print("  first document ({} tokens): {}\n", n,
                 nlohmann::json(tok->decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
}

}  // namespace trident::data
