// Sample indexes at scale (docs/data.md, docs/performance.md): an indexed
// dataset of 10M documents (5..44 tokens, about 245M tokens, u16) is written
// once to TRIDENT_BENCH_DIR (default /tmp/trident_bench_data); then
//   BM_SampleIndexBuild       shuffles and indexes one epoch (goal < 5 s)
//   BM_SampleIndexCachedLoad  opens the cached index (goal < 0.1 s): header
//                             checks and a memory map
//   BM_DatasetOpen            opens the dataset itself: the .idx mapped,
//                             fully validated, its CRC-32C (the cache key)
//                             and the document offsets computed
//   BM_SampleRead             samples of seq_len 2048 + 1 per second
// Iterations(1) for the build: it is seconds long; the others repeat.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "core/data/dataset.hpp"
#include "core/data/sample_index.hpp"

namespace {

constexpr int64_t kDocs = 10'000'000;
constexpr int64_t kSeq = 2048;

std::string prefix() {
  const char* dir = std::getenv("TRIDENT_BENCH_DIR");
  const std::string d = dir ? dir : "/tmp/trident_bench_data";
  std::filesystem::create_directories(d);
  const std::string p = d + "/docs10m";
  if (!std::filesystem::exists(p + ".idx")) {
    trident::data::IndexedDatasetWriter w(p, trident::data::TokenDType::u16);
    std::vector<int32_t> doc(64);
    uint64_t x = 1;
    for (int64_t i = 0; i < kDocs; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t n = 5 + int64_t((x >> 33) % 40);
      for (int64_t t = 0; t < n; ++t) doc[size_t(t)] = int32_t((x >> (t % 32)) & 0x7fff);
      w.add_sequence(doc.data(), n);
      w.end_document();
    }
    w.finish();
  }
  return p;
}

void BM_SampleIndexBuild(benchmark::State& state) {
  trident::data::IndexedDataset data(prefix());
  for (auto _ : state) {
    state.PauseTiming();
    std::filesystem::remove(trident::data::SampleIndex(data, 1, kSeq, 1, {}).path());
    state.ResumeTiming();
    trident::data::SampleIndex idx(data, 1, kSeq, 1, {});
    benchmark::DoNotOptimize(idx.samples_per_epoch());
    state.counters["build_s"] = idx.build_seconds();
  }
  state.counters["documents"] = double(data.num_documents());
  state.counters["tokens"] = double(data.num_tokens());
}
BENCHMARK(BM_SampleIndexBuild)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void BM_SampleIndexCachedLoad(benchmark::State& state) {
  trident::data::IndexedDataset data(prefix());
  { trident::data::SampleIndex warm(data, 1, kSeq, 1, {}); }
  for (auto _ : state) {
    trident::data::SampleIndex idx(data, 1, kSeq, 1, {});
    if (!idx.loaded_from_cache()) state.SkipWithError("the cache was not used");
    benchmark::DoNotOptimize(idx.samples_per_epoch());
  }
}
BENCHMARK(BM_SampleIndexCachedLoad)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DatasetOpen(benchmark::State& state) {
  const std::string p = prefix();
  for (auto _ : state) {
    trident::data::IndexedDataset data(p);
    benchmark::DoNotOptimize(data.index_crc32c());
  }
}
BENCHMARK(BM_DatasetOpen)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SampleRead(benchmark::State& state) {
  trident::data::IndexedDataset data(prefix());
  trident::data::SampleIndex idx(data, 1, kSeq, 1, {});
  std::vector<int32_t> out(kSeq + 1);
  uint64_t k = 0;
  for (auto _ : state) {
    idx.sample(k, out.data());
    k = (k + 7919) % uint64_t(idx.samples_per_epoch());
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_SampleRead)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
