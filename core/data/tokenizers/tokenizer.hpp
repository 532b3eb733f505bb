// The tokenizers of `trident prepare` and `trident sample` (docs/data.md):
//   byte           token = byte value (vocab 256)
//   char           token = index of the Unicode code point in PREFIX.vocab.json
//                  (a JSON list of one-character strings), written by prepare
//   tokenizer.json a Hugging Face byte-level BPE (GPT-2, LLaMA-3, Qwen style):
//                  normalizer, split regex, byte-level mapping, merges by
//                  rank, added tokens, template post-processor, decoder
//   *.model        a SentencePiece model, through the SentencePiece library
// encode() is const and safe to call from several threads at once.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/enums.hpp"

namespace trident::data {

// UTF-8 <-> code points; `what` names the text in errors (a file, an option).
std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& what);
std::string encode_utf8(uint32_t cp);
// Byte offset of the first invalid UTF-8 sequence of s, or npos.
size_t invalid_utf8_at(std::string_view s);

// Token ids are below 2^24 (16,777,216; the largest published vocabularies
// have 262,144 entries): a tokenizer file with a larger id is refused.
constexpr int64_t kMaxTokenId = int64_t(1) << 24;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "char", "hf-bpe", "sentencepiece": for logs and the dataset record.
  virtual TokenizerKind kind() const = 0;
  // Writes what for_dataset(prefix) reads back next to a dataset (atomically):
  // a copy of `source` (the tokenizer file it was loaded from) as
  // PREFIX.tokenizer.json / .model, or PREFIX.vocab.json for char. Returns
  // the file written, or "" (byte: nothing to write).
  virtual std::string save_next_to(const std::string& prefix, const std::string& source) const;
  virtual int64_t vocab() const = 0;
  // Appends the ids of one document (with the tokenizer's own BOS, if it adds
  // one) to out. InputError naming `what` on text it cannot encode.
  virtual void encode(std::string_view text, std::vector<int32_t>& out, const std::string& what) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The end-of-document token appended after each document, if the tokenizer
  // has one (its special tokens: <|endoftext|>, <|end_of_text|>, </s>, ...).
  virtual std::optional<int32_t> eod() const { return std::nullopt; }
  // The id of a special or added token by its text, if there is one.
  virtual std::optional<int32_t> token_id(const std::string& text) const;

  std::vector<int32_t> encode(std::string_view text, const std::string& what) const {
    std::vector<int32_t> out;
    encode(text, out, what);
    return out;
  }

  static std::unique_ptr<Tokenizer> byte();
  static std::unique_ptr<Tokenizer> chars(const std::string& vocab_json);  // InputError naming the file
  // A tokenizer file: Hugging Face tokenizer.json or SentencePiece .model
  // (told apart by content). InputError naming the file and, for JSON, the
  // path of a component Trident does not implement.
  static std::unique_ptr<Tokenizer> from_file(const std::string& path);
  // byte | char (needs the corpus: built by prepare) | a tokenizer file.
  // The tokenizer of a dataset prefix (docs/data.md): the copy prepare wrote
  // next to the data (PREFIX.tokenizer.json / .model, or PREFIX.vocab.json),
  // with PREFIX_train / _valid stripped; byte when there is none.
  static std::unique_ptr<Tokenizer> for_dataset(const std::string& prefix);
};

// Hugging Face tokenizer.json (byte-level BPE).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& json_text);
// SentencePiece model file.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const std::string& bytes);

// The character tokenizer built from a corpus by prepare.
class CharTokenizer : public Tokenizer {
 public:
  explicit CharTokenizer(std::vector<uint32_t> code_points);
  TokenizerKind kind() const override { return TokenizerKind::chars; }
  std::string save_next_to(const std::string& prefix, const std::string& source) const override;
  int64_t vocab() const override { return int64_t(pieces_.size()); }
  void encode(std::string_view text, std::vector<int32_t>& out, const std::string& what) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;

 private:
  std::vector<std::string> pieces_;  // id -> UTF-8 of the code point
  std::map<uint32_t, int32_t> ids_;  // code point -> id
};

// Where a dataset's tokenizer copy lives: PREFIX with _train/_valid stripped.
std::string dataset_base(const std::string& prefix);

}  // namespace trident::data
