// Every recipe key, declared once: path, type and range, default, and the
// line docs/recipes.md shows. The loader reads the keys in this order (a
// derived default may use the keys above it), the unknown-key check takes
// its lists of known keys from here, and `trident keys` prints the tables of
// docs/recipes.md from here (a test keeps the two equal). The builders are
// key_builders.hpp's; the model.* keys come first, from keys_model.cpp.
#include <iterator>

#include "core/recipe/key_builders.hpp"

namespace trident::recipe_detail {

namespace {

const std::vector<Key>& table() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k = model_keys();
    std::vector<Key> rest = {
        mesh_size("parallel.data", FIELD(parallel.data), true,
                  "data-parallel size; `auto`: the world size over `tensor x pipeline x context` (as Megatron-Core and "
                  "torchtitan infer it; the start-up line says what was inferred), or 1 when `tensor` or `pipeline` is "
                  "`auto`"),
        mesh_size("parallel.tensor", FIELD(parallel.tensor), false,
                  "tensor-parallel size (docs/parallelism.md); `heads % tensor == 0`, `ffn_hidden % tensor == 0`; "
                  "`kv_heads % "
                  "tensor == 0` when `kv_heads >= tensor`, else `tensor % kv_heads == 0` (KV heads replicated)"),
        mesh_size("parallel.pipeline", FIELD(parallel.pipeline), false,
                  "pipeline stages; `layers % (pipeline * virtual_stages) == 0`"),
        integer(
            "parallel.context", FIELD(parallel.context), 1, 65536, value<int64_t>(1),
            "context-parallel size ([parallelism.md](parallelism.md#context-parallelism)): each sequence is split "
            "over this many ranks, each holding chunks `i` and `2 x context - 1 - i` of `2 x context`; `seq_len % (2 x "
            "context) == 0`; gradients are reduced and ZeRO shards over `data x context`"),
        integer("parallel.expert", FIELD(parallel.expert), 1, 65536, value<int64_t>(1),
                "expert-parallel size ([parallelism.md](parallelism.md#expert-parallelism)): each MoE layer's experts "
                "are split over this many ranks, carved out of `data x context` as Megatron-Core folds its expert "
                "grid; `model.moe.experts % expert == 0` and `expert` divides `data x context`; the rest of `data x "
                "context` is the expert-data group, over which the experts' gradients reduce and ZeRO shards them "
                "(`trident topology` shows the groups)"),
        integer("parallel.expert_tensor", FIELD(parallel.expert_tensor), 0, 65536, value<int64_t>(0),
                "how many ranks split each expert's FFN: 0 or `tensor` (the dense layers' split), or 1: each expert "
                "whole on one rank, the expert group carved out of `data x context x tensor` (each tensor rank "
                "routes its `1/tensor` of the rows; `expert x 1` divides `data x context x tensor`; balance kinds "
                "`aux_loss` and `none`; CPU); other values are refused"),
        choice<ContextMode>(
            "parallel.context_mode", FIELD(parallel.context_mode), value<ContextMode>(ContextMode::ring),
            "how attention sees the other ranks' keys: `ring` passes key/value blocks around the context "
            "group (asynchronous send/receive overlapped with the block in hand, merged by log-sum-exp); "
            "`all_to_all` (Ulysses) re-shards heads for attention and back, which needs this rank's heads "
            "(`heads / tensor`) and KV heads divisible by `context`"),
        axes("parallel.order", FIELD(parallel.order),
             "mesh dimensions from innermost (adjacent ranks) to outermost; a list without `context` gets it just "
             "inside `data`"),
        choice<ScheduleKind>(
            "parallel.schedule", FIELD(parallel.schedule), value<ScheduleKind>(ScheduleKind::one_f_one_b),
            "pipeline schedule ([parallelism.md](parallelism.md#pipeline-parallelism)); `interleaved_1f1b` needs "
            "`virtual_stages >= 2` and micro-batches per step (`global_batch / (micro_batch x data)`) a multiple of "
            "`pipeline`; `dualpipev` needs `virtual_stages: 2`, at least `2 x pipeline` micro-batches per step, untied "
            "embeddings; the others need `virtual_stages: 1`; `zero_bubble` and `dualpipev` need "
            "`train.recompute` "
            "none or selective"),
        integer("parallel.virtual_stages", FIELD(parallel.virtual_stages), 1, 1024, value<int64_t>(1),
                "model chunks per pipeline rank (`interleaved_1f1b`; 2 for `dualpipev`)"),
        boolean("parallel.overlap_paired", FIELD(parallel.overlap_paired), value<bool>(true),
                "`dualpipev` with MoE layers and `expert > 1`: each paired forward and backward (chunks of different "
                "micro-batches) run as paired passes on one thread, switching at every expert dispatch and combine so "
                "that one's tokens travel while the other computes, as DualPipe overlaps them "
                "([parallelism.md](parallelism.md#dualpipev)); every ZeRO stage, with recompute none or selective "
                "(dualpipev refuses full). `false`: "
                "one after the other"),
        integer("parallel.zero", FIELD(parallel.zero), 0, 3, value<int64_t>(0),
                "ZeRO stage of the data-parallel group: 0 replicate, 1 shard optimizer state, 2 also gradients, 3 also "
                "parameters"),
        integer(
            "parallel.data_shard", FIELD(parallel.data_shard), 0, 1 << 24, value<int64_t>(0),
            "HSDP ([parallelism.md](parallelism.md#hsdp)): the ZeRO shard group's size, a divisor of `data x "
            "context`; 0: all of `data x context` (plain ZeRO). Shard groups are runs of consecutive ranks of "
            "`data x context` (a node); gradients are reduce-scattered and parameters all-gathered inside them, and "
            "each rank's shard is all-reduced over the `data_replicate` groups that hold the same shard; needs "
            "`zero >= 1` when smaller than `data x context`"),
        integer("parallel.data_replicate", FIELD(parallel.data_replicate), 0, 1 << 24, value<int64_t>(0),
                "HSDP: how many replicas of the shard group; 0: `data x context / data_shard`. Given with "
                "`data_shard`, `data_replicate x data_shard` must equal `data x context`"),
        choice<ZeroAccumulate>(
            "parallel.zero_accumulate", FIELD(parallel.zero_accumulate), value<ZeroAccumulate>(ZeroAccumulate::full),
            "ZeRO 2 and 3 with several micro-batches a step: `full` accumulates the gradients in a full-size fp32 "
            "buffer (4P bytes) reduce-scattered once, during the last micro-batch's backward; `shard` "
            "reduce-scatters every micro-batch's gradients, segment by segment as its backward produces them, and "
            "adds them into the fp32 shard (4P/d bytes and the windows in flight; a reduction per micro-batch), as "
            "DeepSpeed, FSDP2 and Megatron-FSDP do ([parallelism.md](parallelism.md#zero)); with a pipeline each "
            "chunk's "
            "backward "
            "is added as it finishes (not with tied embeddings over pipeline stages)"),
        boolean(
            "parallel.sequence_parallel", FIELD(parallel.sequence_parallel), value<bool>(false),
            "Megatron sequence parallelism: with `tensor > 1`, norms, residual adds and the other token-wise work "
            "run on `1/tensor` of the micro-batch's token rows, and the tensor-parallel regions all-gather before / "
            "reduce-scatter after instead of all-reducing. Needs `micro_batch x seq_len` divisible by `tensor`; no "
            "effect with `tensor: 1`"),
        integer("parallel.bucket_bytes", FIELD(parallel.bucket_bytes), 1024, kMax, value<int64_t>(int64_t(25) << 20),
                "gradient bucket size for ZeRO 0 and 1 (stages 2 and 3 reduce per model segment)"),
        integers(
            "parallel.stage_layers", FIELD(parallel.stage_layers), 0, 100000, "even split",
            "layers of each of the `pipeline x virtual_stages` chunks in global chunk order (chunk `v x pipeline + "
            "p` is on stage `p`; under `dualpipev` chunks `p` and `2 x pipeline - 1 - p`); must have that many "
            "entries and sum to `model.layers`. Without it `layers % "
            "(pipeline x virtual_stages) == 0` is required"),
        real("parallel.timeout_s", FIELD(parallel.timeout_s), 0, 1e7, Open::low, value<double>(600.0),
             "a hang is an error: a pipeline transfer (naming the transfer, chunk, micro-batch and peer) or any other "
             "collective or point-to-point operation (naming the operation, its size, the group, this rank's place in "
             "it, and for transfers the peer's world rank and tag) that does not complete within this many seconds "
             "stops "
             "the job ([slurm.md](slurm.md#when-something-goes-wrong))"),
        integer("train.global_batch", FIELD(train.global_batch), 1, int64_t(1) << 24, required<int64_t>(),
                "sequences per optimizer step; divisible by `micro_batch * data`"),
        integer(
            "train.micro_batch", FIELD(train.micro_batch), 1, int64_t(1) << 24, required<int64_t>(),
            "sequences per forward/backward; `global_batch / (micro_batch * data)` micro-batches are accumulated per "
            "step"),
        integer("train.steps", FIELD(train.steps), 1, int64_t(1) << 40, required<int64_t>(),
                "optimizer steps; `steps * global_batch` (the samples of the run) at most 2^48"),
        choice<Precision>(
            "train.precision", FIELD(train.precision), value<Precision>(Precision::fp32),
            "`bf16`/`fp16`: mixed precision — activations, activation gradients and the parameters the "
            "model computes with are stored in the 16-bit format; math, parameter-gradient accumulation, "
            "fp32 master weights and Adam moments stay fp32 (docs/precision.md). On CPU the 16-bit values "
            "are held in fp32 buffers, rounded at every store"),
        real("train.loss_scale", FIELD(train.loss_scale), 0, 1e38, Open::low,
             derived("`65536` for `fp16`, else `1`",
                     [](const Recipe& r) { return r.train.precision == Precision::fp16 ? 65536.0 : 1.0; }),
             "fp16's initial dynamic loss scale (only fp16 may set it)"),
        integer("train.loss_scale_window", FIELD(train.loss_scale_window), 1, kMax, value<int64_t>(1000),
                "fp16: clean steps after which the scale doubles"),
        real("train.min_loss_scale", FIELD(train.min_loss_scale), 0, 1e38, Open::low, value<double>(1.0),
             "fp16: the scale never halves below this; `<= loss_scale`"),
        choice<Recompute>(
            "train.recompute", FIELD(train.recompute), value<Recompute>(Recompute::none),
            "activation recomputation: `selective` drops the attention log-sum-exp and recomputes it "
            "in backward; `full` keeps only each layer's input and reruns the layer's forward in backward. "
            "Gradients are bitwise identical in all three modes"),
        choice<NonFinite>(
            "train.nonfinite", FIELD(train.nonfinite), value<NonFinite>(NonFinite::stop),
            "a step whose loss or gradient norm is inf/NaN (fp16: whose loss is; gradient overflows are the "
            "loss scaler's): `stop` ends the run with an error before the update, naming the first "
            "parameter with a non-finite gradient; `skip` drops the step's update, logs and counts it, and "
            "stops after `nonfinite_limit` in a row. No checkpoint is ever written from a non-finite state"),
        integer("train.nonfinite_limit", FIELD(train.nonfinite_limit), 1, kMax, value<int64_t>(5),
                "`nonfinite: skip`: consecutive skipped steps after which the run stops"),
        integer("train.threads", FIELD(train.threads), 0, 4096, value<int64_t>(0),
                "CPU threads per rank; 0 = `OMP_NUM_THREADS` when set, else the node's cores divided by its ranks"),
        section("train.fp8", "FP8 GEMMs in the linear layers ([precision.md](precision.md#fp8-training))"),
        choice<Fp8Recipe>(
            "train.fp8.recipe", FIELD(train.fp8.recipe), value(Fp8Recipe::none),
            "`tensorwise`: one scale per tensor from its amax at each use (torchao's Float8Linear); `delayed`: the "
            "scale from the amax history of the steps before (Transformer Engine's DelayedScaling); `blockwise`: "
            "1 x 128 tiles of activations and gradients, 128 x 128 blocks of weights (DeepSeek-V3). With "
            "`precision: bf16` (or `fp32`; not `fp16`). The FP8 GEMM is emulated: operands quantised and dequantised, "
            "fp32 GEMM"),
        choice<Fp8Format>("train.fp8.format", FIELD(train.fp8.format), value(Fp8Format::e4m3),
                          "`e4m3` everywhere, or `hybrid`: e4m3 forward, e5m2 for the output gradients (tensorwise, "
                          "delayed; blockwise is e4m3)"),
        integer("train.fp8.amax_history", FIELD(train.fp8.amax_history), 1, 1 << 20, value<int64_t>(1024),
                "`delayed`: steps of amax kept per tensor; the scale comes from their maximum"),
        real("train.fp8.margin", FIELD(train.fp8.margin), 0, 64, Open::none, value(0.0),
             "`delayed`: scale = max_fp8 / amax / 2^margin"),
        boolean("train.fp8.power_of_two", FIELD(train.fp8.power_of_two), value(false),
                "scales rounded to powers of two: tensorwise down (torchao's round_scales_to_power_of_2), "
                "blockwise up (DeepSeek's ue8m0 scale format)"),
        choices<Fp8Module>("train.fp8.keep_high_precision", FIELD(train.fp8.keep_high_precision),
                           "`[embedding, lm_head, router, norm]`",
                           "module kinds whose GEMMs stay in `precision`: `attention` (MLA's projections too), "
                           "`mlp`, `experts`, `mtp` (the multi-token prediction depths' blocks; their eh projection "
                           "never is), `first_layer`, `last_layer`; embedding, LM head, router and norms are never "
                           "FP8 (they may be listed)",
                           /*keep_default=*/true),
        boolean("train.fp8.param_gather", FIELD(train.fp8.param_gather), value(false),
                "ZeRO 3 all-gathers the weights of the FP8 GEMMs as FP8 codes, a byte a value, each with the scale "
                "its GEMM uses (the same run bit for bit, a quarter of those bytes); needs `parallel.zero: 3` and "
                "recipe `tensorwise` or `delayed` ([precision.md](precision.md#fp8-parameter-gathers))"),
        boolean("train.fp8.saved_inputs", FIELD(train.fp8.saved_inputs), value(false),
                "keep the inputs that only a weight gradient reads (the norms' outputs entering the attention's "
                "and a dense MLP's first linear, the MLP's second linear's input) as the FP8 codes their forward "
                "GEMM read, a byte a value in place of bf16's two (the same run bit for bit); needs "
                "`precision: bf16`, recipe `tensorwise` or `delayed`, and `recompute` none or selective "
                "([precision.md](precision.md#fp8-saved-inputs))"),
        real("optim.lr", FIELD(optim.lr), 0, 10, Open::low, required<double>(), "peak learning rate"),
        real("optim.min_lr", FIELD(optim.min_lr), 0, 10, Open::none, value<double>(0.0),
             "final learning rate of the decay; `min_lr <= lr`"),
        integer("optim.warmup", FIELD(optim.warmup), 0, kMax, value<int64_t>(0),
                "linear warmup steps: `lr * (s + 1) / warmup`"),
        choice<LrDecay>("optim.decay", FIELD(optim.decay), value<LrDecay>(LrDecay::cosine),
                        "schedule after warmup (formulas in `optim/lr_schedule.hpp`)"),
        real("optim.wsd_decay_fraction", FIELD(optim.wsd_decay_fraction), 0, 1, Open::low, value<double>(0.2),
             "`wsd` (warmup-stable-decay): fraction of all steps spent in the final linear decay"),
        betas("optim.betas", FIELD(optim.betas), "Adam betas"),
        real("optim.eps", FIELD(optim.eps), 0, 1, Open::low, value<double>(1e-8), "Adam epsilon"),
        real("optim.weight_decay", FIELD(optim.weight_decay), 0, 10, Open::none, value<double>(0.0),
             "decoupled weight decay (AdamW)"),
        real("optim.grad_clip", FIELD(optim.grad_clip), 0, 1e9, Open::none, value<double>(1.0),
             "clip the global gradient norm to this; 0 disables"),
        boolean("optim.decay_norms_and_biases", FIELD(optim.decay_norms_and_biases), value<bool>(false),
                "apply weight decay to norm weights and biases too"),
        boolean("optim.decay_embeddings", FIELD(optim.decay_embeddings), value<bool>(false),
                "apply weight decay to embeddings (a tied LM head follows this)"),
        choice<OptimizerKind>(
            "optim.name", FIELD(optim.name), value(OptimizerKind::adamw),
            "`adamw`; `muon`: torch.optim.Muon for the hidden matrices (attention and MLP projections, "
            "each expert's matrices one by one, MLA's down and up projections), AdamW with the keys "
            "above for the rest (embeddings, LM head, norms, biases, routers, MTP's projection) "
            "([optim.md](optim.md#muon)); every mesh (each matrix orthogonalised whole by one owner rank); CPU only"),
        section("optim.muon", "Muon's keys (`optim.name: muon`), torch.optim.Muon's"),
        real("optim.muon.momentum", FIELD(optim.muon.momentum), 0, 1, Open::none, value(0.95),
             "momentum mu: buf = mu buf + (1 - mu) g (torch's lerp)"),
        boolean("optim.muon.nesterov", FIELD(optim.muon.nesterov), value(true),
                "orthogonalise (1 - mu) g + mu buf rather than buf"),
        integer("optim.muon.ns_steps", FIELD(optim.muon.ns_steps), 1, 99, value<int64_t>(5),
                "Newton-Schulz iterations"),
        coefficients("optim.muon.ns_coefficients", FIELD(optim.muon.ns_coefficients),
                     "the quintic iteration's (a, b, c): X <- a X + (b A + c A^2) X, A = X X^T"),
        choice<MuonAdjustLr>(
            "optim.muon.adjust_lr", FIELD(optim.muon.adjust_lr), value(MuonAdjustLr::original),
            "the update's scale for an A x B matrix: `original` sqrt(max(1, A / B)) (Keller Jordan's); "
            "`match_rms_adamw` 0.2 sqrt(max(A, B)) (Moonlight: AdamW's lr and weight decay carry "
            "over); `spectral` sqrt(A / B) (torch's spectral_unclamped)"),
        choice<MuonPrecision>("optim.muon.ns_precision", FIELD(optim.muon.ns_precision), value(MuonPrecision::bf16),
                              "the iteration's arithmetic: `bf16` as torch.optim.Muon (bf16 operands and results, "
                              "float32 accumulation); `fp32` exact to compare"),
        real("optim.muon.weight_decay", FIELD(optim.muon.weight_decay), 0, 10, Open::none,
             derived("`optim.weight_decay`", [](const Recipe& r) { return r.optim.weight_decay; }),
             "decoupled weight decay of the Muon matrices: p <- p (1 - lr weight_decay), at the unadjusted lr"),
        integer("optim.muon.rounds", FIELD(optim.muon.rounds), 1, 1024, value<int64_t>(4),
                "tensor parallelism: the matrices' exchanges with their owner ranks go in this many rounds, each in "
                "flight while the round before is orthogonalised (1: one exchange each way, no overlap)"),
        section("optim.muon.qk_clip", "QK-clip (Kimi K2's MuonClip, [optim.md](optim.md#qk-clip))"),
        boolean("optim.muon.qk_clip.on", FIELD(optim.muon.qk_clip.on), value(false),
                "after each update, scale the query and key weights of every head whose largest attention logit of "
                "the step exceeded the threshold, so that its logits shrink to it"),
        real("optim.muon.qk_clip.threshold", FIELD(optim.muon.qk_clip.threshold), 0, 1e6, Open::low, value(100.0),
             "tau: the largest logit (the scaled q . k) a head may keep (Kimi K2: 100)"),
        blend("data.train", FIELD(data.train),
              "Megatron indexed dataset `PREFIX` (`PREFIX.bin` / `PREFIX.idx`, see [data.md](data.md)), or a weighted "
              "blend: a list of `{path: PREFIX, weight: W}`; each sample comes from the dataset furthest below its "
              "share"),
        blend("data.valid", FIELD(data.valid),
              "validation split(s), same forms; a blend reports a validation loss per dataset; without it no "
              "evaluation runs"),
        boolean("data.document_mask", FIELD(data.document_mask), value(false),
                "attention stays inside each document of a sample (documents end at the dataset's EOD token) and "
                "positions (learned and rotary) restart at each document"),
        boolean("data.mask_eod_loss", FIELD(data.mask_eod_loss), value(false),
                "no loss on targets that are the EOD token; the mean loss is over the other targets of the global "
                "batch"),
        text("data.cache_dir", FIELD(data.cache_dir), "next to each dataset",
             "directory for the cached sample indexes (for datasets on read-only storage); when set it must be a "
             "writable directory (else exit 2 at start-up); the default falls back to an index in memory, with a "
             "warning, where the data's directory is read-only"),
        section("data.synthetic", "seeded Markov source (below)"),
        integer("data.synthetic.vocab", FIELD(data.syn.vocab), 2, 1 << 30,
                derived("`model.vocab`", [](const Recipe& r) { return r.model.vocab; }),
                "tokens the source emits; `<= model.vocab`"),
        integer("data.synthetic.order", FIELD(data.syn.order), 1, 8, value<int64_t>(2), "context length of the chain"),
        integer("data.synthetic.branching", FIELD(data.syn.branching), 1, 1024, value<int64_t>(4),
                "successors per context"),
        real("data.synthetic.skew", FIELD(data.syn.skew), 0, 100, Open::none, value<double>(0.7),
             "successor j has probability proportional to `exp(-skew * j)`"),
        integer("data.synthetic.seed", FIELD(data.syn.seed), 0, kMax, value<int64_t>(1),
                "seed of the chain's transition structure"),
        integer("eval.every", FIELD(eval.every), 0, kMax, value<int64_t>(0),
                "evaluate every N steps (0: only after the last step)"),
        integer("eval.batches", FIELD(eval.batches), 0, kMax, value<int64_t>(8),
                "micro-batches of the valid split per evaluation (0 disables)"),
        text("checkpoint.dir", FIELD(checkpoint.dir), "— (no checkpoints)",
             "directory of checkpoints: `step_NNNNNNNN/` per saved step and a `latest` pointer"),
        integer("checkpoint.every", FIELD(checkpoint.every), 0, kMax, value<int64_t>(0),
                "save after every N steps (0: only after the last step); with a `dir`, the last step is always saved"),
        integer("checkpoint.keep", FIELD(checkpoint.keep), 1, kMax, value<int64_t>(3),
                "complete checkpoints kept; older ones are removed after a new one is complete"),
        boolean("checkpoint.async", FIELD(checkpoint.async), value<bool>(true),
                "write the files from a background thread (the step pays only a copy to host buffers of 12 bytes per "
                "element of the rank's shard, kept for the run); `false`: write inside the step"),
        integer("log.every", FIELD(log.every), 1, kMax, value<int64_t>(10),
                "stdout line every N steps (and the first and last)"),
        real("log.straggler", FIELD(log.straggler), 0, 1e6, Open::none, value<double>(0.1),
             "on a progress line, name the slowest rank when its busy time (the step less its waits for other ranks: "
             "data-parallel reductions, pipeline transfers, tensor-parallel collectives) exceeds the median rank's by "
             "more than this fraction ([metrics.md](metrics.md#the-progress-line))"),
        text("log.metrics", FIELD(log.metrics), "—",
             "JSON-lines metrics file ([metrics.md](metrics.md)); missing directories are created"),
        text("log.tensorboard", FIELD(log.tensorboard), "none",
             "directory for TensorBoard event files (rank 0): every number of the metrics records as a scalar "
             "tagged `train/loss`, `train/peak_bytes/activations`, `eval/val_loss`, ..., and the resolved recipe as "
             "text; a resumed run adds a file and TensorBoard joins them by step "
             "([metrics.md](metrics.md#tensorboard))"),
        real("log.peak_flops", FIELD(log.peak_flops), 0, 1e20, Open::none, value<double>(0.0),
             "FLOP/s per rank that MFU is relative to; 0 = the GPU's dense peak, or on CPU this machine's sgemm peak "
             "for the run's thread count, measured once and cached ([metrics.md](metrics.md#the-mfu-reference))"),
        text(
            "log.trace", FIELD(log.trace), "none",
            "write a Chrome trace (JSON; open in Perfetto or `chrome://tracing`): one track per rank, spans for "
            "forward, backward (or input / weight passes), pipeline sends (copy and post) and time waiting on pipeline "
            "receives, gradient sync (data, embedding and replicated-parameter reductions), the optimizer step, and "
            "with `parallel.expert > 1` each MoE layer's `expert dispatch` and `expert combine` (issue to completion) "
            "with the part spent `expert (waiting)`; its `otherData` holds each traced step's measured pipeline "
            "`bubble` per "
            "stage and the simulator's `bubble_predicted`"),
        integers("log.trace_steps", FIELD(log.trace_steps), 1, kMax, "`[2]`",
                 "steps (1-based) written to `log.trace`; the file is written after the last of them"),
        text("log.flight_recorder", FIELD(log.flight_recorder),
             "`checkpoint.dir/flight_recorder`, else `/tmp/trident-flight-PID` (rank 0's PID)",
             "directory where, on a timeout (`parallel.timeout_s`), each rank writes its last 1024 communication "
             "operations (`rank_R.json`) and reads the other ranks' to name the one that is behind ([slurm.md]"
             "(slurm.md#when-something-goes-wrong)); on several nodes it must be on a shared file system"),
        integer("seed", FIELD(seed), 0, kMax, value<int64_t>(1234),
                "seeds initialisation (Philox keyed by parameter name) and data sampling"),
        choice<DeviceType>(
            "device", FIELD(device), value<DeviceType>(DeviceType::cpu),
            "compute device; `cuda`: each rank binds to GPU `local_rank % devices`, NCCL for every group "
            "with one GPU per rank, host staging over MPI when ranks share a GPU ([cuda.md](cuda.md)); "
            "refused (exit 2) by a build without CUDA or where no GPU is visible"),
    };
    k.insert(k.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return k;
  }();
  return keys;
}

}  // namespace

