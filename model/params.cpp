// Parameter registry: names, shapes, layout and initialisation.
#include "model/params.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace trident::model {

bool is_expert_major(const ParamRow& row) { return row.rows == Dim::two_EI || row.rows == Dim::EC; }

SharedGradientRanges shared_gradient_ranges(const ParamRegistry& reg, const ModelConfig& cfg, int pipeline_stages,
                                            bool sequence_parallel) {
  SharedGradientRanges out;
  const bool sliced_router = reg.experts().whole;  // each tensor rank routes its share of the rows
  // the token table is shared with another rank where this one holds the embedding or the head, not both
  // (dualpipev's rank 0, or one stage of several chunks, holds both and keeps no copy)
  bool has_embedding = false, has_head = false;
  for (const auto& c : reg.chunks()) has_embedding |= c.embedding, has_head |= c.head;
  const bool shared_table =
      (cfg.tie_embeddings || cfg.mtp.depth > 0) && pipeline_stages > 1 && !(has_embedding && has_head);
  for (const auto& p : reg.params()) {
    const std::pair<int64_t, int64_t> range{p.offset, p.offset + p.numel};
    if (p.token_table && shared_table) out.tied.push_back(range);
    if (p.replication == Replication::tensor &&
        (((sequence_parallel || p.head_partial) && !p.all_rows) || (sliced_router && p.router)))
      out.tensor_replicated.push_back(range);
    if (p.replication == Replication::kv_group) out.kv_replicated.push_back(range);
  }
  return out;
}

std::string layer_prefix(const ModelConfig& cfg, int64_t layer) {
  return fmt::format(fmt::runtime(architecture(cfg.arch).layer_prefix), layer);
}

// One parameter of the architecture's table, at the end of the flat buffer.
void ParamRegistry::add(std::string name, const ParamRow& row, const ModelConfig& m) {
  ParamSpec p;
  p.name = std::move(name), p.offset = total_;
  p.shape = row_shape(row, m, m.padded_vocab(shard_.size));
  p.kind = row.kind, p.init = row.init;
  if (row.init == InitKind::normal)
    p.init_std = row.residual_std ? m.init_std / std::sqrt(2.0 * double(m.layers)) : m.init_std;
  p.token_table = row.slot == Slot::token_table;
  p.vocab_rows = row.rows == Dim::V;
  p.all_rows = row.all_rows;
  p.head_partial = row.head_partial;
  p.expert_major = is_expert_major(row);
  p.router = row.slot == Slot::router_weight || row.slot == Slot::router_bias || row.slot == Slot::router_logit_bias;
  p.numel = shape_numel(p.shape);
  total_ += p.numel;
  params_.push_back(std::move(p));
}

// The architecture's rows, chunk by chunk: the embedding on the first chunk,
// the layers, the final norm and head on the last. A chunk with the head but
// not the embedding gets its own copy of a tied token table (tied_copy).
ParamRegistry::ParamRegistry(const ModelConfig& m, TensorShard shard, std::vector<ChunkSpec> chunks,
                             ExpertShard experts)
    : shard_(shard), chunks_(std::move(chunks)), experts_(experts) {
  TRIDENT_CHECK(experts.size == 1 || (m.moe.enabled && m.moe.experts % experts.size == 0),
                "{} experts over an expert group of {}", m.moe.experts, experts.size);
  if (chunks_.empty()) chunks_.push_back({0, m.layers, true, true});
  const Architecture& arch = architecture(m.arch);
  bool has_embedding = false;
  for (const auto& c : chunks_) has_embedding |= c.embedding;
  for (const auto& chunk : chunks_) {
    if (chunk.embedding)
      for (const ParamRow* row : arch.part(Part::embedding)) add(row->name, *row, m);
    for (int64_t l = chunk.first_layer; l < chunk.first_layer + chunk.layers; ++l)
      for (const ParamRow* row : arch.layer_rows(m, l)) add(layer_prefix(m, l) + row->name, *row, m);
    if (!chunk.head) continue;
    for (const ParamRow* row : arch.part(Part::head))
      if (!row->untied_only || !m.tie_embeddings) add(row->name, *row, m);
    // the head's own copy of the embedding: tied, or read by multi-token prediction
    if ((m.tie_embeddings || m.mtp.depth > 0) && !has_embedding) {
      add(arch.token_table().name, arch.token_table(), m);
      params_.back().tied_copy = true;
    }
    // multi-token prediction's modules, after the head (layers L .. L + D - 1)
    for (int64_t l = m.layers; l < m.layers + m.mtp.depth; ++l)
      for (const ParamRow* row : arch.layer_rows(m, l)) add(layer_prefix(m, l) + row->name, *row, m);
  }
  // Split experts: their weights go after everything else (chunk and layer
  // order kept), so the dense part and the expert part, reduced over
  // different groups, are each one contiguous range.
  // (whole experts too: their gradients reduce over a group of their own, the tensor ranks' included)
  const bool split = experts_.size > 1 || experts_.whole;
  if (split) std::stable_partition(params_.begin(), params_.end(), [](const ParamSpec& p) { return !p.expert_major; });
  apply_plan(m);
  expert_begin_ = total_;
  if (split)
    for (const ParamSpec& p : params_)
      if (p.expert_major) {
        expert_begin_ = p.offset;
        break;
      }
}

