// SentencePiece models (LLaMA-2 style tokenizer.model) through the
// SentencePiece library: BPE and unigram, byte fallback included. Documents
// get no BOS (as Megatron-LM's SentencePiece tokenizer); EOD is the model's
// </s> (eos_id).
#include <sentencepiece_processor.h>

#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"

namespace trident::data {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const std::string& bytes) {
    sentencepiece::util::Status status;
    try {
      status = sp_.LoadFromSerializedProto(bytes);
    } catch (const std::exception& e) {  // the library throws on some malformed models (an empty piece)
      fail_input("{}: a SentencePiece model the library cannot load ({})", path, e.what());
    }
    if (!status.ok())
      fail_input("{}: not a SentencePiece model nor a Hugging Face tokenizer.json ({})", path, status.ToString());
  }
  TokenizerKind kind() const override { return TokenizerKind::sentencepiece; }
  int64_t vocab() const override { return sp_.GetPieceSize(); }
  std::optional<int32_t> eod() const override {
    return sp_.eos_id() >= 0 ? std::optional<int32_t>(sp_.eos_id()) : std::nullopt;
  }
  std::optional<int32_t> token_id(const std::string& text) const override {
    const int id = sp_.PieceToId(text);
    return id != sp_.unk_id() || text == sp_.IdToPiece(sp_.unk_id()) ? std::optional<int32_t>(id) : std::nullopt;
  }
  void encode(std::string_view text, std::vector<int32_t>& out, const std::string& what) const override {
    if (size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
      fail_input("{}: byte offset {}: invalid UTF-8 (byte 0x{:02x})", what, bad, static_cast<unsigned char>(text[bad]));
    std::vector<int> ids;
    auto status = sp_.Encode(absl::string_view(text.data(), text.size()), &ids);
    if (!status.ok()) fail_input("{}: SentencePiece could not encode ({})", what, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> v;
    for (int32_t id : ids) v.push_back(id >= 0 && id < sp_.GetPieceSize() ? id : sp_.unk_id());
    std::string out;
    sp_.Decode(v, &out).IgnoreError();
    return out;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const std::string& bytes) {
  return std::make_unique<SentencePieceTokenizer>(path, bytes);
}

}  // namespace trident::data
