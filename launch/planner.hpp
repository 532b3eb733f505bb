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

#include "core/recipe.hpp"

namespace trident::launch {

struct Link {
  double bandwidth = 0;  // bytes/s, each direction
  double latency = 0;    // s
};

struct Cluster {
  std::string name, source;
  DeviceType device = DeviceType::cuda;   // `device:` in the file (default cuda): the activation layout
  Precision precision = Precision::fp32;  // what the plan assumes: peak FLOP/s and bytes per value
  int devices_per_node = 1;
  double memory_bytes = 0;  // per device
  double peak_flops = 0;    // per device, for the recipe's precision
  double gemm_fraction = 1;
  double memory_bandwidth = 0;  // bytes/s per device: the optimizer step is memory-bound
  Link intra, inter;
};
// InputError naming the file and key. precision: fp32, bf16 or fp16 (bf16 and
// fp16: 2-byte parameters and activations, fp32 master weights, gradients and
// optimizer states).
Cluster load_cluster(const std::string& path, Precision precision);

struct PlanConfig {
  int64_t data = 1, tensor = 1, pipeline = 1, virtual_stages = 1, micro_batch = 1, zero = 0;
  Recompute recompute = Recompute::none;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool sequence_parallel = false;
};

struct PlanMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return params + grads + optimizer + activations + buffers; }
};

struct PlanTime {
  double compute = 0, recompute = 0, bubble = 0, tensor_comm = 0, pipeline_comm = 0, data_comm = 0,
         data_comm_hidden = 0, optimizer = 0;
  double step() const {
    return compute + recompute + bubble + tensor_comm + pipeline_comm + data_comm - data_comm_hidden + optimizer;
  }
};

struct PlanResult {
  PlanConfig config;
  bool feasible = false;
  std::string reason;          // why not (invalid, or out of memory)
  int64_t params = 0;          // whole model
  int64_t stage_params = 0;    // the largest pipeline stage, per tensor rank
  int micro_batches = 0;       // per step and data rank
  int in_flight = 0;           // micro-batches the first stage holds
  double bubble_fraction = 0;  // the simulator's, unit costs
  PlanMemory memory;
  PlanTime time;
  double tokens_per_s = 0, tflops_per_device = 0, mfu = 0;
  bool tensor_intra_node = true, data_intra_node = true, pipeline_intra_node = true;
};

// Bytes the AdamW step reads and writes per parameter element it updates
// (parameter, gradient, both moments; a 2-byte copy of the parameter too
// with bf16/fp16).
double optimizer_bytes_per_element(Precision precision);

// One configuration (validated by the recipe loader for N = D x T x P).
PlanResult plan_one(const Recipe& rc, const Cluster& cluster, const PlanConfig& c);
// Every configuration of N devices, feasible ones first by tokens/s.
std::vector<PlanResult> plan_all(const Recipe& rc, const Cluster& cluster, int64_t devices);

std::string plan_json(const std::vector<PlanResult>& results);
std::string plan_explain(const PlanResult& r, const Cluster& cluster);

}  // namespace trident::launch