const ParamSpec& ParamRegistry::find(const std::string& name, int64_t begin, int64_t end) const {
  for (const auto& p : params_)
    if (p.name == name && p.offset >= begin && p.offset < end) return p;
  throw Error(fmt::format("no parameter named '{}' in elements [{}, {})", name, begin, end));
}

// Global shapes -> this rank's slices, offsets in the local flat buffer.
void ParamRegistry::apply_plan(const ModelConfig& m) {
  const int r = shard_.rank, t = shard_.size;
  total_ = 0;
  for (ParamSpec& p : params_) {
    p.global_shape = p.shape;
    const int64_t rows = p.shape[0], cols = p.global_cols();
    p.valid_rows = p.vocab_rows ? m.vocab : rows;
    const PlanEntry e = tensor_plan(m, p.name);
    p.style = e.style;
    int64_t local_rows = rows, local_cols = cols;
    p.row_ranges = {{0, rows}};
    p.col_begin = 0;
    p.replication = t > 1 ? Replication::tensor : Replication::none;
    switch (e.style) {
      case ShardStyle::replicate:
        break;
      case ShardStyle::column:
      case ShardStyle::vocab: {
        const int64_t part = rows / e.parts, per = part / t;
        p.row_ranges.clear();
        for (int k = 0; k < e.parts; ++k) p.row_ranges.push_back({k * part + r * per, k * part + (r + 1) * per});
        local_rows = per * e.parts;
        p.replication = Replication::none;
        break;
      }
      case ShardStyle::column_kv: {
        const int64_t D = m.head_dim(), heads = std::max<int64_t>(m.kv_heads / t, 1);
        const int64_t first = int64_t(r) * m.kv_heads / t;
        p.row_ranges = {{first * D, (first + heads) * D}};
        local_rows = heads * D;
        p.replication = m.kv_heads < t ? Replication::kv_group : Replication::none;
        break;
      }
      case ShardStyle::row:
        local_cols = cols / t;
        p.col_begin = r * local_cols;
        p.replication = Replication::none;
        break;
    }
    if (p.expert_major && experts_.whole) {  // each expert whole on its rank, whatever the tensor split
      local_rows = rows, local_cols = cols, p.row_ranges = {{0, rows}}, p.col_begin = 0;
      p.replication = Replication::none;
    }
    if (p.expert_major && experts_.size > 1) {  // only this rank's experts' blocks of rows
      const int64_t per = rows / m.moe.experts, L = m.moe.experts / experts_.size;
      const int64_t lo = int64_t(experts_.rank) * L * per, hi = lo + L * per;
      std::vector<std::pair<int64_t, int64_t>> mine;
      local_rows = 0;
      for (auto [b, end] : p.row_ranges)
        if (std::max(b, lo) < std::min(end, hi))
          mine.push_back({std::max(b, lo), std::min(end, hi)}), local_rows += std::min(end, hi) - std::max(b, lo);
      p.row_ranges = std::move(mine);
    }
    p.shape = p.global_shape.size() > 1 ? Shape{local_rows, local_cols} : Shape{local_rows};
    p.numel = local_rows * local_cols;
    p.offset = total_;
    total_ += p.numel;
    p.counts_in_norm =  // a buffer's gradient slot holds counts (bias_ranges), not a gradient
        !p.tied_copy && p.kind != ParamKind::buffer &&
        (p.replication == Replication::none || (p.replication == Replication::tensor && r == 0) ||
         (p.replication == Replication::kv_group && r % (t / m.kv_heads) == 0));
  }
}

int64_t ParamSpec::global_index(int64_t e) const {
  const int64_t lc = cols(), lr = e / lc, c = e % lc;
  int64_t row = lr;
  for (auto [b, end] : row_ranges) {
    if (row < end - b) return (b + row) * global_cols() + col_begin + c;
    row -= end - b;
  }
  throw Error(fmt::format("{}: local element {} outside the slice", name, e));
}

int64_t consolidated_numel(const ModelConfig& cfg) {
  int64_t n = 0;
  const ParamRegistry reg(cfg);
  for (const auto& p : reg.params()) n += p.valid_rows * p.global_cols();
  return n;
}

