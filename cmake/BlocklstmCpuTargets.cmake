# The CPU targets of the build, read from their one home, schedules/cpu_targets.json: each target's
# name, Halide target (its instruction set), tuning table and the CPUs that table is for. The
# runtime's table of them (cpu_targets.inc) is written from here too.

set(BLOCKLSTM_CPU_TARGET_MANIFEST "${PROJECT_SOURCE_DIR}/schedules/cpu_targets.json")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${BLOCKLSTM_CPU_TARGET_MANIFEST}")
file(READ "${BLOCKLSTM_CPU_TARGET_MANIFEST}" blocklstm_cpu_manifest)

# blocklstm_cpu_manifest_get(OUT SECTION INDEX FIELD): a field of entry INDEX of SECTION ("targets"
# or "check_targets"), or "" when the entry has no such field.
function(blocklstm_cpu_manifest_get out section index field)
    string(JSON value ERROR_VARIABLE error GET "${blocklstm_cpu_manifest}" ${section} ${index} ${field})
    if (error)
        set(value "")
    endif ()
    set(${out} "${value}" PARENT_SCOPE)
endfunction()

# blocklstm_cpu_manifest_flag(OUT SECTION INDEX FIELD NAME): a true/false field of the entry (target
# NAME, for the message) as 1 or 0; absent is 0.
function(blocklstm_cpu_manifest_flag out section index field name)
    blocklstm_cpu_manifest_get(value ${section} ${index} ${field})
    if (value STREQUAL "ON")  # string(JSON) reads true as ON
        set(${out} 1 PARENT_SCOPE)
    elseif (value STREQUAL "" OR value STREQUAL "OFF")
        set(${out} 0 PARENT_SCOPE)
    else ()
        message(FATAL_ERROR "${BLOCKLSTM_CPU_TARGET_MANIFEST}: ${name}'s ${field} is '${value}': expected true or false")
    endif ()
endfunction()

# blocklstm_cpu_target_names(SECTION OUT): the names of a section, in the manifest's order.
function(blocklstm_cpu_target_names section out)
    string(JSON count ERROR_VARIABLE error LENGTH "${blocklstm_cpu_manifest}" ${section})
    if (error)
        message(FATAL_ERROR "${BLOCKLSTM_CPU_TARGET_MANIFEST}: no \"${section}\" list (${error})")
    endif ()
    set(names "")
    if (count GREATER 0)
        math(EXPR last "${count} - 1")
        foreach (i RANGE ${last})
            blocklstm_cpu_manifest_get(name ${section} ${i} name)
            list(APPEND names "${name}")
        endforeach ()
    endif ()
    set(${out} "${names}" PARENT_SCOPE)
endfunction()

