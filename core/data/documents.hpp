// Documents of `trident prepare`, streamed from text and JSONL files, plain
// or compressed (.gz through zlib, .zst through libzstd; told by their first
// bytes), in bounded memory (docs/data.md):
//   text      documents are paragraphs: text up to and including a run of
//             two or more newlines (a blank line); nothing is dropped
//   lines     one document per non-empty line (newline and \r removed)
//   jsonl     one JSON object per non-empty line; the document is the string
//             at `json_key`
// A JSONL line that is not an object with a string at the key is an
// InputError naming FILE:LINE, or, with skip_bad_lines, counted and skipped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident::data {

enum class DocumentFormat { text, lines, jsonl };

struct Document {
  std::string text;
  int file = 0;      // index into the reader's files
  int64_t line = 0;  // 1-based line where the document starts
};

// Expands globs (sorted matches) and checks that every file exists.
std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns);

class ByteSource;

class DocumentReader {
 public:
  // Reads `chunk_bytes` at a time (a line or paragraph may span many chunks).
  DocumentReader(std::vector<std::string> files, DocumentFormat format, std::string json_key, bool skip_bad_lines,
                 size_t chunk_bytes = size_t(1) << 20);
  ~DocumentReader();
  // The next document; false at the end of the last file.
  bool next(Document& doc);
  const std::vector<std::string>& files() const { return files_; }
  std::string where(const Document& d) const { return files_[size_t(d.file)] + ":" + std::to_string(d.line); }
  int64_t bytes_read() const;  // input bytes consumed (compressed bytes for compressed files)
  int64_t bytes_total() const { return total_; }
  int64_t bad_lines() const { return bad_lines_; }

 private:
  bool fill();  // more bytes into buf_; false at the end of the current file
  bool next_line(std::string& line, int64_t& line_no);

  std::vector<std::string> files_;
  DocumentFormat format_;
  std::string key_;
  bool skip_bad_;
  size_t chunk_;
  int64_t total_ = 0, done_before_ = 0, bad_lines_ = 0;
  size_t file_ = 0;
  std::unique_ptr<ByteSource> src_;
  std::string buf_;
  size_t pos_ = 0;
  int64_t line_ = 0;
  bool eof_ = false;
};

}  // namespace trident::data
