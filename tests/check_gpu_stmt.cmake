# Fails when a GPU kernel's lowered statement (FILES: the .stmt of every cuda kernel and OpenCL
# twin) runs a stage on the host. The runtime hands GPU kernels device memory only, so a host stage
# fails there at run time: Halide guards an output it computes on the host with
# halide_error_host_is_null, and copies what such a stage reads with halide_copy_to_host. Checked
# on every build, without a GPU.
cmake_minimum_required(VERSION 3.20)
set(bad "")
foreach (file IN LISTS FILES)
    if (NOT EXISTS "${file}")
        message(FATAL_ERROR "no lowered statement ${file}")
    endif ()
    # file(STRINGS): the statements embed device code with NUL bytes, where string(REGEX) stops.
    file(STRINGS "${file}" lines REGEX "halide_error_host_is_null|halide_copy_to_host")
    string(REGEX MATCHALL "halide_error_host_is_null\\(\"[^\"]*\"|halide_copy_to_host\\(([(][^)]*[)])?[^)]*\\)" found "${lines}")
    if (found)
        list(REMOVE_DUPLICATES found)
        get_filename_component(name "${file}" NAME_WE)
        string(REPLACE ";" ", " found "${found}")
        string(APPEND bad "\n  ${name}: ${found}")
    endif ()
endforeach ()
list(LENGTH FILES checked)
if (bad)
    message(FATAL_ERROR "GPU kernels with a stage on the host (give the stage, or the output it feeds, a GPU schedule):${bad}")
endif ()
message(STATUS "${checked} GPU kernels: every stage on the device")
