# Fails unless every bfloat16 product of an AMX target (FILES: the lowered statements of its input
# projection, steps, x_grad / h_prev_grad and w_grad kernels) runs on AMX tiles (tile_matmul:
# tdpbf16ps): a schedule that no longer stores its accumulator in an AMX tile runs as vector code
# without a word, which the numerical tests cannot tell apart (docs/design.md). Checked on every
# build, without an AMX CPU.
cmake_minimum_required(VERSION 3.20)
set(bad "")
foreach (file IN LISTS FILES)
    if (NOT EXISTS "${file}")
        message(FATAL_ERROR "no lowered statement ${file}")
    endif ()
    file(STRINGS "${file}" matmuls REGEX "tile_matmul")
    if (NOT matmuls)
        get_filename_component(name "${file}" NAME_WE)
        string(APPEND bad "\n  ${name}")
    endif ()
endforeach ()
list(LENGTH FILES checked)
if (checked EQUAL 0)
    message(FATAL_ERROR "no AMX kernel statements to check: the build has an AMX target, so its kernels are missing")
endif ()
if (bad)
    message(FATAL_ERROR "AMX kernels whose product is not on AMX tiles (no tile_matmul in the lowered statement):${bad}")
endif ()
message(STATUS "${checked} AMX kernels run their products on tiles")
