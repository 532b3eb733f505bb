// The run's start-up lines (see run_report.hpp, log_run_start).
#include <fmt/ranges.h>

#include <cmath>

#include "core/device_memory.hpp"
#include "core/log.hpp"
#include "kernels/backends.hpp"
#include "kernels/gemm.hpp"
#include "launch/train/run_report.hpp"

namespace trident::launch {

namespace {
std::string mib(int64_t b) { return fmt::format("{:.1f} MiB", double(b) / (1 << 20)); }
}  // namespace

void log_run_start(const Recipe& rc, const parallel::Mesh& mesh, const RunFacts& facts, const StartFacts& start) {
  const auto& m = rc.model;
  const auto& par = rc.parallel;
  log::info("trident: {} | {} layers, hidden {}, heads {}/{}, ffn {}, seq {}, vocab {} | {:.2f}M parameters", rc.source,
            m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.seq_len, m.vocab, double(facts.params) / 1e6);
  if (m.moe.enabled) {                      // active: what a token passes through (top_k of the routed experts)
    int64_t layers = 0, idle = 0, mtp = 0;  // the multi-token prediction blocks' experts too
    for (int64_t l = 0; l < m.layers + m.mtp.depth; ++l)
      if (m.moe.is_moe(l))
        ++layers, mtp += l >= m.layers, idle += (m.moe.experts - m.moe.top_k) * 3 * m.moe.ffn_hidden * m.hidden;
    log::info(
        "mixture of experts: {} MoE layers{} of {} experts (top {}, width {}){} | {:.2f}M parameters, {:.2f}M "
        "active per token",
        layers, mtp ? fmt::format(" ({} of them multi-token prediction)", mtp) : "", m.moe.experts, m.moe.top_k,
        m.moe.ffn_hidden,
        m.moe.shared_experts ? fmt::format(", {} shared of width {}", m.moe.shared_experts, m.moe.shared_ffn_hidden)
                             : "",
        double(facts.params) / 1e6, double(facts.params - idle) / 1e6);
  }
  if (m.mtp.depth > 0)
    log::info(
        "multi-token prediction: depth {} (a block each on the last stage, the k-th predicting token t+1+k), loss "
        "weight {}",
        m.mtp.depth, m.mtp.loss_weight);
  const int64_t Vpad = m.padded_vocab(par.tensor);
  log::info(
      "vocabulary padded {} -> {} (+{} rows, a multiple of vocab_multiple {} x tensor {}); padded logits are "
      "masked and stripped on export",
      m.vocab, Vpad, Vpad - m.vocab, m.vocab_multiple, par.tensor);
  if (par.tensor > 1) {
    const auto& dims = *start.dims;
    log::info(
        "tensor parallel {}{} | per rank: heads {}, kv heads {}{}, ffn {}, vocab rows {} | {:.2f}M parameters "
        "per rank",
        par.tensor, par.sequence_parallel ? " with sequence parallelism" : "", dims.heads, dims.kv_heads,
        m.kv_heads < par.tensor ? fmt::format(" (replicated on {} ranks)", par.tensor / m.kv_heads) : "", dims.ffn,
        dims.vocab, double(start.local_params) / 1e6);
  }
  const int64_t micro_steps = rc.micro_batches_per_step(par.data);
  if (par.pipeline > 1 || par.virtual_stages > 1)
    log::info(
        "pipeline {} x virtual stages {} | schedule {} | layers per chunk [{}] | {} micro-batches per step | "
        "simulated bubble {:.1f}%",
        par.pipeline, par.virtual_stages, par.schedule, fmt::join(start.chunk_layers, ", "), micro_steps,
        100 * facts.predicted_bubble);
  log::info("batch: global {} = micro {} x {} accumulation steps | recompute {} | {} threads | {}",
            rc.train.global_batch, rc.train.micro_batch, micro_steps, rc.train.recompute, facts.threads,
            kernels::cpu_gemm_backend());
  if (rc.train.precision == Precision::bf16 && mesh.device().type == DeviceType::cpu &&
      !kernels::cpu_has_bf16_instructions())
    log::warn(
        "train.precision bf16 on a CPU without bf16 instructions (no AVX512-BF16 or AMX): its GEMMs are emulated "
        "and this run is slower than fp32 (docs/precision.md)");
  if (mesh.device().type == DeviceType::cpu)
    if (const int gpus = device_count(); gpus > 0)
      log::warn(
          "{} GPU(s) visible, but the recipe says device: cpu: this run trains on the CPUs (set device: cuda "
          "to use them; the CUDA backend has not yet run on a GPU, docs/cuda.md)",
          gpus);
  const MemStats mem0 =
      mesh.device().type == DeviceType::cuda ? device_memory_stats() : HostAllocator::instance().stats();
  log::info(
      "data parallel {}{} x ZeRO {}{} | per rank: params {} grads {} optimizer {} activations {} | ZeRO formula: {}",
      par.data,
      par.inferred.empty() ? ""
                           : fmt::format(" ({} inferred: parallel.{} auto = {} ranks / the other axes)", par.inferred,
                                         par.inferred, mesh.world_size()),
      par.zero,
      par.hsdp() ? fmt::format(" (HSDP: sharded over data_shard {}, replicated over data_replicate {})",
                               par.data_shard_size(), par.data_replicate_size())
                 : "",
      mib(mem0.current[0]), mib(mem0.current[1]), mib(mem0.current[2]), mib(mem0.current[3]), start.zero_memory);
  if (rc.model.moe.enabled && par.expert > 1)
    log::info(
        "expert parallel {}: each rank holds {} of each MoE layer's {} experts{}; their gradients reduce over "
        "expert-data {} ({} / expert), the dense ones over data x context {}",
        par.expert, rc.model.moe.experts / par.expert, rc.model.moe.experts, par.whole_experts() ? ", whole" : "",
        par.data * par.context * (par.whole_experts() ? par.tensor : 1) / par.expert,
        par.whole_experts() ? "data x context x tensor" : "data x context", par.data * par.context);
  log::info("model FLOPs/token {:.4g} | MFU reference {:.1f} GFLOP/s ({})", facts.flops_per_token,
            facts.peak_flops / 1e9, facts.peak_source);
  if (mesh.device().type == DeviceType::cuda) log::info("{}", mesh.describe_device());
  if (rc.data.synthetic)
    log::info(
        "data: synthetic Markov source (vocab {}, order {}, branching {}) | entropy floor {:.4f} nats/token "
        "(sequence floor {:.4f}, log(vocab) {:.4f})",
        rc.data.syn.vocab, rc.data.syn.order, rc.data.syn.branching, facts.entropy_floor, facts.sequence_floor,
        std::log(double(rc.data.syn.vocab)));
}

}  // namespace trident::launch
