// The builders of the recipe key table (core/recipe/keys.cpp,
// keys_model.cpp): each makes one Key from its path, the Recipe field it
// fills, its type and range, its default and its line of docs/recipes.md.
// Internal to core/recipe.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "core/recipe/recipe.hpp"
#include "core/recipe/yaml_reader.hpp"

namespace trident::recipe_detail {

inline constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A default: none (the key is required), a value, or a function of the keys
// read before it (with the text the docs show).
template <typename T>
struct Default {
  std::optional<T> value;
  std::function<T(const Recipe&)> derived;
  std::string text;
  std::optional<T> of(const Recipe& r) const { return derived ? std::optional<T>(derived(r)) : value; }
};
template <typename T>
Default<T> required() {
  return {std::nullopt, nullptr, "*required*"};
}
template <typename T>
Default<T> value(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return {v, nullptr, v ? "`true`" : "`false`"};
  else if constexpr (std::is_enum_v<T>)
    return {v, nullptr, fmt::format("`{}`", enum_name(v))};
  else
    return {v, nullptr, fmt::format("`{}`", v)};
}
template <typename F>
auto derived(std::string text, F f) {
  using T = std::decay_t<decltype(f(std::declval<const Recipe&>()))>;
  return Default<T>{std::nullopt, std::function<T(const Recipe&)>(f), std::move(text)};
}

enum class Open { none, low };

inline std::string bound(int64_t v) {
  if (v == (int64_t(1) << 40)) return "2^40";
  if (v == (int64_t(1) << 30)) return "2^30";
  if (v == (int64_t(1) << 24)) return "2^24";
  if (v == (int64_t(1) << 20)) return "2^20";
  if (v == (int64_t(1) << 16)) return "2^16";
  return fmt::format("{}", v);
}
inline std::string int_type(int64_t lo, int64_t hi) {
  return hi == kMax ? fmt::format("int >= {}", lo) : fmt::format("int in [{}, {}]", lo, bound(hi));
}

#define FIELD(member) \
  [](auto& r) -> auto& { return r.member; }

template <typename F>
Key integer(const char* path, F field, int64_t lo, int64_t hi, Default<int64_t> def, const char* doc) {
  return {{path, int_type(lo, hi), def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.integer(path, lo, hi, def.of(r)); },
          [=](const Recipe& r) { return fmt::format("{}", field(r)); }};
}
template <typename F>
Key real(const char* path, F field, double lo, double hi, Open open, Default<double> def, const char* doc) {
  const std::string type = fmt::format("number in {}{}, {:g}]", open == Open::low ? "(" : "[", lo, hi);
  return {{path, type, def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.real(path, lo, hi, def.of(r), open == Open::low); },
          [=](const Recipe& r) { return fmt::format("{}", field(r)); }};
}
template <typename F>
Key boolean(const char* path, F field, Default<bool> def, const char* doc) {
  return {{path, "bool", def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.boolean(path, *def.of(r)); },
          [=](const Recipe& r) { return std::string(field(r) ? "true" : "false"); }};
}
template <typename E, typename F>
Key choice(const char* path, F field, Default<E> def, const char* doc) {
  return {{path, "`" + enum_choices<E>("` \\| `") + "`", def.text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.enumerated<E>(path, def.of(r)); },
          [=](const Recipe& r) { return std::string(enum_name(field(r))); }};
}
template <typename F>
Key text(const char* path, F field, const char* default_text, const char* doc) {
  return {{path, "string", default_text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.text(path, ""); },
          [=](const Recipe& r) { return std::string(field(r)); }};
}
template <typename F>
Key integers(const char* path, F field, int64_t lo, int64_t hi, const char* default_text, const char* doc) {
  return {{path, "list of " + int_type(lo, hi).replace(0, 3, "ints"), default_text, doc},
          [=](Reader& in, Recipe& r) { field(r) = in.integers(path, lo, hi); },
          [=](const Recipe& r) { return fmt::format("[{}]", fmt::join(field(r), ", ")); }};
}
// keep_default: an absent key leaves the field's own default list (else: an empty list)
template <typename E, typename F>
Key choices(const char* path, F field, const char* default_text, const char* doc, bool keep_default = false) {
  return {{path, "list of `" + enum_choices<E>("` \\| `") + "`", default_text, doc},
          [=](Reader& in, Recipe& r) {
            if (keep_default && !in.has(path)) return in.note(path);
            std::vector<E> out;
            for (const auto& name : in.texts(path, {})) {
              const auto e = parse_enum<E>(name);
              if (!e) in.bad(path, "a list of " + enum_choices<E>(", ") + ", found '" + name + "'");
              out.push_back(*e);
            }
            field(r) = out;
          },
          [=](const Recipe& r) {
            std::vector<std::string> names;
            for (E e : field(r)) names.push_back(enum_name(e));
            return fmt::format("[{}]", fmt::join(names, ", "));
          }};
}
template <typename F>
Key mesh_size(const char* path, F field, bool auto_by_default, const char* doc) {
  return {{path, "int >= 1 or `auto`", auto_by_default ? "`auto`" : "`1`", doc},
          [=](Reader& in, Recipe& r) { field(r) = in.mesh_size(path, auto_by_default); }};
}
template <typename F>
Key axes(const char* path, F field, const char* doc) {
  return {{path, "list: a permutation of `tensor`, `context`, `data`, `pipeline` (`context` may be left out)",
           "`[tensor, context, data, pipeline]`", doc},
          [=](Reader& in, Recipe& r) {
            const std::string expected = "a permutation of [" + enum_choices<MeshAxis>(", ") +
                                         "], or of [tensor, data, pipeline] (context then goes just inside data)";
            std::vector<MeshAxis> out;
            for (const auto& name : in.texts(path, {"tensor", "data", "pipeline"})) {
              const auto axis = parse_enum<MeshAxis>(name);
              if (!axis || std::count(out.begin(), out.end(), *axis)) in.bad(path, expected);
              out.push_back(*axis);
            }
            const bool named = std::count(out.begin(), out.end(), MeshAxis::context) > 0;
            if (out.size() != EnumNames<MeshAxis>::table.size() - (named ? 0 : 1)) in.bad(path, expected);
            field(r) = out;
          }};
}
template <typename F>
Key betas(const char* path, F field, const char* doc) {
  return {{path, "[b1, b2], each in [0, 1)", "`[0.9, 0.95]`", doc}, [=](Reader& in, Recipe& r) {
            const auto b = in.reals(path, 2, 0, 1, {0.9, 0.95});
            field(r) = {b[0], b[1]};
          }};
}
template <typename F>
Key coefficients(const char* path, F field, const char* doc) {
  return {{path, "[a, b, c], each in [-100, 100)", "`[3.4445, -4.775, 2.0315]`", doc}, [=](Reader& in, Recipe& r) {
            const auto c = in.reals(path, 3, -100, 100, {3.4445, -4.7750, 2.0315});
            field(r) = {c[0], c[1], c[2]};
          }};
}
template <typename F>
Key blend(const char* path, F field, const char* doc) {
  return {{path, "prefix, or list of `{path, weight}`", "—", doc},
          [=](Reader& in, Recipe& r) { field(r) = in.blend(path); }};
}
inline Key section(const char* path, const char* doc) { return {{path, "map", "present", doc}, nullptr}; }

// The model.* keys, in the loader's order (keys_model.cpp).
std::vector<Key> model_keys();

}  // namespace trident::recipe_detail
