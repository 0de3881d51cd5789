// main() of the test suites: under a CPU target pin this CPU cannot run, exit 77 (ctest: skipped)
// with the reason instead of failing every test.
#include <blocklstm/blocklstm.h>
#include <gtest/gtest.h>

#include "test_env.h"

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (const int status = blt::check_cpu_target_pin()) return status;
    const int status = RUN_ALL_TESTS();
    // The device memory kept between CUDA calls, given back: compute-sanitizer's leak check
    // (tools/gpu_check.sh sanitize) then reports what the library itself loses.
    if (blocklstm::cuda_device_count() > 0) blocklstm::cuda_release_memory();
    return status;
}
