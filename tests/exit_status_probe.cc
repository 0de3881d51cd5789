// A probe of the suites' main() (test_main.cc) for tests/check_exit_status.cmake: one test that
// always skips and one that fails when BLOCKLSTM_PROBE_FAIL is set (and skips otherwise), as a CUDA
// case that faults before the later CUDA cases skip.
#include <gtest/gtest.h>

#include <cstdlib>

TEST(ExitStatusProbe, Skips) { GTEST_SKIP() << "the probe's skipping test"; }

TEST(ExitStatusProbe, FailsWhenAsked) {
    if (!std::getenv("BLOCKLSTM_PROBE_FAIL")) GTEST_SKIP() << "BLOCKLSTM_PROBE_FAIL is not set";
    ADD_FAILURE() << "the probe's planted failure";
}
