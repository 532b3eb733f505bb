// Strict recipe loader over yaml-cpp. See recipe.hpp for the contract and
// docs/recipes.md for every key.
#include "core/recipe.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.hpp"

namespace trident {
namespace {

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = int(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  return "a map";
}

class Reader {
 public:
  Reader(YAML::Node root, std::string file, std::map<std::string, std::string> set_origin)
      : root_(std::move(root)), file_(std::move(file)), set_origin_(std::move(set_origin)) {}

  std::vector<std::string> keys;

  YAML::Node find(const std::string& path) const {
    // const lookups never create entries; reset() rebinds (operator= would
    // assign into the tree).
    YAML::Node n;
    n.reset(root_);
    std::stringstream ss(path);
    std::string part;
    while (std::getline(ss, part, '.')) {
      if (!n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node& cn = n;
      YAML::Node child = cn[part];
      if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      n.reset(child);
    }
    return n;
  }
  bool has(const std::string& path) const {
    YAML::Node n = find(path);
    return n.IsDefined() && !n.IsNull();
  }

  std::string where(const std::string& path) const {
    auto it = set_origin_.find(path);
    if (it != set_origin_.end()) return "--set " + it->second;
    YAML::Node n = find(path);
    if (n.IsDefined()) {
      auto m = n.Mark();
      if (m.line >= 0) return fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1);
    }
    return file_;
  }

  [[noreturn]] void bad(const std::string& path, const std::string& expected) const {
    fail_input("{}: key '{}': expected {}, found {}", where(path), path, expected, describe(find(path)));
  }
  [[noreturn]] void inconsistent(const std::string& path, const std::string& what) const {
    fail_input("{}: key '{}': {}", where(path), path, what);
  }

  // Unknown keys in a section are errors, with the nearest known key suggested.
  void check_section(const std::string& section, const std::vector<std::string>& allowed) const {
    YAML::Node n = section.empty() ? root_ : find(section);
    if (!n.IsDefined() || n.IsNull()) return;
    std::string label = section.empty() ? "top level" : "section '" + section + "'";
    if (!n.IsMap()) bad(section, "a map of keys");
    std::map<std::string, int> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string key = it->first.as<std::string>();
      std::string full = section.empty() ? key : section + "." + key;
      auto mk = it->first.Mark();
      if (seen.count(key))
        fail_input("{}:{}:{}: duplicate key '{}' (first at line {})", file_, mk.line + 1, mk.column + 1, full,
                   seen[key]);
      seen[key] = mk.line + 1;
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string path = section.empty() ? key : section + "." + key;
      std::string best;
      int best_d = 3;
      for (const auto& a : allowed) {
        int d = edit_distance(key, a);
        if (d < best_d) best_d = d, best = a;
      }
      std::string hint = best.empty() ? fmt::format("known keys in {}: {}", label, fmt::join(allowed, ", "))
                                      : fmt::format("did you mean '{}'?", best);
      auto m = it->first.Mark();
      std::string loc = set_origin_.count(path) ? "--set " + set_origin_.at(path)
                                                : fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1);
      fail_input("{}: unknown key '{}' ({})", loc, path, hint);
    }
  }

  void note(const std::string& path) { keys.push_back(path); }