# blocklstm_check_targets_needed(OUT): the check targets a test build needs on the machine that
# configures it: each one whose table (with its bfloat16 and AMX product flags) no production target
# of BLOCKLSTM_CPU_TARGETS that this machine runs has, plus the targets whose float32 and float16
# kernels those run (other_dtypes_as). Where a production target runs natively, its check target
# would test the same tiles again on a narrower instruction set: `sse41@avx2` on an AVX2 machine
# took about 150 s of a 2-core build and 50 s of its tests. The machine is asked as the runtime asks
# it (cmake/host_cpu_runs.cc); cross-compiling, or where the probe fails, every check target.
function(blocklstm_check_targets_needed out)
    blocklstm_cpu_target_names(check_targets all_checks)
    blocklstm_cpu_target_names(targets all_targets)
    # The selected production targets' Halide targets, tables and product flags.
    set(halide_targets "")
    set(kinds "")
    foreach (entry IN LISTS BLOCKLSTM_CPU_TARGETS)
        string(REGEX REPLACE "^x86-64-linux-" "" name "${entry}")
        list(FIND all_targets "${name}" index)
        if (index EQUAL -1)
            continue()  # blocklstm_select_cpu_targets() names it
        endif ()
        blocklstm_cpu_manifest_get(halide_target targets ${index} halide_target)
        blocklstm_cpu_manifest_get(table targets ${index} table)
        blocklstm_cpu_manifest_flag(bf16 targets ${index} bf16_dot_products "${name}")
        blocklstm_cpu_manifest_flag(amx targets ${index} amx_products "${name}")
        list(APPEND halide_targets "${halide_target}")
        list(APPEND kinds "${table}:${bf16}:${amx}")
    endforeach ()
    if (CMAKE_CROSSCOMPILING OR NOT halide_targets)
        set(${out} "${all_checks}" PARENT_SCOPE)
        return()
    endif ()
    try_run(run_status compiled SOURCES "${PROJECT_SOURCE_DIR}/cmake/host_cpu_runs.cc"
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}" CXX_STANDARD 17
            RUN_OUTPUT_VARIABLE answers ARGS ${halide_targets})
    string(REGEX REPLACE "\n$" "" answers "${answers}")
    string(REPLACE "\n" ";" answers "${answers}")
    list(LENGTH answers answered)
    list(LENGTH halide_targets asked)
    if (NOT compiled OR NOT run_status EQUAL 0 OR NOT answered EQUAL asked)
        message(STATUS "CPU check targets: could not ask this machine which targets it runs: all of them")
        set(${out} "${all_checks}" PARENT_SCOPE)
        return()
    endif ()
    set(native_kinds "")
    math(EXPR last "${asked} - 1")
    foreach (i RANGE ${last})
        list(GET answers ${i} runs)
        if (runs STREQUAL "1")
            list(GET kinds ${i} kind)
            list(APPEND native_kinds "${kind}")
        endif ()
    endforeach ()
    set(needed "")
    set(left_out "")
    set(index 0)
    foreach (name IN LISTS all_checks)
        blocklstm_cpu_manifest_get(table check_targets ${index} table)
        blocklstm_cpu_manifest_flag(bf16 check_targets ${index} bf16_dot_products "${name}")
        blocklstm_cpu_manifest_flag(amx check_targets ${index} amx_products "${name}")
        if ("${table}:${bf16}:${amx}" IN_LIST native_kinds)
            list(APPEND left_out "${name}")
        else ()
            list(APPEND needed "${name}")
        endif ()
        math(EXPR index "${index} + 1")
    endforeach ()
    # A check target's float32 and float16 kernels come from the target it names.
    set(index 0)
    foreach (name IN LISTS all_checks)
        blocklstm_cpu_manifest_get(other check_targets ${index} other_dtypes_as)
        if (name IN_LIST needed AND NOT other STREQUAL "" AND NOT other IN_LIST needed)
            list(APPEND needed "${other}")
            list(REMOVE_ITEM left_out "${other}")
        endif ()
        math(EXPR index "${index} + 1")
    endforeach ()
    set(ordered "")
    foreach (name IN LISTS all_checks)  # the manifest's order
        if (name IN_LIST needed)
            list(APPEND ordered "${name}")
        endif ()
    endforeach ()
    if (left_out)
        string(REPLACE ";" ", " left_out "${left_out}")
        message(STATUS "CPU check targets: left out ${left_out}: this machine runs their tables natively")
    endif ()
    set(${out} "${ordered}" PARENT_SCOPE)
endfunction()

# blocklstm_cpu_target_list(VARIABLE DEFAULT DOC): the cache variable VARIABLE, targets by name,
# DEFAULT unless the user set it. A build left at the default follows schedules/cpu_targets.json
# when the default changes (the last default kept as VARIABLE_DEFAULT).
function(blocklstm_cpu_target_list variable default doc)
    set(${variable} "${default}" CACHE STRING "${doc}")
    if (DEFINED ${variable}_DEFAULT AND ${variable} STREQUAL ${variable}_DEFAULT)
        set_property(CACHE ${variable} PROPERTY VALUE "${default}")
    endif ()
    set(${variable}_DEFAULT "${default}" CACHE INTERNAL "")
endfunction()

