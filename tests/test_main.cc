// main() of the test suites: under a CPU target pin this CPU cannot run, exit 77 (ctest: skipped)
// with the reason instead of failing every test.
#include <gtest/gtest.h>

#include "test_env.h"

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (const int status = blt::check_cpu_target_pin()) return status;
    return RUN_ALL_TESTS();
}
