// The geometry of the CPU schedules — vector width, register tiles, k blocks — kept apart from the
// instruction set a kernel is compiled for. Each Halide target has its own geometry (geometry_of);
// a generator can be given another one by name (generator param `geometry`), so that test builds
// run the AVX-512 geometry as AVX2 code on a machine without AVX-512 (LLVM splits each 16-float
// vector into two): a bounds or tiling bug of any geometry shows on any x86-64 machine.
#pragma once

#include "Halide.h"
#include "schedules/cpu_geometry.h"
#include "schedules/panel_layout.h"

namespace blocklstm::schedules {

// The geometry a target's registers and vectors call for, by its vector width: every AVX-512
// flavour (avx512_skylake, _sapphirerapids, _zen4, ...) has 16 floats, where a test of the plain
// AVX512 feature misses them all.
inline const CpuGeometry &geometry_of(const Halide::Target &t) {
    switch (t.natural_vector_size<float>()) {
    case 16: return cpu_geometry("avx512");
    case 8: return cpu_geometry("avx2");
    default: return cpu_geometry("sse41");
    }
}

}  // namespace blocklstm::schedules
