// prepare's document reader on an arbitrary JSONL file (key "text"), lines
// that are not documents skipped and counted.
#include "core/data/documents.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trident::fuzz::write_input("x.jsonl", data, size);
  for (bool skip : {false, true})
    trident::fuzz::refuses_or_reads([&] {
      trident::data::DocumentReader reader({path}, trident::data::DocumentFormat::jsonl, "text", skip);
      trident::data::Document doc;
      while (reader.next(doc)) {}
    });
  return 0;
}
