// Options and suppressions the sanitizer runtimes read at start-up, compiled
// into every executable of a TRIDENT_SANITIZE build (CMakeLists.txt), so
// `trident` and the tests run clean without environment variables
// (ASAN_OPTIONS etc. still add to or override these).
//
// The suppressions cover only libraries that are not built with the
// sanitizers: what Open MPI, its runtime (PMIx, hwloc, libevent), oneDNN,
// OpenMP and the chart renderer's libraries (librsvg, pango, fontconfig,
// cairo, GLib) allocate once and keep for the process's life, and their internal
// synchronisation, which ThreadSanitizer cannot see. Leaks and races in
// Trident's own code are never suppressed.

#define TRIDENT_SANITIZER_HOOK extern "C" __attribute__((visibility("default"), used)) const char*

TRIDENT_SANITIZER_HOOK __asan_default_options() {
  return "detect_leaks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0";
}

TRIDENT_SANITIZER_HOOK __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

TRIDENT_SANITIZER_HOOK __lsan_default_suppressions() {
  return "leak:libmpi.so\n"
         "leak:libopen-pal.so\n"
         "leak:libopen-rte.so\n"
         "leak:libpmix.so\n"
         "leak:libhwloc.so\n"
         "leak:libevent\n"
         "leak:mca_\n"
         "leak:libucp.so\n"
         "leak:libucs.so\n"
         "leak:libdnnl.so\n"
         "leak:libgomp.so\n"
         // `trident report` renders its charts with librsvg, whose text goes through pango, fontconfig,
         // harfbuzz, cairo and GLib's type system: caches they fill once and keep (on a machine with fonts)
         "leak:librsvg\n"
         "leak:libpango\n"
         "leak:libfontconfig.so\n"
         "leak:libharfbuzz.so\n"
         "leak:libcairo.so\n"
         "leak:libglib-2.0.so\n"
         "leak:libgobject-2.0.so\n"
         "leak:libgio-2.0.so\n";
}

TRIDENT_SANITIZER_HOOK __tsan_default_options() { return "halt_on_error=1:second_deadlock_stack=1"; }

TRIDENT_SANITIZER_HOOK __tsan_default_suppressions() {
  return "called_from_lib:libmpi.so\n"
         "called_from_lib:libopen-pal.so\n"
         "called_from_lib:libopen-rte.so\n"
         "called_from_lib:libevent_core\n"
         "called_from_lib:libevent_pthreads\n"
         "called_from_lib:libhwloc.so\n"
         "called_from_lib:libgomp.so\n"
         "called_from_lib:libdnnl.so\n"
         // Open MPI's plug-ins (mca_*.so) and PMIx, loaded at MPI_Init and
         // unloaded at MPI_Finalize (called_from_lib refuses those): by module
         "race:mca_\n"
         "race:libpmix.so\n"
         "mutex:mca_\n"
         "mutex:libpmix.so\n"
         "deadlock:mca_\n"
         "deadlock:libmpi.so\n"
         "deadlock:libopen-pal.so\n"
         "deadlock:libpmix.so\n";
}