const std::vector<Key>& keys() { return table(); }

}  // namespace trident::recipe_detail

namespace trident {

const std::vector<RecipeKey>& recipe_keys() {
  static const std::vector<RecipeKey> docs = [] {
    std::vector<RecipeKey> out;
    for (const auto& k : recipe_detail::keys()) out.push_back(k.doc);
    return out;
  }();
  return docs;
}

std::vector<std::pair<std::string, std::string>> recipe_values(const Recipe& r, const std::string& section) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : recipe_detail::keys())
    if (k.show && k.doc.path.starts_with(section + ".")) out.emplace_back(k.doc.path, k.show(r));
  return out;
}

std::string recipe_section(const std::string& path) {
  const auto dot = path.find('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string recipe_keys_markdown(const std::string& section) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : recipe_keys())
    if (recipe_section(k.path) == section)
      out += fmt::format("| `{}` | {} | {} | {} |\n", k.path, k.type, k.default_text, k.doc);
  return out;
}

std::string recipe_doc_with_tables(const std::string& doc) {
  std::istringstream in(doc);
  std::string out, line, section;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      const auto a = line.find('`'), b = line.rfind('`');
      section = a != std::string::npos && b > a ? line.substr(a + 1, b - a - 1) : "";
    }
    if (line.rfind("| key | type | default | meaning |", 0) == 0) {
      out += recipe_keys_markdown(section);
      in_table = true;
      continue;
    }
    if (in_table && line.rfind("|", 0) == 0) continue;
    in_table = false;
    out += line + "\n";
  }
  return out;
}

}  // namespace trident
