// Strict recipe loader over yaml-cpp. See recipe.hpp for the contract and
// docs/recipes.md for every key.
#include "core/recipe/recipe.hpp"

#include <fmt/ranges.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "core/recipe/mesh_checks.hpp"
#include "core/recipe/model_checks.hpp"
#include "core/recipe/yaml_reader.hpp"
#include "core/schedule_rules.hpp"

namespace trident {
namespace {

using recipe_detail::Reader;
using yaml_detail::describe;

// The known keys of a section ("" = top level, "data.synthetic", ...): the
// next path component of every table key under it.
std::vector<std::string> known_keys(const std::string& section) {
  std::vector<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& k : recipe_detail::keys()) {
    if (k.doc.path.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = k.doc.path.substr(prefix.size());
    rest = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), rest) == out.end()) out.push_back(rest);
  }
  return out;
}

}  // namespace

namespace {

void validate_fp8(Reader& r, const Recipe& rc) {
  const Fp8Config& f = rc.train.fp8;
  if (f.on() && rc.train.precision == Precision::fp16)
    r.inconsistent("train.fp8.recipe",
                   "FP8 GEMMs train with bf16 (or fp32) activations and fp32 master weights, "
                   "without loss scaling: expected train.precision bf16 or fp32, found fp16");
  if (f.recipe == Fp8Recipe::blockwise && f.format == Fp8Format::hybrid)
    r.inconsistent("train.fp8.format",
                   "blockwise scaling casts every operand to e4m3 (DeepSeek-V3): expected e4m3, "
                   "found hybrid");
  if (f.param_gather && f.recipe != Fp8Recipe::tensorwise && f.recipe != Fp8Recipe::delayed)
    r.inconsistent("train.fp8.param_gather",
                   fmt::format("FP8 parameter gathers carry one scale per weight: recipe tensorwise or delayed "
                               "(found {})",
                               enum_name(f.recipe)));
  if (f.param_gather && rc.parallel.zero != 3)
    r.inconsistent("train.fp8.param_gather",
                   fmt::format("FP8 parameter gathers are ZeRO 3's all-gathers: parallel.zero must be 3 (found {})",
                               rc.parallel.zero));
  if (!f.saved_inputs) return;
  if (f.recipe != Fp8Recipe::tensorwise && f.recipe != Fp8Recipe::delayed)
    r.inconsistent("train.fp8.saved_inputs",
                   fmt::format("the weight gradient reads the forward's codes only where both cast the input "
                               "alike: recipe tensorwise or delayed (found {}; blockwise tiles it along the tokens)",
                               enum_name(f.recipe)));
  if (rc.train.precision != Precision::bf16)
    r.inconsistent("train.fp8.saved_inputs",
                   fmt::format("FP8 codes replace the 2-byte copies of the saved activations: expected "
                               "train.precision bf16, found {}",
                               enum_name(rc.train.precision)));
  if (rc.train.recompute == Recompute::full)
    r.inconsistent("train.fp8.saved_inputs",
                   "train.recompute full keeps each layer's input alone: there is no linear's input to keep in FP8 "
                   "(expected recompute none or selective)");
}

}  // namespace

