// Shared by the fuzz targets: the input as a file (most readers take a
// path), and the one rule every target checks: bad input is an InputError
// (the message the user sees, exit 2); anything else escaping, a crash, a
// leak or undefined behaviour is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace trident::fuzz {

// A scratch directory for this process (removed at exit).
inline const std::string& scratch() {
  static const std::string dir = [] {
    const std::string d = std::filesystem::temp_directory_path() / ("trident_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(
          std::filesystem::temp_directory_path() / ("trident_fuzz_" + std::to_string(::getpid())), ec);
    });
    return d;
  }();
  return dir;
}

inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

// Runs f; an InputError is the expected refusal of bad input.
template <typename F>
void refuses_or_reads(F&& f) {
  try {
    f();
  } catch (const InputError&) {}
}

}  // namespace trident::fuzz
