// Cluster files for the planner (see planner.hpp, docs/planner.md): the
// device, its rates and memory, the links inside and between nodes, read
// through the recipes' YAML reader: each key validated with an InputError
// naming file:line:column, the key, what was expected and what was found.
#include <algorithm>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/recipe/yaml_reader.hpp"
#include "launch/plan/planner.hpp"

namespace trident::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// {bandwidth_gbps, latency_us, half_bandwidth_mb}: bytes/s, seconds, bytes
Link link(YamlReader& r, const std::string& key) {
  if (!r.has(key)) fail_input("{}: missing required key '{}' ({{bandwidth_gbps, latency_us}})", r.where(key), key);
  if (!r.find(key).IsMap()) r.bad(key, "a map {bandwidth_gbps, latency_us}");
  r.check_section(key, {"bandwidth_gbps", "latency_us", "half_bandwidth_mb"});
  return {r.positive(key + ".bandwidth_gbps", std::nullopt) * 1e9, r.positive(key + ".latency_us", std::nullopt) * 1e-6,
          r.positive(key + ".half_bandwidth_mb", 0.0) * 1e6};
}

// [[smallest dimension, fraction of peak], ...], ascending dimensions
std::vector<std::pair<double, double>> gemm_table(YamlReader& r, const std::string& key) {
  std::vector<std::pair<double, double>> table;
  if (!r.has(key)) return table;
  const YAML::Node t = r.find(key);
  const std::string expected = "a list of [dimension, fraction] pairs";
  if (!t.IsSequence() || t.size() == 0) r.bad(key, expected);
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", key, i);
    const std::string where = r.key_location(at, t[i].Mark());
    const auto dim = t[i].IsSequence() && t[i].size() == 2 ? yaml_detail::plain_number(t[i][0]) : std::nullopt;
    const auto f = t[i].IsSequence() && t[i].size() == 2 ? yaml_detail::plain_number(t[i][1]) : std::nullopt;
    if (!dim || !f || !(*dim > 0) || !(*f > 0) || *f > 1)
      fail_input("{}: key '{}': expected [dimension > 0, fraction in (0, 1]], found {}", where, at,
                 yaml_detail::describe(t[i]));
    if (!table.empty() && *dim <= table.back().first)
      fail_input("{}: key '{}[0]': expected dimensions in ascending order, found {} after {}", where, at, *dim,
                 table.back().first);
    table.emplace_back(*dim, *f);
  }
  return table;
}

// A text key that must be one of `choices` (the first is the default).
std::string one_of(YamlReader& r, const std::string& key, const std::vector<std::string>& choices) {
  const std::string v = r.text(key, choices.front());
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    std::string expected = choices.front();
    for (size_t i = 1; i < choices.size(); ++i) expected += (i + 1 == choices.size() ? " or " : ", ") + choices[i];
    r.bad(key, expected);
  }
  return v;
}

}  // namespace