// placed: the mesh is the run's (false: the planner's and the sweep's
// recipe before they choose a mesh; what depends on it is checked then).
void recipe_detail::validate_train(Reader& r, const Recipe& rc, bool placed) {
  const auto& t = rc.train;
  const auto& p = rc.parallel;
  if ((p.schedule == ScheduleKind::zero_bubble || p.schedule == ScheduleKind::dualpipev) &&
      t.recompute == Recompute::full)
    r.inconsistent("train.recompute", fmt::format("schedule {} runs weight passes after their input passes, from "
                                                  "the activations the input pass kept; full recompute keeps none: "
                                                  "use recompute none or selective",
                                                  enum_name(p.schedule)));
  // products the run computes with (sample indexes, tokens per step): no overflow
  int64_t samples = 0, tokens = 0;
  if (__builtin_mul_overflow(t.steps, t.global_batch, &samples) || samples > (int64_t(1) << 48))
    r.inconsistent("train.steps", fmt::format("steps({}) x global_batch({}) = {:.3g} samples > 2^48", t.steps,
                                              t.global_batch, double(t.steps) * double(t.global_batch)));
  if (__builtin_mul_overflow(t.global_batch, rc.model.seq_len, &tokens) || tokens > (int64_t(1) << 40))
    r.inconsistent("train.global_batch",
                   fmt::format("global_batch({}) x seq_len({}) = {:.3g} tokens per step > 2^40", t.global_batch,
                               rc.model.seq_len, double(t.global_batch) * double(rc.model.seq_len)));
  if (t.precision != Precision::fp16 && t.loss_scale != 1.0)
    r.inconsistent("train.loss_scale", fmt::format("loss scaling is for fp16; precision is {} (expected 1 or no key, "
                                                   "found {})",
                                                   enum_name(t.precision), t.loss_scale));
  if (t.min_loss_scale > t.loss_scale)
    r.inconsistent("train.min_loss_scale",
                   fmt::format("min_loss_scale({}) > loss_scale({})", t.min_loss_scale, t.loss_scale));
  validate_fp8(r, rc);
  if (!placed) {
    if (rc.optim.min_lr > rc.optim.lr)
      r.inconsistent("optim.min_lr", fmt::format("min_lr({}) > lr({})", rc.optim.min_lr, rc.optim.lr));
    return;
  }
  if (t.global_batch % (t.micro_batch * p.data) != 0)
    r.inconsistent("train.global_batch",
                   fmt::format("global_batch({}) % (micro_batch({}) x data({})) = {} != 0", t.global_batch,
                               t.micro_batch, p.data, t.global_batch % (t.micro_batch * p.data)));
  // the schedule's rules on this mesh (core/schedule_rules.hpp; parallel::validate_schedule applies them again
  // to the action lists)
  {  // micro-batches per step: 0 (not known) when global_batch is refused above
    const int64_t per = t.micro_batch * p.data, M = t.global_batch % per == 0 ? t.global_batch / per : 0;
    if (const auto broken = broken_schedule_rule(p.schedule, p.pipeline, p.virtual_stages, M)) {
      if (broken->of == ScheduleRuleBroken::Of::virtual_stages)
        r.inconsistent("parallel.virtual_stages", broken->message);
      else
        r.inconsistent("train.micro_batch",
                       fmt::format("{}, micro-batches = global_batch({}) / (micro_batch({}) x data({}))",
                                   broken->message, t.global_batch, t.micro_batch, p.data));
    }
  }
  const int64_t rows = t.micro_batch * rc.model.seq_len / p.context;
  if (p.sequence_parallel && rows % p.tensor != 0)
    r.inconsistent("parallel.sequence_parallel",
                   p.context > 1
                       ? fmt::format("sequence parallelism splits micro_batch({}) x seq_len({}) / context({}) = {} "
                                     "token rows over tensor({}): {} % {} != 0",
                                     t.micro_batch, rc.model.seq_len, p.context, rows, p.tensor, rows, p.tensor)
                       : fmt::format("sequence parallelism splits micro_batch({}) x seq_len({}) = {} token rows over "
                                     "tensor({}): {} % {} != 0",
                                     t.micro_batch, rc.model.seq_len, rows, p.tensor, rows, p.tensor));
  if (p.whole_experts() && rc.device == DeviceType::cuda)
    r.inconsistent("parallel.expert_tensor",
                   fmt::format("expert_tensor(1) < tensor({}) on device cuda: whole experts are built for the CPU "
                               "(leave expert_tensor at 0 on a GPU)",
                               p.tensor));
  if (p.whole_experts() && rows % p.tensor != 0)
    r.inconsistent("parallel.expert_tensor",
                   fmt::format("expert_tensor(1): each tensor rank routes its share of the micro-batch's {} token rows "
                               "(micro_batch x seq_len / context) to whole experts: {} % tensor({}) != 0",
                               rows, rows, p.tensor));
  if (rc.optim.min_lr > rc.optim.lr)
    r.inconsistent("optim.min_lr", fmt::format("min_lr({}) > lr({})", rc.optim.min_lr, rc.optim.lr));
}

