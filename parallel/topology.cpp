// Topology arithmetic (see topology.hpp).
#include "parallel/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"

namespace trident::parallel {

std::vector<MeshAxis> full_order(const std::vector<MeshAxis>& order) {
  std::vector<MeshAxis> out = order;
  if (std::find(out.begin(), out.end(), Dim::context) == out.end()) {
    auto data = std::find(out.begin(), out.end(), Dim::data);
    out.insert(data, Dim::context);
  }
  return out;
}

Topology::Topology(int data, int pipeline, int tensor, const std::vector<MeshAxis>& order, int context, int expert,
                   bool whole_experts, int data_shard)
    : expert_(expert), whole_(whole_experts && tensor > 1), shard_(data_shard > 0 ? data_shard : data * context) {
  TRIDENT_CHECK((data * context) % shard_ == 0, "data_shard({}) does not divide data x context = {}", shard_,
                data * context);
  TRIDENT_CHECK(data >= 1 && pipeline >= 1 && tensor >= 1 && context >= 1, "mesh sizes must be >= 1");
  const int domain = data * context * (whole_ ? tensor : 1);
  TRIDENT_CHECK(expert >= 1 && domain % expert == 0, "expert({}) does not divide data x context{} = {}", expert,
                whole_ ? " x tensor" : "", domain);
  size_[size_t(Dim::data)] = data, size_[size_t(Dim::pipeline)] = pipeline, size_[size_t(Dim::tensor)] = tensor;
  size_[size_t(Dim::context)] = context;
  const std::vector<MeshAxis> full = full_order(order);
  TRIDENT_CHECK(full.size() == 4, "order needs the four axes (context may be left out)");
  std::set<Dim> seen;
  for (size_t i = 0; i < 4; ++i) {
    TRIDENT_CHECK(seen.insert(full[i]).second, "mesh dimension '{}' listed twice", enum_name(full[i]));
    order_[i] = full[i];
  }
}

Coords Topology::coords(int rank) const {
  TRIDENT_CHECK(rank >= 0 && rank < world(), "rank {} outside world size {}", rank, world());
  Coords c;
  for (Dim d : order_) {
    c.at(d) = rank % size(d);
    rank /= size(d);
  }
  return c;
}

int Topology::rank_of(const Coords& c) const {
  int rank = 0, stride = 1;
  for (Dim d : order_) {
    rank += c.at(d) * stride;
    stride *= size(d);
  }
  return rank;
}

namespace {

// The axes along which a group's members differ (all but the embedding group).
std::vector<Dim> varied_axes(GroupKind kind) {
  switch (kind) {
    case GroupKind::tensor:
      return {Dim::tensor};
    case GroupKind::pipeline:
      return {Dim::pipeline};
    case GroupKind::data:
      return {Dim::data};
    case GroupKind::context:
      return {Dim::context};
    case GroupKind::data_context:
    case GroupKind::expert:
    case GroupKind::expert_data:
    case GroupKind::data_shard:
    case GroupKind::data_replicate:
    case GroupKind::expert_shard:
    case GroupKind::expert_replicate:
      return {Dim::data, Dim::context};
    case GroupKind::model_parallel:
      return {Dim::tensor, Dim::pipeline};
    case GroupKind::embedding:
      break;
  }
  return {};
}

}  // namespace

int Topology::expert_shard_size(int expert_data) const { return expert_data / std::gcd(data_replicate(), expert_data); }

std::pair<int, std::vector<int>> Topology::replica_place(int rank) const {
  std::vector<int> dc = members(GroupKind::data_context, rank);
  if (whole_) {  // the whole pipeline stage: every tensor rank's data_context group
    const std::vector<int> tensor = members(GroupKind::tensor, rank);
    dc.clear();
    for (int t : tensor) {
      const std::vector<int> g = members(GroupKind::data_context, t);
      dc.insert(dc.end(), g.begin(), g.end());
    }
    std::sort(dc.begin(), dc.end());
  }
  const int place = int(std::lower_bound(dc.begin(), dc.end(), rank) - dc.begin());
  return {place, std::move(dc)};
}

std::vector<int> Topology::members(GroupKind kind, int rank) const {
  const Coords me = coords(rank);
  std::vector<int> out;
  if (kind == GroupKind::data_shard || kind == GroupKind::data_replicate || kind == GroupKind::expert_shard ||
      kind == GroupKind::expert_replicate) {  // runs of `run` consecutive members of the whole group
    const bool dense = kind == GroupKind::data_shard || kind == GroupKind::data_replicate;
    const std::vector<int> all = members(dense ? GroupKind::data_context : GroupKind::expert_data, rank);
    const int run = dense ? shard_ : expert_shard_size(int(all.size()));
    const int place = int(std::lower_bound(all.begin(), all.end(), rank) - all.begin());
    const bool shard = kind == GroupKind::data_shard || kind == GroupKind::expert_shard;
    for (int i = 0; i < int(all.size()); ++i)
      if (shard ? i / run == place / run : i % run == place % run) out.push_back(all[size_t(i)]);
    return out;
  }
  if (kind == GroupKind::expert || kind == GroupKind::expert_data) {
    const auto [place, dc] = replica_place(rank);
    for (int i = 0; i < int(dc.size()); ++i)
      if (kind == GroupKind::expert ? i / expert_ == place / expert_ : i % expert_ == place % expert_)
        out.push_back(dc[size_t(i)]);
    return out;
  }
  if (kind != GroupKind::embedding) {
    // the ranks whose coordinates equal mine off the varied axes, ascending:
    // work in the group's size, not the world's
    const std::vector<Dim> d = varied_axes(kind);
    Coords c = me;
    const int outer = d.size() > 1 ? size(d[1]) : 1;
    for (int j = 0; j < outer; ++j) {
      if (d.size() > 1) c.at(d[1]) = j;
      for (int i = 0; i < size(d[0]); ++i) c.at(d[0]) = i, out.push_back(rank_of(c));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // embedding: first and last stage together; a middle stage holds no embedding: alone
  const int stages = size(Dim::pipeline);
  Coords first = me, last = me;
  first.pp = 0, last.pp = stages - 1;
  if (me.pp != 0 && me.pp != stages - 1) return {rank_of(me)};
  out = {rank_of(first)};
  if (stages > 1) out.push_back(rank_of(last));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int>> Topology::groups(GroupKind kind) const {
  std::set<std::vector<int>> unique;
  for (int r = 0; r < world(); ++r) unique.insert(members(kind, r));
  std::vector<std::vector<int>> out(unique.begin(), unique.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return out;
}

namespace {

// A group's members: all of them up to 16; a longer evenly spaced group as
// its first two, "...", its last and the count (a world of 16384 stays a
// table of 16384 short lines).
std::string group_text(const std::vector<int>& m) {
  const size_t n = m.size();
  bool even = n > 16;
  for (size_t i = 2; even && i < n; ++i) even = m[i] - m[i - 1] == m[1] - m[0];
  if (!even) return fmt::format("[{}]", fmt::join(m, ","));
  return fmt::format("[{},{},...,{}]({})", m[0], m[1], m[n - 1], n);
}

}  // namespace

std::string Topology::describe(int ranks_per_node) const {
  const bool cp = size(Dim::context) > 1, ep = expert_ > 1, hsdp = data_replicate() > 1;
  std::string s =
      cp ? fmt::format("mesh data {} x context {} x pipeline {} x tensor {} = world {} | {} ranks per node\n",
                       size(Dim::data), size(Dim::context), size(Dim::pipeline), size(Dim::tensor), world(),
                       ranks_per_node)
         : fmt::format("mesh data {} x pipeline {} x tensor {} = world {} | {} ranks per node\n", size(Dim::data),
                       size(Dim::pipeline), size(Dim::tensor), world(), ranks_per_node);
  if (ep && whole_)
    s += fmt::format(
        "experts: expert {} x expert_data {} (data x context x tensor = {}, each expert whole: expert_tensor 1) x "
        "pipeline {}\n",
        expert_, size(Dim::data) * size(Dim::context) * size(Dim::tensor) / expert_,
        size(Dim::data) * size(Dim::context) * size(Dim::tensor), size(Dim::pipeline));
  else if (ep)
    s += fmt::format("experts: expert {} x expert_data {} (data x context = {}) x pipeline {} x tensor {}\n", expert_,
                     size(Dim::data) * size(Dim::context) / expert_, size(Dim::data) * size(Dim::context),
                     size(Dim::pipeline), size(Dim::tensor));
  if (hsdp)
    s += fmt::format(
        "hsdp: data_shard {} x data_replicate {} (data x context = {}): ZeRO shards within a data_shard "
        "group, replicated over data_replicate{}\n",
        shard_, data_replicate(), size(Dim::data) * size(Dim::context),
        ep ? " (experts: expert_shard x expert_replicate of expert_data)" : "");
  s += fmt::format("{:>5} {:>5} {:>4} ", "rank", "node", "dp");
  if (cp) s += fmt::format("{:>4} ", "cp");
  s += fmt::format("{:>4} {:>4}  {:<14} ", "pp", "tp", "tensor");
  if (cp) s += fmt::format("{:<14} ", "context");
  s += fmt::format("{:<14} {:<14} ", "pipeline", "data");
  if (cp) s += fmt::format("{:<16} ", "data_context");
  if (ep) s += fmt::format("{:<14} {:<14} ", "expert", "expert_data");
  if (hsdp) s += fmt::format("{:<14} {:<14} ", "data_shard", "data_replicate");
  if (hsdp && ep) s += fmt::format("{:<14} {:<16} ", "expert_shard", "expert_replicate");
  s += fmt::format("{:<16} {}\n", "model_parallel", "embedding");
  std::map<std::pair<int, int>, std::string> texts;  // (group kind, lowest member) -> text
  std::map<int, std::vector<int>> replicas;          // data_context groups by lowest member
  std::map<int, std::vector<int>> data_context;      // (HSDP) the same without whole experts' tensor ranks
  std::map<int, std::vector<int>> expert_data;       // (HSDP) expert_data groups by lowest member
  for (int r = 0; r < world(); ++r) {
    Coords c = coords(r);
    auto g = [&](GroupKind k) -> const std::string& {  // each group's text made once
      Coords low = c;
      for (Dim d : varied_axes(k)) low.at(d) = 0;
      const std::pair<int, int> key{int(k), k == GroupKind::embedding ? r : rank_of(low)};
      auto it = texts.find(key);
      if (it == texts.end()) it = texts.emplace(key, group_text(members(k, r))).first;
      return it->second;
    };
    auto expert_g = [&](GroupKind k) -> const std::string& {  // keyed by the group's lowest member
      Coords low = c;
      low.dp = low.cp = 0;
      if (whole_) low.tp = 0;
      std::vector<int>& dc = replicas[rank_of(low)];
      if (dc.empty()) dc = replica_place(r).second;
      const int place = int(std::lower_bound(dc.begin(), dc.end(), r) - dc.begin());
      const int first = dc[size_t(k == GroupKind::expert ? place / expert_ * expert_ : place % expert_)];
      auto it = texts.find({int(k), first});
      if (it == texts.end()) it = texts.emplace(std::pair<int, int>{int(k), first}, group_text(members(k, r))).first;
      return it->second;
    };
    auto run_g = [&](GroupKind k) -> const std::string& {  // HSDP: runs of a data_context or expert_data group
      const bool dense = k == GroupKind::data_shard || k == GroupKind::data_replicate;
      const bool shard = k == GroupKind::data_shard || k == GroupKind::expert_shard;
      Coords low = c;
      low.dp = low.cp = 0;
      if (!dense && whole_) low.tp = 0;
      std::vector<int>& dc = (dense ? data_context : replicas)[rank_of(low)];
      if (dc.empty()) dc = dense ? members(GroupKind::data_context, r) : replica_place(r).second;
      int place = int(std::lower_bound(dc.begin(), dc.end(), r) - dc.begin());
      const std::vector<int>* all = &dc;
      if (!dense) {  // this rank's expert_data group: every expert-th member of dc
        std::vector<int>& ed = expert_data[dc[size_t(place % expert_)]];
        if (ed.empty())
          for (size_t i = size_t(place % expert_); i < dc.size(); i += size_t(expert_)) ed.push_back(dc[i]);
        all = &ed, place /= expert_;
      }
      const int run = dense ? shard_ : expert_shard_size(int(all->size()));
      const int first = (*all)[size_t(shard ? place / run * run : place % run)];
      auto it = texts.find({int(k), first});
      if (it == texts.end()) it = texts.emplace(std::pair<int, int>{int(k), first}, group_text(members(k, r))).first;
      return it->second;
    };
    s += fmt::format("{:>5} {:>5} {:>4} ", r, r / ranks_per_node, c.dp);
    if (cp) s += fmt::format("{:>4} ", c.cp);
    s += fmt::format("{:>4} {:>4}  {:<14} ", c.pp, c.tp, g(GroupKind::tensor));
    if (cp) s += fmt::format("{:<14} ", g(GroupKind::context));
    s += fmt::format("{:<14} {:<14} ", g(GroupKind::pipeline), g(GroupKind::data));
    if (cp) s += fmt::format("{:<16} ", g(GroupKind::data_context));
    if (ep) s += fmt::format("{:<14} {:<14} ", expert_g(GroupKind::expert), expert_g(GroupKind::expert_data));
    if (hsdp) s += fmt::format("{:<14} {:<14} ", run_g(GroupKind::data_shard), run_g(GroupKind::data_replicate));
    if (hsdp && ep)
      s += fmt::format("{:<14} {:<16} ", run_g(GroupKind::expert_shard), run_g(GroupKind::expert_replicate));
    s += fmt::format("{:<16} {}\n", g(GroupKind::model_parallel), g(GroupKind::embedding));
  }
  return s;
}

}  // namespace trident::parallel
