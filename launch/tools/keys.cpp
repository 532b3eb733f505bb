// `trident keys` (see keys.hpp).
#include "launch/tools/keys.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/recipe/recipe.hpp"

namespace trident::launch {

int run_keys(const std::string& update) {
  if (update.empty()) {
    std::vector<std::string> sections;
    for (const auto& k : recipe_keys())
      if (std::find(sections.begin(), sections.end(), recipe_section(k.path)) == sections.end())
        sections.push_back(recipe_section(k.path));
    for (const auto& s : sections)
      fmt::print("## {}\n\n{}\n", s.empty() ? "Top level" : "`" + s + "`", recipe_keys_markdown(s));
    return kExitOk;
  }
  std::ifstream in(update);
  if (!in) fail_input("keys: cannot read '{}'", update);
  std::stringstream ss;
  ss << in.rdbuf();
  write_file_atomic(update, recipe_doc_with_tables(ss.str()));
  return kExitOk;
}

}  // namespace trident::launch
