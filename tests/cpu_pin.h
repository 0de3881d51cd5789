// The CPU target pin of a test process (BLOCKLSTM_CPU_TARGET, as ctest's per-target runs set it).
#pragma once

namespace blt {

// Prints the pinned target; returns 77 (ctest: skipped) after saying why when this CPU cannot run
// it, 1 when the library has no such target, and 0 when the tests should run (also unpinned).
int check_cpu_target_pin();

}  // namespace blt
