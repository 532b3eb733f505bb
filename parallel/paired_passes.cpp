// Paired passes (paired_passes.hpp) on ucontext: the first pass gets a
// stack of its own (mapped, with a guard page below it), the second runs on
// the caller's.
#include "parallel/paired_passes.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
// ThreadSanitizer's dynamic annotations (its runtime defines them)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace trident::parallel {

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

// TRIDENT_PAIRED_SEQUENTIAL=1 runs the passes one after the other (for a
// comparison; the results are the same).
bool sequential() {
  static const bool s = env_flag("TRIDENT_PAIRED_SEQUENTIAL");
  return s;
}

// The first pass's stack: the model's forward (oneDNN and OpenMP calls
// included) needs far less; pages are only touched as used.
constexpr size_t kStackBytes = size_t(64) << 20;

struct Pair {
  ucontext_t main_ctx{}, fiber_ctx{};
  const std::function<void()>* first = nullptr;
  bool in_fiber = false, fiber_done = false, main_done = false;
  std::exception_ptr error;
  // The sanitizers follow a stack switch only when told. ASan: the stack
  // each side runs on (the caller's learnt at the first switch into the
  // fiber) and each side's fake stack. TSan: each pass is a fiber of its
  // own; the switches synchronise, or with TRIDENT_TSAN_CONCURRENT_PASSES=1
  // only the first switch in and the last out do (the caller's set-up
  // happens before the first pass, both passes before what follows the
  // pair), so that the passes are concurrent to TSan and any memory both
  // write is a reported race: each pass's workspace must be its own
  // (docs/testing.md#sanitizers).
  const void* fiber_bottom = nullptr;
  size_t fiber_size = 0;
  const void* main_bottom = nullptr;
  size_t main_size = 0;
  void* main_fake = nullptr;
  void* fiber_fake = nullptr;
  void* tsan_main = nullptr;
  void* tsan_fiber = nullptr;
};

thread_local Pair* active = nullptr;
thread_local long switches = 0;

// Before swapcontext from one side to the other. to_fiber: the destination;
// sync: TSan orders everything before with everything after (always, or
// with concurrent passes the first switch in and the last out only); last: the side being left ends (ASan frees
// its fake stack).
// Inlined: TSan must switch fibers with no instrumented function return
// between it and the swapcontext (a return would pop the other fiber's
// shadow stack).
__attribute__((always_inline)) inline void before_switch(Pair& p, bool to_fiber, bool sync, bool last) {
#if defined(__SANITIZE_ADDRESS__)
  void** fake = last ? nullptr : (to_fiber ? &p.main_fake : &p.fiber_fake);
  __sanitizer_start_switch_fiber(fake, to_fiber ? p.fiber_bottom : p.main_bottom,
                                 to_fiber ? p.fiber_size : p.main_size);
#endif
#if defined(__SANITIZE_THREAD__)
  static const bool concurrent = env_flag("TRIDENT_TSAN_CONCURRENT_PASSES");
  __tsan_switch_to_fiber(to_fiber ? p.tsan_fiber : p.tsan_main,
                         sync || !concurrent ? 0 : __tsan_switch_to_fiber_no_sync);
#endif
  (void)p, (void)to_fiber, (void)sync, (void)last;
}

// Right after a side resumes (swapcontext returned to it, or the fiber starts).
void after_switch(Pair& p, bool in_fiber) {
#if defined(__SANITIZE_ADDRESS__)
  if (in_fiber)
    __sanitizer_finish_switch_fiber(p.fiber_fake, &p.main_bottom, &p.main_size);
  else
    __sanitizer_finish_switch_fiber(p.main_fake, nullptr, nullptr);
#endif
  (void)p, (void)in_fiber;
}

// The switcher's own state (which side runs, which has ended, the switch
// count), read and written by both sides at a switch: bookkeeping of the
// switch itself, not of either pass, so TSan does not count it as either
// pass's memory (what the passes write must be their own).
struct Bookkeeping {
#if defined(__SANITIZE_THREAD__)
  Bookkeeping() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
  ~Bookkeeping() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__), AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  Bookkeeping() = default;
#endif
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;
};

void fiber_entry() {
  Pair* p = active;
  after_switch(*p, true);
  try {
    (*p->first)();
  } catch (...) {
    p->error = std::current_exception();
  }
  {
    [[maybe_unused]] Bookkeeping b;
    p->fiber_done = true;
    p->in_fiber = false;
    if (!p->main_done) ++switches;  // the second pass resumes
  }
  before_switch(*p, false, true, true);
  setcontext(&p->main_ctx);  // never returns: this stack's frames end here (no return through the sanitizers)
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

void run_paired(const std::function<void()>& first, const std::function<void()>& second) {
  TRIDENT_CHECK(active == nullptr, "paired passes do not nest");
  if (sequential()) {
    first();
    second();
    return;
  }
  thread_local Stack stack;  // one per thread, kept: a step makes many pairs
  Pair p;
  p.first = &first;
  TRIDENT_CHECK(getcontext(&p.fiber_ctx) == 0, "paired passes: getcontext failed");
  p.fiber_ctx.uc_stack.ss_sp = static_cast<char*>(stack.base) + stack.guard;
  p.fiber_ctx.uc_stack.ss_size = kStackBytes;
  p.fiber_ctx.uc_link = &p.main_ctx;
  makecontext(&p.fiber_ctx, fiber_entry, 0);
  p.fiber_bottom = p.fiber_ctx.uc_stack.ss_sp, p.fiber_size = kStackBytes;
#if defined(__SANITIZE_THREAD__)
  p.tsan_main = __tsan_get_current_fiber();
  p.tsan_fiber = __tsan_create_fiber(0);
#endif
  active = &p;
  p.in_fiber = true;
  before_switch(p, true, true, false);
  swapcontext(&p.main_ctx, &p.fiber_ctx);  // the first pass, to its first switch or its end
  after_switch(p, false);
  std::exception_ptr second_error;
  try {
    second();
  } catch (...) {
    second_error = std::current_exception();
  }
  bool rest = false;
  {
    [[maybe_unused]] Bookkeeping b;
    p.main_done = true;
    rest = !p.fiber_done;
    if (rest) ++switches, p.in_fiber = true;
  }
  if (rest) {  // the first pass's rest
    before_switch(p, true, false, false);
    swapcontext(&p.main_ctx, &p.fiber_ctx);
    after_switch(p, false);
  }
#if defined(__SANITIZE_THREAD__)
  __tsan_destroy_fiber(p.tsan_fiber);
#endif
  active = nullptr;
  if (p.error) std::rethrow_exception(p.error);
  if (second_error) std::rethrow_exception(second_error);
}

void switch_pass() {
  Pair* p = active;
  if (!p) return;
  bool to_fiber = false;
  {
    [[maybe_unused]] Bookkeeping b;
    // a pass whose other has ended runs on to its end
    if (p->in_fiber ? p->main_done : p->fiber_done) return;
    to_fiber = !p->in_fiber;
    ++switches;
    p->in_fiber = to_fiber;
  }
  if (to_fiber) {
    before_switch(*p, true, false, false);
    swapcontext(&p->main_ctx, &p->fiber_ctx);
    after_switch(*p, false);
  } else {
    before_switch(*p, false, false, false);
    swapcontext(&p->fiber_ctx, &p->main_ctx);
    after_switch(*p, true);
  }
}

long take_pass_switches() {
  const long n = switches;
  switches = 0;
  return n;
}

}  // namespace trident::parallel
