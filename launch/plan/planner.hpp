// `trident plan`: every valid parallel configuration of a recipe's model and
// global batch on N devices of a cluster (configs/clusters/*.yaml), with its
// predicted memory per device by category and its predicted step time, ranked
// by tokens/s. docs/planner.md has the model; the formulas use the trainer's
// own sources: the parameter registry (parameter counts per stage),
// flops_per_token, the activation formula of model/memory.hpp, the schedule
// and its simulator (in-flight micro-batches, bubble).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/recipe/recipe.hpp"
#include "launch/plan/step_model.hpp"

namespace trident::launch {

// A link level: the bus bandwidth a ring collective reaches on large
// messages (bytes/s per device, each direction), the latency of one ring
// step, and the message size at which the reached bandwidth is half of it
// (protocol and pipelining overheads of small messages; 0: none).
struct Link {
  double bandwidth = 0;   // bytes/s
  double latency = 0;     // s
  double half_bytes = 0;  // bytes
  // Bandwidth reached by a collective of `bytes` per rank.
  double bandwidth_at(double bytes) const {
    return half_bytes > 0 ? bandwidth * bytes / (bytes + half_bytes) : bandwidth;
  }
};

struct Cluster {
  std::string name, source;
  DeviceType device = DeviceType::cuda;   // `device:` in the file (default cuda): the activation layout
  Precision precision = Precision::fp32;  // what the plan assumes: peak FLOP/s and bytes per value
  int devices_per_node = 1;
  double memory_bytes = 0;   // per device
  double usable_bytes = 0;   // `usable_memory_gib` (default memory_gib): what a training process can allocate
  double peak_flops = 0;     // per device, for the recipe's precision
  double gemm_fraction = 1;  // of peak: large GEMMs (every GEMM without `gemm_efficiency`)
  std::vector<std::pair<double, double>> gemm_table;  // `gemm_efficiency`: smallest dimension -> fraction
  double attention_fraction = 0;   // flash attention's rate as a fraction of peak (default gemm_fraction)
  bool flash_attention = true;     // `attention: flash | materialized` (default: flash, on both devices)
  bool attention_dropout = false;  // `attention_dropout: true`: the software drops out probabilities (not Trident)
  double memory_bandwidth = 0;     // bytes/s per device (datasheet)
  double memory_fraction = 1;      // of it, what elementwise kernels and the optimizer reach
  double kernel_floor = 0;         // s: the least time a kernel takes (launch, tail)
  Link intra, inter;
  // `software:` what the training software the plan models hides and keeps
  // (docs/planner.md#software); the defaults are Trident's trainer
  std::string software = "Trident";
  // `tensor_comm_overlap:` the sequence-parallel all-gathers and reduce-scatters pipelined with their GEMMs:
  // none, the forward's (torchtitan's async tensor parallelism), or the backward's too (Megatron-Core's)
  enum class TensorOverlap { none, forward, both } tensor_overlap = TensorOverlap::none;
  bool pipeline_comm_overlap = false;  // the interleaved schedule's sends and receives behind other chunks' compute
  bool data_comm_overlap = false;      // gradient reduce-scatter and parameter gather overlapped, pipelined too
  // `activations:` what the software keeps for the backward: Trident's allocation, Megatron-Core's formula, or
  // torchtitan's activation checkpointing (docs/planner.md#software)
  enum class Kept { trident, megatron, torchtitan } kept = Kept::trident;
  double gemm_peak_flops = 0;     // `gemm_precision: fp8`: the GEMMs at peak_tflops.fp8 (else peak_flops)
  double fp8_peak_flops = 0;      // peak_tflops.fp8 x fp8_gemm_fraction, where the file has it
  bool fp8_saved_inputs = false;  // `gemm_precision: fp8`: Transformer Engine keeps GEMM inputs in fp8
  // the recipe's train.fp8 planned (apply_recipe_fp8): its FP8 linears at fp8_peak_flops
  bool fp8_from_recipe = false;
  Fp8Config recipe_fp8;
  bool sharded_grad_accumulation = false;  // `zero_grad_accumulation: shard`: ZeRO 2/3 accumulate in the shard
  bool fp32_cross_entropy = false;         // `cross_entropy: fp32`: Megatron-Core's unfused loss over fp32 logits
  double grad_reduce_bytes = 4;            // `grad_reduce: fp32 | bf16`: bytes per gradient the data group reduces
  DeviceRates rates() const;
};
// InputError naming the file and key. precision: fp32, bf16 or fp16 (bf16 and
// fp16: 2-byte parameters and activations, fp32 master weights, gradients and
// optimizer states).
Cluster load_cluster(const std::string& path, Precision precision, const std::vector<std::string>& overrides = {});
// A recipe with train.fp8 planned on cluster `cl` (read from `path`): the
// GEMMs of the linears Trident runs in FP8 at peak_tflops.fp8 (InputError
// naming the file when it lacks that key), ZeRO 3's gathers with
// param_gather in FP8; a cluster whose software already runs its GEMMs in
// fp8 (`gemm_precision: fp8`) is left as it is.
void apply_recipe_fp8(Cluster& cl, const Recipe& rc, const std::string& path);

struct PlanConfig {
  int64_t data = 1, tensor = 1, pipeline = 1, virtual_stages = 1, micro_batch = 1, zero = 0;
  Recompute recompute = Recompute::none;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool sequence_parallel = false;
  std::vector<int64_t> stage_layers;  // layers per chunk (P x V); empty: the even split
  int64_t context = 1;                // the sequence split over this many ranks
  ContextMode context_mode = ContextMode::ring;
  int64_t expert = 1;      // each MoE layer's experts split over this many ranks (carved out of data x context)
  int64_t data_shard = 0;  // HSDP: the ZeRO shard group (0: all of data x context)
  bool shard_accumulation = false;  // ZeRO 2-3: parallel.zero_accumulate shard
  int64_t shard_size() const { return data_shard > 0 ? data_shard : data * context; }
};

struct PlanMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return params + grads + optimizer + activations + buffers; }
};

