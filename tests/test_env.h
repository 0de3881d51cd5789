// What the machine a test process runs on offers: the CPU target pin (BLOCKLSTM_CPU_TARGET, as
// ctest's per-target runs set it) and a CUDA device.
#pragma once

#include <string>

namespace blocklstm {
struct TensorView;
enum class DType : int;
}
namespace testing { class UnitTest; }

namespace blt {

// Prints the pinned target; returns 77 (ctest: skipped) after saying why when this CPU cannot run
// it, 1 when the library has no such target, and 0 when the tests should run (also unpinned).
int check_cpu_target_pin();

// The GPU tests: true where they cannot run, with the reason printed. On a machine with an NVIDIA
// GPU (/dev/nvidia0, or nvidia-smi on the PATH) where blocklstm finds no CUDA device, it also
// records a test failure naming why: a GPU test that skips on a GPU machine tested nothing.
bool skip_without_cuda();

// Whether this build runs CUDA kernels in `dtype` (runtime/kernels.inc; bfloat16's only with
// cuda_bfloat16(), BLOCKLSTM_CUDA_BF16=1). A CUDA call in a dtype without them is refused, naming
// the kernel, before anything is written.
bool cuda_kernels_in(blocklstm::DType dtype);

// With BLOCKLSTM_TEST_OUTPUT_DIGESTS=FILE, appends a line to FILE for a library output that a
// test checks: the test's name, the pinned CPU target, the output's name and an FNV-1a hash of its
// bytes (host tensors). Two runs' sorted files are equal when every checked output kept its bits:
// the check that a change which must not move a bit (a refactoring) moved none.
void record_output_digest(const std::string &output, const blocklstm::TensorView &t);

// The process's exit status after RUN_ALL_TESTS returned `status`: 77 when tests were selected and
// every one skipped with no failure (ctest's SKIP_RETURN_CODE), else `status` (non-zero on any
// failure, whatever else skipped).
int exit_status(int status, const ::testing::UnitTest &run);

}  // namespace blt
