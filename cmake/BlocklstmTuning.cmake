# Tuning tables (schedules/tuned/<table>.json, schedules/tuning.h): which table a kernel is built
# with, and its knobs as the generator param `tuning`. The checked-in tables are read first, then
# the files of BLOCKLSTM_TUNING, each replacing the table its "table" field names.

# blocklstm_read_tuning(FILE PREFIX): PREFIX_TABLE (the table's name), PREFIX_KNOBS
# ("name:value,..." in the file's order), PREFIX_TUNED_ON (where and how it was tuned, or why not),
# PREFIX_CPU ("VENDOR:FAMILY" from the optional "cpu" object, the CPUs a target with this table is
# chosen on automatically, e.g. "AuthenticAMD:25"; "" for any CPU).
function(blocklstm_read_tuning file prefix)
    if (NOT EXISTS "${file}")
        message(FATAL_ERROR "tuning table ${file}: no such file")
    endif ()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${file}")
    file(READ "${file}" json)
    foreach (field IN ITEMS table tuned_on measured)
        string(JSON ${field} ERROR_VARIABLE error GET "${json}" ${field})
        if (error)
            message(FATAL_ERROR "tuning table ${file}: field '${field}': ${error}")
        endif ()
    endforeach ()
    string(JSON count ERROR_VARIABLE error LENGTH "${json}" knobs)
    if (error OR count EQUAL 0)
        message(FATAL_ERROR "tuning table ${file}: no \"knobs\" object ${error}")
    endif ()
    set(knobs "")
    math(EXPR last "${count} - 1")
    foreach (i RANGE ${last})
        string(JSON name MEMBER "${json}" knobs ${i})
        string(JSON value GET "${json}" knobs ${name})
        if (NOT value MATCHES "^-?[0-9]+$")
            message(FATAL_ERROR "tuning table ${file}: knob ${name} is '${value}', expected an integer")
        endif ()
        list(APPEND knobs "${name}:${value}")
    endforeach ()
    list(JOIN knobs "," knobs)
    set(cpu "")
    string(JSON cpu_type ERROR_VARIABLE error TYPE "${json}" cpu)
    if (NOT error)
        string(JSON vendor ERROR_VARIABLE error GET "${json}" cpu vendor)
        string(JSON family ERROR_VARIABLE error2 GET "${json}" cpu family)
        if (NOT cpu_type STREQUAL "OBJECT" OR error OR error2 OR NOT vendor MATCHES "^[A-Za-z]+$"
            OR NOT family MATCHES "^[0-9]+$")
            message(FATAL_ERROR "tuning table ${file}: \"cpu\" must be {\"vendor\": \"<cpuid vendor, e.g. "
                    "AuthenticAMD>\", \"family\": <cpuid family, e.g. 25>}")
        endif ()
        set(cpu "${vendor}:${family}")
    endif ()
    if (NOT measured)
        set(tuned_on "(not measured) ${tuned_on}")
    endif ()
    # '|' separates the CPU target table's fields, ';' CMake's list items (the tuner's --shapes
    # takes spaces as well)
    string(REPLACE "|" "/" tuned_on "${tuned_on}")
    string(REPLACE ";" " " tuned_on "${tuned_on}")
    set(${prefix}_TABLE "${table}" PARENT_SCOPE)
    set(${prefix}_KNOBS "${knobs}" PARENT_SCOPE)
    set(${prefix}_TUNED_ON "${tuned_on}" PARENT_SCOPE)
    set(${prefix}_CPU "${cpu}" PARENT_SCOPE)
endfunction()

# blocklstm_load_tuning_tables(): BLOCKLSTM_TUNING_TABLES (their names) and, for each,
# BLOCKLSTM_TUNING_<name>_KNOBS / _TUNED_ON / _CPU / _FILE, in the caller's scope. A relative path in
# BLOCKLSTM_TUNING is taken from the source tree's root.
macro(blocklstm_load_tuning_tables)
    file(GLOB blocklstm_files "${PROJECT_SOURCE_DIR}/schedules/tuned/*.json")
    set(blocklstm_own_files "")
    foreach (blocklstm_file IN LISTS BLOCKLSTM_TUNING)
        get_filename_component(blocklstm_file "${blocklstm_file}" ABSOLUTE BASE_DIR "${PROJECT_SOURCE_DIR}")
        list(APPEND blocklstm_own_files "${blocklstm_file}")
    endforeach ()
    set(BLOCKLSTM_TUNING_TABLES "")
    set(BLOCKLSTM_TUNING_OWN_TABLES "")  # the tables of BLOCKLSTM_TUNING's files
    foreach (blocklstm_file IN LISTS blocklstm_files blocklstm_own_files)
        blocklstm_read_tuning("${blocklstm_file}" blocklstm_t)
        list(APPEND BLOCKLSTM_TUNING_TABLES "${blocklstm_t_TABLE}")
        if (blocklstm_file IN_LIST blocklstm_own_files)
            list(APPEND BLOCKLSTM_TUNING_OWN_TABLES "${blocklstm_t_TABLE}")
        endif ()
        set(BLOCKLSTM_TUNING_${blocklstm_t_TABLE}_KNOBS "${blocklstm_t_KNOBS}")
        set(BLOCKLSTM_TUNING_${blocklstm_t_TABLE}_TUNED_ON "${blocklstm_t_TUNED_ON}")
        set(BLOCKLSTM_TUNING_${blocklstm_t_TABLE}_CPU "${blocklstm_t_CPU}")
        set(BLOCKLSTM_TUNING_${blocklstm_t_TABLE}_FILE "${blocklstm_file}")
    endforeach ()
    foreach (blocklstm_file IN LISTS blocklstm_own_files)
        message(STATUS "blocklstm: building with the tuning table ${blocklstm_file}")
    endforeach ()
    list(REMOVE_DUPLICATES BLOCKLSTM_TUNING_TABLES)
endmacro()

# The table of a CPU target: by its widest vector instructions.
function(blocklstm_cpu_table_of halide_target out)
    if (halide_target MATCHES "^host")
        message(FATAL_ERROR "BLOCKLSTM_CPU_TARGETS: '${halide_target}' does not say its instruction set, "
                "which picks the tuning table: expected a target that names it, e.g. "
                "x86-64-linux-avx512_skylake, x86-64-linux-avx2-fma-f16c or x86-64-linux-sse41")
    elseif (halide_target MATCHES "avx512")
        set(${out} "x86-64-avx512" PARENT_SCOPE)
    elseif (halide_target MATCHES "avx2")
        set(${out} "x86-64-avx2" PARENT_SCOPE)
    else ()
        set(${out} "x86-64-sse41" PARENT_SCOPE)
    endif ()
endfunction()
