// Paired passes (paired_passes.hpp) on ucontext: the first pass gets a
// stack of its own (mapped, with a guard page below it), the second runs on
// the caller's.
#include "parallel/paired_passes.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <exception>

#include "core/error.hpp"

namespace trident::parallel {

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSequential = true;
#else
constexpr bool kSequential = false;
#endif

// The first pass's stack: the model's forward (oneDNN and OpenMP calls
// included) needs far less; pages are only touched as used.
constexpr size_t kStackBytes = size_t(64) << 20;

struct Pair {
  ucontext_t main_ctx{}, fiber_ctx{};
  const std::function<void()>* first = nullptr;
  const std::function<void()>* on_switch = nullptr;
  bool in_fiber = false, fiber_done = false, main_done = false;
  std::exception_ptr error;
};

thread_local Pair* active = nullptr;
thread_local long switches = 0;

void fiber_entry() {
  Pair* p = active;
  try {
    (*p->first)();
  } catch (...) {
    p->error = std::current_exception();
  }
  p->fiber_done = true;
  p->in_fiber = false;
  if (!p->main_done) (*p->on_switch)(), ++switches;  // the second pass resumes with its own state
  // returns to uc_link: the main context
}

// A mapped stack with an inaccessible page below it.
struct Stack {
  void* base = nullptr;
  size_t bytes = 0, guard = 0;
  Stack() {
    guard = size_t(sysconf(_SC_PAGESIZE));
    bytes = kStackBytes + guard;
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TRIDENT_CHECK(base != MAP_FAILED, "paired passes: cannot map a {} MiB stack", kStackBytes >> 20);
    mprotect(base, guard, PROT_NONE);
  }
  ~Stack() { munmap(base, bytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
};

}  // namespace

void run_paired(const std::function<void()>& first, const std::function<void()>& second,
                const std::function<void()>& on_switch) {
  TRIDENT_CHECK(active == nullptr, "paired passes do not nest");
  if (kSequential) {
    first();
    second();
    return;
  }
  thread_local Stack stack;  // one per thread, kept: a step makes many pairs
  Pair p;
  p.first = &first, p.on_switch = &on_switch;
  TRIDENT_CHECK(getcontext(&p.fiber_ctx) == 0, "paired passes: getcontext failed");
  p.fiber_ctx.uc_stack.ss_sp = static_cast<char*>(stack.base) + stack.guard;
  p.fiber_ctx.uc_stack.ss_size = kStackBytes;
  p.fiber_ctx.uc_link = &p.main_ctx;
  makecontext(&p.fiber_ctx, fiber_entry, 0);
  active = &p;
  p.in_fiber = true;
  swapcontext(&p.main_ctx, &p.fiber_ctx);  // the first pass, to its first switch or its end
  std::exception_ptr second_error;
  try {
    second();
  } catch (...) {
    second_error = std::current_exception();
  }
  p.main_done = true;
  if (!p.fiber_done) {  // the first pass's rest
    on_switch(), ++switches;
    p.in_fiber = true;
    swapcontext(&p.main_ctx, &p.fiber_ctx);
  }
  active = nullptr;
  if (p.error) std::rethrow_exception(p.error);
  if (second_error) std::rethrow_exception(second_error);
}

void switch_pass() {
  Pair* p = active;
  if (!p) return;
  if (p->in_fiber) {
    if (p->main_done) return;  // the second pass has ended: the first runs on to its end
    (*p->on_switch)(), ++switches;
    p->in_fiber = false;
    swapcontext(&p->fiber_ctx, &p->main_ctx);
  } else {
    if (p->fiber_done) return;
    (*p->on_switch)(), ++switches;
    p->in_fiber = true;
    swapcontext(&p->main_ctx, &p->fiber_ctx);
  }
}

long take_pass_switches() {
  const long n = switches;
  switches = 0;
  return n;
}

}  // namespace trident::parallel
