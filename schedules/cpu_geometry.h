// The geometry of the CPU schedules — vector width, register tiles, k blocks — as plain numbers,
// free of Halide: the generators compile with them (schedules/cpu_params.h picks one per target)
// and the tests derive their tile-boundary shapes from them (tests/test_util.h), so the tests
// follow the schedules when the numbers change.
#pragma once

#include <stdexcept>
#include <string>

namespace blocklstm::schedules {

struct CpuGeometry {
    const char *name;
    // Floats per vector: 4 (SSE4.1), 8 (AVX2), 16 (AVX-512).
    int vector_floats;
    // Rows of a batched GEMM's accumulator tile: 2 x 6 = 12 accumulators + 2 B vectors + 1
    // broadcast fit 16 registers (AVX2, SSE4.1); 2 x 12 = 24 + 3 fit AVX-512's 32.
    int gemm_tile_rows;
    // Rows of a per-step product's accumulator tile: the batch B, usually a multiple of 4 and
    // often small (8, 16), is not padded to a multiple of 6.
    int gemm_step_tile_rows;
    // Steps of k per block of a batched GEMM: a B panel of tile_cols x k_block floats is 32 KiB
    // (AVX2: 16 x 512; AVX-512: 32 x 256, not measured), as large as a 32 KiB L1 data cache.
    // Measured on an AMD EPYC (AVX2) against blocks of 256 (half of L1), with
    // tools/peers/gemm_ab.sh: fewer block updates of c and packing passes win, 2-7% on every
    // batched product of the benchmark shapes.
    int gemm_k_block;

    // Columns of a GEMM accumulator tile: two vectors.
    int gemm_tile_cols() const { return 2 * vector_floats; }
};

inline constexpr CpuGeometry cpu_geometries[] = {
    {"sse41", 4, 6, 4, 512},
    {"avx2", 8, 6, 4, 512},
    {"avx512", 16, 12, 8, 256},
};

inline const CpuGeometry &cpu_geometry(const std::string &name) {
    for (const CpuGeometry &g : cpu_geometries) {
        if (name == g.name) return g;
    }
    throw std::invalid_argument("unknown CPU geometry '" + name + "' (sse41, avx2, avx512)");
}

// The per-step products (B rows) keep all of k in one block up to 2048 (4H of H = 512): each
// block is one parallel loop, and 8 of them per step cost more than the L1 reuse they buy
// (BlockLSTMGrad at T=100, B=64, H=512).
constexpr int gemm_step_k_block = 2048;

// Register tiles per row block: the rows of A a packed panel is reused for (6 x 16 = 96 rows).
constexpr int gemm_row_block_tiles = 16;

constexpr int gemm_column_chunks = 2;

}  // namespace blocklstm::schedules
