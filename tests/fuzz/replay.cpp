// Every fuzz target's seeds and regression inputs, replayed by the normal
// build (gcc, no libFuzzer) on every test run: an input that once crashed a
// parser stays fixed. Each target's entry point is compiled under its own
// name (see tests/CMakeLists.txt). Fuzzing itself is tests/fuzz/run.sh.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#define TARGET(name) extern "C" int fuzz_entry_##name(const uint8_t*, size_t);
#define TARGETS(X)    \
  X(recipe)           \
  X(safetensors)      \
  X(indexed_dataset)  \
  X(checkpoint_index) \
  X(hf_config)        \
  X(hf_tokenizer)     \
  X(sentencepiece)    \
  X(char_vocab)       \
  X(dataset_record)   \
  X(jsonl)            \
  X(prepare)
TARGETS(TARGET)
#undef TARGET

namespace {

using Entry = int (*)(const uint8_t*, size_t);

int replay(const std::string& target, Entry entry) {
  int inputs = 0;
  for (const char* kind : {"seeds", "regressions"}) {
    const std::filesystem::path dir = std::filesystem::path(TRIDENT_SOURCE_DIR) / "tests/fuzz" / kind / target;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      EXPECT_NO_THROW(entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++inputs;
    }
  }
  return inputs;
}

#define REPLAY(name) \
  TEST(FuzzReplay, name) { EXPECT_GT(replay(#name, fuzz_entry_##name), 0) << "no seeds for " #name; }
TARGETS(REPLAY)

}  // namespace
