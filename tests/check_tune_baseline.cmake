# `blocklstm tune --baseline autoschedulers`, small: Halide's three CPU autoschedulers schedule the
# peephole sums (whose b_grad output the CPU leaves empty: Adams2019 once ended the whole tool on
# its empty region) and a product; each kernel's outputs must match the hand schedule's before it
# is timed, every one must get a time, and the schedules they chose are written. Then a child
# that dies (made to, as Adams2019 did) must be a failed row with its reason, the rest timed.
#   cmake -DCLI=<blocklstm> -DWORK=<dir> -P check_tune_baseline.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${CLI}" tune --baseline autoschedulers --families seq_bwd_reduce,gemm_nn
                        --shapes 4,8,16,16 --threads 1 --out "${WORK}/baseline.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0)
    message(FATAL_ERROR "blocklstm tune --baseline autoschedulers failed (${code}):\n${out}\n${err}")
endif ()
set(timed "[0-9]+\\.[0-9]+ [0-9]+\\.[0-9]+x")
foreach (family IN ITEMS seq_bwd_reduce gemm_nn)
    if (NOT out MATCHES "  ${family} +4,8,16,16 +[0-9.]+ +${timed} +${timed} +${timed}\n")
        message(FATAL_ERROR "${family}: not every autoscheduler's kernel ran and matched ours:\n${out}\n${err}")
    endif ()
endforeach ()
file(STRINGS "${WORK}/baseline.json.csv" logged REGEX "\"autoscheduler:[A-Za-z0-9]+\",ok,")
list(LENGTH logged n)
if (NOT n EQUAL 6)
    message(FATAL_ERROR "expected 6 logged autoscheduler times, found ${n}:\n${logged}")
endif ()
message(STATUS "ok: Adams2019, Li2018 and Mullapudi2016 each scheduled, checked and timed both families")
foreach (family IN ITEMS seq_bwd_reduce gemm_nn)
    foreach (name IN ITEMS Adams2019 Li2018 Mullapudi2016)
        set(file "${WORK}/baseline.json.csv.schedules/${family}_4,8,16,16_${name}.h")
        if (NOT EXISTS "${file}")
            message(FATAL_ERROR "no schedule written for ${name} on ${family}: ${file}")
        endif ()
        file(READ "${file}" source)
        if (NOT source MATCHES "\\.compute_root\\(\\)")  # every schedule here computes some stage at root
            message(FATAL_ERROR "${file} is not a Halide schedule:\n${source}")
        endif ()
    endforeach ()
endforeach ()
message(STATUS "ok: the six schedules are written as C++")

execute_process(COMMAND "${CMAKE_COMMAND}" -E env BLOCKLSTM_TUNE_TEST_CHILD_ABORT=Li2018
                        "${CLI}" tune --baseline autoschedulers --families gemm_nn --shapes 4,8,16,16 --threads 1
                        --out "${WORK}/child_dies.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(reason "Li2018: the autoscheduler's process ended by signal 6 \\(Aborted\\): blocklstm tune: aborted by an "
           "exception it cannot catch: a test's exception out of a noexcept function\n")
string(JOIN "" reason ${reason})
if (NOT code EQUAL 0 OR NOT out MATCHES "  gemm_nn +4,8,16,16 +[0-9.]+ +${timed} +failed +${timed}\n"
    OR NOT out MATCHES "${reason}")
    message(FATAL_ERROR "a child that died was not reported as a failed row with its reason (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: a child that dies is a failed row with its reason; the others are timed")
