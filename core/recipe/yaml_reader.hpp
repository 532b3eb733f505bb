// The YAML reader of recipes and cluster files: one document parsed with
// file:line:column syntax errors, typed getters that name file:line:column
// (or the --set override), the key, what was expected and what was found,
// unknown keys refused with the nearest known one. The recipe's keys are
// declared once, in the table of core/recipe/keys.cpp.
#pragma once
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/enums.hpp"
#include "core/error.hpp"
#include "core/recipe/recipe.hpp"

namespace trident {

// The single YAML document of `text` (what: "a recipe", "a cluster file"):
// InputError "NAME:LINE:COLUMN: ..." for a syntax error, a tab in the
// indentation, deep nesting or a second document.
YAML::Node parse_yaml(const std::string& text, const std::string& name, const std::string& what);
// The file at `path` through parse_yaml; InputError when it is a directory or cannot be read.
YAML::Node read_yaml_file(const std::string& path, const std::string& what);
// Sets each "key.path=value" of `overrides` (the value parsed as YAML) in
// `root`, creating sections as needed; InputError naming `flag` for a
// malformed one. Returns each key path's override as given ("--set k=v"),
// for YamlReader to name in place of a file line.
std::map<std::string, std::string> apply_yaml_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                                        const std::string& flag = "--set");

namespace yaml_detail {

inline int edit_distance(const std::string& a, const std::string& b) {
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

inline bool quoted(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "!"; }

// What a value is, as an error message shows it: '12', the quoted string
// "12", a list of 1 ([0.9]), a map.
inline std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (quoted(n)) return "the quoted string \"" + n.Scalar() + "\"";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& v : n) items.push_back(v.IsScalar() ? v.Scalar() : v.IsSequence() ? "[...]" : "{...}");
    return fmt::format("a list of {} ([{}])", n.size(), fmt::join(items, ", "));
  }
  return "a map";
}

// A plain (unquoted) decimal integer: no leading zero (YAML would read 010
// as octal 8), no quotes (a quoted "2" is a string).
inline std::optional<int64_t> plain_integer(const YAML::Node& n) {
  if (!n.IsScalar() || quoted(n)) return std::nullopt;
  const std::string& t = n.Scalar();
  const size_t digits = t.find_first_not_of("+-") == 1 ? 1 : 0;
  if (t.size() == digits || t.find_first_not_of("0123456789", digits) != std::string::npos) return std::nullopt;
  if (t[digits] == '0' && t.size() > digits + 1) return std::nullopt;
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {
    return std::nullopt;  // out of range
  }
}

// A plain number (not a quoted string, no octal-looking integer).
inline std::optional<double> plain_number(const YAML::Node& n) {
  if (!n.IsScalar() || quoted(n)) return std::nullopt;
  const std::string& t = n.Scalar();
  const size_t digits = t.find_first_not_of("+-") == 1 ? 1 : 0;
  if (t.size() > digits + 1 && t[digits] == '0' && std::isdigit(static_cast<unsigned char>(t[digits + 1])))
    return std::nullopt;
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

}  // namespace yaml_detail

