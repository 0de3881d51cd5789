#include "test_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <blocklstm/blocklstm.h>

#include <cstdlib>
#include <iostream>

namespace blt {

int check_cpu_target_pin() {
    const char *pin = std::getenv("BLOCKLSTM_CPU_TARGET");
    if (!pin || !*pin) return 0;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.name == pin && !t.runs_here) {
            std::cout << "[ SKIPPED  ] CPU target " << t.name << " (" << t.halide_target
                      << "): this CPU lacks " << t.missing << std::endl;
            return 77;
        }
    }
    try {
        std::cout << "[ target   ] pinned by BLOCKLSTM_CPU_TARGET: " << blocklstm::cpu_target_in_use()
                  << std::endl;
    } catch (const blocklstm::Error &e) {  // a target this library does not have: a failure
        std::cout << e.what() << std::endl;
        return 1;
    }
    return 0;
}

bool skip_without_cuda() {
    if (blocklstm::cuda_device_count() > 0) return false;
    static const bool gpu_here =
        ::access("/dev/nvidia0", F_OK) == 0 || std::system("command -v nvidia-smi > /dev/null 2>&1") == 0;
    if (gpu_here && blocklstm::cuda_built()) {
        ADD_FAILURE() << "this machine has an NVIDIA GPU, but blocklstm finds no CUDA device: "
                      << blocklstm::cuda_unavailable_reason();
    }
    std::cout << "[SKIP] " << blocklstm::cuda_unavailable_reason() << std::endl;
    return true;
}

int exit_status(int status, const ::testing::UnitTest &run) {
    const bool all_skipped = run.test_to_run_count() > 0 && run.skipped_test_count() == run.test_to_run_count();
    if (status == 0 && run.failed_test_count() == 0 && !run.ad_hoc_test_result().Failed() && all_skipped) {
        std::cout << "[ SKIPPED  ] every selected test skipped (exit 77)" << std::endl;
        return 77;
    }
    return status;
}

}  // namespace blt
