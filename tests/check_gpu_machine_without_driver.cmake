# On a machine that shows an NVIDIA GPU (here: an nvidia-smi on the PATH) but where blocklstm finds
# no CUDA device, the GPU tests must fail, naming why, instead of skipping: a fake nvidia-smi
# stands in for the GPU. Where a CUDA device is really there, the check does not apply.
#   cmake -DCLI=<blocklstm> -DTEST=<variants_test> -DWORK=<dir> -P check_gpu_machine_without_driver.cmake
execute_process(COMMAND "${CLI}" list OUTPUT_VARIABLE listing)
if (NOT listing MATCHES "\nCUDA: no device \\(([^\n]*)\\)\n")
    message(STATUS "[SKIP] a CUDA device is present, or the build has no CUDA: nothing to check")
    return()
endif ()
set(reason "${CMAKE_MATCH_1}")
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/nvidia-smi" "#!/bin/sh\necho 'GPU 0: a fake NVIDIA GPU'\n")
file(CHMOD "${WORK}/nvidia-smi" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${WORK}:$ENV{PATH}"
                        "${TEST}" --gtest_filter=transpose__cuda_f32_plain_any.BlockLSTMGrad_plain__all_ones
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}" "this machine has an NVIDIA GPU, but blocklstm finds no CUDA device: ${reason}" at)
if (code EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "expected a failure naming why no CUDA device was found (${reason}); got exit ${code}:\n${out}${err}")
endif ()
message(STATUS "a GPU test on a GPU machine without a usable driver fails: ${reason}")
