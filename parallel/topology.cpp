// Topology arithmetic (see topology.hpp).
#include "parallel/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "core/error.hpp"

namespace trident::parallel {

const char* group_name(GroupKind k) {
  switch (k) {
    case GroupKind::tensor:
      return "tensor";
    case GroupKind::pipeline:
      return "pipeline";
    case GroupKind::data:
      return "data";
    case GroupKind::model_parallel:
      return "model_parallel";
    case GroupKind::embedding:
      return "embedding";
  }
  return "?";
}

Topology::Topology(int data, int pipeline, int tensor, const std::vector<MeshAxis>& order)
    : data_(data), pipeline_(pipeline), tensor_(tensor) {
  TRIDENT_CHECK(data >= 1 && pipeline >= 1 && tensor >= 1, "mesh sizes must be >= 1");
  TRIDENT_CHECK(order.size() == 3, "order needs three dimensions");
  std::set<Dim> seen;
  for (size_t i = 0; i < 3; ++i) {
    TRIDENT_CHECK(seen.insert(order[i]).second, "mesh dimension '{}' listed twice", enum_name(order[i]));
    order_[i] = order[i];
  }
}

int Topology::size(Dim d) const { return d == Dim::data ? data_ : d == Dim::pipeline ? pipeline_ : tensor_; }

static int& coord(Coords& c, Dim d) { return d == Dim::data ? c.dp : d == Dim::pipeline ? c.pp : c.tp; }
static int coord(const Coords& c, Dim d) { return d == Dim::data ? c.dp : d == Dim::pipeline ? c.pp : c.tp; }

Coords Topology::coords(int rank) const {
  TRIDENT_CHECK(rank >= 0 && rank < world(), "rank {} outside world size {}", rank, world());
  Coords c;
  for (Dim d : order_) {
    coord(c, d) = rank % size(d);
    rank /= size(d);
  }
  return c;
}

int Topology::rank_of(const Coords& c) const {
  int rank = 0, stride = 1;
  for (Dim d : order_) {
    rank += coord(c, d) * stride;
    stride *= size(d);
  }
  return rank;
}

std::vector<int> Topology::members(GroupKind kind, int rank) const {
  const Coords me = coords(rank);
  std::vector<int> out;
  auto vary = [&](std::initializer_list<Dim> dims) {
    for (int r = 0; r < world(); ++r) {
      Coords c = coords(r);
      bool same = true;
      for (Dim d : {Dim::data, Dim::pipeline, Dim::tensor})
        if (std::find(dims.begin(), dims.end(), d) == dims.end() && coord(c, d) != coord(me, d)) same = false;
      if (same) out.push_back(r);
    }
  };
  switch (kind) {
    case GroupKind::tensor:
      vary({Dim::tensor});
      break;
    case GroupKind::pipeline:
      vary({Dim::pipeline});
      break;
    case GroupKind::data:
      vary({Dim::data});
      break;
    case GroupKind::model_parallel:
      vary({Dim::tensor, Dim::pipeline});
      break;
    case GroupKind::embedding: {
      // first and last stage together; a middle stage holds no embedding: alone
      Coords first = me, last = me;
      first.pp = 0, last.pp = pipeline_ - 1;
      if (me.pp != 0 && me.pp != pipeline_ - 1) {
        out = {rank_of(me)};
        break;
      }
      out = {rank_of(first)};
      if (pipeline_ > 1) out.push_back(rank_of(last));
      std::sort(out.begin(), out.end());
      break;
    }
  }
  return out;
}

std::vector<std::vector<int>> Topology::groups(GroupKind kind) const {
  std::set<std::vector<int>> unique;
  for (int r = 0; r < world(); ++r) unique.insert(members(kind, r));
  std::vector<std::vector<int>> out(unique.begin(), unique.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return out;
}

std::string Topology::describe(int ranks_per_node) const {
  std::string s = fmt::format("mesh data {} x pipeline {} x tensor {} = world {} | {} ranks per node\n", data_,
                              pipeline_, tensor_, world(), ranks_per_node);
  s += fmt::format("{:>5} {:>5} {:>4} {:>4} {:>4}  {:<14} {:<14} {:<14} {:<16} {}\n", "rank", "node", "dp", "pp", "tp",
                   "tensor", "pipeline", "data", "model_parallel", "embedding");
  for (int r = 0; r < world(); ++r) {
    Coords c = coords(r);
    auto g = [&](GroupKind k) { return fmt::format("[{}]", fmt::join(members(k, r), ",")); };
    s += fmt::format("{:>5} {:>5} {:>4} {:>4} {:>4}  {:<14} {:<14} {:<14} {:<16} {}\n", r, r / ranks_per_node, c.dp,
                     c.pp, c.tp, g(GroupKind::tensor), g(GroupKind::pipeline), g(GroupKind::data),
                     g(GroupKind::model_parallel), g(GroupKind::embedding));
  }
  return s;
}

}  // namespace trident::parallel
