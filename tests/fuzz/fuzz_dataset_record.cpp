// prepare's dataset record (PREFIX.meta.json) on arbitrary text.
#include "core/data/dataset_record.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trident::fuzz::write_input("r.meta.json", data, size);
  trident::fuzz::refuses_or_reads([&] {
    for (const char* split : {"/r_train", "/r_valid", "/r"}) {
      const auto rec = trident::data::read_dataset_record(trident::fuzz::scratch() + split);
      trident::data::check_tokenizer_copy(rec);
    }
  });
  return 0;
}
