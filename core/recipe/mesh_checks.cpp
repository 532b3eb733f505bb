// The recipe's parallel.* checks on a world of ranks (mesh_checks.hpp);
// docs/recipes.md#parallel lists the keys.
#include "core/recipe/mesh_checks.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/schedule_rules.hpp"

namespace trident::recipe_detail {
namespace {

// Does this recipe pass every mesh check with `p` on `world` ranks?
bool passes_on(Reader& r, const Recipe& rc, const ParallelConfig& p, int64_t world) {
  Recipe q = rc;
  q.parallel = p;
  try {
    validate_mesh(r, q, world);
    validate_context(r, q);
    validate_train(r, q, true);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// "meshes (data x tensor x pipeline) of 8 ranks this recipe can use: 4x1x2, ..."
// (context, expert and the rest as the recipe gives them): only meshes that
// pass every check, so that each one listed works as it is.
std::string mesh_fits(Reader& r, const Recipe& rc, int64_t world) {
  const ParallelConfig& given = rc.parallel;
  const int64_t c = given.context;
  std::vector<std::string> fits;
  if (world % c == 0)
    for (int64_t t = 1; t <= world / c; ++t)  // divisors only: linear in the world size
      if ((world / c) % t == 0)
        for (int64_t pp = 1; pp <= world / (c * t); ++pp)
          if ((world / (c * t)) % pp == 0) {
            ParallelConfig p = given;
            p.data = world / (c * t * pp), p.tensor = t, p.pipeline = pp;
            if (passes_on(r, rc, p, world)) fits.push_back(fmt::format("{}x{}x{}", p.data, t, pp));
          }
  const std::string ctx = c > 1 ? fmt::format(", with context {}", c) : "";
  if (fits.empty()) return fmt::format("no mesh of {} ranks{} passes this recipe's checks", world, ctx);
  return fmt::format("meshes (data x tensor x pipeline{}) of {} ranks this recipe can use: {}", ctx, world,
                     fmt::join(fits, ", "));
}

// "data(2) x tensor(1) x pipeline(1)", with " x context(C)" when context > 1
std::string mesh_product(const ParallelConfig& p) {
  std::string s = fmt::format("data({}) x tensor({}) x pipeline({})", p.data, p.tensor, p.pipeline);
  if (p.context > 1) s += fmt::format(" x context({})", p.context);
  return s;
}

// The expert grid: expert x expert_tensor carved out of data x context x tensor.
void validate_expert(Reader& r, const ModelConfig& m, const ParallelConfig& p) {
  const int64_t et = p.expert_tensor_size();
  if (et != p.tensor && et != 1)
    r.inconsistent("parallel.expert_tensor",
                   fmt::format("expert_tensor({}): each expert's FFN is split over the tensor group (0 or "
                               "tensor({})) or whole on one rank (1); another split is not built",
                               p.expert_tensor, p.tensor));
  if (p.whole_experts()) {  // each tensor rank routes its share of the rows to whole experts
    if (!m.moe.enabled)
      r.inconsistent("parallel.expert_tensor",
                     "expert_tensor(1) < tensor needs model.moe: a dense model has no experts");
    else if (m.moe.balance != Balance::aux_loss && m.moe.balance != Balance::none)
      r.inconsistent("parallel.expert_tensor",
                     fmt::format("expert_tensor(1) < tensor({}) with model.moe.balance.kind {}: only aux_loss and none "
                                 "are built for it (each tensor rank routes a slice of the rows)",
                                 p.tensor, enum_name(m.moe.balance)));
  }
  if (p.expert == 1) return;
  if (!m.moe.enabled)
    r.inconsistent("parallel.expert",
                   fmt::format("expert({}) needs model.moe: a dense model has no experts to split", p.expert));
  else if (m.moe.experts % p.expert != 0)
    r.inconsistent("parallel.expert", fmt::format("experts({}) % expert({}) != 0", m.moe.experts, p.expert));
  const int64_t grid = p.data * p.context * p.tensor;
  if (grid % (p.expert * et) != 0) {
    // expert_tensor unset is the tensor split: say so, and offer whole experts where they fit
    const std::string split = p.expert_tensor == 0 ? fmt::format("expert_tensor (unset: = tensor({}))", p.tensor)
                                                   : fmt::format("expert_tensor({})", et);
    const bool whole_fits =
        et > 1 && grid % p.expert == 0 && (m.moe.balance == Balance::aux_loss || m.moe.balance == Balance::none);
    r.inconsistent(
        "parallel.expert",
        fmt::format("expert({}) x {} = {} does not divide data x context x tensor = {} x {} x {} = {}; {}", p.expert,
                    split, p.expert * et, p.data, p.context, p.tensor, grid,
                    whole_fits
                        ? fmt::format("set parallel.expert_tensor=1 (each expert whole on one rank, the expert "
                                      "group carved out of data x context x tensor = {}; CPU), or a "
                                      "parallel.expert that divides data x context = {}",
                                      grid, p.data * p.context)
                        : fmt::format("set a parallel.expert that divides data x context = {}", p.data * p.context)));
  }
}

// HSDP: data x context = data_replicate x data_shard, ZeRO >= 1.
void validate_hsdp(Reader& r, const ParallelConfig& p) {
  const int64_t dc = p.data * p.context;
  const std::string grid = p.context > 1 ? fmt::format("data x context = {} x {} = {}", p.data, p.context, dc)
                                         : fmt::format("data = {}", dc);
  if (p.data_shard > 0 && dc % p.data_shard != 0)
    r.inconsistent("parallel.data_shard", fmt::format("data_shard({}) does not divide {}", p.data_shard, grid));
  if (p.data_replicate > 0 && dc % p.data_replicate != 0)
    r.inconsistent("parallel.data_replicate",
                   fmt::format("data_replicate({}) does not divide {}", p.data_replicate, grid));
  if (p.data_shard > 0 && p.data_replicate > 0 && p.data_shard * p.data_replicate != dc)
    r.inconsistent("parallel.data_replicate",
                   fmt::format("data_replicate({}) x data_shard({}) = {} != {}", p.data_replicate, p.data_shard,
                               p.data_replicate * p.data_shard, grid));
  if (p.hsdp() && p.zero < 1)
    r.inconsistent("parallel.data_shard",
                   fmt::format("data_shard({}) < {} shards ZeRO's state within groups, but parallel.zero is 0 (no "
                               "shards): set parallel.zero 1, 2 or 3, or leave data_shard unset",
                               p.data_shard_size(), grid));
}

}  // namespace

// The one `auto` mesh size becomes the world size over the others; `data`
// is auto unless given, and 1 when another axis is auto.
void resolve_auto_mesh(Reader& r, Recipe& rc, int64_t world) {
  ParallelConfig& p = rc.parallel;
  if (p.data == 0 && !r.has("parallel.data") && (p.tensor == 0 || p.pipeline == 0)) p.data = 1;
  const int autos = (p.data == 0) + (p.tensor == 0) + (p.pipeline == 0);
  if (autos > 1) r.inconsistent("parallel.data", "at most one of data, tensor, pipeline may be 'auto'");
  if (autos == 0) return;
  int64_t& axis = p.data == 0 ? p.data : p.tensor == 0 ? p.tensor : p.pipeline;
  const std::string name = p.data == 0 ? "data" : p.tensor == 0 ? "tensor" : "pipeline";
  std::vector<std::string> fixed;
  int64_t known = p.context;
  for (const auto& [n, v] : {std::pair<const char*, int64_t>{"data", p.data},
                             {"tensor", p.tensor},
                             {"pipeline", p.pipeline},
                             {"context", p.context}})
    if (v > 0) fixed.push_back(fmt::format("{}({})", n, v)), known *= std::string(n) == "context" ? 1 : v;
  if (world == 1 && known > 1) {  // validate_mesh says: started without a launcher
    axis = 1;
    return;
  }
  if (world % known != 0)
    r.inconsistent("parallel." + name, fmt::format("`auto`: world size {} is not divisible by {} = {}; {}", world,
                                                   fmt::join(fixed, " x "), known, mesh_fits(r, rc, world)));
  axis = world / known;
  p.inferred = name;
}

void validate_mesh(Reader& r, const Recipe& rc, int64_t world) {
  const ModelConfig& m = rc.model;
  const ParallelConfig& p = rc.parallel;
  const int64_t mesh = p.data * p.tensor * p.pipeline * p.context;
  if (mesh != world && world == 1)  // the usual mistake: a multi-rank recipe started without a launcher
    r.inconsistent("parallel.data",
                   fmt::format("{} = {} ranks, but this is one process (started "
                               "without a launcher, or with one rank): run it under `mpirun -np {} trident ...`, "
                               "`srun -n {} --mpi=pmix trident ...` or `trident submit` (docs/slurm.md)",
                               mesh_product(p), mesh, mesh, mesh));
  if (mesh != world) {
    const int64_t others = p.tensor * p.pipeline * p.context;
    ParallelConfig inferred = p;
    inferred.data = world % others == 0 ? world / others : 0;
    const std::string fix =
        inferred.data > 0 && passes_on(r, rc, inferred, world)
            ? fmt::format("set parallel.data=auto (data {} on {} ranks), or use one of the ", inferred.data, world)
            : "use one of the ";
    const std::string fits = mesh_fits(r, rc, world);
    r.inconsistent("parallel.data", fmt::format("{} = {} != world size {}; {}", mesh_product(p), mesh, world,
                                                fits.rfind("no mesh", 0) == 0 ? fits : fix + fits));
  }
  if (m.heads % p.tensor != 0)
    r.inconsistent("parallel.tensor", fmt::format("heads({}) % tensor({}) != 0", m.heads, p.tensor));
  // KV heads are split when there are at least `tensor` of them, replicated otherwise
  if (m.kv_heads >= p.tensor && m.kv_heads % p.tensor != 0)
    r.inconsistent("parallel.tensor", fmt::format("kv_heads({}) % tensor({}) != 0", m.kv_heads, p.tensor));
  if (m.kv_heads < p.tensor && p.tensor % m.kv_heads != 0)
    r.inconsistent("parallel.tensor", fmt::format("tensor({}) % kv_heads({}) != 0 (fewer KV heads than tensor ranks "
                                                  "are replicated, which needs tensor to be a multiple)",
                                                  p.tensor, m.kv_heads));
  if (m.ffn_hidden % p.tensor != 0)
    r.inconsistent("parallel.tensor", fmt::format("ffn_hidden({}) % tensor({}) != 0", m.ffn_hidden, p.tensor));
  if (m.moe.enabled && m.moe.ffn_hidden % p.tensor != 0)
    r.inconsistent("parallel.tensor", fmt::format("each expert's FFN is split over the tensor group: "
                                                  "moe.ffn_hidden({}) % tensor({}) != 0",
                                                  m.moe.ffn_hidden, p.tensor));
  if (m.moe.enabled && m.moe.balance == Balance::hf && (p.pipeline > 1 || p.virtual_stages > 1))
    r.inconsistent("parallel.pipeline", fmt::format("model.moe.balance.kind hf sums the counts of every MoE layer of "
                                                    "a micro-batch, which needs them on one pipeline stage: "
                                                    "pipeline({}) x virtual_stages({}) (use aux_loss, or pipeline 1)",
                                                    p.pipeline, p.virtual_stages));
  if (m.moe.enabled && m.moe.shared_width() % p.tensor != 0)
    r.inconsistent("parallel.tensor", fmt::format("the shared experts' FFN is split over the tensor group: "
                                                  "shared_experts({}) x shared_ffn_hidden({}) % tensor({}) != 0",
                                                  m.moe.shared_experts, m.moe.shared_ffn_hidden, p.tensor));
  validate_expert(r, m, p);
  validate_hsdp(r, p);
  if (p.zero_accumulate == ZeroAccumulate::shard) {
    if (p.zero < 2)
      r.inconsistent("parallel.zero_accumulate",
                     fmt::format("shard accumulates gradients in the ZeRO 2-3 gradient shard; ZeRO {} keeps the "
                                 "model's whole gradient buffer (set parallel.zero 2 or 3, or zero_accumulate full)",
                                 p.zero));
    else if (p.pipeline > 1 && m.tie_embeddings)
      r.inconsistent("parallel.zero_accumulate",
                     fmt::format("shard with pipeline {} and model.tie_embeddings: the first and last stages' "
                                 "copies of the token table are summed on their whole gradients, which shard "
                                 "accumulation does not keep (zero_accumulate full, or untied embeddings)",
                                 p.pipeline));
  }
  // Muon's Newton-Schulz iteration runs on the CPU in this version (docs/optim.md#muon)
  if (rc.optim.name == OptimizerKind::muon && rc.device == DeviceType::cuda)
    r.inconsistent("device", "cuda with optim.name muon: its iteration runs on the CPU in this version");
  if (rc.optim.muon.qk_clip.on && rc.optim.name != OptimizerKind::muon)
    r.inconsistent("optim.muon.qk_clip.on", "QK-clip is Muon's (MuonClip): set optim.name muon");
  if (p.schedule == ScheduleKind::dualpipev && m.tie_embeddings)
    r.inconsistent("model.tie_embeddings",
                   "schedule dualpipev puts the embedding and the LM head on pipeline rank 0, in two chunks; a "
                   "table tied across two chunks of one rank is not supported: set tie_embeddings false");
  if (!p.stage_layers.empty()) {
    const int64_t chunks = p.pipeline * p.virtual_stages;
    const int64_t sum = std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t(0));
    if (int64_t(p.stage_layers.size()) != chunks)
      r.inconsistent("parallel.stage_layers",
                     fmt::format("{} entries for pipeline({}) x virtual_stages({}) = {} chunks", p.stage_layers.size(),
                                 p.pipeline, p.virtual_stages, chunks));
    if (sum != m.layers)
      r.inconsistent("parallel.stage_layers",
                     fmt::format("the per-chunk layers sum to {} != model.layers({})", sum, m.layers));
  } else if (m.layers % (p.pipeline * p.virtual_stages) != 0) {
    r.inconsistent("parallel.pipeline", fmt::format("layers({}) % (pipeline({}) x virtual_stages({})) != 0 (or list "
                                                    "the layers per chunk in parallel.stage_layers)",
                                                    m.layers, p.pipeline, p.virtual_stages));
  }
}

// Context parallelism: the sequence in 2 x context chunks; all_to_all's head split.
void validate_context(Reader& r, const Recipe& rc) {
  const auto& p = rc.parallel;
  const auto& m = rc.model;
  if (p.context == 1) return;
  if (m.seq_len % (2 * p.context) != 0)
    r.inconsistent("parallel.context",
                   fmt::format("seq_len({}) % (2 x context({})) = {} != 0: each context rank holds two chunks of "
                               "seq_len / (2 x context) tokens (chunks i and 2 x context - 1 - i, for causal balance)",
                               m.seq_len, p.context, m.seq_len % (2 * p.context)));
  if (rc.device == DeviceType::cuda)
    r.inconsistent("parallel.context",
                   fmt::format("context({}) with device: cuda: context parallelism runs on the CPU in this version "
                               "(its ring and all-to-all move host buffers, not device ones); use device: cpu or "
                               "context: 1",
                               p.context));
  if (p.context_mode != ContextMode::all_to_all) return;
  const int64_t heads = m.heads / p.tensor, kv = m.kv_heads >= p.tensor ? m.kv_heads / p.tensor : 1;
  if (heads % p.context != 0)
    r.inconsistent("parallel.context_mode",
                   fmt::format("all_to_all re-shards this rank's heads over context: heads({}) / tensor({}) = {}, and "
                               "{} % context({}) = {} != 0 (use context_mode: ring)",
                               m.heads, p.tensor, heads, heads, p.context, heads % p.context));
  if (kv % p.context != 0)
    r.inconsistent("parallel.context_mode",
                   fmt::format("all_to_all re-shards this rank's KV heads over context: {} KV head(s) per tensor rank "
                               "(kv_heads({}), tensor({})), and {} % context({}) = {} != 0 (use context_mode: ring)",
                               kv, m.kv_heads, p.tensor, kv, p.context, kv % p.context));
}

}  // namespace trident::recipe_detail
