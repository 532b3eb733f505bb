// Resharding a checkpoint onto this rank's shard (see reshard.hpp).
#include "launch/checkpoint/reshard.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.hpp"
#include "core/safetensors.hpp"

namespace trident::launch::checkpoint {

namespace {

// The pieces of local row `e` (elements [e, e + run) of parameter p, global
// row grow from column gcol) that this rank's shard needs, appended to plan.
int64_t plan_row(const std::vector<IndexPiece>& pieces, int64_t grow, int64_t gcol, int64_t run, int64_t dst,
                 ReshardPlan& plan, std::set<std::string>& files) {
  int64_t filled = 0;
  std::vector<char> done(static_cast<size_t>(run), 0);
  for (const IndexPiece& pc : pieces) {
    int64_t lr = 0;  // the saved slice's local row holding global row grow
    bool has = false;
    for (auto [a, b] : pc.rows) {
      if (grow >= a && grow < b) {
        lr += grow - a, has = true;
        break;
      }
      lr += b - a;
    }
    if (!has) continue;
    const int64_t x0 = std::max(gcol, pc.col_begin), x1 = std::min(gcol + run, pc.col_begin + pc.local_cols());
    if (x1 <= x0) continue;
    const int64_t le = lr * pc.local_cols() + (x0 - pc.col_begin);  // saved local element of column x0
    const int64_t a = std::max(le, pc.local_begin), b = std::min(le + (x1 - x0), pc.local_end);
    if (b <= a) continue;
    // replicated parameters are saved by several ranks: take each element once
    const int64_t first = (x0 - gcol) + (a - le);  // position in this run
    for (int64_t i = first; i < first + (b - a);) {
      if (done[size_t(i)]) {
        ++i;
        continue;
      }
      int64_t j = i;
      while (j < first + (b - a) && !done[size_t(j)]) done[size_t(j++)] = 1;
      plan.copies.push_back({pc.file, pc.offset + (a - pc.local_begin) + (i - first), dst + i, j - i});
      files.insert(pc.file);
      filled += j - i;
      i = j;
    }
  }
  return filled;
}

}  // namespace

ReshardPlan plan_reshard(const CheckpointIndex& index, const std::string& index_path, const RankState& s) {
  ReshardPlan plan;
  std::set<std::string> files;
  for (const auto& p : s.registry->params()) {
    const int64_t lo = std::max(s.shard_begin, p.offset), hi = std::min(s.shard_end, p.offset + p.numel);
    if (hi <= lo) continue;
    auto found = index.tensors.find(p.name);
    if (found == index.tensors.end()) fail_input("{}: no tensor '{}' in the checkpoint", index_path, p.name);
    const int64_t lc = p.cols();
    int64_t filled = 0;
    for (int64_t e = lo - p.offset; e < hi - p.offset;) {  // one local row (part) at a time
      const int64_t c = e % lc, run = std::min(lc - c, hi - p.offset - e);
      const int64_t g = p.global_index(e);
      const int64_t grow = g / p.global_cols(), gcol = g % p.global_cols();
      const int64_t dst = p.offset + e - s.shard_begin;
      if (grow >= p.valid_rows) {  // vocabulary padding: nothing saved, nothing used
        plan.zeros.push_back({dst, dst + run});
        filled += run;
        e += run;
        continue;
      }
      filled += plan_row(found->second.pieces, grow, gcol, run, dst, plan, files);
      e += run;
    }
    if (filled != hi - lo)
      fail_input("{}: tensor '{}': the checkpoint holds {} of the {} elements this rank needs", index_path, p.name,
                 filled, hi - lo);
  }
  plan.files.assign(files.begin(), files.end());
  return plan;
}

void run_reshard(const ReshardPlan& plan, const std::string& dir, const RankState& s) {
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  for (const auto& name : plan.files)
    readers[name] = std::make_unique<SafetensorsReader>((std::filesystem::path(dir) / name).string());
  for (const Copy& c : plan.copies) {
    const auto& r = *readers.at(c.file);
    r.read_range("params", c.src, c.count, s.params + c.dst);
    if (s.exp_avg) r.read_range("exp_avg", c.src, c.count, s.exp_avg + c.dst);
    if (s.exp_avg_sq) r.read_range("exp_avg_sq", c.src, c.count, s.exp_avg_sq + c.dst);
  }
  for (auto [a, b] : plan.zeros)
    for (float* t : {s.params, s.exp_avg, s.exp_avg_sq})
      if (t) std::fill(t + a, t + b, 0.0f);
}

}  // namespace trident::launch::checkpoint
