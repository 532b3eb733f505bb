// `trident prepare` end to end on an arbitrary corpus (JSONL, text by
// paragraph or by line; 1 or 2 workers; byte tokenizer) with one document
// larger than every internal buffer (the input's bytes repeated past 1.4 x
// the read chunk and encoding batch, which the second byte sets to 16-271
// bytes so that each run is quick) placed first, last or alone. Bad input is an
// InputError; a dataset it writes accounts for every document and token
// (train + valid + skipped = read), or the target aborts.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/data/prepare.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const size_t buffer = 16 + size_t(data[1]), big_bytes = buffer * 7 / 5;
  const std::string body(reinterpret_cast<const char*>(data + 2), size - 2);
  const bool jsonl = flags & 1, lines = flags & 16;
  const int where = (flags >> 1) % 3;  // 0: big first, 1: big last, 2: big alone
  std::string piece;
  for (char c : body)
    if (c != '\n' && c != '\r') piece += c;
  if (piece.empty()) piece = "x";
  std::string big;
  while (big.size() < big_bytes) big += piece;
  if (jsonl) big = nlohmann::json({{"text", big}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  big += jsonl || lines ? "\n" : "\n\n";
  const std::string text = where == 0 ? big + body : where == 1 ? body + "\n\n" + big : big;
  const std::string input = trident::fuzz::write_input(jsonl ? "in.jsonl" : "in.txt",
                                                       reinterpret_cast<const uint8_t*>(text.data()), text.size());
  trident::data::PrepareOptions o;
  o.inputs = {input}, o.out = trident::fuzz::scratch() + "/ds", o.tokenizer = "byte", o.force = true;
  o.eod_token = (flags & 32) ? "none" : "", o.valid_fraction = (flags & 64) ? 0.25 : 0;
  o.workers = 1 + ((flags >> 3) & 1), o.doc_per_line = lines, o.skip_bad_lines = flags & 128;
  o.buffer_bytes = buffer;
  bool written = false;
  trident::fuzz::refuses_or_reads([&] {
    trident::data::prepare(o);
    written = true;
  });
  if (!written) return 0;
  std::ifstream in(o.out + ".meta.json");
  const auto meta = nlohmann::json::parse(in);
  const auto& sp = meta["splits"];
  const int64_t docs = sp["train"]["documents"].get<int64_t>() + sp["valid"]["documents"].get<int64_t>() +
                       meta["skipped"]["empty_documents"].get<int64_t>();
  const int64_t tokens = sp["train"]["tokens"].get<int64_t>() + sp["valid"]["tokens"].get<int64_t>();
  if (docs != meta["documents_read"].get<int64_t>() || tokens != meta["tokens"].get<int64_t>() ||
      tokens < int64_t(big_bytes))  // the big document is in a split
    std::abort();
  return 0;
}
