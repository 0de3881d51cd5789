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
# Every CUDA launch numbers its blocks in x alone: gridDim.y and .z stop at 65,535 blocks, which
# rows of L*B would pass (halide_cuda_run(state, kernel, blocks x, y, z, threads x, y, z, ...)).
set(two_d "")
foreach (file IN LISTS FILES)
    file(STRINGS "${file}" launches REGEX "halide_cuda_run\\(")
    foreach (launch IN LISTS launches)
        if (launch MATCHES "halide_cuda_run\\([^,]*, \"([^\"]*)\", [^,]*, ([^,]*), ([^,]*),")
            if (NOT CMAKE_MATCH_2 STREQUAL "1" OR NOT CMAKE_MATCH_3 STREQUAL "1")
                get_filename_component(name "${file}" NAME_WE)
                string(APPEND two_d "\n  ${name}: ${CMAKE_MATCH_1} (blocks in y: ${CMAKE_MATCH_2}, in z: ${CMAKE_MATCH_3})")
            endif ()
        endif ()
    endforeach ()
endforeach ()
if (two_d)
    message(FATAL_ERROR "CUDA launches with blocks in y or z (at most 65,535 there: number them in x, as schedules/cuda.h's gpu_tile_flat does):${two_d}")
endif ()
message(STATUS "${checked} GPU kernels: every stage on the device, every CUDA grid one-dimensional")
