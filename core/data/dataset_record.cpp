// The dataset record's reader (see dataset_record.hpp).
#include "core/data/dataset_record.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/crc32c.hpp"
#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"

namespace trident::data {

DatasetRecord read_dataset_record(const std::string& prefix) {
  DatasetRecord r;
  const std::string path = dataset_base(prefix) + ".meta.json";
  if (!std::filesystem::exists(path)) return r;
  std::ifstream in(path);
  try {
    const auto j = nlohmann::json::parse(in);
    const auto& t = j.at("tokenizer");
    const std::string kind = t.at("kind").get<std::string>();
    r.tokenizer = parse_enum<TokenizerKind>(kind);
    if (!r.tokenizer)
      fail_input("{}: key 'tokenizer.kind': expected {}, found '{}'", path, enum_choices<TokenizerKind>(), kind);
    r.vocab = t.at("vocab").get<int64_t>();
    r.eod = t.value("eod", int64_t(-1));
    const bool valid = prefix.size() > 6 && prefix.compare(prefix.size() - 6, 6, "_valid") == 0;
    const bool train = prefix.size() > 6 && prefix.compare(prefix.size() - 6, 6, "_train") == 0;
    // a record without this split (or without splits) says nothing of its ids;
    // operator[] of a const json on a missing key is undefined, so look first
    const char* split = valid ? "valid" : "train";
    if ((valid || train) && j.contains("splits") && j.at("splits").contains(split))
      r.max_id = j.at("splits").at(split).value("max_id", int64_t(-1));
    if (t.contains("file")) {
      r.tokenizer_file = (std::filesystem::path(path).parent_path() / t.at("file").get<std::string>()).string();
      r.tokenizer_crc32c = t.at("crc32c").get<uint32_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not a dataset record written by trident prepare ({})", path, e.what());
  }
  r.path = path;
  return r;
}

void check_tokenizer_copy(const DatasetRecord& r) {
  if (r.tokenizer_file.empty()) return;
  if (!std::filesystem::exists(r.tokenizer_file))
    fail_input("{}: the tokenizer the data was made with is missing (recorded in {})", r.tokenizer_file, r.path);
  const uint32_t crc = crc32c_file(r.tokenizer_file);
  if (crc != r.tokenizer_crc32c)
    fail_input(
        "{}: CRC-32C {:08x} does not match {:08x} recorded in {}: the tokenizer next to the data was changed "
        "after prepare; prepare the data again",
        r.tokenizer_file, crc, r.tokenizer_crc32c, r.path);
}

}  // namespace trident::data