  int64_t integer(const std::string& path, int64_t lo, int64_t hi, std::optional<int64_t> def) {
    note(path);
    std::string expected = hi == std::numeric_limits<int64_t>::max()
                               ? fmt::format("an integer >= {}", lo)
                               : fmt::format("an integer in [{}, {}]", lo, hi);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    YAML::Node n = find(path);
    int64_t v = 0;
    if (!n.IsScalar()) bad(path, expected);
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      bad(path, expected);
    }
    if (v < lo || v > hi) bad(path, expected);
    return v;
  }

  double real(const std::string& path, double lo, double hi, std::optional<double> def, bool lo_open = false) {
    note(path);
    std::string expected = fmt::format("a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    YAML::Node n = find(path);
    double v = 0;
    if (!n.IsScalar()) bad(path, expected);
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      bad(path, expected);
    }
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) bad(path, expected);
    return v;
  }

  bool boolean(const std::string& path, bool def) {
    note(path);
    if (!has(path)) return def;
    YAML::Node n = find(path);
    if (!n.IsScalar()) bad(path, "true or false");
    try {
      return n.as<bool>();
    } catch (const YAML::Exception&) {
      bad(path, "true or false");
    }
  }

  std::string text(const std::string& path, std::optional<std::string> def) {
    note(path);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' (a string)", file_, path);
    }
    YAML::Node n = find(path);
    if (!n.IsScalar()) bad(path, "a string");
    return n.Scalar();
  }

  std::string choice(const std::string& path, const std::vector<std::string>& choices,
                     std::optional<std::string> def) {
    std::string expected = fmt::format("one of {}", fmt::join(choices, " | "));
    note(path);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    YAML::Node n = find(path);
    if (!n.IsScalar() || std::find(choices.begin(), choices.end(), n.Scalar()) == choices.end())
      bad(path, expected);
    return n.Scalar();
  }

  std::vector<double> reals(const std::string& path, size_t count, double lo, double hi,
                            std::vector<double> def) {
    note(path);
    std::string expected = fmt::format("a list of {} numbers in [{}, {})", count, lo, hi);
    if (!has(path)) return def;
    YAML::Node n = find(path);
    if (!n.IsSequence() || n.size() != count) bad(path, expected);
    std::vector<double> out;
    for (auto v : n) {
      double x = 0;
      try {
        x = v.as<double>();
      } catch (const YAML::Exception&) {
        bad(path, expected);
      }
      if (!(x >= lo && x < hi)) bad(path, expected);
      out.push_back(x);
    }
    return out;
  }

  // A list of integers in [lo, hi] (any length; empty when absent).
  std::vector<int64_t> integers(const std::string& path, int64_t lo, int64_t hi) {
    note(path);
    const std::string expected = fmt::format("a list of integers in [{}, {}]", lo, hi);
    if (!has(path)) return {};
    YAML::Node n = find(path);
    if (!n.IsSequence()) bad(path, expected);
    std::vector<int64_t> out;
    for (auto v : n) {
      int64_t x = 0;
      try {
        x = v.as<int64_t>();
      } catch (const YAML::Exception&) {
        bad(path, expected);
      }
      if (x < lo || x > hi) bad(path, expected);
      out.push_back(x);
    }
    return out;
  }

  std::vector<std::string> texts(const std::string& path, std::vector<std::string> def) {
    note(path);
    if (!has(path)) return def;
    YAML::Node n = find(path);
    if (!n.IsSequence()) bad(path, "a list of strings");
    std::vector<std::string> out;
    for (auto v : n) {
      if (!v.IsScalar()) bad(path, "a list of strings");
      out.push_back(v.Scalar());
    }
    return out;
  }

  // An integer mesh size, or the word `auto` (returned as 0).
  int64_t mesh_size(const std::string& path) {
    if (has(path) && find(path).IsScalar() && find(path).Scalar() == "auto") {
      note(path);
      return 0;
    }
    return integer(path, 1, 1 << 20, 1);
  }

 private:
  YAML::Node root_;
  std::string file_;
  std::map<std::string, std::string> set_origin_;
};

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Applies --set overrides onto the parsed tree, creating maps as needed.
std::map<std::string, std::string> apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> origin;
  for (const auto& o : overrides) {
    auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      fail_input("--set {}: expected key.path=value, found no '='", o);
    std::string path = o.substr(0, eq), value = o.substr(eq + 1);
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      fail_input("--set {}: value is not valid YAML: {}", o, e.msg);
    }
    std::vector<std::string> parts;
    std::stringstream ss(path);
    for (std::string p; std::getline(ss, p, '.');) {
      if (p.empty()) fail_input("--set {}: empty component in key path '{}'", o, path);
      parts.push_back(p);
    }
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = chain.back()[parts[i]];
      if (next.IsDefined() && !next.IsNull() && !next.IsMap())
        fail_input("--set {}: '{}' is not a section", o, parts[i]);
      if (!next.IsDefined() || next.IsNull()) {
        chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next.reset(chain.back()[parts[i]]);
      }
      chain.push_back(next);
    }
    chain.back()[parts.back()] = parsed;
    origin[path] = o;
  }
  return origin;
}

std::string mesh_fits(int64_t world) {
  std::vector<std::string> fits;
  for (int64_t t = 1; t <= world; ++t)
    for (int64_t p = 1; p <= world; ++p)
      if (world % (t * p) == 0) fits.push_back(fmt::format("{}x{}x{}", world / (t * p), t, p));
  return fmt::format("meshes (data x tensor x pipeline) that fit world size {}: {}", world, fmt::join(fits, ", "));
}