# blocklstm_select_cpu_targets(): the targets of BLOCKLSTM_CPU_TARGETS (production, best first)
# and BLOCKLSTM_CPU_CHECK_TARGETS (the tests' check targets), by name ("x86-64-linux-" before a
# name, as Halide target strings start, is allowed). Sets, in the caller's scope,
# BLOCKLSTM_CPU_TARGET_NAMES (production then check targets) and for each name's tag
# T = MAKE_C_IDENTIFIER(name): BLOCKLSTM_CPU_<T>_HALIDE_TARGET, _TABLE, _CHECK (0 or 1), _CPUS
# (the table's CPUs, "vendor:family:first_model:last_model" items; empty: any CPU) and _BF16_DOT
# (0 or 1: its bfloat16 kernels' products in pairs of bfloat16 products).
macro(blocklstm_select_cpu_targets)
    set(BLOCKLSTM_CPU_TARGET_NAMES "")
    foreach (blocklstm_section IN ITEMS targets check_targets)
        if (blocklstm_section STREQUAL "targets")
            set(blocklstm_variable BLOCKLSTM_CPU_TARGETS)
        else ()
            set(blocklstm_variable BLOCKLSTM_CPU_CHECK_TARGETS)
        endif ()
        set(blocklstm_wanted ${${blocklstm_variable}})
        blocklstm_cpu_target_names(${blocklstm_section} blocklstm_known)
        foreach (blocklstm_entry IN LISTS blocklstm_wanted)
            string(REGEX REPLACE "^x86-64-linux-" "" blocklstm_name "${blocklstm_entry}")
            list(FIND blocklstm_known "${blocklstm_name}" blocklstm_index)
            if (blocklstm_index EQUAL -1)
                string(REPLACE ";" ", " blocklstm_list "${blocklstm_known}")
                message(FATAL_ERROR "${blocklstm_variable}: '${blocklstm_entry}' is not one of "
                        "schedules/cpu_targets.json's \"${blocklstm_section}\": ${blocklstm_list}")
            endif ()
            blocklstm_cpu_target_entry(${blocklstm_section} ${blocklstm_index})
        endforeach ()
    endforeach ()
endmacro()

# One entry of the manifest into the caller's (the macro's) scope.
function(blocklstm_cpu_target_entry section index)
    blocklstm_cpu_manifest_get(name ${section} ${index} name)
    blocklstm_cpu_manifest_get(halide_target ${section} ${index} halide_target)
    blocklstm_cpu_manifest_get(table ${section} ${index} table)
    if (name STREQUAL "" OR halide_target STREQUAL "" OR table STREQUAL "")
        message(FATAL_ERROR "${BLOCKLSTM_CPU_TARGET_MANIFEST}: ${section}[${index}] needs a name, a "
                "halide_target and a table")
    endif ()
    string(MAKE_C_IDENTIFIER "${name}" tag)
    set(check 0)
    if (section STREQUAL "check_targets")
        set(check 1)
    endif ()
    # The CPUs the table is for: [{vendor, family, models: [[first, last], ...]}, ...].
    set(cpus "")
    string(JSON count ERROR_VARIABLE error LENGTH "${blocklstm_cpu_manifest}" ${section} ${index} cpus)
    if (NOT error AND count GREATER 0)
        math(EXPR last "${count} - 1")
        foreach (c RANGE ${last})
            string(JSON vendor GET "${blocklstm_cpu_manifest}" ${section} ${index} cpus ${c} vendor)
            string(JSON family GET "${blocklstm_cpu_manifest}" ${section} ${index} cpus ${c} family)
            string(JSON ranges LENGTH "${blocklstm_cpu_manifest}" ${section} ${index} cpus ${c} models)
            math(EXPR last_range "${ranges} - 1")
            foreach (r RANGE ${last_range})
                string(JSON first GET "${blocklstm_cpu_manifest}" ${section} ${index} cpus ${c} models ${r} 0)
                string(JSON final GET "${blocklstm_cpu_manifest}" ${section} ${index} cpus ${c} models ${r} 1)
                if (NOT vendor MATCHES "^[A-Za-z]+$" OR NOT "${family}${first}${final}" MATCHES "^[0-9]+$")
                    message(FATAL_ERROR "${BLOCKLSTM_CPU_TARGET_MANIFEST}: ${name}'s cpus: expected {\"vendor\": "
                            "\"<cpuid vendor>\", \"family\": <n>, \"models\": [[<first>, <last>], ...]}")
                endif ()
                list(APPEND cpus "${vendor}:${family}:${first}:${final}")
            endforeach ()
        endforeach ()
    endif ()
    set(BLOCKLSTM_CPU_TARGET_NAMES ${BLOCKLSTM_CPU_TARGET_NAMES} "${name}" PARENT_SCOPE)
    set(BLOCKLSTM_CPU_${tag}_HALIDE_TARGET "${halide_target}" PARENT_SCOPE)
    set(BLOCKLSTM_CPU_${tag}_TABLE "${table}" PARENT_SCOPE)
    set(BLOCKLSTM_CPU_${tag}_CHECK ${check} PARENT_SCOPE)
    set(BLOCKLSTM_CPU_${tag}_CPUS "${cpus}" PARENT_SCOPE)
    blocklstm_cpu_manifest_get(vector_floats ${section} ${index} vector_floats)
    set(BLOCKLSTM_CPU_${tag}_VECTOR_FLOATS "${vector_floats}" PARENT_SCOPE)
    blocklstm_cpu_manifest_flag(bf16_dot ${section} ${index} bf16_dot_products "${name}")
    set(BLOCKLSTM_CPU_${tag}_BF16_DOT ${bf16_dot} PARENT_SCOPE)
    blocklstm_cpu_manifest_flag(amx ${section} ${index} amx_products "${name}")
    set(BLOCKLSTM_CPU_${tag}_AMX ${amx} PARENT_SCOPE)
    # A target whose float32 and float16 kernels are another's builds its bfloat16 kernels alone.
    blocklstm_cpu_manifest_get(other_dtypes_as ${section} ${index} other_dtypes_as)
    set(BLOCKLSTM_CPU_${tag}_OTHER_DTYPES_AS "${other_dtypes_as}" PARENT_SCOPE)
