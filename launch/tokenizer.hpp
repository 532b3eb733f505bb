// The tokenizers of `trident prepare` (docs/data.md), for text in and out:
//   byte  token = byte value (vocab 256)
//   char  token = index of the Unicode code point in PREFIX.vocab.json (a
//         JSON list of one-character strings), written by prepare
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trident::launch {

// UTF-8 <-> code points; `what` names the text in errors (a file, an option).
std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& what);
std::string encode_utf8(uint32_t cp);

class Tokenizer {
 public:
  static Tokenizer byte();
  static Tokenizer chars(const std::string& vocab_json);  // InputError naming the file
  // The tokenizer of a dataset prefix: PREFIX.vocab.json (PREFIX_train or
  // _valid stripped) when prepare wrote one, else byte.
  static Tokenizer for_dataset(const std::string& prefix);
  const std::string& kind() const { return kind_; }
  int64_t vocab() const { return kind_ == "byte" ? 256 : int64_t(pieces_.size()); }
  // InputError naming `what` and the character's offset when it has no token.
  std::vector<int32_t> encode(const std::string& text, const std::string& what) const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  std::string kind_ = "byte";
  std::vector<std::string> pieces_;  // char: id -> UTF-8 of the code point
  std::map<uint32_t, int32_t> ids_;  // char: code point -> id
};

}  // namespace trident::launch
