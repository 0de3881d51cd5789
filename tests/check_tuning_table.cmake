# A kernel built from a small tuning table: its lowered statement follows the table. The generator
# program runs as the build runs it (cmake/BlocklstmTuning.cmake reads the table) on gemm form=nn
# for AVX2, once with the checked-in table and once with a small table of other tile sizes; the
# statements must show each table's register tile (the accumulator allocation, columns x rows)
# and k block (the block count, (K + k_block - 1) / k_block), and the order of its tile loops. A table that breaks the tables'
# rules (a tile wider than a panel group) must be refused, naming the table and the rule.
#   cmake -DGENERATOR=<blocklstm_generators> -DSOURCE=<source root> -DWORK=<dir> -P check_tuning_table.cmake
cmake_minimum_required(VERSION 3.25)
set(PROJECT_SOURCE_DIR "${SOURCE}")
include("${SOURCE}/cmake/BlocklstmTuning.cmake")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(generate table_file name out_stmt out_code out_error)
    blocklstm_read_tuning("${table_file}" t)
    execute_process(COMMAND "${GENERATOR}" -g gemm -f ${name} -n ${name} -e stmt -o "${WORK}"
                            target=x86-64-linux-avx2-fma-f16c-no_runtime form=nn dtype=float32
                            "tuning_table=${t_TABLE}" "tuning=${t_KNOBS}"
                    RESULT_VARIABLE code ERROR_VARIABLE error OUTPUT_QUIET)
    set(stmt "")
    if (code EQUAL 0)
        file(READ "${WORK}/${name}.stmt" stmt)
    endif ()
    set(${out_stmt} "${stmt}" PARENT_SCOPE)
    set(${out_code} "${code}" PARENT_SCOPE)
    set(${out_error} "${error}" PARENT_SCOPE)
endfunction()

function(expect stmt what pattern)
    if (NOT stmt MATCHES "${pattern}")
        message(FATAL_ERROR "${what}: the lowered statement has no '${pattern}'")
    endif ()
    message(STATUS "ok: ${what}")
endfunction()

# A test table; an optional fifth argument gives gemm_columns_inner (default 0), a sixth
# gemm_step_tile_vectors (default: left out, so the knob's fallback, 2).
function(write_table file tile_rows tile_vectors k_block)
    set(columns_inner 0)
    set(step_vectors "")
    if (ARGC GREATER 4)
        set(columns_inner "${ARGV4}")
    endif ()
    if (ARGC GREATER 5)
        set(step_vectors " \"gemm_step_tile_vectors\": ${ARGV5},")
    endif ()
    file(WRITE "${file}" "{
  \"table\": \"x86-64-avx2\",
  \"measured\": false,
  \"tuned_on\": \"a test table\",
  \"knobs\": {
    \"vector_floats\": 8, \"gemm_tile_rows\": ${tile_rows}, \"gemm_tile_vectors\": ${tile_vectors},
    \"gemm_step_tile_rows\": 4,${step_vectors} \"gemm_k_block\": ${k_block}, \"gemm_step_k_block\": 2048,
    \"gemm_row_block_tiles\": 16, \"gemm_column_chunks\": 2, \"gemm_columns_inner\": ${columns_inner},
    \"column_sum_vectors\": 16
  }
}
")
endfunction()

# The kernel generated from a table has its tile (16 columns x `rows` accumulators) and k block.
function(expect_follows table_file name rows k_block out_stmt)
    generate("${table_file}" ${name} stmt code error)
    if (NOT code EQUAL 0)
        message(FATAL_ERROR "${name}: the table did not generate: ${error}")
    endif ()
    math(EXPR k_last "${k_block} - 1")
    expect("${stmt}" "${name}: 16 x ${rows} accumulators" "allocate c_part[^ ]*\\[float32 \\* 16 \\* ${rows} \\* 1\\]")
    expect("${stmt}" "${name}: k blocks of ${k_block}" "\\+ ${k_last}\\)/${k_block}")
    set(${out_stmt} "${stmt}" PARENT_SCOPE)
endfunction()

# The checked-in AVX2 table: 6 rows x 2 vectors of 8 floats, k blocks of 512.
expect_follows("${SOURCE}/schedules/tuned/x86-64-avx2.json" checked_in 6 512 stmt)

# A small table: 4 rows x 2 vectors, k blocks of 128.
write_table("${WORK}/small.json" 4 2 128)
expect_follows("${WORK}/small.json" small 4 128 stmt)
if (stmt MATCHES "\\+ 511\\)/512")
    message(FATAL_ERROR "small table: the statement still blocks k by 512")
endif ()

# The order of the tile loops (gemm_columns_inner): the loop over column tiles is inside the loop
# over row tiles with 1, outside it with 0 (the small table's).
function(expect_tile_order stmt what columns_inner)
    string(FIND "${stmt}" "for (c.s1.x.xo.xo," column_loop)
    string(FIND "${stmt}" "for (c.s1.y.yo.yo," row_loop)
    if (column_loop EQUAL -1 OR row_loop EQUAL -1)
        message(FATAL_ERROR "${what}: the lowered statement has no loop over column or row tiles")
    endif ()
    if (columns_inner AND NOT column_loop GREATER row_loop)
        message(FATAL_ERROR "${what}: the column tiles' loop is not inside the row tiles' loop")
    elseif (NOT columns_inner AND NOT column_loop LESS row_loop)
        message(FATAL_ERROR "${what}: the row tiles' loop is not inside the column tiles' loop")
    endif ()
    message(STATUS "ok: ${what}")
