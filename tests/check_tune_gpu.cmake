# `blocklstm tune` on the GPU schedules, run on an OpenCL device (PoCL on CI machines): the same
# search as on a CUDA GPU, so a short run must time the default GPU families (the steps and the
# reductions), check their outputs, and write a table "cuda" that the tables' reader accepts and
# that says it is not a measurement of a GPU. --device cuda without a CUDA driver is refused
# with the reason (on a GPU machine it tunes instead).
#   cmake -DCLI=<blocklstm> -DSOURCE=<source root> -DWORK=<dir> -P check_tune_gpu.cmake
cmake_minimum_required(VERSION 3.25)
set(PROJECT_SOURCE_DIR "${SOURCE}")
include("${SOURCE}/cmake/BlocklstmTuning.cmake")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

execute_process(COMMAND "${CLI}" tune --device opencl --minutes 0.2 --shapes 3,4,8,8 --out "${WORK}/cuda.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0)
    message(FATAL_ERROR "blocklstm tune --device opencl failed (${code}):\n${out}\n${err}")
endif ()
foreach (family IN ITEMS seq_fwd_step seq_bwd_step seq_bwd_reduce seq_bwd_reduce_peephole)
    if (NOT out MATCHES "  ${family} +3,4,8,8 +[0-9.]+ +[0-9.]+ +[0-9.]+x")
        message(FATAL_ERROR "no timing of GPU family ${family} in the report:\n${out}")
    endif ()
endforeach ()
blocklstm_read_tuning("${WORK}/cuda.json" t)
if (NOT t_TABLE STREQUAL "cuda" OR NOT t_KNOBS MATCHES "step_cols_per_thread:[0-9]+"
    OR NOT t_TUNED_ON MATCHES "^\\(not measured\\) OpenCL")
    message(FATAL_ERROR "unexpected table from the OpenCL run: ${t_TABLE}: ${t_KNOBS} (${t_TUNED_ON})")
endif ()
message(STATUS "ok: wrote table ${t_TABLE}: ${t_KNOBS} (${t_TUNED_ON})")

# A log holds one target's times: a CPU run refuses to resume the OpenCL run's log.
execute_process(COMMAND "${CLI}" tune --minutes 0 --shapes 3,4,8,8 --families seq_fwd_step
                        --out "${WORK}/cpu.json" --log "${WORK}/cuda.json.csv"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (code EQUAL 0 OR NOT err MATCHES "holds times for .*opencl")
    message(FATAL_ERROR "a log of another target was not refused (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: another target's log is refused")

# A batched product (cuBLAS's where it loads) is tuned only when asked for.
execute_process(COMMAND "${CLI}" tune --device opencl --minutes 0 --families gemm_tn --shapes 2,4,8,8
                        --out "${WORK}/gemm.json" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "  gemm_tn +2,4,8,8 +[0-9.]+")
    message(FATAL_ERROR "the batched GPU product did not run (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: the batched product runs on the GPU schedule")

execute_process(COMMAND "${CLI}" tune --device cuda --minutes 0 --shapes 2,4,8,8 --out "${WORK}/cuda_device.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (code EQUAL 0)
    blocklstm_read_tuning("${WORK}/cuda_device.json" d)
    message(STATUS "ok: this machine has a CUDA device: ${d_TUNED_ON}")
elseif (NOT err MATCHES "--device cuda: cannot run kernels here: ")
    message(FATAL_ERROR "--device cuda without a CUDA device was not refused clearly (${code}):\n${out}\n${err}")
else ()
    message(STATUS "ok: --device cuda refused here: ${err}")
endif ()
