// `trident prepare`: a text file -> an indexed token dataset (train and valid
// splits), docs/data.md. InputError naming the file on bad input; nothing is
// left behind on failure.
#pragma once
#include <string>

namespace trident::launch {

struct PrepareOptions {
  std::string input, out, tokenizer = "byte";
  double valid_fraction = 0.1;
};
void prepare(const PrepareOptions& opts);

}  // namespace trident::launch
