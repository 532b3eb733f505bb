// Launcher environment and placement (see launch_env.hpp).
#include "parallel/launch_env.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "parallel/mpi/mpi_communicator.hpp"

namespace trident::parallel {

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end ? -1 : int(x);
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// "0-3,6" from ascending ranks
std::string ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  e.node_name = host_name();
  if (env_int("SLURM_PROCID") >= 0 && !env_text("SLURM_STEP_ID").empty()) {  // a task of an srun job step
    e.launcher = "srun";
    e.rank = env_int("SLURM_PROCID");
    e.world = env_int("SLURM_NTASKS") >= 0 ? env_int("SLURM_NTASKS") : env_int("SLURM_NPROCS");
    e.local_rank = env_int("SLURM_LOCALID");
    e.node = env_int("SLURM_NODEID");
    if (!env_text("SLURMD_NODENAME").empty()) e.node_name = env_text("SLURMD_NODENAME");
    e.job = fmt::format("Slurm job {} step {}", env_text("SLURM_JOB_ID"), env_text("SLURM_STEP_ID"));
    e.mpi_plugin = env_text("SLURM_MPI_TYPE");
  } else if (env_int("OMPI_COMM_WORLD_RANK") >= 0) {
    e.launcher = "mpirun";
    e.rank = env_int("OMPI_COMM_WORLD_RANK");
    e.world = env_int("OMPI_COMM_WORLD_SIZE");
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    e.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (env_int("PMIX_RANK") >= 0) {
    e.launcher = "pmix";
    e.rank = env_int("PMIX_RANK");
  }
  return e;
}

std::string describe_placement(const LaunchEnv& env, MpiCommunicator& world, std::vector<int>* node_of_rank) {
  constexpr int kName = 64;
  const int n = world.size();
  Tensor names = Tensor::zeros({int64_t(n) * kName}, DType::i32, MemCategory::other);  // one char per element
  for (int i = 0; i < kName - 1 && i < int(env.node_name.size()); ++i)
    names.data<int32_t>()[int64_t(world.rank()) * kName + i] = static_cast<unsigned char>(env.node_name[size_t(i)]);
  Tensor local = Tensor::zeros({int64_t(n)}, DType::i32, MemCategory::other);  // the launcher's local ranks
  local.data<int32_t>()[world.rank()] = env.local_rank;
  if (n > 1) world.all_gather(names)->wait(), world.all_gather(local)->wait();
  std::vector<std::string> node_names;
  std::map<std::string, int> index;
  std::vector<int> node(static_cast<size_t>(n));
  std::vector<std::vector<int>> ranks;
  for (int r = 0; r < n; ++r) {
    std::string s;
    for (int i = 0; i < kName; ++i) {
      const int32_t c = names.data<int32_t>()[int64_t(r) * kName + i];
      if (c == 0) break;
      s += char(c);
    }
    auto [it, fresh] = index.try_emplace(s, int(node_names.size()));
    if (fresh) node_names.push_back(s), ranks.emplace_back();
    node[size_t(r)] = it->second;
    ranks[size_t(it->second)].push_back(r);
  }
  if (node_of_rank) *node_of_rank = node;
  std::string where = env.launcher == "none"   ? "one process, no launcher"
                      : env.launcher == "srun" ? "srun, " + env.job
                                               : env.launcher;
  std::string out = fmt::format("launch: {} | {} rank{} on {} node{}", where, n, n == 1 ? "" : "s", node_names.size(),
                                node_names.size() == 1 ? "" : "s");
  for (size_t k = 0; k < node_names.size(); ++k) {
    std::vector<int> locals;
    for (int r : ranks[k]) locals.push_back(local.data<int32_t>()[r]);
    const bool known = std::find(locals.begin(), locals.end(), -1) == locals.end();
    out += fmt::format("\n  node {} ({}): ranks {}{}", k, node_names[k], ranges(ranks[k]),
                       known ? fmt::format(" (local ranks {})", fmt::join(locals, ",")) : "");
  }
  return out;
}

std::string groups_across_nodes(const std::vector<std::vector<int>>& groups, const std::vector<int>& node_of_rank) {
  std::string out;
  for (const auto& g : groups) {
    bool split = false;
    for (int r : g) split |= node_of_rank[size_t(r)] != node_of_rank[size_t(g.front())];
    if (split) out += fmt::format("{}[{}]", out.empty() ? "" : " ", ranges(g));
  }
  return out;
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void check_same_on_all_ranks(MpiCommunicator& world, uint64_t hash, const std::string& what, const std::string& mine) {
  const int n = world.size();
  if (n == 1) return;
  Tensor all = Tensor::zeros({2 * int64_t(n)}, DType::i32, MemCategory::other);  // two 32-bit halves per rank
  all.data<int32_t>()[2 * world.rank()] = int32_t(uint32_t(hash >> 32));
  all.data<int32_t>()[2 * world.rank() + 1] = int32_t(uint32_t(hash));
  world.all_gather(all)->wait();
  std::vector<std::pair<uint64_t, std::vector<int>>> by_hash;  // in order of the first rank holding each
  for (int r = 0; r < n; ++r) {
    const uint64_t h =
        (uint64_t(uint32_t(all.data<int32_t>()[2 * r])) << 32) | uint32_t(all.data<int32_t>()[2 * r + 1]);
    auto it = std::find_if(by_hash.begin(), by_hash.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_hash.end())
      by_hash.push_back({h, {r}});
    else
      it->second.push_back(r);
  }
  if (by_hash.size() == 1) return;
  std::string groups;
  for (const auto& [h, ranks] : by_hash)
    groups += fmt::format("{}{} {} {} {:016x}", groups.empty() ? "" : "; ", ranks.size() == 1 ? "rank" : "ranks",
                          ranges(ranks), ranks.size() == 1 ? "has" : "have", h);
  fail_input("the ranks disagree on {}: {}. Every rank must be started with the same arguments; this rank ({}) read {}",
             what, groups, world.rank(), mine);
}

}  // namespace trident::parallel
