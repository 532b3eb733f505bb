// Reductions of scalars and small host vectors over a group (see rank_reductions.hpp).
#include "parallel/rank_reductions.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"

namespace trident::parallel {
namespace {

bool alone(Communicator* group) { return !group || group->size() == 1; }

double reduce_scalar(Communicator* group, double local, ReduceOp op) {
  if (alone(group)) return local;
  Tensor t = Tensor::empty({1}, DType::f64, MemCategory::comm);
  t.data<double>()[0] = local;
  group->all_reduce(t, {.op = op})->wait();
  return t.data<double>()[0];
}

}  // namespace

double sum_over(Communicator* group, double local) { return reduce_scalar(group, local, ReduceOp::sum); }
double max_over(Communicator* group, double local) { return reduce_scalar(group, local, ReduceOp::max); }

namespace {
std::vector<double> reduce_vector(Communicator* group, std::vector<double> local, ReduceOp op) {
  if (alone(group) || local.empty()) return local;
  Tensor t = Tensor::empty({int64_t(local.size())}, DType::f64, MemCategory::comm);
  std::copy(local.begin(), local.end(), t.data<double>());
  group->all_reduce(t, {op})->wait();
  return {t.data<double>(), t.data<double>() + local.size()};
}
}  // namespace

std::vector<double> sum_over(Communicator* group, std::vector<double> local) {
  return reduce_vector(group, std::move(local), ReduceOp::sum);
}

std::vector<double> max_over(Communicator* group, std::vector<double> local) {
  return reduce_vector(group, std::move(local), ReduceOp::max);
}

void agree_or_fail(Communicator* group, const std::function<void()>& check, const std::string& elsewhere) {
  std::string problem;
  try {
    check();
  } catch (const InputError& e) {
    problem = e.what();
  }
  const bool failed = max_over(group, problem.empty() ? 0 : 1) != 0;
  if (!problem.empty()) throw InputError(problem);
  if (failed) throw InputError(elsewhere);
}

std::vector<double> gather_scalar(Communicator* group, double mine) {
  if (alone(group)) return {mine};
  Tensor t = Tensor::zeros({group->size()}, DType::f64, MemCategory::comm);
  t.data<double>()[group->rank()] = mine;
  group->all_gather(t)->wait();
  return {t.data<double>(), t.data<double>() + group->size()};
}

std::vector<int64_t> gather_counts(Communicator* group, int64_t mine) {
  std::vector<int64_t> out;
  for (double v : gather_scalar(group, double(mine))) out.push_back(int64_t(v));
  return out;
}

std::vector<double> gather_varying(Communicator* group, const std::vector<double>& mine,
                                   std::vector<int64_t>* counts_out) {
  const std::vector<int64_t> counts = gather_counts(group, int64_t(mine.size()));
  if (counts_out) *counts_out = counts;
  if (alone(group)) return mine;
  int64_t total = 0, offset = 0;
  for (int r = 0; r < group->size(); ++r) {
    if (r < group->rank()) offset += counts[size_t(r)];
    total += counts[size_t(r)];
  }
  if (total == 0) return {};
  Tensor buf = Tensor::zeros({total}, DType::f64, MemCategory::comm);
  std::copy(mine.begin(), mine.end(), buf.data<double>() + offset);
  group->all_gather(buf, {counts})->wait();
  return {buf.data<double>(), buf.data<double>() + total};
}

}  // namespace trident::parallel
