// main() of the test suites: under a CPU target pin this CPU cannot run, exit 77 (ctest: skipped)
// with the reason instead of failing every test. A run whose every selected test skipped, none
// failing, also exits 77, so that ctest can report it skipped by its exit code (SKIP_RETURN_CODE)
// and never by a pattern in the output, which a failure's output also holds when later tests skip.
#include <blocklstm/blocklstm.h>
#include <gtest/gtest.h>

#include "test_env.h"

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (const int status = blt::check_cpu_target_pin()) return status;
    const int status = RUN_ALL_TESTS();
    // The device memory kept between CUDA calls, given back: compute-sanitizer's leak check
    // (scripts/gpu_check.sh sanitize) then reports what the library itself loses.
    if (blocklstm::cuda_device_count() > 0) blocklstm::cuda_release_memory();
    return blt::exit_status(status, *::testing::UnitTest::GetInstance());
}