class YamlReader {
 public:
  YamlReader(YAML::Node root, std::string file, std::map<std::string, std::string> set_origin)
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
    YAML::Node n = find(path);
    return key_location(path, n.IsDefined() ? n.Mark() : YAML::Mark::null_mark());
  }

  // The --set option that made `path` (or a key under it), else file:line:column
  // (the file alone for a node with no place in it).
  std::string key_location(const std::string& path, const YAML::Mark& m) const {
    auto under = [](const std::string& a, const std::string& b) {  // a is b, or a key or element inside b
      return a == b || a.rfind(b + ".", 0) == 0 || a.rfind(b + "[", 0) == 0;
    };
    for (const auto& [set_path, option] : set_origin_)
      if (under(set_path, path) || under(path, set_path)) return option;
    return m.line >= 0 && !m.is_null() ? fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1) : file_;
  }

  [[noreturn]] void bad(const std::string& path, const std::string& expected) const {
    fail_input("{}: key '{}': expected {}, found {}", where(path), path, expected, yaml_detail::describe(find(path)));
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
      if (!it->first.IsScalar())
        fail_input("{}: a key in {} is {}, expected a name", key_location(section, it->first.Mark()), label,
                   yaml_detail::describe(it->first));
      std::string key = it->first.Scalar();
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
        int d = yaml_detail::edit_distance(key, a);
        if (d < best_d) best_d = d, best = a;
      }
      std::string hint = best.empty() ? fmt::format("known keys in {}: {}", label, fmt::join(allowed, ", "))
                                      : fmt::format("did you mean '{}'?", best);
      fail_input("{}: unknown key '{}' ({})", key_location(path, it->first.Mark()), path, hint);
    }
  }

  void note(const std::string& path) { keys.push_back(path); }

  // A number > 0 (the cluster files' rates and sizes).
  double positive(const std::string& path, std::optional<double> def) {
    note(path);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' (a number > 0)", file_, path);
    }
    const std::optional<double> v = yaml_detail::plain_number(find(path));
    if (!v || !std::isfinite(*v) || !(*v > 0)) bad(path, "a number > 0");
    return *v;
  }

  int64_t integer(const std::string& path, int64_t lo, int64_t hi, std::optional<int64_t> def) {
    note(path);
    std::string expected = hi == std::numeric_limits<int64_t>::max() ? fmt::format("an integer >= {}", lo)
                                                                     : fmt::format("an integer in [{}, {}]", lo, hi);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    const std::optional<int64_t> v = yaml_detail::plain_integer(find(path));
    if (!v || *v < lo || *v > hi) bad(path, expected);
    return *v;
  }

  double real(const std::string& path, double lo, double hi, std::optional<double> def, bool lo_open = false) {
    note(path);
    std::string expected = fmt::format("a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    const std::optional<double> o = yaml_detail::plain_number(find(path));
    if (!o) bad(path, expected);
    const double v = *o;
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) bad(path, expected);
    return v;
  }

  bool boolean(const std::string& path, bool def) {
    note(path);
    if (!has(path)) return def;
    YAML::Node n = find(path);
    if (!n.IsScalar() || yaml_detail::quoted(n)) bad(path, "true or false");
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

  template <typename E>
  E enumerated(const std::string& path, std::optional<E> def) {
    const std::string expected = "one of " + enum_choices<E>();
    note(path);
    if (!has(path)) {
      if (def) return *def;
      fail_input("{}: missing required key '{}' ({})", file_, path, expected);
    }
    YAML::Node n = find(path);
    if (!n.IsScalar()) bad(path, expected);
    const std::optional<E> v = parse_enum<E>(n.Scalar());
    if (!v) bad(path, expected);
    return *v;
  }

  std::vector<double> reals(const std::string& path, size_t count, double lo, double hi, std::vector<double> def) {
    note(path);
    std::string expected = fmt::format("a list of {} numbers in [{}, {})", count, lo, hi);
    if (!has(path)) return def;
    YAML::Node n = find(path);
    if (!n.IsSequence() || n.size() != count) bad(path, expected);
    std::vector<double> out;
    for (auto v : n) {
      const std::optional<double> x = yaml_detail::plain_number(v);
      if (!x || !(*x >= lo && *x < hi)) bad(path, expected);
      out.push_back(*x);
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
      const std::optional<int64_t> x = yaml_detail::plain_integer(v);
      if (!x || *x < lo || *x > hi) bad(path, expected);
      out.push_back(*x);
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

  // A dataset prefix, or a list of {path, weight} (a plain string in the list
  // has weight 1). Weights >= 0, not all zero.
  std::vector<DataSource> blend(const std::string& path) {
    note(path);
    if (!has(path)) return {};
    const std::string expected = "a dataset prefix or a list of {path: PREFIX, weight: W >= 0}";
    YAML::Node n = find(path);
    if (n.IsScalar()) return {{n.Scalar(), 1.0}};
    if (!n.IsSequence() || n.size() == 0) bad(path, expected);
    std::vector<DataSource> out;
    double total = 0;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node e = n[i];
      const std::string at = fmt::format("{}[{}]", path, i);
      DataSource d;
      if (e.IsScalar()) {
        d.path = e.Scalar();
      } else if (e.IsMap()) {
        for (auto it = e.begin(); it != e.end(); ++it) {
          const std::string k = it->first.IsScalar() ? it->first.Scalar() : yaml_detail::describe(it->first);
          if (k != "path" && k != "weight")
            fail_input("{}: key '{}': unknown key '{}' in a blend entry (known: path, weight)", where(path), at, k);
        }
        if (!e["path"] || !e["path"].IsScalar())
          fail_input("{}: key '{}.path': expected a dataset prefix, found {}", where(path), at,
                     yaml_detail::describe(e["path"]));
        d.path = e["path"].Scalar();
        if (e["weight"]) {
          try {
            d.weight = e["weight"].as<double>();
          } catch (const YAML::Exception&) {
            fail_input("{}: key '{}.weight': expected a number >= 0, found {}", where(path), at,
                       yaml_detail::describe(e["weight"]));
          }
        }
      } else {
        bad(path, expected);
      }
      if (!(d.weight >= 0) || !std::isfinite(d.weight))
        fail_input("{}: key '{}.weight': expected a number >= 0, found {}", where(path), at, d.weight);
      total += d.weight;
      out.push_back(d);
    }
    if (total <= 0) fail_input("{}: key '{}': the blend weights are all zero", where(path), path);
    return out;
  }

  // An integer mesh size, or the word `auto` (returned as 0); absent: 0 when
  // auto_by_default, else 1.
  int64_t mesh_size(const std::string& path, bool auto_by_default) {
    if (has(path) && find(path).IsScalar() && find(path).Scalar() == "auto") {
      note(path);
      return 0;
    }
    return integer(path, 1, 1 << 20, auto_by_default ? 0 : 1);
  }

 private:
  YAML::Node root_;
  std::string file_;
  std::map<std::string, std::string> set_origin_;
};

namespace recipe_detail {

using Reader = YamlReader;

// One key of the table: its documentation and how to read it into a Recipe
// (no reader: a section that only holds keys).
struct Key {
  RecipeKey doc;
  std::function<void(Reader&, Recipe&)> read;
  // the typed value as YAML reads it back (null: a section, or a key not
  // recorded: lists of maps, the mesh's own)
  std::function<std::string(const Recipe&)> show = nullptr;
};
// The key table, in reading order (core/recipe/keys.cpp).
const std::vector<Key>& keys();

}  // namespace recipe_detail
}  // namespace trident
