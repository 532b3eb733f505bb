// The model on this rank's mesh, in the documented order (see parallelize.hpp).
#include "model/parallelize.hpp"

#include <vector>

#include "kernels/buffer.hpp"
#include "model/params.hpp"

namespace trident::model {
namespace {

parallel::DataParallelSpec data_parallel_spec(const Recipe& rc, parallel::Mesh& mesh, const ParamRegistry& reg) {
  const auto& p = rc.parallel;
  const auto shared = shared_gradient_ranges(reg, rc.model, int(p.pipeline), p.sequence_parallel);
  // gradients are final only after the whole schedule: chunks exchange activations, or the backward is split
  const bool pipelined = p.pipeline > 1 || p.virtual_stages > 1 || p.schedule == ScheduleKind::zero_bubble;
  return {int(p.zero),
          p.bucket_bytes,
          mesh.device(),
          pipelined,
          rc.micro_batches_per_step(p.data),
          mesh.data_shard(),  // the ranks sharing ZeRO's shards: data x context, or HSDP's shard group
          {shared.tied, shared.tensor_replicated, shared.kv_replicated, mesh.embedding(), mesh.tensor(), mesh.kv()},
          p.zero_accumulate == ZeroAccumulate::shard,
          mesh.data_replicate()};  // HSDP: the replicas of this rank's shard (else alone)
}

}  // namespace

ParallelModel parallelize(const Recipe& rc, parallel::Mesh& mesh) {
  const auto& p = rc.parallel;
  ParallelModel m;
  // 1. tensor parallelism, 2. context parallelism
  m.tp = std::make_unique<parallel::TensorParallel>(mesh.tensor(), p.sequence_parallel);
  m.cp = std::make_unique<parallel::ContextParallel>(mesh.context(), p.context_mode, rc.model.seq_len);
  // 3. the pipeline split: this pipeline rank's chunks, their tensor slices
  const auto chunks =
      pipeline_chunks(rc.model, int(p.pipeline), int(p.virtual_stages), p.stage_layers, mesh.coords().pp, p.schedule);
  // 3b. expert parallelism: this rank's experts of every MoE layer
  if (rc.model.moe.enabled && p.expert > 1)
    m.ep = std::make_unique<parallel::ExpertParallel>(mesh.expert(), rc.model.moe.experts);
  // 4. the model of those chunks, placed (its precision decides every activation context it makes)
  m.net = std::make_unique<Transformer<float>>(rc.model, uint64_t(rc.seed),
                                               Placement{.full_buffers = parallel::model_owns_buffers(int(p.zero)),
                                                         .tp = m.tp.get(),
                                                         .cp = m.cp.get(),
                                                         .ep = m.ep.get(),
                                                         .whole_experts = p.whole_experts(),
                                                         .chunks = chunks,
                                                         .device = mesh.device(),
                                                         .precision = rc.train.precision,
                                                         .fp8 = rc.train.fp8});
  // 5. data parallelism over the model's segments, then the storage it owns, then the initial values
  const ParamRegistry& reg = m.net->registry();
  parallel::DataParallelSpec dense = data_parallel_spec(rc, mesh, reg), experts = dense;
  experts.data = mesh.expert_shard();  // the ranks sharing the experts' shards: expert_data, or its HSDP shard group
  experts.replicas = mesh.expert_replicate();
  if (rc.train.fp8.param_gather) dense.cast = experts.cast = m.net->fp8_param_gather();
  m.dp =
      std::make_unique<parallel::DataParallelParts>(dense, experts, mesh.expert(), reg.expert_begin(),
                                                    m.net->segments(), reg.total(), &m.net->params(), &m.net->grads());
  m.net->set_storage(m.dp->storage());
  m.dp->initialize([&](float* dst, int64_t begin, int64_t end) {  // Philox by global index: a shard only its own
    std::vector<float> host(size_t(end - begin));
    reg.initialize_range(host.data(), begin, end, uint64_t(rc.seed));
    kernels::copy(dst, host.data(), end - begin);
  });
  return m;
}

}  // namespace trident::model
