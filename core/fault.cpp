// TRIDENT_FAULT parsing and the injection points (see fault.hpp).
#include "core/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace trident::fault {
namespace {

enum class Kind { kill, stall, fail_write, nan, slow, fp8_frozen_scales, fp8_e5m2_forward };

struct Fault {
  Kind kind;
  int64_t step = 0;
  int rank = -1;  // every rank
  Phase phase;
  std::string text;
  int64_t ms = 0;    // slow: how long this rank sleeps
  int attempt = -1;  // only in this attempt of a supervised run (TRIDENT_ATTEMPT); -1: every one
};

std::mutex g_mutex;
std::vector<Fault> g_faults;  // this rank's

const char* kinds[] = {"kill", "stall", "fail_write", "nan", "slow", "fp8_frozen_scales", "fp8_e5m2_forward"};
bool is_break(Kind k) { return k == Kind::fp8_frozen_scales || k == Kind::fp8_e5m2_forward; }
const char* phases[] = {"forward", "backward", "reduction", "save"};

template <typename E, size_t N>
E parse_name(const std::string& word, const char* (&names)[N], const std::string& what, const std::string& text) {
  for (size_t i = 0; i < N; ++i)
    if (word == names[i]) return E(i);
  std::string list;
  for (size_t i = 0; i < N; ++i) list += (i ? " | " : "") + std::string(names[i]);
  fail_input("TRIDENT_FAULT: '{}': {}: expected {}, found '{}'", text, what, list, word);
}

int64_t parse_int(const std::string& value, const std::string& key, const std::string& text, int64_t min) {
  char* end = nullptr;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end || n < min)
    fail_input("TRIDENT_FAULT: '{}': {}: expected an integer >= {}, found '{}'", text, key, min, value);
  return n;
}

Fault parse_fault(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  std::getline(in, word, ',');
  Fault f{parse_name<Kind>(word, kinds, "the kind", text), 0, -1, Phase::forward, text, 0};
  f.phase = f.kind == Kind::fail_write ? Phase::save : Phase::forward;
  while (std::getline(in, word, ',')) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "step")
      f.step = parse_int(value, key, text, 1);
    else if (key == "rank")
      f.rank = int(parse_int(value, key, text, 0));
    else if (key == "phase")
      f.phase = parse_name<Phase>(value, phases, "phase", text);
    else if (key == "ms" && f.kind == Kind::slow)
      f.ms = parse_int(value, key, text, 1);
    else if (key == "attempt")
      f.attempt = int(parse_int(value, key, text, 0));
    else
      fail_input("TRIDENT_FAULT: '{}': expected step=, rank=, attempt={}or phase=, found '{}'", text,
                 f.kind == Kind::slow ? ", ms= " : " ", word);
  }
  if (f.kind == Kind::fail_write && f.phase != Phase::save)
    fail_input("TRIDENT_FAULT: '{}': fail_write happens at phase save", text);
  if (f.kind == Kind::slow && f.ms == 0) fail_input("TRIDENT_FAULT: '{}': slow needs ms=M (milliseconds)", text);
  if (f.kind == Kind::nan && f.phase == Phase::save)
    fail_input("TRIDENT_FAULT: '{}': nan happens at phase forward, backward or reduction", text);
  return f;
}

}  // namespace

void configure(int world_rank) {
  std::vector<Fault> mine;
  const char* attempt_env = std::getenv("TRIDENT_ATTEMPT");  // set by `trident supervise`
  const int attempt = attempt_env ? std::atoi(attempt_env) : 0;
  if (const char* env = std::getenv("TRIDENT_FAULT")) {
    std::istringstream in(env);
    for (std::string one; std::getline(in, one, ';');) {
      if (one.find_first_not_of(" ") == std::string::npos) continue;
      const Fault f = parse_fault(one.substr(one.find_first_not_of(" ")));
      if ((f.rank < 0 || f.rank == world_rank) && (f.attempt < 0 || f.attempt == attempt)) mine.push_back(f);
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_faults = std::move(mine);
}

bool hit(Phase phase, int64_t step) {
  Kind kind;
  int64_t ms = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const Fault* due = nullptr;
    for (const Fault& f : g_faults)
      if ((f.step == 0 || f.step == step) && f.phase == phase && !is_break(f.kind)) due = &f;
    if (!due) return false;
    kind = due->kind, ms = due->ms;
  }
  if (kind == Kind::slow) {  // a straggler: this rank is late by ms, then carries on
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return false;
  }
  if (kind == Kind::kill) ::kill(::getpid(), SIGKILL);
  if (kind == Kind::stall)
    for (;;) ::pause();  // until killed: the other ranks' collectives time out
  return true;
}

bool broken(Break b) {
  const Kind k = b == Break::fp8_frozen_scales ? Kind::fp8_frozen_scales : Kind::fp8_e5m2_forward;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const Fault& f : g_faults)
    if (f.kind == k) return true;
  return false;
}

std::string describe() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string out;
  for (const Fault& f : g_faults) out += (out.empty() ? "" : "; ") + f.text;
  return out;
}

}  // namespace trident::fault