endfunction()

# blocklstm_check_cpu_target_aliases(): a target whose float32 and float16 kernels are another's
# (the manifest's other_dtypes_as) needs that target in the same build, one that builds them.
function(blocklstm_check_cpu_target_aliases)
    foreach (name IN LISTS BLOCKLSTM_CPU_TARGET_NAMES)
        string(MAKE_C_IDENTIFIER "${name}" tag)
        set(other "${BLOCKLSTM_CPU_${tag}_OTHER_DTYPES_AS}")
        if (other STREQUAL "")
            continue()
        endif ()
        string(MAKE_C_IDENTIFIER "${other}" other_tag)
        if (NOT other IN_LIST BLOCKLSTM_CPU_TARGET_NAMES OR NOT BLOCKLSTM_CPU_${other_tag}_OTHER_DTYPES_AS STREQUAL "")
            message(FATAL_ERROR "CPU target ${name} runs the float32 and float16 kernels of ${other} "
                    "(schedules/cpu_targets.json's other_dtypes_as): select ${other} too "
                    "(BLOCKLSTM_CPU_TARGETS / BLOCKLSTM_CPU_CHECK_TARGETS), a target that builds all of its own")
        endif ()
    endforeach ()
endfunction()

# blocklstm_check_cpu_target_table(NAME): a production target's table uses its instruction set's
# vectors (the manifest's vector_floats): its tiles are fitted to that register file. A check
# target runs another table's tiles on purpose.
function(blocklstm_check_cpu_target_table name)
    string(MAKE_C_IDENTIFIER "${name}" tag)
    set(table "${BLOCKLSTM_CPU_${tag}_TABLE}")
    if (NOT DEFINED BLOCKLSTM_TUNING_${table}_KNOBS)
        message(FATAL_ERROR "CPU target ${name}: no tuning table '${table}' (schedules/tuned/${table}.json or BLOCKLSTM_TUNING)")
    endif ()
    if (BLOCKLSTM_CPU_${tag}_CHECK)
        return()
    endif ()
    string(REGEX MATCH "(^|,)vector_floats:([0-9]+)" found "${BLOCKLSTM_TUNING_${table}_KNOBS}")
    if (NOT CMAKE_MATCH_2 STREQUAL BLOCKLSTM_CPU_${tag}_VECTOR_FLOATS)
        message(FATAL_ERROR "tuning table ${table}: vector_floats ${CMAKE_MATCH_2} is not the "
                "${BLOCKLSTM_CPU_${tag}_VECTOR_FLOATS} floats of a vector of ${BLOCKLSTM_CPU_${tag}_HALIDE_TARGET}, "
                "the CPU target ${name} that runs it (schedules/cpu_targets.json)")
    endif ()
