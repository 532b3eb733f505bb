// Hugging Face tokenizer.json, byte-level BPE (GPT-2, LLaMA-3, Qwen style);
// docs/data.md lists what is implemented. Everything else in a file is
// refused naming its JSON path, so a file Trident would encode differently
// from the `tokenizers` library never gets through.
//
// Encoding one document:
//   1. split out added tokens (leftmost-longest match on the raw text)
//   2. normalize each remaining span (NFC through utf8proc, or nothing)
//   3. pre-tokenize: Split (regex through PCRE2, JIT-compiled, or literal;
//      Isolated or Removed) and ByteLevel (optional prefix space, optional
//      GPT-2 regex)
//   4. BPE over the bytes of each piece: the adjacent pair of lowest merge
//      rank is merged first (leftmost on ties) until no pair has a rank;
//      with ignore_merges a piece that is itself a vocabulary entry is taken
//      whole. Results are cached per thread.
//   5. post-processor: TemplateProcessing's special tokens around the text.
// The vocabulary is kept as raw bytes (the byte-level mapping undone), so
// steps 3-4 never build the mapped strings.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"

namespace trident::data {
namespace {

using json = nlohmann::json;

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A JSON value with the path that reached it, for messages.
struct Node {
  const std::string& file;
  const json& j;
  std::string path;

  Node at(const std::string& key) const {
    if (!j.is_object() || !j.contains(key)) fail_input("{}: {}: expected key '{}', not found", file, path, key);
    return {file, j.at(key), path + "." + key};
  }
  Node at(size_t i) const { return {file, j.at(i), fmt::format("{}[{}]", path, i)}; }
  bool has(const std::string& key) const { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }
  std::string str() const {
    if (!j.is_string()) fail_input("{}: {}: expected a string, found {}", file, path, j.dump());
    return j.get<std::string>();
  }
  bool boolean() const {
    if (!j.is_boolean()) fail_input("{}: {}: expected true or false, found {}", file, path, j.dump());
    return j.get<bool>();
  }
  bool flag(const std::string& key, bool fallback) const { return has(key) ? at(key).boolean() : fallback; }
  [[noreturn]] void refuse(const std::string& what) const {
    fail_input("{}: {}: {} is not implemented by Trident's tokenizer (docs/data.md lists what is)", file, path, what);
  }
};

// GPT-2's byte <-> printable character mapping.
struct ByteLevelMap {
  uint32_t to_cp[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteLevelMap() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? b : 256 + extra++;
      to_byte[to_cp[b]] = uint8_t(b);
    }
  }
};
const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap m;
  return m;
}

// Mapped characters -> raw bytes; nullopt if a character is not a mapped byte.
std::optional<std::string> unmap_bytes(const std::string& mapped) {
  const auto& m = byte_level_map();
  std::string out;
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(mapped.data());
  while (i < mapped.size()) {
    unsigned char c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + size_t(len) > mapped.size()) return std::nullopt;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (p[i + size_t(k)] & 0x3f);
    auto it = m.to_byte.find(cp);
    if (it == m.to_byte.end()) return std::nullopt;
    out += char(it->second);
    i += size_t(len);
  }
  return out;
}

class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const Node& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    uint32_t flags = literal ? PCRE2_LITERAL | PCRE2_UTF : PCRE2_UTF | PCRE2_UCP;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail_input("{}: {}: the pattern does not compile at offset {}: {}", where.file, where.path, off,
                 reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // interpreted when JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_piece(begin, end, matched) for the matches and the gaps
  // between them, in order. The text is valid UTF-8 (checked once before).
  template <typename F>
  void split(std::string_view text, F&& on_piece) const {
    // per thread: match data, and a JIT stack that may grow to 64 MiB (a
    // pattern like \s+(?!\S) over a very long run of spaces needs more than
    // the default 32 KiB)
    struct Scratch {
      pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
      pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 64 << 20, nullptr);
      pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
      Scratch() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
      ~Scratch() { pcre2_match_context_free(ctx), pcre2_jit_stack_free(stack), pcre2_match_data_free(md); }
    };
    thread_local Scratch scratch;
    pcre2_match_data* md = scratch.md;
    const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, gap = 0;
    while (pos <= text.size()) {
      int rc = pcre2_match(code_, s, text.size(), pos, PCRE2_NO_UTF_CHECK, md, scratch.ctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        throw Error(fmt::format("tokenizer: the split pattern failed at byte {} of a {}-byte piece: {}", pos,
                                text.size(), reinterpret_cast<const char*>(msg)));
      }
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step one character
        pos = b + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xc0) == 0x80) ++pos;
        continue;
      }
      if (b > gap) on_piece(gap, b, false);
      on_piece(b, e, true);
      gap = pos = e;
    }
    if (gap < text.size()) on_piece(gap, text.size(), false);
  }

 private:
  pcre2_code* code_ = nullptr;
};

