// AddressSanitizer defaults for the runtime's programs (used by the
// sanitizer build, tools/build.sh with SANITIZE=1; harmless otherwise).
// Expand TPC_ASAN_DEFAULT_OPTIONS once per program, in its main file.
//
// - allocator_may_return_null=1: the runtime checks its large allocations
//   (a plan may ask for more memory than the machine has) and reports a
//   one-line error; ASan must hand it the null rather than abort.
// - MPI programs add ":detect_leaks=0": OpenMPI keeps allocations past
//   MPI_Finalize inside components it has already unloaded, so their leaks
//   can be neither fixed nor suppressed by module name. The runtime's own
//   code is leak-checked by the unit tests and the fuzzers.
#pragma once

#define TPC_ASAN_DEFAULT_OPTIONS(extra)                                        \
  extern "C" __attribute__((used, visibility("default"))) const char *         \
  __asan_default_options() {                                                   \
    return "allocator_may_return_null=1" extra;                                \
  }
