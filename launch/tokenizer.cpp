// Byte and character tokenizers (see tokenizer.hpp).
#include "launch/tokenizer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/error.hpp"

namespace trident::launch {

std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& what) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + size_t(len) > s.size())
      fail_input("{}: byte offset {}: invalid UTF-8 (byte 0x{:02x}); use --tokenizer byte for binary input", what, i,
                 c);
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((cc >> 6) != 2)
        fail_input("{}: byte offset {}: invalid UTF-8 continuation byte 0x{:02x}", what, i + size_t(k), cc);
      cp = (cp << 6) | (cc & 0x3f);
    }
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

Tokenizer Tokenizer::byte() { return Tokenizer(); }

Tokenizer Tokenizer::chars(const std::string& vocab_json) {
  Tokenizer t;
  t.kind_ = "char";
  std::ifstream in(vocab_json, std::ios::binary);
  if (!in) fail_input("{}: cannot open", vocab_json);
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON ({})", vocab_json, e.what());
  }
  if (!list.is_array()) fail_input("{}: expected a JSON list of one-character strings", vocab_json);
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) fail_input("{}: entry {}: expected a string, found {}", vocab_json, i, list[i].dump());
    const std::string piece = list[i].get<std::string>();
    const auto cps = decode_utf8(piece, vocab_json);
    if (cps.size() != 1)
      fail_input("{}: entry {}: expected one character, found {} ('{}')", vocab_json, i, cps.size(), piece);
    t.ids_[cps[0]] = int32_t(i);
    t.pieces_.push_back(piece);
  }
  return t;
}

Tokenizer Tokenizer::for_dataset(const std::string& prefix) {
  std::string base = prefix;
  for (const char* suffix : {"_train", "_valid"}) {
    const std::string s(suffix);
    if (base.size() > s.size() && base.compare(base.size() - s.size(), std::string::npos, s) == 0) {
      base.resize(base.size() - s.size());
      break;
    }
  }
  const std::string vocab = base + ".vocab.json";
  return std::filesystem::exists(vocab) ? chars(vocab) : byte();
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, const std::string& what) const {
  std::vector<int32_t> out;
  if (kind_ == "byte") {
    for (unsigned char c : text) out.push_back(int32_t(c));
    return out;
  }
  size_t offset = 0;
  for (uint32_t cp : decode_utf8(text, what)) {
    auto it = ids_.find(cp);
    if (it == ids_.end())
      fail_input("{}: character '{}' (U+{:04X}) at byte offset {} is not in the tokenizer's vocabulary", what,
                 encode_utf8(cp), cp, offset);
    out.push_back(it->second);
    offset += encode_utf8(cp).size();
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (kind_ == "byte")
      out += id >= 0 && id < 256 ? char(id) : '?';
    else
      out += id >= 0 && size_t(id) < pieces_.size() ? pieces_[size_t(id)] : "\xEF\xBF\xBD";  // U+FFFD
  }
  return out;
}

}  // namespace trident::launch
