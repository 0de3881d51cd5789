# Fails unless each kernel of CHECKS (lines "library owner generator halide_target params...",
# written by generators/CMakeLists.txt), which the build does not generate because its key is its
# owner's, lowers to its owner's statement when generated with its own target's table: the knobs a
# family reads (schedules/cpu_knobs.inc: read_by) are all that the key holds of the table, so a
# schedule reading another knob where two tables differ in it shows here. GENERATOR: the generator
# program; KERNELS: the build's generators/ folder (the owners' .stmt); WORK: a scratch folder.
cmake_minimum_required(VERSION 3.20)
file(STRINGS "${CHECKS}" lines)
if (NOT lines)
    message(FATAL_ERROR "${CHECKS}: no shared kernel to check")
endif ()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
# A statement without the names that differ between two builds of one kernel: its function's name,
# and the numbers Halide appends to its unique names (closures `__1`, `__2` numbered in another
# order).
function(normalized_statement file name out)
    file(READ "${file}" text)
    string(REPLACE "${name}" "KERNEL" text "${text}")
    string(REGEX REPLACE "__[0-9]+([^0-9A-Za-z_])" "\\1" text "${text}")
    set(${out} "${text}" PARENT_SCOPE)
endfunction()
set(bad "")
foreach (line IN LISTS lines)
    separate_arguments(words UNIX_COMMAND "${line}")
    list(POP_FRONT words library owner generator halide_target)
    execute_process(COMMAND "${GENERATOR}" -n ${library} -d 0 -g ${generator} -f ${library} -e stmt -o "${WORK}"
                            target=${halide_target} ${words}
                    RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    if (NOT rc EQUAL 0)
        message(FATAL_ERROR "generating ${library} failed (${rc}): ${err}")
    endif ()
    normalized_statement("${WORK}/${library}.stmt" ${library} again)
    normalized_statement("${KERNELS}/${owner}.stmt" ${owner} built)
    if (again STREQUAL built)
        message(STATUS "${library} is ${owner}'s code")
    else ()
        file(WRITE "${WORK}/${library}.normalized.stmt" "${again}")
        file(WRITE "${WORK}/${owner}.normalized.stmt" "${built}")
        string(APPEND bad "\n  ${library} is not ${owner}'s code (compare ${WORK}/${library}.normalized.stmt "
               "and ${WORK}/${owner}.normalized.stmt): its schedule reads a knob that schedules/cpu_knobs.inc "
               "does not list for its products")
    endif ()
endforeach ()
if (bad)
    message(FATAL_ERROR "shared kernels that differ from their owners:${bad}")
endif ()
list(LENGTH lines checked)
message(STATUS "${checked} shared kernels lower to their owners' statements")
