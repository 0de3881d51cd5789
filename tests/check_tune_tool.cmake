# `blocklstm tune` end to end, small: a few seconds of search on one family and one small shape
# must write a table that the tables' reader accepts (the one the build uses), log every candidate,
# and resume from its log when run again; every family runs and writes its outputs.
#   cmake -DCLI=<blocklstm> -DSOURCE=<source root> -DWORK=<dir> -P check_tune_tool.cmake
cmake_minimum_required(VERSION 3.25)
set(PROJECT_SOURCE_DIR "${SOURCE}")
include("${SOURCE}/cmake/BlocklstmTuning.cmake")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(args tune --minutes 0.2 --shapes 4,8,16,16 --families gemm_nn --threads 1 --out "${WORK}/table.json")

execute_process(COMMAND "${CLI}" ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0)
    message(FATAL_ERROR "blocklstm tune failed (${code}):\n${out}\n${err}")
endif ()
blocklstm_read_tuning("${WORK}/table.json" t)
message(STATUS "ok: wrote table ${t_TABLE}: ${t_KNOBS} (${t_TUNED_ON})")
if (NOT t_TUNED_ON MATCHES "blocklstm tune --minutes 0.2")
    message(FATAL_ERROR "the table does not say how it was tuned: ${t_TUNED_ON}")
endif ()
file(STRINGS "${WORK}/table.json.csv" log)
list(LENGTH log lines)
if (lines LESS 3 OR NOT out MATCHES "gemm_nn +4,8,16,16 +[0-9.]+ +[0-9.]+ +[0-9.]+x")
    message(FATAL_ERROR "expected a log of candidates and a per-family report:\n${out}")
endif ()
message(STATUS "ok: ${lines} log lines and a per-family report")

execute_process(COMMAND "${CLI}" ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "Resuming: [0-9]+ measurements")
    message(FATAL_ERROR "a second run did not resume from the log (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: resumed from the log")