endfunction()

# blocklstm_write_cpu_target_table(FILE): the runtime's table of the selected targets, best first
# (runtime/src/cpu_target.cpp): the functions' tags, and per target its name, Halide target, table,
# knobs, where the table was tuned, whether it is a check target, the CPUs the table is for and the
# Halide features its code needs (the enum of HalideRuntime.h, so a feature the runtime does not
# know is a compile error).
function(blocklstm_write_cpu_target_table file)
    set(symbols "")
    set(specs "")
    foreach (name IN LISTS BLOCKLSTM_CPU_TARGET_NAMES)
        string(MAKE_C_IDENTIFIER "${name}" tag)
        set(table "${BLOCKLSTM_CPU_${tag}_TABLE}")
        set(halide_target "${BLOCKLSTM_CPU_${tag}_HALIDE_TARGET}")
        string(APPEND symbols " \\\n    M(kernel, ${tag})")
        set(cpus "")
        foreach (cpu IN LISTS BLOCKLSTM_CPU_${tag}_CPUS)
            string(REPLACE ":" ";" fields "${cpu}")
            list(GET fields 0 vendor)
            list(GET fields 1 family)
            list(GET fields 2 first)
            list(GET fields 3 final)
            string(APPEND cpus "{\"${vendor}\", ${family}, ${first}, ${final}}, ")
        endforeach ()
        # x86-64-linux-<feature>-<feature>...: the features after architecture, bits and OS.
        string(REGEX REPLACE "^[^-]+-[^-]+-[^-]+-?" "" feature_text "${halide_target}")
        string(REPLACE "-" ";" feature_list "${feature_text}")
        set(features "")
        foreach (feature IN LISTS feature_list)
            string(APPEND features "{halide_target_feature_${feature}, \"${feature}\"}, ")
        endforeach ()
        set(check false)
        if (BLOCKLSTM_CPU_${tag}_CHECK)
            set(check true)
        endif ()
        string(REPLACE "\\" "\\\\" tuned_on "${BLOCKLSTM_TUNING_${table}_TUNED_ON}")
        string(REPLACE "\"" "\\\"" tuned_on "${tuned_on}")
        set(bf16_dot false)
        if (BLOCKLSTM_CPU_${tag}_BF16_DOT)
            set(bf16_dot true)
        endif ()
        set(amx false)
        if (BLOCKLSTM_CPU_${tag}_AMX)
            set(amx true)
        endif ()
        string(APPEND specs " \\\n    {\"${name}\", \"${halide_target}\", \"${table}\", "
               "\"${BLOCKLSTM_TUNING_${table}_KNOBS}\", \"${tuned_on}\", ${check}, ${bf16_dot}, ${amx}, "
               "\"${BLOCKLSTM_CPU_${tag}_OTHER_DTYPES_AS}\", {${cpus}}, {${features}}},")
    endforeach ()
    # Written only when it changes, so that a configure run rebuilds nothing it did not change.
    file(WRITE "${file}.new" "// Written by CMake (cmake/BlocklstmCpuTargets.cmake) from schedules/cpu_targets.json and
// BLOCKLSTM_CPU_TARGETS / BLOCKLSTM_CPU_CHECK_TARGETS: the CPU targets of every CPU kernel, best first.
// M(kernel, tag): the kernel's function for one target is <kernel>__<tag>, unless that is another
// target's (cpu_kernels_shared.inc: the same code, or other_dtypes_as).
#define BLOCKLSTM_FOR_EACH_CPU_TARGET(M, kernel)${symbols}

// {name, Halide target, tuning table, its knobs, where it was tuned, check_only, bf16_dot_products,
//  amx_products, other_dtypes_as (the target whose float32 and float16 kernels it runs, or empty),
//  {the CPUs the table is for: {vendor, family, first model, last model}, ...} (none: any CPU),
//  {{Halide feature, its name}, ...}}
#define BLOCKLSTM_CPU_TARGET_SPECS${specs}
")
    file(COPY_FILE "${file}.new" "${file}" ONLY_IF_DIFFERENT)
endfunction()