template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<std::pair<const ParamRegistry*, const T*>>& parts) {
  std::map<std::string, int64_t> base;  // each parameter's offset in the consolidated layout
  {
    const ParamRegistry whole(cfg);
    int64_t n = 0;
    for (const auto& p : whole.params()) base[p.name] = n, n += p.valid_rows * p.global_cols();
  }
  for (const auto& [reg, buf] : parts)
    for (const auto& p : reg->params()) {
      if (p.tied_copy) continue;
      const T* src = buf + p.offset;
      const int64_t lc = p.cols(), gc = p.global_cols(), b = base.at(p.name);
      for (int64_t lr = 0; lr < p.rows(); ++lr) {
        const int64_t g = p.global_index(lr * lc);  // first element of the local row
        if (g / gc >= p.valid_rows) continue;       // vocabulary padding
        std::copy(src + lr * lc, src + (lr + 1) * lc, out + b + g);
      }
    }
}

template <typename T>
void consolidate(T* out, const ModelConfig& cfg, const std::vector<const T*>& rank_buffers) {
  const int t = int(rank_buffers.size());
  std::vector<ParamRegistry> regs;
  for (int r = 0; r < t; ++r) regs.emplace_back(cfg, TensorShard{r, t});
  std::vector<std::pair<const ParamRegistry*, const T*>> parts;
  for (int r = 0; r < t; ++r) parts.push_back({&regs[size_t(r)], rank_buffers[size_t(r)]});
  consolidate(out, cfg, parts);
}

template void consolidate<float>(float*, const ModelConfig&, const std::vector<const float*>&);
template void consolidate<double>(double*, const ModelConfig&, const std::vector<const double*>&);
template void consolidate<float>(float*, const ModelConfig&,
                                 const std::vector<std::pair<const ParamRegistry*, const float*>>&);
template void consolidate<double>(double*, const ModelConfig&,
                                  const std::vector<std::pair<const ParamRegistry*, const double*>>&);

const ParamSpec& ParamRegistry::at(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw Error(fmt::format("no parameter named '{}'", name));
}

template <typename T>
void ParamRegistry::initialize_range(T* out, int64_t begin, int64_t end, uint64_t seed) const {
  for (const auto& p : params_) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (hi <= lo) continue;
    T* dst = out + (lo - begin);
    switch (p.init) {
      case InitKind::zeros:
        std::fill(dst, dst + (hi - lo), T(0));
        break;
      case InitKind::ones:
        std::fill(dst, dst + (hi - lo), T(1));
        break;
      case InitKind::normal: {
        // Philox by global index: runs of this rank's slice that are
        // contiguous in the global tensor (at most one local row each).
        const PhiloxKey key = philox_key(seed, p.name);
        const int64_t lc = p.cols();
        for (int64_t e = lo - p.offset; e < hi - p.offset;) {
          const int64_t limit = hi - p.offset, g = p.global_index(e);
          int64_t run = std::min(lc - e % lc, limit - e);
          while (e + run < limit && p.global_index(e + run) == g + run) run += std::min(lc, limit - e - run);
          philox_fill_normal(out + (p.offset + e - begin), uint64_t(g), run, key, 0.0, p.init_std);
          e += run;
        }
        break;
      }
    }
  }
}

template void ParamRegistry::initialize_range<float>(float*, int64_t, int64_t, uint64_t) const;
template void ParamRegistry::initialize_range<double>(double*, int64_t, int64_t, uint64_t) const;

std::vector<kernels::AdamWRange> decay_ranges(const ParamRegistry& reg, const OptimConfig& cfg) {
  std::vector<kernels::AdamWRange> out;
  bool last = false;
  for (const auto& p : reg.params()) {
    if (p.kind == ParamKind::buffer) continue;
    const bool decay = p.kind == ParamKind::weight ||
                       ((p.kind == ParamKind::bias || p.kind == ParamKind::norm) && cfg.decay_norms_and_biases) ||
                       (p.kind == ParamKind::embedding && cfg.decay_embeddings);
    if (!out.empty() && last == decay && out.back().offset + out.back().size == p.offset)
      out.back().size += p.numel;
    else
      out.push_back({p.offset, p.numel, decay ? cfg.weight_decay : 0.0});
    last = decay;
  }
  return out;
}

