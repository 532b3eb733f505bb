// Streaming documents from text/JSONL files, plain, gzip or zstd (see
// documents.hpp).
#include "core/data/documents.hpp"

#include <glob.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace trident::data {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t read(char* out, size_t n) = 0;  // 0 at the end
  virtual int64_t consumed() const = 0;          // bytes of the file read so far
};

namespace {

class PlainSource : public ByteSource {
 public:
  PlainSource(FILE* f, const std::string& path) : f_(f), path_(path) {}
  ~PlainSource() override { std::fclose(f_); }
  size_t read(char* out, size_t n) override {
    size_t got = std::fread(out, 1, n, f_);
    if (got == 0 && std::ferror(f_)) fail_input("{}: read failed ({})", path_, std::strerror(errno));
    done_ += int64_t(got);
    return got;
  }
  int64_t consumed() const override { return done_; }

 protected:
  FILE* f_;
  std::string path_;
  int64_t done_ = 0;
};

class GzipSource : public ByteSource {
 public:
  GzipSource(const std::string& path) : path_(path) {
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) fail_input("{}: cannot open ({})", path, std::strerror(errno));
    gzbuffer(f_, 1 << 18);
  }
  ~GzipSource() override { gzclose(f_); }
  size_t read(char* out, size_t n) override {
    int got = gzread(f_, out, unsigned(n));
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f_, &err);
      fail_input("{}: gzip data is corrupt near compressed offset {} ({})", path_, gzoffset(f_), msg);
    }
    return size_t(got);
  }
  int64_t consumed() const override { return int64_t(gzoffset(f_)); }

 private:
  gzFile f_;
  std::string path_;
};

class ZstdSource : public ByteSource {
 public:
  ZstdSource(FILE* f, const std::string& path) : file_(f, path), path_(path), in_(ZSTD_DStreamInSize()) {
    ds_ = ZSTD_createDStream();
    ZSTD_initDStream(ds_);
  }
  ~ZstdSource() override { ZSTD_freeDStream(ds_); }
  size_t read(char* out, size_t n) override {
    ZSTD_outBuffer ob{out, n, 0};
    while (ob.pos == 0) {
      if (ib_.pos == ib_.size) {
        size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          if (last_ != 0) fail_input("{}: zstd stream is truncated (compressed offset {})", path_, file_.consumed());
          return 0;
        }
        ib_ = {in_.data(), got, 0};
      }
      last_ = ZSTD_decompressStream(ds_, &ob, &ib_);
      if (ZSTD_isError(last_))
        fail_input("{}: zstd data is corrupt near compressed offset {} ({})", path_, file_.consumed(),
                   ZSTD_getErrorName(last_));
    }
    return ob.pos;
  }
  int64_t consumed() const override { return file_.consumed(); }

 private:
  PlainSource file_;
  std::string path_;
  std::vector<char> in_;
  ZSTD_inBuffer ib_{nullptr, 0, 0};
  ZSTD_DStream* ds_;
  size_t last_ = 0;
};

std::unique_ptr<ByteSource> open_source(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail_input("{}: cannot open input ({})", path, std::strerror(errno));
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t n = std::fread(magic, 1, 4, f);
  std::rewind(f);
  if (n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    std::fclose(f);
    return std::make_unique<GzipSource>(path);
  }
  if (n == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    return std::make_unique<ZstdSource>(f, path);
  return std::make_unique<PlainSource>(f, path);
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& p : patterns) {
    if (p.find_first_of("*?[") == std::string::npos) {
      if (std::filesystem::is_directory(p))
        fail_input("{}: a directory, expected a file (give its files, or a glob such as '{}/*.jsonl')", p, p);
      if (!std::filesystem::is_regular_file(p)) fail_input("{}: input file not found", p);
      files.push_back(p);
      continue;
    }
    glob_t g{};
    int rc = glob(p.c_str(), 0, nullptr, &g);
    if (rc == GLOB_NOMATCH || g.gl_pathc == 0) {
      globfree(&g);
      fail_input("{}: the pattern matches no file", p);
    }
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    std::sort(matches.begin(), matches.end());
    for (auto& m : matches)
      if (std::filesystem::is_regular_file(m)) files.push_back(m);
  }
  if (files.empty()) fail_input("prepare: no input files (give --input FILE or a glob)");
  return files;
}

