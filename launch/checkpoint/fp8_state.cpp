// Delayed FP8 scaling's state in a checkpoint (see fp8_state.hpp).
#include "launch/checkpoint/fp8_state.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "parallel/rank_reductions.hpp"

namespace trident::launch::checkpoint {

namespace {

// Each entry as doubles: layer, linear, operand, scale, n, n amaxes (floats exact in doubles).
std::vector<double> pack(const Fp8State& s) {
  std::vector<double> out;
  for (const auto& t : s) {
    out.insert(out.end(), {double(t.layer), double(int(t.linear)), double(int(t.operand)), double(t.scale),
                           double(t.amaxes.size())});
    out.insert(out.end(), t.amaxes.begin(), t.amaxes.end());
  }
  return out;
}

Fp8State unpack(const std::vector<double>& v) {
  Fp8State out;
  for (size_t i = 0; i + 5 <= v.size();) {
    model::Fp8Linears::TensorState t;
    t.layer = int64_t(v[i]), t.linear = model::Linear(int(v[i + 1])), t.operand = model::Operand(int(v[i + 2]));
    t.scale = float(v[i + 3]);
    const auto n = size_t(v[i + 4]);
    for (size_t k = 0; k < n; ++k) t.amaxes.push_back(float(v[i + 5 + k]));
    out.push_back(std::move(t));
    i += 5 + n;
  }
  return out;
}

template <typename E, int N>
E named(const std::string& path, const std::string& key, const std::string& found, const char* (*name)(E)) {
  std::string all;
  for (int i = 0; i < N; ++i) {
    if (found == name(E(i))) return E(i);
    all += (i ? " | " : "") + std::string(name(E(i)));
  }
  fail_input("{}: key '{}': expected {}, found '{}'", path, key, all, found);
}

}  // namespace

Fp8State gather_fp8_state(parallel::Communicator* world, const Fp8State& mine) {
  return unpack(parallel::gather_varying(world, pack(mine)));
}

std::string fp8_state_json(const Fp8State& s) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& t : s)
    tensors.push_back({{"layer", t.layer},
                       {"linear", model::linear_name(t.linear)},
                       {"operand", model::operand_name(t.operand)},
                       {"scale", t.scale},
                       {"amax_history", t.amaxes}});
  return nlohmann::ordered_json{{"recipe", "delayed"}, {"tensors", tensors}}.dump(1) + "\n";
}

Fp8State read_fp8_state(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open (the FP8 state the checkpoint index records)", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array())
    fail_input("{}: key 'tensors': expected a list of the delayed-scaling tensors", path);
  Fp8State out;
  for (size_t i = 0; i < j["tensors"].size(); ++i) {
    const nlohmann::json& e = j["tensors"][i];
    const std::string at = fmt::format("tensors[{}]", i);
    auto need = [&](const char* key, bool ok, const char* what) {
      if (!e.is_object() || !e.contains(key) || !ok) fail_input("{}: key '{}.{}': expected {}", path, at, key, what);
    };
    need("layer", e.is_object() && e.contains("layer") && e["layer"].is_number_integer() && e["layer"] >= 0,
         "a layer index >= 0");
    need("linear", e.is_object() && e.contains("linear") && e["linear"].is_string(), "a linear's name");
    need("operand", e.is_object() && e.contains("operand") && e["operand"].is_string(), "input, weight or grad");
    need("scale", e.is_object() && e.contains("scale") && e["scale"].is_number() && e["scale"] > 0, "a scale > 0");
    need("amax_history", e.is_object() && e.contains("amax_history") && e["amax_history"].is_array(),
         "a list of amaxes");
    model::Fp8Linears::TensorState t;
    t.layer = e["layer"].get<int64_t>();
    t.linear = named<model::Linear, model::kLinears>(path, at + ".linear", e["linear"], model::linear_name);
    t.operand = named<model::Operand, 3>(path, at + ".operand", e["operand"], model::operand_name);
    t.scale = e["scale"].get<float>();
    for (const auto& a : e["amax_history"]) {
      if (!a.is_number() || !std::isfinite(a.get<double>()) || a.get<double>() < 0)
        fail_input("{}: key '{}.amax_history': expected amaxes >= 0, found {}", path, at, a.dump());
      t.amaxes.push_back(a.get<float>());
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace trident::launch::checkpoint
