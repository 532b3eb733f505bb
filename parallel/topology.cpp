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
    case GroupKind::context:
      return "context";
    case GroupKind::data_context:
      return "data_context";
  }
  return "?";
}

std::vector<MeshAxis> full_order(const std::vector<MeshAxis>& order) {
  std::vector<MeshAxis> out = order;
  if (std::find(out.begin(), out.end(), Dim::context) == out.end()) {
    auto data = std::find(out.begin(), out.end(), Dim::data);
    out.insert(data, Dim::context);
  }
  return out;
}

Topology::Topology(int data, int pipeline, int tensor, const std::vector<MeshAxis>& order, int context) {
  TRIDENT_CHECK(data >= 1 && pipeline >= 1 && tensor >= 1 && context >= 1, "mesh sizes must be >= 1");
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

std::vector<int> Topology::members(GroupKind kind, int rank) const {
  const Coords me = coords(rank);
  std::vector<int> out;
  auto vary = [&](std::initializer_list<Dim> dims) {
    for (int r = 0; r < world(); ++r) {
      Coords c = coords(r);
      bool same = true;
      for (Dim d : order_)
        if (std::find(dims.begin(), dims.end(), d) == dims.end() && c.at(d) != me.at(d)) same = false;
      if (same) out.push_back(r);
    }
  };
  const int stages = size(Dim::pipeline);
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
    case GroupKind::context:
      vary({Dim::context});
      break;
    case GroupKind::data_context:
      vary({Dim::data, Dim::context});
      break;
    case GroupKind::model_parallel:
      vary({Dim::tensor, Dim::pipeline});
      break;
    case GroupKind::embedding: {
      // first and last stage together; a middle stage holds no embedding: alone
      Coords first = me, last = me;
      first.pp = 0, last.pp = stages - 1;
      if (me.pp != 0 && me.pp != stages - 1) {
        out = {rank_of(me)};
        break;
      }
      out = {rank_of(first)};
      if (stages > 1) out.push_back(rank_of(last));
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
  const bool cp = size(Dim::context) > 1;
  std::string s =
      cp ? fmt::format("mesh data {} x context {} x pipeline {} x tensor {} = world {} | {} ranks per node\n",
                       size(Dim::data), size(Dim::context), size(Dim::pipeline), size(Dim::tensor), world(),
                       ranks_per_node)
         : fmt::format("mesh data {} x pipeline {} x tensor {} = world {} | {} ranks per node\n", size(Dim::data),
                       size(Dim::pipeline), size(Dim::tensor), world(), ranks_per_node);
  s += fmt::format("{:>5} {:>5} {:>4} ", "rank", "node", "dp");
  if (cp) s += fmt::format("{:>4} ", "cp");
  s += fmt::format("{:>4} {:>4}  {:<14} ", "pp", "tp", "tensor");
  if (cp) s += fmt::format("{:<14} ", "context");
  s += fmt::format("{:<14} {:<14} ", "pipeline", "data");
  if (cp) s += fmt::format("{:<16} ", "data_context");
  s += fmt::format("{:<16} {}\n", "model_parallel", "embedding");
  for (int r = 0; r < world(); ++r) {
    Coords c = coords(r);
    auto g = [&](GroupKind k) { return fmt::format("[{}]", fmt::join(members(k, r), ",")); };
    s += fmt::format("{:>5} {:>5} {:>4} ", r, r / ranks_per_node, c.dp);
    if (cp) s += fmt::format("{:>4} ", c.cp);
    s += fmt::format("{:>4} {:>4}  {:<14} ", c.pp, c.tp, g(GroupKind::tensor));
    if (cp) s += fmt::format("{:<14} ", g(GroupKind::context));
    s += fmt::format("{:<14} {:<14} ", g(GroupKind::pipeline), g(GroupKind::data));
    if (cp) s += fmt::format("{:<16} ", g(GroupKind::data_context));
    s += fmt::format("{:<16} {}\n", g(GroupKind::model_parallel), g(GroupKind::embedding));
  }
  return s;
}

}  // namespace trident::parallel