DocumentReader::DocumentReader(std::vector<std::string> files, DocumentFormat format, std::string json_key,
                               bool skip_bad_lines, size_t chunk_bytes)
    : files_(std::move(files)),
      format_(format),
      key_(std::move(json_key)),
      skip_bad_(skip_bad_lines),
      chunk_(std::max<size_t>(1, chunk_bytes)) {
  for (const auto& f : files_) total_ += int64_t(std::filesystem::file_size(f));
  src_ = open_source(files_[0]);
}

DocumentReader::~DocumentReader() = default;

int64_t DocumentReader::bytes_read() const { return done_before_ + (src_ ? src_->consumed() : 0); }

bool DocumentReader::fill() {
  if (eof_) return false;
  if (pos_ > 0) buf_.erase(0, pos_), pos_ = 0;
  const size_t old = buf_.size();
  buf_.resize(old + chunk_);
  size_t got = src_->read(buf_.data() + old, chunk_);
  buf_.resize(old + got);
  if (got == 0) eof_ = true;
  return got > 0;
}

// One line without its newline; false at the end of the current file.
bool DocumentReader::next_line(std::string& line, int64_t& line_no) {
  for (;;) {
    size_t nl = buf_.find('\n', pos_);
    if (nl != std::string::npos) {
      line.assign(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      line_no = ++line_;
      return true;
    }
    if (!fill()) {
      if (pos_ >= buf_.size()) return false;
      line.assign(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
      line_no = ++line_;
      return true;
    }
  }
}

bool DocumentReader::next(Document& doc) {
  for (;;) {
    doc.file = int(file_);
    bool got = false;
    if (format_ == DocumentFormat::text) {
      // up to and including the first run of >= 2 newlines ('\r' allowed inside the run)
      doc.text.clear();
      doc.line = line_ + 1;
      size_t scanned = 0;  // relative to pos_: bytes known to hold no complete boundary
      for (;;) {
        size_t end = std::string::npos, i = pos_ + scanned;
        for (; i < buf_.size(); ++i) {
          if (buf_[i] != '\n') continue;
          size_t j = i + 1, newlines = 1;
          while (j < buf_.size() && (buf_[j] == '\n' || buf_[j] == '\r')) newlines += buf_[j++] == '\n';
          if (j == buf_.size() && !eof_) break;  // the run may go on in the next chunk
          if (newlines >= 2) {
            end = j;
            break;
          }
          i = j - 1;
        }
        if (end != std::string::npos) {
          doc.text.assign(buf_, pos_, end - pos_);
          pos_ = end;
          got = true;
          break;
        }
        scanned = std::min(i, buf_.size()) - pos_;
        if (!fill()) {
          if (pos_ < buf_.size()) {
            doc.text.assign(buf_, pos_, std::string::npos);
            pos_ = buf_.size();
            got = true;
          }
          break;
        }
      }
      line_ += int64_t(std::count(doc.text.begin(), doc.text.end(), '\n'));
    } else {
      std::string line;
      int64_t line_no = 0;
      while (!got && next_line(line, line_no)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        doc.line = line_no;
        if (format_ == DocumentFormat::lines) {
          doc.text = std::move(line);
          got = true;
          break;
        }
        std::string problem;
        try {
          nlohmann::json j = nlohmann::json::parse(line);
          if (!j.is_object())
            problem = fmt::format("expected a JSON object, found {}", j.type_name());
          else if (!j.contains(key_))
            problem = fmt::format("no key '{}' (use --json-key)", key_);
          else if (!j[key_].is_string())
            problem = fmt::format("'{}' is {}, expected a string", key_, j[key_].type_name());
          else
            doc.text = j[key_].get<std::string>(), got = true;
        } catch (const nlohmann::json::exception& e) {
          problem = fmt::format("not JSON ({})", e.what());
        }
        if (!problem.empty()) {
          if (!skip_bad_) fail_input("{}: {} (or pass --skip-bad-lines)", where(doc), problem);
          ++bad_lines_;
        }
      }
    }
    if (got) return true;
    // next file
    done_before_ += src_->consumed();
    if (++file_ >= files_.size()) {
      src_.reset();
      return false;
    }
    src_ = open_source(files_[file_]);
    buf_.clear(), pos_ = 0, line_ = 0, eof_ = false;
  }
}

}  // namespace trident::data