struct PreStep {
  enum Kind { split, byte_level } kind;
  std::unique_ptr<Regex> regex;
  bool remove_matches = false;  // Split behavior Removed
  bool add_prefix_space = false;
};

class HfBpeTokenizer : public Tokenizer {
 public:
  HfBpeTokenizer(const std::string& path, const json& root) : path_(path) {
    Node r{path, root, "$"};
    load_model(r.at("model"));
    load_added(r);
    if (r.has("normalizer")) load_normalizer(r.at("normalizer"));
    if (!r.has("pre_tokenizer")) r.at("pre_tokenizer").refuse("a BPE model without a ByteLevel pre-tokenizer");
    load_pre(r.at("pre_tokenizer"));
    bool byte_level =
        std::any_of(pre_.begin(), pre_.end(), [](const PreStep& s) { return s.kind == PreStep::byte_level; });
    if (!byte_level)
      r.at("pre_tokenizer").refuse("a BPE pipeline without a ByteLevel pre-tokenizer (use the SentencePiece .model)");
    if (r.has("post_processor")) load_post(r.at("post_processor"));
    if (!r.has("decoder")) r.at("decoder").refuse("a missing decoder");
    load_decoder(r.at("decoder"));
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"})
      if (auto id = token_id(name)) {
        eod_ = id;
        break;
      }
  }

  TokenizerKind kind() const override { return TokenizerKind::hf_bpe; }
  int64_t vocab() const override { return vocab_size_; }
  std::optional<int32_t> eod() const override { return eod_; }
  std::optional<int32_t> token_id(const std::string& text) const override {
    for (const auto& a : added_)
      if (a.content == text) return a.id;
    return std::nullopt;
  }