Cluster load_cluster(const std::string& path, Precision prec, const std::vector<std::string>& overrides) {
  YAML::Node root = read_yaml_file(path, "a cluster file");
  if (!root.IsMap())
    fail_input("{}: expected a map of cluster keys (docs/planner.md), found {}", path, yaml_detail::describe(root));
  const auto origin = apply_yaml_overrides(root, overrides, "--cluster-set");
  YamlReader r(root, path, origin);
  r.check_section(
      "", {"name", "device", "devices_per_node", "memory_gib", "peak_tflops", "gemm_fraction", "gemm_efficiency",
           "attention", "attention_fraction", "memory_bandwidth_gbps", "memory_fraction", "kernel_floor_us",
           "intra_node", "inter_node", "attention_dropout", "usable_memory_gib", "software"});
  Cluster c;
  c.source = path;
  c.precision = prec;
  c.name = r.text("name", path);
  if (!overrides.empty()) c.name += fmt::format(" ({})", fmt::join(overrides, ", "));
  c.device = r.enumerated<DeviceType>("device", c.device);
  c.devices_per_node = int(r.integer("devices_per_node", 1, 1 << 20, std::nullopt));
  c.memory_bytes = r.positive("memory_gib", std::nullopt) * kGiB;
  c.usable_bytes = r.positive("usable_memory_gib", c.memory_bytes / kGiB) * kGiB;
  if (c.usable_bytes > c.memory_bytes)
    fail_input("{}: key 'usable_memory_gib': expected at most memory_gib ({}), found {}", r.where("usable_memory_gib"),
               c.memory_bytes / kGiB, c.usable_bytes / kGiB);
  const std::string precision = enum_name(prec), peak = "peak_tflops." + precision;
  if (!r.has("peak_tflops") || !r.find("peak_tflops").IsMap()) r.bad("peak_tflops", "a map {fp32, bf16, fp16}");
  r.check_section("peak_tflops", {"fp32", "bf16", "fp16", "fp8"});
  if (!r.has(peak))
    fail_input("{}: key '{}': missing (the recipe trains in {})", r.where("peak_tflops"), peak, precision);
  c.peak_flops = r.positive(peak, std::nullopt) * 1e12;
  c.gemm_fraction = r.real("gemm_fraction", 0, 1, std::nullopt, true);
  c.gemm_table = gemm_table(r, "gemm_efficiency");
  c.attention_fraction = r.real("attention_fraction", 0, 1, c.gemm_fraction, true);
  // Trident's attention is flash-style on both devices; `materialized` plans another code's
  const std::string attention = r.text("attention", "flash");
  if (attention != "flash" && attention != "materialized") r.bad("attention", "flash or materialized");
  c.flash_attention = attention == "flash";
  c.attention_dropout = r.boolean("attention_dropout", false);
  c.memory_bandwidth = r.positive("memory_bandwidth_gbps", std::nullopt) * 1e9;
  c.memory_fraction = r.real("memory_fraction", 0, 1, 1.0, true);
  c.kernel_floor = r.positive("kernel_floor_us", 0.0) * 1e-6;
  c.intra = link(r, "intra_node");
  c.inter = link(r, "inter_node");
  if (r.has("software")) {
    if (!r.find("software").IsMap()) r.bad("software", "a map of software keys (docs/planner.md#software)");
    r.check_section("software", {"name", "tensor_comm_overlap", "data_comm_overlap", "activations", "gemm_precision",
                                 "fp8_gemm_fraction", "cross_entropy", "grad_reduce", "pipeline_comm_overlap",
                                 "zero_grad_accumulation"});
    c.software = r.text("software.name", c.software);
    // true: forward and backward (Megatron-Core's --tp-comm-overlap); forward: the forward's and the recomputed
    // forward's only (torchtitan's async tensor parallelism, docs/planner.md#software)
    const std::string tp_overlap = one_of(r, "software.tensor_comm_overlap", {"false", "true", "forward"});
    c.tensor_overlap = tp_overlap == "true"      ? Cluster::TensorOverlap::both
                       : tp_overlap == "forward" ? Cluster::TensorOverlap::forward
                                                 : Cluster::TensorOverlap::none;
    c.data_comm_overlap = r.boolean("software.data_comm_overlap", false);
    c.pipeline_comm_overlap = r.boolean("software.pipeline_comm_overlap", false);
    const std::string kept = one_of(r, "software.activations", {"trident", "megatron", "torchtitan"});
    c.kept = kept == "megatron"     ? Cluster::Kept::megatron
             : kept == "torchtitan" ? Cluster::Kept::torchtitan
                                    : Cluster::Kept::trident;
    // NVIDIA's performance recipes reduce the gradients in bf16 (grad_reduce_in_fp32 = False)
    c.grad_reduce_bytes = one_of(r, "software.grad_reduce", {"fp32", "bf16"}) == "bf16" ? 2 : 4;
    c.fp32_cross_entropy = one_of(r, "software.cross_entropy", {"fused", "fp32"}) == "fp32";
    // ZeRO 2/3 with several micro-batches: Trident accumulates a whole gradient buffer and reduce-scatters it once;
    // Megatron-FSDP and PyTorch's FSDP reduce-scatter every micro-batch's into the shard
    c.sharded_grad_accumulation = one_of(r, "software.zero_grad_accumulation", {"buffer", "shard"}) == "shard";
    // Transformer Engine's fp8 recipes: the GEMMs (forward, input and weight gradients) in fp8, the rest as planned
    const std::string gemms = one_of(r, "software.gemm_precision", {std::string(enum_name(prec)), "fp8"});
    if (gemms == "fp8" && !r.has("peak_tflops.fp8"))
      fail_input("{}: key 'peak_tflops.fp8': missing (software.gemm_precision is fp8)", r.where("peak_tflops"));
    c.fp8_saved_inputs = gemms == "fp8";
  }
  // fp8 GEMMs reach this fraction of what the GEMM table gives bf16 ones of their peak (scaling and
  // amax reductions included; the casts are costed apart, step_model.cpp)
  if (r.has("peak_tflops.fp8"))
    c.fp8_peak_flops = r.positive("peak_tflops.fp8", std::nullopt) * 1e12 *
                       (r.has("software") ? r.real("software.fp8_gemm_fraction", 0, 1, 1.0, true) : 1.0);
  if (c.fp8_saved_inputs) c.gemm_peak_flops = c.fp8_peak_flops;
  return c;
}

void apply_recipe_fp8(Cluster& cl, const Recipe& rc, const std::string& path) {
  if (!rc.train.fp8.on() || cl.gemm_peak_flops > 0) return;
  if (cl.fp8_peak_flops <= 0)
    fail_input(
        "{}: key 'peak_tflops.fp8': missing (the recipe's train.fp8.recipe is {}: its linears' GEMMs are "
        "planned at the device's fp8 peak)",
        path, enum_name(rc.train.fp8.recipe));
  cl.gemm_peak_flops = cl.fp8_peak_flops, cl.fp8_from_recipe = true, cl.recipe_fp8 = rc.train.fp8;
}

DeviceRates Cluster::rates() const {
  DeviceRates r;
  r.peak_flops = peak_flops;
  r.gemm_peak_flops = gemm_peak_flops > 0 ? gemm_peak_flops : peak_flops;
  r.fp8_casts = gemm_peak_flops > 0;
  r.fp8_linears_only = fp8_from_recipe, r.fp8 = recipe_fp8;
  if (fp32_cross_entropy) {
    // Megatron-Core's vocab_parallel_cross_entropy: forward the logits cast to fp32 (2 + 4 bytes), the maximum
    // read (4), the shift and the exponential in place (8 + 8), the sum read (4), the normalisation in place (8);
    // backward the gradient scaled in place (8) and cast back (4 + 2)
    r.loss_bytes_forward = 2 + 4 + 4 + 8 + 8 + 4 + 8;
    r.loss_bytes_backward = 8 + 4 + 2;
  }
  r.gemm_table = gemm_table;
  r.gemm_fraction = gemm_fraction;
  r.attention_fraction = attention_fraction;
  r.flash_attention = flash_attention;
  r.attention_dropout = attention_dropout;
  r.memory_bandwidth = memory_bandwidth * memory_fraction;
  r.kernel_floor = kernel_floor;
  r.bytes_per_value = precision == Precision::fp32 ? 4 : 2;
  return r;
}

}  // namespace trident::launch