std::vector<kernels::MuonMatrix> muon_matrices(const ParamRegistry& reg, const ModelConfig& cfg, int64_t begin,
                                               int64_t end, bool sliced) {
  std::vector<kernels::MuonMatrix> out;
  const Architecture& arch = architecture(cfg.arch);
  // the registries of the tensor group's ranks (this rank's own when not sliced)
  std::vector<std::unique_ptr<ParamRegistry>> made;
  std::vector<const ParamRegistry*> ranks = {&reg};
  if (sliced && reg.shard().size > 1) {
    ranks.assign(size_t(reg.shard().size), nullptr);
    for (int r = 0; r < reg.shard().size; ++r) {
      if (r == reg.shard().rank) {
        ranks[size_t(r)] = &reg;
        continue;
      }
      made.push_back(
          std::make_unique<ParamRegistry>(cfg, TensorShard{r, reg.shard().size}, reg.chunks(), reg.experts()));
      ranks[size_t(r)] = made.back().get();
    }
  }
  for (size_t i = 0; i < reg.params().size(); ++i) {
    const ParamSpec& p = reg.params()[i];
    const ParamRow* row = arch.find(p.name);
    if (p.kind != ParamKind::weight || p.shape.size() != 2 || p.vocab_rows || !row || p.offset < begin ||
        p.offset >= end)
      continue;
    if (row->slot == Slot::router_weight || row->slot == Slot::shared_gate_weight || row->slot == Slot::mtp_proj)
      continue;
    // the logical matrices: each expert's block of rows, and the plan's row blocks in it (GPT-2's c_attn: q, k
    // and v; an expert's gate and up)
    const int64_t blocks = (p.expert_major ? cfg.moe.experts : 1) * std::max(1, row->plan.parts);
    const int64_t rows = p.global_shape[0] / blocks, cols = p.global_cols();
    std::vector<kernels::MuonMatrix> mine(size_t(blocks), kernels::MuonMatrix{rows, cols, {}});
    for (auto& m : mine) m.held.resize(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      const ParamSpec& q = ranks[r]->params()[i];
      TRIDENT_CHECK(q.name == p.name && q.offset == p.offset, "Muon: tensor rank {}'s layout differs at {}", r, p.name);
      int64_t local = 0;  // local row of the range's first row
      for (auto [lo, hi] : q.row_ranges) {
        for (int64_t g = lo; g < hi;) {
          const int64_t k = g / rows, n = std::min(hi, (k + 1) * rows) - g;
          mine[size_t(k)].held[r].push_back(
              {q.offset + (local + g - lo) * q.cols(), g - k * rows, q.col_begin, n, q.cols()});
          g += n;
        }
        local += hi - lo;
      }
    }
    for (auto& m : mine)  // blocks no rank of the group holds: other expert ranks' experts
      if (std::any_of(m.held.begin(), m.held.end(), [](const auto& h) { return !h.empty(); }))
        out.push_back(std::move(m));
  }
  return out;
}

std::vector<kernels::AdamWRange> without_matrices(const std::vector<kernels::AdamWRange>& ranges,
                                                  const std::vector<kernels::MuonMatrix>& matrices, int slice) {
  std::vector<std::pair<int64_t, int64_t>> held;  // this rank's matrix elements, in order
  for (const auto& m : matrices)
    for (const auto& b : m.held[size_t(slice)]) held.push_back({b.offset, b.offset + b.rows * b.cols});
  std::sort(held.begin(), held.end());
  std::vector<kernels::AdamWRange> out;
  auto emit = [&](int64_t lo, int64_t hi, double decay) {
    if (hi > lo) out.push_back({lo, hi - lo, decay});
  };
  size_t m = 0;  // both lists in offset order, the blocks disjoint
  for (const auto& r : ranges) {
    const int64_t end = r.offset + r.size;
    while (m < held.size() && held[m].second <= r.offset) ++m;
    int64_t at = r.offset;
    for (size_t k = m; k < held.size() && held[k].first < end; ++k) {
      emit(at, held[k].first, r.weight_decay);
      at = std::max(at, held[k].second);
    }
    emit(at, end, r.weight_decay);
  }
  return out;
}

std::vector<kernels::BiasRange> bias_ranges(const ParamRegistry& reg, const Recipe& rc) {
  std::vector<kernels::BiasRange> out;
  const MoeConfig& e = rc.model.moe;
  if (e.bias_rate <= 0) return out;
  const double mean = double(rc.train.global_batch * rc.model.seq_len * e.top_k) / double(e.experts);
  for (const auto& p : reg.params())
    if (p.kind == ParamKind::buffer) out.push_back({p.offset, p.numel, e.bias_rate, mean});
  return out;
}

std::vector<std::pair<int64_t, int64_t>> norm_counted_runs(const ParamRegistry& reg, int64_t begin, int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t run_begin = -1, run_end = -1;
  auto flush = [&] {
    if (run_begin >= 0) runs.push_back({run_begin - begin, run_end - begin});
    run_begin = run_end = -1;
  };
  for (const auto& p : reg.params()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (hi <= lo) continue;
    if (!p.counts_in_norm) {
      flush();
      continue;
    }
    if (run_begin >= 0 && run_end == lo) {
      run_end = hi;
    } else {
      flush();
      run_begin = lo, run_end = hi;
    }
  }
  flush();
  return runs;
}

}  // namespace trident::model