execute_process(COMMAND "${CLI}" tune --shapes 1,2,3 RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (code EQUAL 0 OR NOT err MATCHES "--shapes: '1,2,3' is not T,B,I,H")
    message(FATAL_ERROR "a malformed --shapes was not refused clearly (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: a malformed shape is refused")

# Every family's kernels from the checked-in table must run and write every output at a tiny
# shape (the tool starts their outputs as NaN and refuses an output left unwritten: a call Halide
# took for a bounds query once timed the peephole sums as a kernel doing nothing).
execute_process(COMMAND "${CLI}" tune --minutes 0 --shapes 2,4,8,8 --threads 1 --out "${WORK}/every_family.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0)
    message(FATAL_ERROR "the base table's kernels did not all run (${code}):\n${out}\n${err}")
endif ()
foreach (family IN ITEMS gemm_nn_bias seq_fwd_step seq_bwd_step gemm_nn gemm_tn_panels seq_bwd_reduce)
    if (NOT out MATCHES "  ${family} +2,4,8,8 +[0-9.]+ +[0-9.]+ +[0-9.]+x")
        message(FATAL_ERROR "no timing of family ${family} in the report:\n${out}")
    endif ()
endforeach ()
message(STATUS "ok: every family's kernels run and write their outputs")

# From a table with 1 x 1-vector register tiles (a third of the FMAs in flight), the grid's first
# wider tile beats it by far: the move must be timed in the ops, alternated with the best, before
# it is kept (the ops run with each table's kernels swapped in and checked against the library's
# own), and the final report timed the same way; a second run resumes with the verdicts of the
# first from the log. (SSE4.1: any x86-64 machine runs it.)
file(WRITE "${WORK}/poor.json" [=[{
  "table": "x86-64-sse41",
  "knobs": {"vector_floats": 4, "gemm_tile_rows": 1, "gemm_tile_vectors": 1, "gemm_step_tile_rows": 1,
            "gemm_k_block": 512, "gemm_step_k_block": 2048, "gemm_row_block_tiles": 16,
            "gemm_column_chunks": 2, "gemm_columns_inner": 0, "column_sum_vectors": 16}
}]=])
set(args tune --minutes 0.3 --target x86-64-linux-sse41 --from "${WORK}/poor.json" --shapes 4,16,64,64
         --families gemm_nn --threads 1 --out "${WORK}/from_poor.json")
execute_process(COMMAND "${CLI}" ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "in the ops, alternated with the best: 0\\.[0-9]+x its time \\(kept\\)\n"
    OR NOT out MATCHES "In the ops, [^\n]*\n[^\n]*\n  4,16,64,64 +[0-9.]+ -> [0-9.]+ ms [0-9.]+x"
    OR NOT out MATCHES "Wrote [^\n]*, the ops timed with each table's kernels, alternated")
    message(FATAL_ERROR "a better table was not confirmed in the ops (${code}):\n${out}\n${err}")
endif ()
blocklstm_read_tuning("${WORK}/from_poor.json" p)
if (p_KNOBS MATCHES "gemm_tile_rows:1,gemm_tile_vectors:1")
    message(FATAL_ERROR "the tuned table kept the poor register tile: ${p_KNOBS}")
endif ()
message(STATUS "ok: a move is kept only after a timing in the ops (${p_KNOBS})")
execute_process(COMMAND "${CLI}" ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "Resuming: [0-9]+ measurements and [1-9][0-9]* side-by-side verdicts"
    OR NOT out MATCHES "in the ops, alternated with the best: 0\\.[0-9]+x its time \\(kept\\) \\(from the log\\)")
    message(FATAL_ERROR "a second run did not reuse the verdicts of its log (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: a resumed run reuses the verdicts")

# --verdicts kernels: the kernels a move changes timed side by side instead; a log's verdicts in
# the ops are not its verdicts (the same log, not resumed from them).
execute_process(COMMAND "${CLI}" ${args} --verdicts kernels RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "Resuming: [0-9]+ measurements and 0 side-by-side verdicts"
    OR NOT out MATCHES "side by side with the best: 0\\.[0-9]+x its time \\(kept\\)\n"
    OR NOT out MATCHES "Wrote [^\n]*, estimated from the kernels, timed side by side")
    message(FATAL_ERROR "--verdicts kernels did not time the kernels side by side (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: --verdicts kernels times the kernels side by side")

# --compare: the poor table against the tuned one, each kernel and then the ops, no table
# written; the poor one's 1 x 1 tiles are slower in the ops too.
execute_process(COMMAND "${CLI}" tune --compare "${WORK}/poor.json" --from "${WORK}/from_poor.json"
                        --target x86-64-linux-sse41 --shapes 4,16,64,64 --threads 1 --out "${WORK}/compare.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if (NOT code EQUAL 0 OR NOT out MATCHES "In the ops, [^\n]*\n[^\n]*\n  4,16,64,64 +[0-9.]+ -> [0-9.]+ ms 0\\.[0-9]+x"
    OR NOT out MATCHES "poor.json: [1-9][0-9]*\\.[0-9]+x the base table's time" OR EXISTS "${WORK}/compare.json")
    message(FATAL_ERROR "--compare did not time the poor table as slower in the ops (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: --compare times two tables in the ops")

# Runs the tool with ARGN: it must stop before any search (no "Base:" line) with an error on
# stderr matching `pattern`.
function(expect_refused what pattern)
    execute_process(COMMAND "${CLI}" ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if (NOT code EQUAL 2 OR NOT err MATCHES "${pattern}" OR out MATCHES "Base:")
        message(FATAL_ERROR "${what}: not refused up front as expected (${code}):\n${out}\n${err}")
    endif ()
    message(STATUS "ok: ${what}")
endfunction()

# A log is this run's only at its thread count: resuming it at another is refused, naming both.
expect_refused("a log of another thread count is refused" "table.json.csv holds times at --threads 1, not 2"
               tune --minutes 0.1 --shapes 4,8,16,16 --families gemm_nn --threads 2 --out "${WORK}/table.json")

# A damaged log line is an error naming the file and the line, not a bare std::stod.
file(READ "${WORK}/table.json.csv" log)
file(WRITE "${WORK}/damaged.json.csv" "${log}gemm_nn,\"4,8,16,16\",\"gemm_k_block:512\",ok,.,\n")
expect_refused("a damaged log names its line" "damaged.json.csv line [0-9]+: '.' is not a positive number"
               tune --minutes 0.1 --shapes 4,8,16,16 --families gemm_nn --threads 1 --out "${WORK}/damaged.json")

# An --out that cannot be written is refused before any search, not at the first kept move.
expect_refused("an unwritable --out is refused up front" "--out: cannot write .*no/such/dir/t.json.tmp"
               tune --minutes 0.1 --shapes 4,8,16,16 --families gemm_nn --threads 1 --out "${WORK}/no/such/dir/t.json")

# A table whose knob is not an integer is refused naming the knob and the value as written.
file(READ "${WORK}/poor.json" poor)
string(REPLACE "\"gemm_k_block\": 512" "\"gemm_k_block\": 256.5" fraction "${poor}")
file(WRITE "${WORK}/fraction.json" "${fraction}")
expect_refused("a fractional knob is refused" "knob gemm_k_block is '256.5', expected an integer"
               tune --minutes 0 --target x86-64-linux-sse41 --from "${WORK}/fraction.json" --out "${WORK}/fraction_out.json")

# Usage errors as the blocklstm tool reports them (one line, "see blocklstm tune --help").
expect_refused("an unknown option is a usage error" "^blocklstm tune: .*--bogus.*see blocklstm tune --help" tune --bogus)
expect_refused("--minutes nan is refused" "--minutes: 'nan' is not a number of minutes" tune --minutes nan)
expect_refused("an unknown --target is named" "--target: 'bogus' is not a Halide target" tune --target bogus)
expect_refused("verdicts in the ops are the CPU's" "--verdicts ops: only on the CPU" tune --device cuda --verdicts ops)
expect_refused("--compare of the base's own knobs is refused" "--compare: .*from_poor.json has the base table's knobs"
               tune --compare "${WORK}/from_poor.json" --from "${WORK}/from_poor.json" --target x86-64-linux-sse41)
expect_refused("--compare of another table is refused" "--compare: the table is x86-64-avx2, the base x86-64-sse41"
               tune --compare "${SOURCE}/schedules/tuned/x86-64-avx2.json" --target x86-64-linux-sse41)

# A target whose instructions this CPU lacks cannot be timed here: refused, naming the feature.
file(READ "/proc/cpuinfo" cpuinfo)
if (cpuinfo MATCHES "avx512f")
    message(STATUS "skipped: this CPU has AVX-512, so no x86 target here lacks a feature to refuse")
else ()
    expect_refused("a target this CPU cannot run is refused" "--target: x86-64-linux-avx512_skylake needs avx512"
                   tune --minutes 0 --target x86-64-linux-avx512_skylake --families gemm_nn --out "${WORK}/skylake.json")
endif ()

# A run that keeps no move leaves a table already at --out as it was (the base would replace it).
file(READ "${WORK}/from_poor.json" tuned)
execute_process(COMMAND "${CLI}" tune --minutes 0 --target x86-64-linux-sse41 --shapes 4,16,64,64 --families gemm_nn
                        --threads 1 --fresh --out "${WORK}/from_poor.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ "${WORK}/from_poor.json" after)
if (NOT code EQUAL 0 OR NOT after STREQUAL tuned OR NOT out MATCHES "No move kept: [^\n]*from_poor.json stays as it was")
    message(FATAL_ERROR "a run that kept no move replaced the tuned table (${code}):\n${out}\n${err}")
endif ()
message(STATUS "ok: a tuned table survives a run that kept nothing")
