// `trident sample`: text from a checkpoint (saved under any mesh), on one
// process. The prompt is encoded with the tokenizer of the checkpoint's
// training data (core/data/tokenizers/tokenizer.hpp), or given as token ids. Each new
// token runs the model over the last model.seq_len tokens (positions past
// the text are padding, which causal attention never lets the text see)
// and draws from softmax(logits / temperature) restricted to the top_k most
// likely tokens (0: all); temperature 0 is greedy. The draws come from
// Philox keyed by the seed: the same seed gives the same text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident::launch {

struct SampleOptions {
  std::string checkpoint;
  std::string prompt;               // text, or
  std::vector<int32_t> prompt_ids;  // token ids (datasets without a tokenizer: synthetic)
  int64_t tokens = 200;             // new tokens
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string logits_out;  // safetensors: "logits" [prompt, vocab] and "tokens" [prompt] of the prompt
};

// Prints the prompt and its continuation on stdout; returns the new token ids.
std::vector<int32_t> sample(const SampleOptions& o);

}  // namespace trident::launch
