#include "test_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <blocklstm/blocklstm.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

bool cuda_kernels_in(blocklstm::DType dtype) {
    if (dtype == blocklstm::DType::bf16 && !blocklstm::cuda_bfloat16()) return false;  // built, switched off
    for (const blocklstm::KernelInfo &k : blocklstm::kernels())
        if (k.backend == blocklstm::Device::cuda && k.dtype == dtype) return true;
    return false;
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

void record_output_digest(const std::string &output, const blocklstm::TensorView &t) {
    static const char *const path = std::getenv("BLOCKLSTM_TEST_OUTPUT_DIGESTS");
    if (!path || !*path || t.device != blocklstm::Device::cpu) return;
    uint64_t hash = 14695981039346656037ull;
    const auto *bytes = static_cast<const unsigned char *>(t.data);
    for (std::size_t k = 0; k < t.num_bytes(); ++k) hash = (hash ^ bytes[k]) * 1099511628211ull;
    const ::testing::TestInfo *test = ::testing::UnitTest::GetInstance()->current_test_info();
    const char *pin = std::getenv("BLOCKLSTM_CPU_TARGET");
    char line[512];
    const int n = std::snprintf(line, sizeof line, "%s.%s %s %s %016llx\n", test ? test->test_suite_name() : "-",
                                test ? test->name() : "-", pin && *pin ? pin : "auto", output.c_str(),
                                static_cast<unsigned long long>(hash));
    // One write of the whole line with O_APPEND: lines of processes that ctest runs side by side do
    // not interleave.
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    if (::write(fd, line, static_cast<std::size_t>(std::min(n, int(sizeof line) - 1))) < 0) {
    }
    ::close(fd);
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
