// Cluster files for the planner (see planner.hpp, docs/planner.md): the
// device, its rates and memory, the links inside and between nodes, each key
// validated with an InputError naming the file and key.
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "core/error.hpp"
#include "launch/plan/planner.hpp"

namespace trident::launch {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double number(const YAML::Node& n, const std::string& path, const std::string& key) {
  if (!n || !n.IsScalar()) fail_input("{}: missing key '{}'", path, key);
  try {
    const double v = n.as<double>();
    if (!(v > 0)) fail_input("{}: key '{}': expected a number > 0, found {}", path, key, v);
    return v;
  } catch (const YAML::Exception&) {
    fail_input("{}: key '{}': expected a number, found '{}'", path, key, n.as<std::string>());
  }
}

// An optional number: `fallback` when the key is absent; `most` bounds it.
double optional_number(const YAML::Node& n, const std::string& path, const std::string& key, double fallback,
                       double most = 0) {
  if (!n) return fallback;
  const double v = number(n, path, key);
  if (most > 0 && v > most) fail_input("{}: key '{}': expected at most {}, found {}", path, key, most, v);
  return v;
}

Link link(const YAML::Node& n, const std::string& path, const std::string& key) {
  if (!n || !n.IsMap()) fail_input("{}: missing key '{}' ({{bandwidth_gbps, latency_us}})", path, key);
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (k != "bandwidth_gbps" && k != "latency_us" && k != "half_bandwidth_mb")
      fail_input("{}: unknown key '{}.{}' (expected bandwidth_gbps, latency_us, half_bandwidth_mb)", path, key, k);
  }
  return {number(n["bandwidth_gbps"], path, key + ".bandwidth_gbps") * 1e9,
          number(n["latency_us"], path, key + ".latency_us") * 1e-6,
          optional_number(n["half_bandwidth_mb"], path, key + ".half_bandwidth_mb", 0) * 1e6};
}

}  // namespace

Cluster load_cluster(const std::string& path, Precision prec) {
  const std::string precision = enum_name(prec);
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail_input("{}: cannot open cluster file", path);
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (!y.IsMap()) fail_input("{}: expected a map of cluster keys", path);
  static const std::vector<std::string> known = {"name",
                                                 "device",
                                                 "devices_per_node",
                                                 "memory_gib",
                                                 "peak_tflops",
                                                 "gemm_fraction",
                                                 "gemm_efficiency",
                                                 "attention",
                                                 "attention_fraction",
                                                 "memory_bandwidth_gbps",
                                                 "memory_fraction",
                                                 "kernel_floor_us",
                                                 "intra_node",
                                                 "inter_node",
                                                 "attention_dropout"};
  for (const auto& kv : y) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), k) == known.end())
      fail_input("{}: unknown key '{}' (docs/planner.md lists the cluster keys)", path, k);
  }
  Cluster c;
  c.source = path;
  c.precision = prec;
  c.name = y["name"] ? y["name"].as<std::string>() : path;
  if (y["device"]) {
    const auto device = y["device"].IsScalar() ? parse_enum<DeviceType>(y["device"].Scalar()) : std::nullopt;
    if (!device)
      fail_input("{}: key 'device': expected {}, found '{}'", path, enum_choices<DeviceType>(),
                 YAML::Dump(y["device"]));
    c.device = *device;
  }
  c.devices_per_node = int(number(y["devices_per_node"], path, "devices_per_node"));
  c.memory_bytes = number(y["memory_gib"], path, "memory_gib") * kGiB;
  if (!y["peak_tflops"] || !y["peak_tflops"][precision])
    fail_input("{}: key 'peak_tflops.{}': missing (the recipe trains in {})", path, precision, precision);
  c.peak_flops = number(y["peak_tflops"][precision], path, "peak_tflops." + precision) * 1e12;
  c.gemm_fraction = number(y["gemm_fraction"], path, "gemm_fraction");
  if (c.gemm_fraction > 1) fail_input("{}: key 'gemm_fraction': expected at most 1, found {}", path, c.gemm_fraction);
  if (const YAML::Node t = y["gemm_efficiency"]) {
    // [[smallest dimension, fraction of peak], ...], ascending dimensions
    if (!t.IsSequence() || t.size() == 0)
      fail_input("{}: key 'gemm_efficiency': expected a list of [dimension, fraction] pairs", path);
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string at = fmt::format("gemm_efficiency[{}]", i);
      if (!t[i].IsSequence() || t[i].size() != 2) fail_input("{}: key '{}': expected [dimension, fraction]", path, at);
      const double dim = number(t[i][0], path, at + "[0]"), f = number(t[i][1], path, at + "[1]");
      if (f > 1) fail_input("{}: key '{}[1]': expected at most 1, found {}", path, at, f);
      if (!c.gemm_table.empty() && dim <= c.gemm_table.back().first)
        fail_input("{}: key '{}[0]': expected dimensions in ascending order, found {} after {}", path, at, dim,
                   c.gemm_table.back().first);
      c.gemm_table.emplace_back(dim, f);
    }
  }
  c.attention_fraction = optional_number(y["attention_fraction"], path, "attention_fraction", c.gemm_fraction, 1);
  c.flash_attention = true;  // Trident's attention is flash-style on both devices
  if (const YAML::Node a = y["attention"]) {
    const std::string v = a.IsScalar() ? a.Scalar() : YAML::Dump(a);
    if (v != "flash" && v != "materialized")
      fail_input("{}: key 'attention': expected flash or materialized, found '{}'", path, v);
    c.flash_attention = v == "flash";
  }
  if (const YAML::Node d = y["attention_dropout"]) {
    if (!d.IsScalar() || (d.Scalar() != "true" && d.Scalar() != "false"))
      fail_input("{}: key 'attention_dropout': expected true or false, found '{}'", path, YAML::Dump(d));
    c.attention_dropout = d.Scalar() == "true";
  }
  c.memory_bandwidth = number(y["memory_bandwidth_gbps"], path, "memory_bandwidth_gbps") * 1e9;
  c.memory_fraction = optional_number(y["memory_fraction"], path, "memory_fraction", 1, 1);
  c.kernel_floor = y["kernel_floor_us"] ? number(y["kernel_floor_us"], path, "kernel_floor_us") * 1e-6 : 0;
  c.intra = link(y["intra_node"], path, "intra_node");
  c.inter = link(y["inter_node"], path, "inter_node");
  return c;
}

DeviceRates Cluster::rates() const {
  DeviceRates r;
  r.peak_flops = peak_flops;
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
