// The safetensors reader (checkpoint shards, Hugging Face weights) on
// arbitrary files: every tensor it lists is read.
#include <vector>

#include "core/safetensors.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trident::fuzz::write_input("x.safetensors", data, size);
  trident::fuzz::refuses_or_reads([&] {
    const trident::SafetensorsReader reader(path);
    for (const auto& e : reader.entries()) {
      std::vector<char> out(size_t(e.end - e.begin));  // checked against the file's size by the reader
      reader.read(e.name, out.data());
      const int64_t n = e.end - e.begin;
      if (n > 0) reader.read_range(e.name, 0, 1, out.data());
    }
  });
  return 0;
}
