// The indexed dataset reader on an arbitrary PREFIX.idx (with a fixed
// PREFIX.bin of 4096 bytes): every document it lists is read.
#include <vector>

#include "core/data/dataset.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string bin = [] {
    std::vector<uint8_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint8_t(i * 7);
    return trident::fuzz::write_input("d.bin", tokens.data(), tokens.size());
  }();
  (void)bin;
  trident::fuzz::write_input("d.idx", data, size);
  trident::fuzz::refuses_or_reads([&] {
    const trident::data::IndexedDataset ds(trident::fuzz::scratch() + "/d");
    std::vector<int32_t> out;
    for (int64_t d = 0; d < ds.num_documents() && d < 64; ++d) {
      out.resize(size_t(ds.doc_tokens(d)));
      ds.read(ds.doc_offset(d), ds.doc_tokens(d), out.data());
    }
    if (ds.num_tokens() > 0) (void)ds.max_token();
  });
  return 0;
}