endfunction()
expect_tile_order("${stmt}" "small: row tiles innermost" 0)
write_table("${WORK}/columns_inner.json" 4 2 128 1)
expect_follows("${WORK}/columns_inner.json" columns_inner 4 128 stmt)
expect_tile_order("${stmt}" "columns_inner: column tiles innermost" 1)

# A table the generator must refuse, with an error matching `pattern` (the table and the rule).
function(expect_refused table_file name what pattern)
    generate("${table_file}" ${name} stmt code error)
    if (code EQUAL 0)
        message(FATAL_ERROR "${what}: the table was accepted")
    endif ()
    expect("${error}" "${what}" "${pattern}")
endfunction()

# A table that breaks the geometry rule: 5 vectors of 8 = 40 columns do not divide a panel group.
write_table("${WORK}/broken.json" 2 5 128)
expect_refused("${WORK}/broken.json" broken "a broken table is refused, naming the table and the rule"
               "tuning table x86-64-avx2: register tiles of gemm_tile_vectors 5 x 8 = 40 columns do not divide a panel group of 96 columns")

# A table whose step tiles do not fit the registers: 4 rows x 4 vectors need 16 accumulators, 4
# vectors of W_h and a broadcast, 21 of AVX2's 16.
write_table("${WORK}/step_registers.json" 4 2 128 0 4)
expect_refused("${WORK}/step_registers.json" step_registers "step tiles past the registers are refused"
               "tuning table x86-64-avx2: gemm_step_tile_rows 4 x gemm_step_tile_vectors 4 accumulators need 21 vector registers, more than the 16 there are")

# A table whose batched tiles have a multiple of a vector's floats in rows (8 with AVX2): Halide
# would read the products' outputs back with aligned loads (schedules/schedule.h: machine).
write_table("${WORK}/aligned_rows.json" 8 1 128)
expect_refused("${WORK}/aligned_rows.json" aligned_rows "tiles of a vector's floats in rows are refused"
               "tuning table x86-64-avx2: gemm_tile_rows 8 is a multiple of the 8 floats of a vector")

# A table whose vectors are not its instruction set's: 16 floats in the AVX2 table (the tiles
# would fit AVX-512's 32 registers, not AVX2's 16), refused where the CPU targets are read
# (cmake/BlocklstmCpuTargets.cmake, from schedules/cpu_targets.json), for the target that runs it.
file(READ "${WORK}/small.json" small)
string(REPLACE "\"vector_floats\": 8" "\"vector_floats\": 16" wide "${small}")
file(WRITE "${WORK}/wide.json" "${wide}")
file(WRITE "${WORK}/wide.cmake" "
set(PROJECT_SOURCE_DIR \"${SOURCE}\")
include(\"${SOURCE}/cmake/BlocklstmCpuTargets.cmake\")
include(\"${SOURCE}/cmake/BlocklstmTuning.cmake\")
set(BLOCKLSTM_CPU_TARGETS avx2-fma-f16c)
set(BLOCKLSTM_CPU_CHECK_TARGETS avx2-fma-f16c@avx512)
blocklstm_select_cpu_targets()
blocklstm_read_tuning(\"${SOURCE}/schedules/tuned/x86-64-avx512.json\" t)
set(BLOCKLSTM_TUNING_x86-64-avx512_KNOBS \"\${t_KNOBS}\")
blocklstm_check_cpu_target_table(avx2-fma-f16c@avx512)  # a check target: another table's tiles, on purpose
blocklstm_read_tuning(\"${WORK}/wide.json\" t)
set(BLOCKLSTM_TUNING_x86-64-avx2_KNOBS \"\${t_KNOBS}\")
blocklstm_check_cpu_target_table(avx2-fma-f16c)
")
execute_process(COMMAND ${CMAKE_COMMAND} -P "${WORK}/wide.cmake" RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE error)
string(REGEX REPLACE "[ \n]+" " " error "${error}")  # CMake wraps its messages' lines
if (code EQUAL 0)
    message(FATAL_ERROR "a table of another instruction set's vectors: the table was accepted")
endif ()
expect("${error}" "a table of another instruction set's vectors is refused"
       "tuning table x86-64-avx2: vector_floats 16 is not the 8 floats of a vector of x86-64-linux-avx2-fma-f16c")

# A CUDA table whose thread blocks cannot get their registers: 32 thread rows (1024 threads) of
# 4 x 8 accumulators, about 80 registers each, is past a multiprocessor's 65,536.
file(READ "${SOURCE}/schedules/tuned/cuda.json" cuda)
string(REPLACE "\"batched_thread_rows\": 8" "\"batched_thread_rows\": 32" registers "${cuda}")
file(WRITE "${WORK}/registers.json" "${registers}")
blocklstm_read_tuning("${WORK}/registers.json" t)
execute_process(COMMAND "${GENERATOR}" -g gemm -f registers -n registers -e stmt -o "${WORK}"
                        target=x86-64-linux-cuda-no_runtime form=nn dtype=float32
                        "tuning_table=${t_TABLE}" "tuning=${t_KNOBS}"
                RESULT_VARIABLE code ERROR_VARIABLE error OUTPUT_QUIET)
if (code EQUAL 0)
    message(FATAL_ERROR "a CUDA table past the register file: the table was accepted")
endif ()
expect("${error}" "a CUDA table past the register file is refused"
       "tuning table cuda: batched_thread_rows 32 with 4 x 8 accumulators: 1024 threads of about 80 registers")
