// Byte and character tokenizers, and finding a tokenizer (see tokenizer.hpp).
// The Hugging Face BPE is in hf_tokenizer.cpp, SentencePiece in
// sentencepiece_tokenizer.cpp.
#include "core/data/tokenizers/tokenizer.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace trident::data {

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || c == 0xc0 || c == 0xc1 || c > 0xf4 || i + size_t(len) > n) return i;
    uint32_t cp = c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      if ((p[i + size_t(k)] >> 6) != 2) return i;
      cp = (cp << 6) | (p[i + size_t(k)] & 0x3f);
    }
    // overlong forms, surrogates, beyond U+10FFFF
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return i;
    i += size_t(len);
  }
  return std::string_view::npos;
}

std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& what) {
  if (size_t bad = invalid_utf8_at(s); bad != std::string_view::npos)
    fail_input("{}: byte offset {}: invalid UTF-8 (byte 0x{:02x}); use --tokenizer byte for binary input", what, bad,
               static_cast<unsigned char>(s[bad]));
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3f);
    out.push_back(cp);
    i += size_t(len);
  }
  return out;
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80)
    s += char(cp);
  else if (cp < 0x800)
    s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
  else if (cp < 0x10000)
    s += char(0xe0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3f)), s += char(0x80 | (cp & 0x3f));
  else
    s += char(0xf0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3f)), s += char(0x80 | ((cp >> 6) & 0x3f)),
        s += char(0x80 | (cp & 0x3f));
  return s;
}

namespace {
std::string read_whole(const std::string& path);
}  // namespace

std::optional<int32_t> Tokenizer::token_id(const std::string&) const { return std::nullopt; }

std::string Tokenizer::save_next_to(const std::string& prefix, const std::string& source) const {
  if (source.empty()) return "";
  const std::string bytes = read_whole(source);
  const std::string copy = prefix + (bytes.find_first_not_of(" \t\r\n") != std::string::npos &&
                                             bytes[bytes.find_first_not_of(" \t\r\n")] == '{'
                                         ? ".tokenizer.json"
                                         : ".tokenizer.model");
  write_file_atomic(copy, bytes);
  return copy;
}

std::string CharTokenizer::save_next_to(const std::string& prefix, const std::string&) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : pieces_) list.push_back(p);
  const std::string file = prefix + ".vocab.json";
  write_file_atomic(file, list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return file;
}

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  TokenizerKind kind() const override { return TokenizerKind::byte; }
  std::string save_next_to(const std::string&, const std::string&) const override { return ""; }
  int64_t vocab() const override { return 256; }
  void encode(std::string_view text, std::vector<int32_t>& out, const std::string&) const override {
    for (unsigned char c : text) out.push_back(int32_t(c));
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += id >= 0 && id < 256 ? char(id) : '?';
    return out;
  }
};

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open tokenizer file ({})", path, std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<uint32_t> code_points) {
  for (uint32_t cp : code_points) {
    ids_[cp] = int32_t(pieces_.size());
    pieces_.push_back(encode_utf8(cp));
  }
}

void CharTokenizer::encode(std::string_view text, std::vector<int32_t>& out, const std::string& what) const {
  size_t offset = 0;
  for (uint32_t cp : decode_utf8(std::string(text), what)) {
    auto it = ids_.find(cp);
    if (it == ids_.end())
      fail_input("{}: character '{}' (U+{:04X}) at byte offset {} is not in the tokenizer's vocabulary", what,
                 encode_utf8(cp), cp, offset);
    out.push_back(it->second);
    offset += encode_utf8(cp).size();
  }
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += id >= 0 && size_t(id) < pieces_.size() ? pieces_[size_t(id)] : "\xEF\xBF\xBD";
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::byte() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> Tokenizer::chars(const std::string& vocab_json) {
  const std::string text = read_whole(vocab_json);
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON ({})", vocab_json, e.what());
  }
  if (!list.is_array()) fail_input("{}: expected a JSON list of one-character strings", vocab_json);
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) fail_input("{}: entry {}: expected a string, found {}", vocab_json, i, list[i].dump());
    const std::string piece = list[i].get<std::string>();
    const auto one = decode_utf8(piece, vocab_json);
    if (one.size() != 1)
      fail_input("{}: entry {}: expected one character, found {} ('{}')", vocab_json, i, one.size(), piece);
    cps.push_back(one[0]);
  }
  return std::make_unique<CharTokenizer>(std::move(cps));
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  if (std::filesystem::is_directory(path))
    fail_input("{}: is a directory; give the tokenizer file (tokenizer.json or tokenizer.model)", path);
  const std::string bytes = read_whole(path);
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') return load_hf_tokenizer(path, bytes);
  if (bytes.empty()) fail_input("{}: the tokenizer file is empty", path);
  return load_sentencepiece(path, bytes);
}

std::string dataset_base(const std::string& prefix) {
  std::string base = prefix;
  for (const std::string s : {"_train", "_valid"})
    if (base.size() > s.size() && base.compare(base.size() - s.size(), std::string::npos, s) == 0) {
      base.resize(base.size() - s.size());
      break;
    }
  return base;
}

std::unique_ptr<Tokenizer> Tokenizer::for_dataset(const std::string& prefix) {
  for (const std::string& p : {prefix, dataset_base(prefix)}) {
    for (const char* ext : {".tokenizer.json", ".tokenizer.model"})
      if (std::filesystem::exists(p + ext)) return from_file(p + ext);
    if (std::filesystem::exists(p + ".vocab.json")) return chars(p + ".vocab.json");
  }
  return byte();
}

}  // namespace trident::data
