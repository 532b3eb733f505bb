// `trident keys`: every recipe key (the loader's one table) as markdown
// tables by section, or a reference page rewritten with them.
#pragma once
#include <string>

namespace trident::launch {

// Prints the tables (update == ""), or rewrites the page `update` in place.
int run_keys(const std::string& update);

}  // namespace trident::launch