namespace {

using recipe_detail::resolve_auto_mesh;
using recipe_detail::validate_context;
using recipe_detail::validate_mesh;
using recipe_detail::validate_train;

void validate_data(Reader& r, Recipe& rc) {
  auto& d = rc.data;
  // from the typed recipe (validate_on_mesh has no YAML); the YAML only adds the conflict
  const bool has_train = !d.train.empty();
  if (has_train && r.has("data.synthetic"))
    r.inconsistent("data.synthetic", "set either data.train (an indexed dataset) or data.synthetic, not both");
  if (!has_train && !d.valid.empty()) r.inconsistent("data.valid", "data.valid needs data.train");
  d.synthetic = !has_train;
  for (const char* key : {"data.document_mask", "data.mask_eod_loss"})
    if (d.synthetic && (std::string(key) == "data.document_mask" ? d.document_mask : d.mask_eod_loss))
      r.inconsistent(key,
                     "needs data.train (a dataset whose documents end with an EOD token); synthetic data has "
                     "no documents");
  if (!d.synthetic) return;
  if (d.syn.vocab > rc.model.vocab)
    r.inconsistent("data.synthetic.vocab",
                   fmt::format("synthetic vocab({}) > model.vocab({})", d.syn.vocab, rc.model.vocab));
  if (d.syn.branching > d.syn.vocab)
    r.inconsistent("data.synthetic.branching",
                   fmt::format("branching({}) > synthetic vocab({})", d.syn.branching, d.syn.vocab));
}

// Cross-field checks, with the arithmetic in the message.
// world == kUnplaced: everything but the mesh (load_recipe_unplaced).
constexpr int64_t kUnplaced = 0;
void validate(Reader& r, Recipe& rc, int64_t world) {
  const bool placed = world != kUnplaced;
  recipe_detail::validate_model_keys(r, rc);
  if (placed) {
    resolve_auto_mesh(r, rc, world);
    validate_mesh(r, rc, world);
    validate_context(r, rc);
  }
  validate_train(r, rc, placed);
  validate_data(r, rc);
  if (!rc.log.trace.empty() && rc.log.trace_steps.empty()) rc.log.trace_steps = {std::min<int64_t>(2, rc.train.steps)};
}

Recipe read_recipe(YAML::Node root, const std::string& file, const std::vector<std::string>& overrides, int64_t world) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) fail_input("{}: expected a map of sections at the top level, found {}", file, describe(root));
  auto origin = apply_yaml_overrides(root, overrides);
  Reader r(root, file, origin);
  Recipe rc;
  rc.source = file;
  rc.overrides = overrides;
  // unknown keys first, section by section, then every key in table order
  r.check_section("", known_keys(""));
  for (const auto& s : known_keys(""))
    if (!known_keys(s).empty()) r.check_section(s, known_keys(s));
  for (const auto& k : recipe_detail::keys())
    if (!k.read) r.check_section(k.doc.path, known_keys(k.doc.path));
  for (const auto& k : recipe_detail::keys())
    if (k.read) k.read(r, rc);
  rc.keys_read = r.keys;
  rc.model.moe.enabled = r.has("model.moe");
  if (!r.has("model.mtp")) rc.model.mtp.depth = 0;  // the section turns it on (its depth defaults to 1)
  if (rc.model.moe.enabled && !r.has("model.moe.experts"))
    r.inconsistent("model.moe", "model.moe.experts is required (the number of routed experts, >= 2)");
  validate(r, rc, world);
  return rc;
}
}  // namespace

namespace {

// A parse error in the user's words: a tab indenting a line (YAML indents
// with spaces) and nesting too deep are named as such.
[[noreturn]] void syntax_error(const std::string& text, const std::string& name, const std::string& what,
                               const YAML::ParserException& e) {
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line) && number <= e.mark.line;) {
    ++number;
    const size_t lead = line.find_first_not_of(" \t");
    const size_t tab = line.find('\t');
    if (tab != std::string::npos && (lead == std::string::npos || tab < lead))
      fail_input("{}:{}:{}: a tab character in the indentation (YAML indents with spaces only)", name, number, tab + 1);
  }
  if (dynamic_cast<const YAML::DeepRecursion*>(&e))
    fail_input("{}:{}:{}: YAML nested too deeply ({} nests a few levels)", name, e.mark.line + 1, e.mark.column + 1,
               what);
  fail_input("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
}

}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& name, const std::string& what) {
  // one document: a '---' (or '...') at the start of a line after content
  // starts another (yaml-cpp 0.7's LoadAll can loop forever on bad input, so
  // the markers are found here)
  std::istringstream lines(text);
  bool content = false;
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const bool marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    if (marker && content)
      fail_input("{}:{}: a second YAML document ('{}'); {} is one document", name, number, line.substr(0, 3), what);
    const size_t first = line.find_first_not_of(" \t\r");
    content = content || (!marker && first != std::string::npos && line[first] != '#');
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    syntax_error(text, name, what, e);
  }
}

std::map<std::string, std::string> apply_yaml_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                                        const std::string& flag) {
  std::map<std::string, std::string> origin;
  for (const auto& o : overrides) {
    auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) fail_input("{} {}: expected key.path=value, found no '='", flag, o);
    std::string path = o.substr(0, eq), value = o.substr(eq + 1);
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      fail_input("{} {}: value is not valid YAML: {}", flag, o, e.msg);
    }
    std::vector<std::string> parts;
    std::stringstream ss(path);
    for (std::string p; std::getline(ss, p, '.');) {
      if (p.empty()) fail_input("{} {}: empty component in key path '{}'", flag, o, path);
      parts.push_back(p);
    }
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = chain.back()[parts[i]];
      if (next.IsDefined() && !next.IsNull() && !next.IsMap())
        fail_input("{} {}: '{}' is not a section", flag, o, parts[i]);
      if (!next.IsDefined() || next.IsNull()) {
        chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next.reset(chain.back()[parts[i]]);
      }
      chain.push_back(next);
    }
    chain.back()[parts.back()] = parsed;
    origin[path] = flag + " " + o;
  }
  return origin;
}

