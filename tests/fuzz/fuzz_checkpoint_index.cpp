// The checkpoint index reader (index.json) on arbitrary text.
#include "launch/checkpoint/index.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trident::fuzz::write_input("index.json", data, size);
  trident::fuzz::refuses_or_reads([&] { trident::launch::checkpoint::read_index(path); });
  return 0;
}
