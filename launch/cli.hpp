// The command line's words (docs/commands.md, "Errors and exit codes"):
// validators that check a value's type and bound before CLI11 converts it,
// and the translation of CLI11's own parse errors into the one documented
// form, `--flag: expected ..., found '...'` (main prefixes `trident CMD: `).
// Every count a user can type has a bound here, so that no command starts
// work it cannot finish (a world of 2^31 ranks, 10^11 sampled tokens).
// Not here: the commands' own checks of recipe and file contents.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace trident::launch::cli {

// An integer in [lo, hi]: "expected an integer in [lo, hi], found 'x'".
CLI::Validator integer_in(int64_t lo, int64_t hi);
// A finite number in [lo, hi] (or [lo, hi) with open_high).
CLI::Validator number_in(double lo, double hi, bool open_high = false);
// One of the given words: "expected a | b | c, found 'x'".
CLI::Validator one_of(std::vector<std::string> names);

// CLI11's error for the subcommand `sub` (null: the top level) in the
// documented form, without the `trident CMD: ` prefix.
std::string describe(const CLI::ParseError& e, const CLI::App* sub);

}  // namespace trident::launch::cli
