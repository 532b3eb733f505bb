// The character tokenizer's PREFIX.vocab.json on arbitrary text.
#include "core/data/tokenizers/tokenizer.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trident::fuzz::write_input("x.vocab.json", data, size);
  trident::fuzz::refuses_or_reads([&] {
    const auto tok = trident::data::Tokenizer::chars(path);
    const auto ids = tok->encode("the quick brown fox", "text");
    (void)tok->decode(ids);
  });
  return 0;
}