  void encode(std::string_view text, std::vector<int32_t>& out, const std::string& what) const override {
    if (size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
      fail_input("{}: byte offset {}: invalid UTF-8 (byte 0x{:02x})", what, bad, static_cast<unsigned char>(text[bad]));
    out.insert(out.end(), prefix_.begin(), prefix_.end());
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
      const auto& cands = added_by_first_[static_cast<unsigned char>(text[i])];
      const Added* hit = nullptr;
      for (int k : cands)
        if (text.compare(i, added_[size_t(k)].content.size(), added_[size_t(k)].content) == 0) {
          hit = &added_[size_t(k)];
          break;
        }
      if (!hit) {
        ++i;
        continue;
      }
      encode_span(text.substr(start, i - start), out);
      out.push_back(hit->id);
      i += hit->content.size();
      start = i;
    }
    encode_span(text.substr(start), out);
    out.insert(out.end(), suffix_.begin(), suffix_.end());
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids)
      out += id >= 0 && size_t(id) < id_bytes_.size() ? id_bytes_[size_t(id)] : std::string("\xEF\xBF\xBD");
    return out;
  }

 private:
  struct Added {
    std::string content;
    int32_t id;
  };
  struct Merge {
    int32_t rank, id;
  };

  // A token id: an integer in [0, kMaxTokenId).
  int32_t parse_id(const json& v, const std::string& where) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxTokenId)
      fail_input("{}: {}: expected a token id in [0, {}), found {}", path_, where, kMaxTokenId, v.dump());
    return v.get<int32_t>();
  }

  void load_model(const Node& m) {
    if (m.at("type").str() != "BPE") m.at("type").refuse(fmt::format("model type '{}'", m.at("type").str()));
    if (m.has("dropout") && m.at("dropout").j.get<double>() != 0) m.at("dropout").refuse("BPE dropout");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.has(k) && !m.at(k).str().empty()) m.at(k).refuse(fmt::format("a non-empty {}", k));
    if (m.flag("byte_fallback", false)) m.at("byte_fallback").refuse("byte_fallback in a byte-level BPE");
    ignore_merges_ = m.flag("ignore_merges", false);
    const Node vocab = m.at("vocab");
    if (!vocab.j.is_object()) fail_input("{}: {}: expected an object token -> id", path_, vocab.path);
    id_bytes_.resize(vocab.j.size());
    std::unordered_map<int32_t, std::string> token_of;  // id -> the first token that has it
    for (auto it = vocab.j.begin(); it != vocab.j.end(); ++it) {
      const int32_t id = parse_id(it.value(), fmt::format("{}.{}", vocab.path, it.key()));
      if (auto [first, fresh] = token_of.emplace(id, it.key()); !fresh)
        fail_input("{}: {}: tokens '{}' and '{}' both have id {} (decoding would be ambiguous)", path_, vocab.path,
                   first->second, it.key(), id);
      if (size_t(id) >= id_bytes_.size()) id_bytes_.resize(size_t(id) + 1);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
      if (auto raw = unmap_bytes(it.key())) {
        bytes_to_id_.emplace(*raw, id);
        id_bytes_[size_t(id)] = *raw;
      } else {
        id_bytes_[size_t(id)] = it.key();
      }
    }
    for (int b = 0; b < 256; ++b) {
      auto it = bytes_to_id_.find(std::string(1, char(b)));
      if (it == bytes_to_id_.end())
        fail_input("{}: {}: no token for byte 0x{:02x} ('{}'): a byte-level vocabulary needs all 256", path_,
                   vocab.path, b, encode_utf8(byte_level_map().to_cp[b]));
      byte_id_[b] = it->second;
    }
    const Node merges = m.at("merges");
    if (!merges.j.is_array()) fail_input("{}: {}: expected a list", path_, merges.path);
    merges_.reserve(merges.j.size());
    for (size_t i = 0; i < merges.j.size(); ++i) {
      const Node e = merges.at(i);
      std::string a, b;
      if (e.j.is_string()) {
        const std::string s = e.str();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail_input("{}: {}: expected \"LEFT RIGHT\", found \"{}\"", path_, e.path, s);
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (e.j.is_array() && e.j.size() == 2) {
        a = e.at(0).str(), b = e.at(1).str();
      } else {
        fail_input("{}: {}: expected \"LEFT RIGHT\" or [LEFT, RIGHT], found {}", path_, e.path, e.j.dump());
      }
      auto ra = unmap_bytes(a), rb = unmap_bytes(b);
      auto ia = ra ? bytes_to_id_.find(*ra) : bytes_to_id_.end();
      auto ib = rb ? bytes_to_id_.find(*rb) : bytes_to_id_.end();
      auto ic = ra && rb ? bytes_to_id_.find(*ra + *rb) : bytes_to_id_.end();
      if (ia == bytes_to_id_.end() || ib == bytes_to_id_.end() || ic == bytes_to_id_.end())
        fail_input("{}: {}: merge \"{} {}\" uses or makes a token that is not in model.vocab", path_, e.path, a, b);
      merges_.emplace(key(ia->second, ib->second), Merge{int32_t(i), ic->second});
    }
  }

  void load_added(const Node& r) {
    if (!r.has("added_tokens")) return;
    const Node list = r.at("added_tokens");
    for (size_t i = 0; i < list.j.size(); ++i) {
      const Node a = list.at(i);
      for (const char* k : {"single_word", "lstrip", "rstrip"})
        if (a.flag(k, false)) a.at(k).refuse(fmt::format("an added token with {} true", k));
      const int32_t id = parse_id(a.at("id").j, a.path + ".id");
      const std::string content = a.at("content").str();
      if (content.empty()) fail_input("{}: {}.content: an added token cannot be empty", path_, a.path);
      for (const Added& other : added_)
        if (other.id == id && other.content != content)
          fail_input("{}: {}: added tokens '{}' and '{}' both have id {} (decoding would be ambiguous)", path_,
                     list.path, other.content, content, id);
      added_.push_back({content, int32_t(id)});
      vocab_size_ = std::max<int64_t>(vocab_size_, id + 1);
      if (size_t(id) >= id_bytes_.size()) id_bytes_.resize(size_t(id) + 1);
      id_bytes_[size_t(id)] = content;
    }
    for (size_t k = 0; k < added_.size(); ++k)
      added_by_first_[static_cast<unsigned char>(added_[k].content[0])].push_back(int(k));
    for (auto& c : added_by_first_)  // longest first: leftmost-longest matching
      std::stable_sort(c.begin(), c.end(), [&](int x, int y) {
        return added_[size_t(x)].content.size() > added_[size_t(y)].content.size();
      });
  }

  void load_normalizer(const Node& n) {
    const std::string type = n.at("type").str();
    if (type == "Sequence") {
      const Node list = n.at("normalizers");
      for (size_t i = 0; i < list.j.size(); ++i) load_normalizer(list.at(i));
    } else if (type == "NFC") {
      nfc_ = true;
    } else {
      n.refuse(fmt::format("normalizer '{}'", type));
    }
  }

  void load_pre(const Node& p) {
    const std::string type = p.at("type").str();
    if (type == "Sequence") {
      const Node list = p.at("pretokenizers");
      for (size_t i = 0; i < list.j.size(); ++i) load_pre(list.at(i));
    } else if (type == "Split") {
      if (p.flag("invert", false)) p.at("invert").refuse("an inverted Split");
      const std::string behavior = p.at("behavior").str();
      if (behavior != "Isolated" && behavior != "Removed")
        p.at("behavior").refuse(fmt::format("Split behavior '{}'", behavior));
      const Node pat = p.at("pattern");
      PreStep s{PreStep::split, nullptr};
      if (pat.has("Regex"))
        s.regex = std::make_unique<Regex>(pat.at("Regex").str(), false, pat.at("Regex"));
      else
        s.regex = std::make_unique<Regex>(pat.at("String").str(), true, pat.at("String"));
      s.remove_matches = behavior == "Removed";
      pre_.push_back(std::move(s));
    } else if (type == "ByteLevel") {
      PreStep s{PreStep::byte_level, nullptr};
      s.add_prefix_space = p.flag("add_prefix_space", false);
      if (p.flag("use_regex", true)) s.regex = std::make_unique<Regex>(kGpt2Pattern, false, p);
      pre_.push_back(std::move(s));
    } else {
      p.refuse(fmt::format("pre-tokenizer '{}'", type));
    }
  }

  void load_post(const Node& p) {
    const std::string type = p.at("type").str();
    if (type == "Sequence") {
      const Node list = p.at("processors");
      for (size_t i = 0; i < list.j.size(); ++i) load_post(list.at(i));
    } else if (type == "TemplateProcessing") {
      const Node single = p.at("single"), specials = p.at("special_tokens");
      bool after = false;
      for (size_t i = 0; i < single.j.size(); ++i) {
        const Node piece = single.at(i);
        if (piece.has("Sequence")) {
          after = true;
          continue;
        }
        const std::string name = piece.at("SpecialToken").at("id").str();
        const Node ids = specials.at(name).at("ids");
        for (size_t k = 0; k < ids.j.size(); ++k) (after ? suffix_ : prefix_).push_back(ids.at(k).j.get<int32_t>());
      }
    } else if (type != "ByteLevel") {
      p.refuse(fmt::format("post-processor '{}'", type));
    }
  }

  void load_decoder(const Node& d) {
    const std::string type = d.at("type").str();
    if (type != "ByteLevel") d.refuse(fmt::format("decoder '{}'", type));
  }

  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

  // Text between added tokens.
  void encode_span(std::string_view span, std::vector<int32_t>& out) const {
    if (span.empty()) return;
    std::string normalized;
    if (nfc_ && !is_ascii(span)) {
      utf8proc_uint8_t* dst = nullptr;
      utf8proc_ssize_t n =
          utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(span.data()), utf8proc_ssize_t(span.size()), &dst,
                       utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n < 0) fail_input("{}: NFC normalization failed ({})", path_, utf8proc_errmsg(n));
      normalized.assign(reinterpret_cast<char*>(dst), size_t(n));
      std::free(dst);
      span = normalized;
    }
    pre_tokenize(span, 0, out);
  }

  static bool is_ascii(std::string_view s) {
    for (unsigned char c : s)
      if (c & 0x80) return false;
    return true;
  }

  // Pre-tokenizer step `step` over one piece, then BPE on the final pieces.
  void pre_tokenize(std::string_view piece, size_t step, std::vector<int32_t>& out) const {
    if (step == pre_.size()) return bpe(piece, out);
    const PreStep& s = pre_[step];
    std::string prefixed;
    if (s.kind == PreStep::byte_level && s.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
      prefixed = " ";
      prefixed += piece;
      piece = prefixed;
    }
    if (!s.regex) return pre_tokenize(piece, step + 1, out);
    s.regex->split(piece, [&](size_t b, size_t e, bool matched) {
      if (!(matched && s.remove_matches)) pre_tokenize(piece.substr(b, e - b), step + 1, out);
    });
  }

  void bpe(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (word.size() == 1) return out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    if (ignore_merges_) {
      auto it = bytes_to_id_.find(std::string(word));
      if (it != bytes_to_id_.end()) return out.push_back(it->second);
    }
    struct Cache {
      const void* owner = nullptr;
      std::unordered_map<std::string, std::vector<int32_t>> map;
    };
    thread_local Cache cache;
    if (cache.owner != this || cache.map.size() > (1u << 18)) cache.map.clear(), cache.owner = this;
    std::string key_text(word);
    if (auto it = cache.map.find(key_text); it != cache.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<int32_t> sym = word.size() <= 32 ? merge_short(word) : merge_long(word);
    out.insert(out.end(), sym.begin(), sym.end());
    cache.map.emplace(std::move(key_text), std::move(sym));
  }

  // Both merge in the same order: the adjacent pair of lowest rank first,
  // the leftmost of equal ranks. Short words: rescan the pairs after each
  // merge (O(n^2), no allocation beyond the result).
  std::vector<int32_t> merge_short(std::string_view word) const {
    std::vector<int32_t> sym(word.size());
    for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(word[i])];
    while (sym.size() > 1) {
      int32_t best = INT32_MAX, best_id = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = merges_.find(key(sym[i], sym[i + 1]));
        if (it != merges_.end() && it->second.rank < best) best = it->second.rank, best_id = it->second.id, at = i;
      }
      if (best_id < 0) break;
      sym[at] = best_id;
      sym.erase(sym.begin() + std::ptrdiff_t(at) + 1);
    }
    return sym;
  }

  // Long words (a paragraph of CJK text is one piece): symbols in a linked
  // list and candidate merges in a heap ordered by (rank, position); an entry
  // whose pair has changed since it was pushed is skipped. O(n log n).
  std::vector<int32_t> merge_long(std::string_view word) const {
    const int64_t n = int64_t(word.size());
    const size_t len = word.size();
    std::vector<int32_t> id(len);
    std::vector<int64_t> prev(len), next(len);
    std::vector<char> alive(len, 1);
    for (int64_t i = 0; i < n; ++i)
      id[size_t(i)] = byte_id_[static_cast<unsigned char>(word[size_t(i)])], prev[size_t(i)] = i - 1,
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    struct Candidate {
      int32_t rank;
      int64_t pos;
      int32_t left, right, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto push = [&](int64_t pos) {
      const int64_t nx = next[size_t(pos)];
      if (nx < 0) return;
      auto it = merges_.find(key(id[size_t(pos)], id[size_t(nx)]));
      if (it != merges_.end()) heap.push({it->second.rank, pos, id[size_t(pos)], id[size_t(nx)], it->second.id});
    };
    for (int64_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int64_t pos = c.pos, nx = alive[size_t(pos)] ? next[size_t(pos)] : -1;
      if (nx < 0 || id[size_t(pos)] != c.left || id[size_t(nx)] != c.right) continue;  // stale
      id[size_t(pos)] = c.merged;
      alive[size_t(nx)] = 0;
      next[size_t(pos)] = next[size_t(nx)];
      if (next[size_t(pos)] >= 0) prev[size_t(next[size_t(pos)])] = pos;
      if (prev[size_t(pos)] >= 0) push(prev[size_t(pos)]);
      push(pos);
    }
    std::vector<int32_t> sym;
    for (int64_t i = 0; i >= 0; i = next[size_t(i)]) sym.push_back(id[size_t(i)]);
    return sym;
  }

  std::string path_;
  int64_t vocab_size_ = 0;
  bool ignore_merges_ = false, nfc_ = false;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::vector<std::string> id_bytes_;  // id -> raw bytes (decoding)
  int32_t byte_id_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<Added> added_;
  std::vector<int> added_by_first_[256];
  std::vector<PreStep> pre_;
  std::vector<int32_t> prefix_, suffix_;
  std::optional<int32_t> eod_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail_input("{}: not valid JSON ({})", path, e.what());
  }
  try {
    return std::make_unique<HfBpeTokenizer>(path, root);
  } catch (const json::exception& e) {  // a field of the wrong type deep inside
    fail_input("{}: unexpected content ({})", path, e.what());
  }
}

}  // namespace trident::data