Recipe read_recipe(YAML::Node root, const std::string& file, const std::vector<std::string>& overrides,
                   int64_t world) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) fail_input("{}: expected a map of sections at the top level, found {}", file, describe(root));
  auto origin = apply_overrides(root, overrides);
  Reader r(root, file, origin);
  Recipe rc;
  rc.source = file;
  rc.overrides = overrides;

  r.check_section("", {"model", "parallel", "train", "optim", "data", "eval", "checkpoint", "log", "seed",
                       "device"});
  r.check_section("model", {"arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab",
                            "rope_theta", "norm_eps", "init_std", "tie_embeddings", "vocab_multiple"});
  r.check_section("parallel", {"data", "tensor", "pipeline", "order", "schedule", "virtual_stages", "zero",
                               "sequence_parallel", "bucket_bytes", "stage_layers", "timeout_s"});
  r.check_section("train", {"global_batch", "micro_batch", "steps", "precision", "recompute", "threads", "loss_scale",
                            "loss_scale_window", "min_loss_scale"});
  r.check_section("optim", {"lr", "min_lr", "warmup", "decay", "wsd_decay_fraction", "betas", "eps",
                            "weight_decay", "grad_clip", "decay_norms_and_biases", "decay_embeddings"});
  r.check_section("data", {"train", "valid", "synthetic"});
  r.check_section("data.synthetic", {"vocab", "order", "branching", "skew", "seed"});
  r.check_section("eval", {"every", "batches"});
  r.check_section("checkpoint", {"dir", "every", "keep", "async"});
  r.check_section("log", {"every", "metrics", "peak_flops", "trace", "trace_steps"});

  // model
  auto& m = rc.model;
  m.arch = r.choice("model.arch", {"gpt2", "llama"}, std::nullopt);
  m.layers = r.integer("model.layers", 1, 100000, std::nullopt);
  m.hidden = r.integer("model.hidden", 1, 1 << 20, std::nullopt);
  m.heads = r.integer("model.heads", 1, 1 << 16, std::nullopt);
  m.kv_heads = r.integer("model.kv_heads", 1, 1 << 16, m.heads);
  int64_t ffn_default = m.arch == "gpt2" ? 4 * m.hidden : (8 * m.hidden / 3 + 63) / 64 * 64;
  m.ffn_hidden = r.integer("model.ffn_hidden", 1, 1 << 24, ffn_default);
  m.seq_len = r.integer("model.seq_len", 1, 1 << 24, std::nullopt);
  m.vocab = r.integer("model.vocab", 2, 1 << 30, std::nullopt);
  m.rope_theta = r.real("model.rope_theta", 0, 1e12, 10000.0, true);
  m.norm_eps = r.real("model.norm_eps", 0, 1, 1e-5, true);
  m.init_std = r.real("model.init_std", 0, 10, 0.02, true);
  m.tie_embeddings = r.boolean("model.tie_embeddings", m.arch == "gpt2");
  m.vocab_multiple = r.integer("model.vocab_multiple", 1, 1 << 16, 64);
  if (m.hidden % m.heads != 0)
    r.inconsistent("model.heads", fmt::format("hidden({}) % heads({}) = {} != 0", m.hidden, m.heads,
                                              m.hidden % m.heads));
  if (m.heads % m.kv_heads != 0)
    r.inconsistent("model.kv_heads", fmt::format("heads({}) % kv_heads({}) = {} != 0", m.heads, m.kv_heads,
                                                 m.heads % m.kv_heads));
  if (m.arch == "gpt2" && m.kv_heads != m.heads)
    r.inconsistent("model.kv_heads", fmt::format("gpt2 uses multi-head attention: kv_heads({}) != heads({})",
                                                 m.kv_heads, m.heads));
  if (m.arch == "llama" && m.head_dim() % 2 != 0)
    r.inconsistent("model.heads", fmt::format("rotary embedding needs an even head size, hidden({}) / heads({}) = {}",
                                              m.hidden, m.heads, m.head_dim()));

  // parallel
  auto& p = rc.parallel;
  p.data = r.mesh_size("parallel.data");
  p.tensor = r.mesh_size("parallel.tensor");
  p.pipeline = r.mesh_size("parallel.pipeline");
  p.order = r.texts("parallel.order", p.order);
  p.schedule = r.choice("parallel.schedule", {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"}, "1f1b");
  p.virtual_stages = r.integer("parallel.virtual_stages", 1, 1024, 1);
  p.zero = r.integer("parallel.zero", 0, 3, 0);
  p.sequence_parallel = r.boolean("parallel.sequence_parallel", false);
  p.bucket_bytes = r.integer("parallel.bucket_bytes", 1024, kMax, p.bucket_bytes);
  p.stage_layers = r.integers("parallel.stage_layers", 0, 100000);
  p.timeout_s = r.real("parallel.timeout_s", 0, 1e7, p.timeout_s, true);
  {
    std::vector<std::string> sorted = p.order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"data", "pipeline", "tensor"})
      r.bad("parallel.order", "a permutation of [tensor, data, pipeline]");
  }
  int autos = (p.data == 0) + (p.tensor == 0) + (p.pipeline == 0);
  if (autos > 1) r.inconsistent("parallel.data", "at most one of data, tensor, pipeline may be 'auto'");
  if (autos == 1) {
    int64_t known = std::max<int64_t>(p.data, 1) * std::max<int64_t>(p.tensor, 1) * std::max<int64_t>(p.pipeline, 1);
    if (world % known != 0)
      r.inconsistent("parallel.data", fmt::format("world size {} is not divisible by the fixed mesh sizes ({}); {}",
                                                  world, known, mesh_fits(world)));
    (p.data == 0 ? p.data : p.tensor == 0 ? p.tensor : p.pipeline) = world / known;
  }
  const int64_t mesh = p.data * p.tensor * p.pipeline;
  if (mesh != world && world == 1)  // the usual mistake: a multi-rank recipe started without a launcher
    r.inconsistent("parallel.data",
                   fmt::format("data({}) x tensor({}) x pipeline({}) = {} ranks, but this is one process (started "
                               "without a launcher, or with one rank): run it under `mpirun -np {} trident ...`, "
                               "`srun -n {} --mpi=pmix trident ...` or `trident submit` (docs/slurm.md)",
                               p.data, p.tensor, p.pipeline, mesh, mesh, mesh));
  if (mesh != world)
    r.inconsistent("parallel.data", fmt::format("data({}) x tensor({}) x pipeline({}) = {} != world size {}; {}",
                                                p.data, p.tensor, p.pipeline, mesh, world, mesh_fits(world)));
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
  if (!p.stage_layers.empty()) {
    const int64_t chunks = p.pipeline * p.virtual_stages, sum = std::accumulate(p.stage_layers.begin(),
                                                                                p.stage_layers.end(), int64_t(0));
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

  // train
  auto& t = rc.train;
  t.global_batch = r.integer("train.global_batch", 1, kMax, std::nullopt);
  t.micro_batch = r.integer("train.micro_batch", 1, kMax, std::nullopt);
  t.steps = r.integer("train.steps", 1, kMax, std::nullopt);
  t.precision = r.choice("train.precision", {"fp32", "bf16", "fp16"}, "fp32");
  t.loss_scale = r.real("train.loss_scale", 0, 1e38, t.precision == "fp16" ? 65536.0 : 1.0, true);
  t.loss_scale_window = r.integer("train.loss_scale_window", 1, kMax, 1000);
  t.min_loss_scale = r.real("train.min_loss_scale", 0, 1e38, 1.0, true);
  if (t.precision != "fp16" && t.loss_scale != 1.0)
    r.inconsistent("train.loss_scale", fmt::format("loss scaling is for fp16; precision is {} (expected 1 or no key, "
                                                   "found {})",
                                                   t.precision, t.loss_scale));
  if (t.min_loss_scale > t.loss_scale)
    r.inconsistent("train.min_loss_scale", fmt::format("min_loss_scale({}) > loss_scale({})", t.min_loss_scale,
                                                       t.loss_scale));
  t.recompute = r.choice("train.recompute", {"none", "selective", "full"}, "none");
  t.threads = r.integer("train.threads", 0, 4096, 0);
  if (t.global_batch % (t.micro_batch * p.data) != 0)
    r.inconsistent("train.global_batch", fmt::format("global_batch({}) % (micro_batch({}) x data({})) = {} != 0",
                                                     t.global_batch, t.micro_batch, p.data,
                                                     t.global_batch % (t.micro_batch * p.data)));
  if (p.sequence_parallel && (t.micro_batch * m.seq_len) % p.tensor != 0)
    r.inconsistent("parallel.sequence_parallel",
                   fmt::format("sequence parallelism splits micro_batch({}) x seq_len({}) = {} token rows over "
                               "tensor({}): {} % {} != 0",
                               t.micro_batch, m.seq_len, t.micro_batch * m.seq_len, p.tensor,
                               t.micro_batch * m.seq_len, p.tensor));

  // optim
  auto& o = rc.optim;
  o.lr = r.real("optim.lr", 0, 10, std::nullopt, true);
  o.min_lr = r.real("optim.min_lr", 0, 10, 0.0);
  o.warmup = r.integer("optim.warmup", 0, kMax, 0);
  o.decay = r.choice("optim.decay", {"constant", "cosine", "linear", "wsd"}, "cosine");
  o.wsd_decay_fraction = r.real("optim.wsd_decay_fraction", 0, 1, 0.2, true);
  auto betas = r.reals("optim.betas", 2, 0, 1, {0.9, 0.95});
  o.betas = {betas[0], betas[1]};
  o.eps = r.real("optim.eps", 0, 1, 1e-8, true);
  o.weight_decay = r.real("optim.weight_decay", 0, 10, 0.0);
  o.grad_clip = r.real("optim.grad_clip", 0, 1e9, 1.0);
  o.decay_norms_and_biases = r.boolean("optim.decay_norms_and_biases", false);
  o.decay_embeddings = r.boolean("optim.decay_embeddings", false);
  if (o.min_lr > o.lr)
    r.inconsistent("optim.min_lr", fmt::format("min_lr({}) > lr({})", o.min_lr, o.lr));

  // data
  auto& d = rc.data;
  bool has_train = r.has("data.train");
  d.train = r.text("data.train", "");
  d.valid = r.text("data.valid", "");
  bool has_syn = r.has("data.synthetic");
  d.syn.vocab = r.integer("data.synthetic.vocab", 2, 1 << 30, m.vocab);
  d.syn.order = r.integer("data.synthetic.order", 1, 8, 2);
  d.syn.branching = r.integer("data.synthetic.branching", 1, 1024, 4);
  d.syn.skew = r.real("data.synthetic.skew", 0, 100, 0.7);
  d.syn.seed = r.integer("data.synthetic.seed", 0, kMax, 1);
  if (has_train && has_syn)
    r.inconsistent("data.synthetic", "set either data.train (an indexed dataset) or data.synthetic, not both");
  if (!has_train && r.has("data.valid"))
    r.inconsistent("data.valid", "data.valid needs data.train");
  d.synthetic = !has_train;
  if (d.synthetic) {
    if (d.syn.vocab > m.vocab)
      r.inconsistent("data.synthetic.vocab", fmt::format("synthetic vocab({}) > model.vocab({})", d.syn.vocab,
                                                         m.vocab));
    if (d.syn.branching > d.syn.vocab)
      r.inconsistent("data.synthetic.branching",
                     fmt::format("branching({}) > synthetic vocab({})", d.syn.branching, d.syn.vocab));
  }

  rc.eval.every = r.integer("eval.every", 0, kMax, 0);
  rc.eval.batches = r.integer("eval.batches", 0, kMax, 8);
  rc.checkpoint.dir = r.text("checkpoint.dir", "");
  rc.checkpoint.every = r.integer("checkpoint.every", 0, kMax, 0);
  rc.checkpoint.keep = r.integer("checkpoint.keep", 1, kMax, 3);
  rc.checkpoint.async = r.boolean("checkpoint.async", true);
  rc.log.every = r.integer("log.every", 1, kMax, 10);
  rc.log.metrics = r.text("log.metrics", "");
  rc.log.peak_flops = r.real("log.peak_flops", 0, 1e20, 0.0);
  rc.log.trace = r.text("log.trace", "");
  rc.log.trace_steps = r.integers("log.trace_steps", 1, kMax);
  if (!rc.log.trace.empty() && rc.log.trace_steps.empty()) rc.log.trace_steps = {std::min<int64_t>(2, rc.train.steps)};
  rc.seed = r.integer("seed", 0, kMax, 1234);
  rc.device = r.choice("device", {"cpu", "cuda"}, "cpu");
  rc.keys_read = r.keys;
  return rc;
}

}  // namespace

Recipe load_recipe_text(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
                        int64_t world) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  Recipe rc = read_recipe(root, name, overrides, world);
  rc.text = text;
  return rc;
}

int64_t recipe_ranks(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail_input("{}: cannot open recipe file", path);
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (!root.IsMap()) return 0;
  apply_overrides(root, overrides);
  int64_t n = 1;
  for (const char* k : {"data", "tensor", "pipeline"}) {
    const YAML::Node v = root["parallel"] ? root["parallel"][k] : YAML::Node();
    if (!v) continue;
    try {
      const int64_t x = v.as<int64_t>();
      if (x < 1) return 0;
      n *= x;
    } catch (const YAML::Exception&) {
      return 0;  // auto, or not a number (load_recipe says which)
    }
  }
  return n;
}

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides, int64_t world) {
  std::ifstream in(path);
  if (!in) fail_input("{}: cannot open recipe file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return load_recipe_text(ss.str(), path, overrides, world);
}

}  // namespace trident