// Seconds per step on the slowest pipeline stage, by category.
struct PlanTime {
  double gemm = 0, attention = 0, memory = 0;  // forward and backward of every micro-batch
  double recompute = 0, bubble = 0, tensor_comm = 0, pipeline_comm = 0, data_comm = 0, data_comm_hidden = 0,
         optimizer = 0;
  double tensor_comm_hidden = 0;    // the part of tensor_comm pipelined with its GEMMs (`tensor_comm_overlap`)
  double pipeline_comm_hidden = 0;  // the part of pipeline_comm behind other chunks' compute (`pipeline_comm_overlap`)
  // context parallelism: the ring's (or all-to-all's) transfers, and the part
  // of them the attention of the block in hand does not hide (in step())
  double context_comm = 0, context_comm_hidden = 0;
  // expert parallelism: the MoE layers' token dispatch and combine (all-to-all over the expert group),
  // and the part a dualpipev paired step runs under the other pass's compute
  double expert_comm = 0, expert_comm_hidden = 0;
  // Muon (optim.name muon): this rank's Newton-Schulz iterations (in `optimizer`), and the exchanges that
  // bring each matrix to its owner and back (the tensor group's all-to-alls, the replicas' gather and sum)
  double muon_iteration = 0, optimizer_comm = 0;
  // HSDP: the part of data_comm that crosses between shard groups (the replicas' all-reduce)
  double replica_comm = 0;
  double compute() const { return gemm + attention + memory; }
  double step() const {
    return compute() + recompute + bubble + tensor_comm - tensor_comm_hidden + pipeline_comm - pipeline_comm_hidden +
           data_comm - data_comm_hidden + optimizer + optimizer_comm + context_comm - context_comm_hidden +
           expert_comm - expert_comm_hidden;
  }
};

struct PlanResult {
  PlanConfig config;
  Precision precision = Precision::fp32;  // what the plan assumed (the cluster's)
  bool feasible = false;
  std::string reason;               // why not (invalid, or out of memory)
  int64_t params = 0;               // whole model
  int64_t stage_params = 0;         // the largest pipeline stage, per tensor rank (and per expert rank: its experts)
  int64_t stage_expert_params = 0;  // of which routed experts' (this rank's share)
  int micro_batches = 0;            // per step and data rank
  int in_flight = 0;                // micro-batches the first stage holds
  double bubble_fraction = 0;       // the simulator's, unit costs
  PlanMemory memory;
  PlanTime time;
  double tokens_per_s = 0, tflops_per_device = 0, mfu = 0;
  std::vector<Op> ops;  // one layer's and the head's operations (the per-operation table)
  bool tensor_intra_node = true, data_intra_node = true, pipeline_intra_node = true, context_intra_node = true,
       expert_intra_node = true, replica_intra_node = true;  // data: the (shard) group ZeRO reduces over
};

// Bytes the AdamW step reads and writes per parameter element it updates
// (parameter, gradient, both moments; a 2-byte copy of the parameter too
// with bf16/fp16).
double optimizer_bytes_per_element(Precision precision);

// The recipe as the planner reads it: its model, batch and choices (ZeRO,
// schedule, micro-batch, recompute, precision), checked except for the mesh,
// which is what the planner chooses (load_recipe_unplaced).
Recipe load_plan_recipe(const std::string& path, const std::vector<std::string>& sets);
// The recipe put on configuration c (its mesh and choices set in the typed
// recipe, checked as the loader checks a run's): InputError "key '...': ..."
// when it does not fit.
Recipe on_mesh(const Recipe& rc, const PlanConfig& c);
// The recipe's own choices on the mesh D x T x P x C (context) with E-way
// expert parallelism (0: the recipe's parallel.expert): an InputError when
// the recipe does not fit that mesh.
PlanConfig mesh_choices(const Recipe& rc, int64_t D, int64_t T, int64_t P, int64_t C = 1, int64_t E = 0);

// One configuration (the recipe put on its mesh by on_mesh): plan_memory
// and plan_time (plan_parts.hpp). The memo keeps what many configurations
// share: schedule facts, group placements (plan_all's).
class PlanMemo;
PlanResult plan_one(const Recipe& rc, const Cluster& cluster, const PlanConfig& c);
PlanResult plan_one(const Recipe& rc, const Cluster& cluster, const PlanConfig& c, PlanMemo& memo);
// Every configuration of N devices, feasible ones first by tokens/s; context
// sizes up to max_context (both modes where valid); for MoE models every
// expert size that divides data x context and the experts.
std::vector<PlanResult> plan_all(const Recipe& rc, const Cluster& cluster, int64_t devices, int64_t max_context = 1);

std::string plan_json(const std::vector<PlanResult>& results);
std::string plan_explain(const PlanResult& r, const Cluster& cluster);

}  // namespace trident::launch
