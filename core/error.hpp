// Errors: typed exceptions and the one family of check macros.
// InputError is bad user input (recipe, dataset, command line): main prints it
// once and exits 2. Error is everything else (exit 1). Library checks
// (MPI_CHECK, CUDA_CHECK, ...) are built from check_library() so every report
// carries the statement, file:line, the library's message, rank and host.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace trident {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public Error {
 public:
  using Error::Error;
};

// Exit codes of every trident command.
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitBadInput = 2 };

[[noreturn]] void throw_check_failure(const char* cond, const char* file, int line, const std::string& msg);

// Formats "<library> error in `stmt` at file:line on rank R (host): message".
[[noreturn]] void throw_library_failure(const char* library, const char* stmt, const char* file, int line,
                                        const std::string& message);

template <typename... Args>
[[noreturn]] void fail_input(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace trident

// The template every library check is made from: `stmt` returns a status,
// `ok` is the success value, `to_string(status)` the library's message.
// Backends define theirs in one line, e.g.
//   #define MPI_CHECK(stmt) TRIDENT_LIBRARY_CHECK("MPI", stmt, MPI_SUCCESS, mpi_error_string)
#define TRIDENT_LIBRARY_CHECK(library, stmt, ok, to_string)                                             \
  do {                                                                                                  \
    auto trident_status_ = (stmt);                                                                      \
    if (trident_status_ != (ok))                                                                        \
      ::trident::throw_library_failure(library, #stmt, __FILE__, __LINE__, to_string(trident_status_)); \
  } while (0)

#define TRIDENT_CHECK(cond, ...)                                                                      \
  do {                                                                                                \
    if (!(cond)) ::trident::throw_check_failure(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
