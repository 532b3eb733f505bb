// `trident supervise` (see supervise.hpp): the restart loop.
#include "launch/tools/supervise.hpp"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident::launch {

namespace {

std::atomic<int> g_stop{0};  // the stop signal received, passed on to the attempt's processes

extern "C" void on_stop(int sig) { g_stop.store(sig); }

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Whether any process of group pgid is left (stopped ones included).
bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

// The attempt's process group gone: SIGTERM, up to `grace` seconds, then SIGKILL (a stopped rank too).
// Returns how long it took.
double tear_down(pid_t pgid, double grace) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!group_alive(pgid)) return 0;
  ::kill(-pgid, SIGTERM);
  ::kill(-pgid, SIGCONT);  // a stopped process takes SIGTERM only when it runs
  while (group_alive(pgid) && seconds_since(t0) < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (group_alive(pgid)) {
    log::warn("supervise: processes of the failed attempt still run after {:.0f} s: SIGKILL", grace);
    ::kill(-pgid, SIGKILL);
    while (group_alive(pgid) && seconds_since(t0) < grace + 30)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return seconds_since(t0);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
}

// Runs the command in a process group of its own; returns its wait status.
int run_attempt(const SuperviseOptions& o, int attempt, const std::string& restart, pid_t& pgid) {
  std::vector<char*> argv;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("supervise: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    sigset_t none;  // the command starts with every signal deliverable and the default actions
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) ::signal(sig, SIG_DFL);
    ::setpgid(0, 0);
    ::setenv("TRIDENT_ATTEMPT", std::to_string(attempt).c_str(), 1);
    if (attempt > 0) ::setenv("TRIDENT_RESUME", "auto", 1), ::setenv("TRIDENT_RESTART", restart.c_str(), 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "error: supervise: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // either side may get there first
  pgid = pid;
  int status = 0;
  int passed = 0;
  for (;;) {  // every 20 ms: a stop signal is passed on however it falls against the wait
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("supervise: waitpid failed: {}", std::strerror(errno)));
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // pass the stop on to the launcher, which passes it to the ranks (mpirun and srun forward SIGTERM,
    // SIGINT and SIGUSR1; the other processes of its group, such as srun's helper, may not take them)
    if (const int sig = g_stop.load(); sig != 0 && sig != passed) {
      ::kill(pid, sig);
      passed = sig;
    }
  }
  return status;
}

}  // namespace

int supervise(const SuperviseOptions& o) {
  if (o.command.empty())
    fail_input(
        "supervise: expected the launch command after --, e.g. trident supervise -- mpirun -np 4 trident train "
        "RECIPE.yaml; found none");
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigset_t stops;  // caught here (trident's main leaves them unblocked for this command)
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(sig, &sa, nullptr), sigaddset(&stops, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
  int code = kExitFailure;
  std::string restart;  // the last failure, for the next attempt's accounting (TRIDENT_RESTART)
  for (int attempt = 0; attempt <= o.restarts; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    if (attempt > 0)
      log::info("supervise: attempt {} of {} starts (resuming from the newest checkpoint)", attempt + 1,
                o.restarts + 1);
    pid_t pgid = 0;
    const int status = run_attempt(o, attempt, restart, pgid);
    const double ran = seconds_since(start), ended_at = epoch_seconds();
    code = exit_code_of(status);
    if (code == 0) {
      tear_down(pgid, o.grace);  // nothing should be left; a straggler is not the next attempt's
      if (const int sig = g_stop.load())
        log::info("supervise: the job stopped cleanly on {} (attempt {}): no restart", strsignal(sig), attempt + 1);
      else
        log::info("supervise: the job finished (attempt {}, {} restart{})", attempt + 1, attempt,
                  attempt == 1 ? "" : "s");
      return 0;
    }
    const double teardown = tear_down(pgid, o.grace);
    if (const int sig = g_stop.load()) {
      log::info("supervise: stopped by {} (the job's {}): no restart", strsignal(sig), describe_status(status));
      return code;
    }
    if (code == kExitBadInput) {  // a recipe, dataset or word the job refused: the same again would be too
      log::error("supervise: attempt {} refused its input (exit code 2): no restart", attempt + 1);
      return code;
    }
    log::error("supervise: attempt {} failed after {:.1f} s: {}; its remaining processes gone in {:.1f} s", attempt + 1,
               ran, describe_status(status), teardown);
    if (attempt == o.restarts) {
      log::error("supervise: restarts exhausted ({}): exit code {}", o.restarts, code);
      return code;
    }
    restart = fmt::format("failed_at={:.3f};teardown={:.3f};cause={}", ended_at, teardown, describe_status(status));
  }
  return code;
}

}  // namespace trident::launch
