// SentencePiece tokenizer.model on arbitrary bytes: a model that loads
// encodes and decodes a fixed text.
#include "core/data/tokenizers/tokenizer.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  trident::fuzz::refuses_or_reads([&] {
    const auto tok = trident::data::load_sentencepiece("tokenizer.model", bytes);
    const auto ids = tok->encode("Hello, world! 123 ünïcödé", "text");
    (void)tok->decode(ids);
  });
  return 0;
}
