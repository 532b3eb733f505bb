// Text generation from a checkpoint (see sample.hpp).
#include "launch/tools/sample.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/data/dataset_record.hpp"
#include "core/data/tokenizers/tokenizer.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/philox.hpp"
#include "core/safetensors.hpp"
#include "launch/checkpoint/checkpoint.hpp"
#include "model/transformer.hpp"

namespace trident::launch {

// The tokenizer the checkpoint records (its own copy, checked on load);
// checkpoints from before tokenizers were recorded: the copy next to the
// training data, checked against the data's record.
std::unique_ptr<data::Tokenizer> checkpoint_tokenizer(const WholeModel& w) {
  if (w.tokenizer) {
    const auto& t = *w.tokenizer;
    if (t.file.empty()) return data::Tokenizer::byte();
    const std::string file = (std::filesystem::path(w.dir) / t.file).string();
    return t.kind == TokenizerKind::chars ? data::Tokenizer::chars(file) : data::Tokenizer::from_file(file);
  }
  if (w.recipe.data.synthetic) return data::Tokenizer::byte();
  const std::string& data = w.recipe.data.train[0].path;
  log::info("sample: {} records no tokenizer (an older checkpoint); using the one next to {}", w.dir, data);
  data::check_tokenizer_copy(data::read_dataset_record(data));
  return data::Tokenizer::for_dataset(data);
}

std::vector<int32_t> sample(const SampleOptions& o) {
  if (o.temperature < 0 || !std::isfinite(o.temperature))
    fail_input("sample: --temperature: expected a number >= 0, found {}", o.temperature);
  if (o.top_k < 0) fail_input("sample: --top-k: expected an integer >= 0, found {}", o.top_k);
  if (o.tokens < 0) fail_input("sample: --tokens: expected an integer >= 0, found {}", o.tokens);
  const WholeModel w = load_whole_model(o.checkpoint);
  const ModelConfig& m = w.recipe.model;
  const bool have_text = !o.prompt.empty();
  const std::unique_ptr<data::Tokenizer> tokp = checkpoint_tokenizer(w);
  const data::Tokenizer& tok = *tokp;
  if (have_text && w.recipe.data.synthetic)
    fail_input(
        "sample: --prompt: the checkpoint's recipe {} trains on synthetic data, which has no tokenizer; give "
        "token ids with --prompt-ids",
        w.recipe.source);
  std::vector<int32_t> ids = have_text ? tok.encode(o.prompt, "--prompt") : o.prompt_ids;
  if (ids.empty()) fail_input("sample: give a non-empty --prompt TEXT or --prompt-ids ID,ID,...");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= m.vocab)
      fail_input("sample: --prompt-ids: token {} at position {} is outside the vocabulary [0, {})", ids[i], i, m.vocab);
  if (!have_text || w.recipe.data.synthetic)
    log::info("sample: {} (step {}), prompt of {} tokens", w.dir, w.step, ids.size());
  else
    log::info("sample: {} (step {}), {} tokenizer (vocab {}), prompt of {} tokens", w.dir, w.step, tok.kind(),
              tok.vocab(), ids.size());

  model::Transformer<float> net(m, w.recipe.seed);
  std::copy(w.params.begin(), w.params.end(), net.params().data<float>());
  auto ctx = net.make_activations(1, model::Recompute::none);
  const int64_t T = m.seq_len, Vp = net.dims().vocab;
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  // logits of position `at` of the last min(T, n) tokens
  auto run = [&](const std::vector<int32_t>& seq) -> int64_t {
    const int64_t n = std::min<int64_t>(T, int64_t(seq.size()));
    std::fill(window.begin(), window.end(), 0);
    std::copy(seq.end() - n, seq.end(), window.begin());
    net.forward(*ctx, window.data(), nullptr, 0.0f);
    return n;
  };

  if (!o.logits_out.empty()) {  // the prompt's logits (the first seq_len tokens), for comparisons
    const int64_t n = std::min<int64_t>(T, int64_t(ids.size()));
    run(std::vector<int32_t>(ids.begin(), ids.begin() + n));
    std::vector<float> logits(static_cast<size_t>(n * m.vocab));
    for (int64_t t = 0; t < n; ++t)
      std::copy(ctx->logits + t * Vp, ctx->logits + t * Vp + m.vocab, logits.begin() + t * m.vocab);
    write_safetensors(o.logits_out,
                      {{"logits", DType::f32, {n, m.vocab}, logits.data()}, {"tokens", DType::i32, {n}, ids.data()}},
                      {{"checkpoint", w.dir}, {"step", std::to_string(w.step)}});
  }

  const PhiloxKey key = philox_key(o.seed, "sample");
  std::vector<int32_t> seq = ids, out;
  std::string shown;  // text printed so far
  size_t printed = 0;
  std::vector<double> p(static_cast<size_t>(m.vocab));
  std::vector<int32_t> order(static_cast<size_t>(m.vocab));
  if (have_text) std::fputs(o.prompt.c_str(), stdout), std::fflush(stdout);
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t n = run(seq);
    const float* row = ctx->logits + (n - 1) * Vp;  // the real vocabulary; padding columns never drawn
    int32_t next;
    if (o.temperature == 0) {
      next = int32_t(std::max_element(row, row + m.vocab) - row);
    } else {
      std::iota(order.begin(), order.end(), 0);
      int64_t k = o.top_k > 0 ? std::min(o.top_k, m.vocab) : m.vocab;
      if (k < m.vocab)
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, double(row[order[size_t(j)]]));
      for (int64_t j = 0; j < k; ++j)
        sum += p[size_t(j)] = std::exp((double(row[order[size_t(j)]]) - mx) / o.temperature);
      const double u = u32_to_unit(philox_at(key, uint64_t(i))[0]) * sum;
      double acc = 0;
      next = order[size_t(k - 1)];
      for (int64_t j = 0; j < k; ++j)
        if ((acc += p[size_t(j)]) >= u) {
          next = order[size_t(j)];
          break;
        }
    }
    seq.push_back(next);
    out.push_back(next);
    if (have_text) {  // the decoded text grows; print what is new (SentencePiece joins pieces with spaces)
      const std::string text = tok.decode(out);
      if (text.size() > printed && text.compare(0, printed, shown) == 0) {
        std::fwrite(text.data() + printed, 1, text.size() - printed, stdout), std::fflush(stdout);
        shown = text, printed = text.size();
      }
    }
  }
  if (have_text)
    std::fputs("\n", stdout);
  else
    std::printf("%s\n", fmt::format("{}", fmt::join(out, " ")).c_str());
  return out;
}

}  // namespace trident::launch