YAML::Node read_yaml_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail_input("{}: a directory, expected {}", path, what);
  std::ifstream in(path);
  if (!in) fail_input("{}: cannot open {}", path, what);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_yaml(ss.str(), path, what);
}

Recipe load_recipe_text(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
                        int64_t world) {
  const YAML::Node root = parse_yaml(text, name, "a recipe");
  Recipe rc;
  try {
    rc = read_recipe(root, name, overrides, world);
  } catch (const YAML::Exception& e) {  // a shape the reader did not expect: named, never a bare "bad conversion"
    fail_input("{}:{}:{}: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  rc.text = text;
  return rc;
}

int64_t recipe_ranks(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return 0;  // load_recipe says what is wrong
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail_input("{}: cannot open recipe file", path);
  } catch (const YAML::ParserException&) {
    return 0;  // load_recipe names the error
  }
  if (!root.IsMap()) return 0;
  apply_yaml_overrides(root, overrides);
  int64_t n = 1;
  for (const char* k : {"data", "tensor", "pipeline", "context"}) {
    const YAML::Node v = root["parallel"] ? root["parallel"][k] : YAML::Node();
    if (!v) continue;
    if (v.IsScalar() && v.Scalar() == "auto") continue;  // the smallest mesh: 1
    try {
      const int64_t x = v.as<int64_t>();
      if (x < 1) return 0;
      n *= x;
    } catch (const YAML::Exception&) {
      return 0;  // not a number (load_recipe says which)
    }
  }
  return n;
}

void place_on_one_process(Recipe& rc) {
  ParallelConfig& p = rc.parallel;
  p.data = p.tensor = p.pipeline = p.context = p.expert = 1;
  p.expert_tensor = 0;  // = tensor
  p.virtual_stages = 1;
  p.zero = 0;
  p.schedule = ScheduleKind::one_f_one_b;
  p.sequence_parallel = false;
  p.stage_layers.clear();
  validate_on_mesh(rc, 1);
}

Recipe load_recipe_on_one_process(const std::string& path, const std::vector<std::string>& overrides) {
  Recipe rc = load_recipe_unplaced(path, overrides);
  place_on_one_process(rc);
  return rc;
}

Recipe load_model_recipe_on_one_process(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> sets = overrides;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception&) {
    return load_recipe_on_one_process(path, overrides);  // names what is wrong
  }
  if (!root.IsMap()) return load_recipe_on_one_process(path, overrides);
  YAML::Node given = YAML::Clone(root);
  apply_yaml_overrides(given, overrides);
  // the required keys outside `model`, with values any model passes
  for (const auto& [section, key, value] :
       std::vector<std::tuple<const char*, const char*, const char*>>{{"train", "global_batch", "1"},
                                                                      {"train", "micro_batch", "1"},
                                                                      {"train", "steps", "1"},
                                                                      {"optim", "lr", "0.001"}})
    if (!given[section] || !given[section].IsMap() || !given[section][key])
      sets.push_back(fmt::format("{}.{}={}", section, key, value));
  return load_recipe_on_one_process(path, sets);
}

Recipe load_recipe_text_on_one_process(const std::string& yaml_text, const std::string& name,
                                       const std::vector<std::string>& overrides) {
  Recipe rc = load_recipe_text(yaml_text, name, overrides, kUnplaced);
  place_on_one_process(rc);
  return rc;
}

Recipe load_recipe_unplaced(const std::string& path, const std::vector<std::string>& overrides) {
  return load_recipe(path, overrides, kUnplaced);
}

void validate_on_mesh(Recipe& rc, int64_t world) {
  TRIDENT_CHECK(world >= 1, "validate_on_mesh: world size {}", world);
  // no YAML: a key is named with the recipe's file (the values were set in code)
  Reader r(YAML::Node(YAML::NodeType::Map), rc.source, {});
  validate(r, rc, world);
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides, int64_t world) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail_input("{}: a directory, expected a recipe file (RECIPE.yaml)", path);
  std::ifstream in(path);
  if (!in) fail_input("{}: cannot open recipe file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return load_recipe_text(ss.str(), path, overrides, world);
}

}  // namespace trident
