// The command line's validators and error wording (see cli.hpp).
#include "launch/cli.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>

namespace trident::launch::cli {

namespace {

// A whole-string integer that fits int64 (no sign games, no trailing text).
bool parse_integer(const std::string& v, int64_t& out) {
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE || end == v.c_str() || *end) return false;
  out = n;
  return true;
}

std::string quoted_values(const std::vector<std::string>& values) {
  std::vector<std::string> q;
  for (const auto& v : values) q.push_back("'" + v + "'");
  return fmt::format("{}", fmt::join(q, ", "));
}

// The options (and positional arguments) `sub` takes, for messages.
std::string options_of(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options())
    if (!o->get_lnames().empty()) names.push_back("--" + o->get_lnames()[0]);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string positionals_of(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options())
    if (o->get_lnames().empty() && o->get_positional()) names.push_back(o->get_type_name());
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, " "));
}

const CLI::Option* find_option(const CLI::App* sub, const std::string& name) {
  if (!sub) return nullptr;
  for (const CLI::Option* o : sub->get_options())
    if (o->check_name(name) || o->get_name() == name) return o;
  return nullptr;
}

// What the option takes, in the help's words ("INT:[1, 1024]", "TEXT").
std::string wants(const CLI::App* sub, const std::string& name) {
  const CLI::Option* o = find_option(sub, name);
  return o ? o->get_type_name() : std::string("a value");
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) {
        int64_t n = 0;
        if (parse_integer(v, n) && n >= lo && n <= hi) return std::string();
        return fmt::format("expected an integer in {}, found '{}'", range, v);
      },
      range);
}

CLI::Validator number_in(double lo, double hi, bool open_high) {
  const std::string range = fmt::format("[{}, {}{}", lo, hi, open_high ? ")" : "]");
  return CLI::Validator(
      [lo, hi, open_high, range](std::string& v) {
        char* end = nullptr;
        errno = 0;
        const double x = v.empty() ? std::nan("") : std::strtod(v.c_str(), &end);
        const bool ok = !v.empty() && end != v.c_str() && !*end && errno != ERANGE && std::isfinite(x) && x >= lo &&
                        (open_high ? x < hi : x <= hi);
        return ok ? std::string() : fmt::format("expected a number in {}, found '{}'", range, v);
      },
      range);
}

CLI::Validator one_of(std::vector<std::string> names) {
  const std::string list = fmt::format("{}", fmt::join(names, " | "));
  return CLI::Validator(
      [names, list](std::string& v) {
        return std::find(names.begin(), names.end(), v) != names.end()
                   ? std::string()
                   : fmt::format("expected {}, found '{}'", list, v);
      },
      list);
}

std::string describe(const CLI::ParseError& e, const CLI::App* sub) {
  const std::string what = e.what();
  std::smatch m;
  // our validators already speak the documented form: "--flag: expected ..., found '...'"
  if (dynamic_cast<const CLI::ValidationError*>(&e)) return what;
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // "The following argument(s) was/were not expected: C B A" (CLI11 lists them last first)
    const size_t colon = what.find(": ");
    std::vector<std::string> extras;
    std::istringstream in(colon == std::string::npos ? what : what.substr(colon + 2));
    for (std::string w; in >> w;) extras.push_back(w);
    std::reverse(extras.begin(), extras.end());
    if (extras.empty()) return what;
    std::string all = fmt::format("{}", fmt::join(extras, " "));
    if (extras[0].size() > 1 && extras[0][0] == '-')
      return fmt::format("{}: expected one of {}, found '{}'", extras[0],
                         sub ? options_of(*sub) : "the options of --help", all);
    return fmt::format("{}: expected no more arguments (this command takes {}), found '{}'", extras[0],
                       sub ? positionals_of(*sub) : "a command", all);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    if (std::regex_match(what, m, std::regex(R"((\S+): At Most (\d+) required but received (\d+))"))) {
      const CLI::Option* o = find_option(sub, m[1]);
      std::vector<std::string> given = o ? o->results() : std::vector<std::string>{};
      return fmt::format("{}: expected {} value (the option given once), found {}{}", m[1].str(),
                         m[2].str() == "1" ? "one" : "at most " + m[2].str(), m[3].str(),
                         given.empty() ? "" : " (" + quoted_values(given) + ")");
    }
    if (std::regex_match(what, m, std::regex(R"((\S+): (\d+) required (.*) missing)")))
      return fmt::format("{}: expected a value ({}), found none", m[1].str(), m[3].str());
    if (std::regex_match(what, m, std::regex(R"((\S+): At least (\d+) required but received (\d+))")))
      return fmt::format("{}: expected at least {} value(s), found {}", m[1].str(), m[2].str(), m[3].str());
    if (std::regex_match(what, m, std::regex(R"(Expected exactly (\d+) arguments to (\S+), got (\d+))")))
      return fmt::format("{}: expected {} value(s), found {}", m[2].str(), m[1].str(), m[3].str());
    if (std::regex_match(what, m, std::regex(R"((\S+) was given a disallowed flag override)")))
      return fmt::format("{}: expected the flag alone, found a value", m[1].str());
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    if (std::regex_match(what, m, std::regex(R"(Could not convert: (\S+) = (.*))")))
      return fmt::format("{}: expected {}, found '{}'", m[1].str(), wants(sub, m[1]), m[2].str());
    if (std::regex_match(what, m, std::regex(R"((\S+): too many inputs for a flag)")))
      return fmt::format("{}: expected the flag once, with no value, found more", m[1].str());
    if (std::regex_match(what, m, std::regex(R"((\S+): Should be true/false or a number)")))
      return fmt::format("{}: expected true or false, found another value", m[1].str());
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    if (std::regex_match(what, m, std::regex(R"((\S+) is required)"))) {
      if (m[1].str() == "A subcommand") return fmt::format("command: expected a command, found none");
      return fmt::format("{}: expected a value ({}), found none (a required option)", m[1].str(), wants(sub, m[1]));
    }
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e))
    if (std::regex_match(what, m, std::regex(R"((\S+) excludes (\S+))")))
      return fmt::format("{}: expected {} or {}, not both, found both", m[1].str(), m[1].str(), m[2].str());
  if (dynamic_cast<const CLI::RequiresError*>(&e))
    if (std::regex_match(what, m, std::regex(R"((\S+) requires (\S+))")))
      return fmt::format("{}: expected {} with it, found {} alone", m[1].str(), m[2].str(), m[1].str());
  return what;
}

}  // namespace trident::launch::cli
