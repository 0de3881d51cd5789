// Tile sizes of the CPU schedules, per target. The register budget sets the accumulator tile:
// AVX2 and SSE4.1 have 16 vector registers, AVX-512 has 32.
#pragma once

#include "Halide.h"

namespace blocklstm::schedules {

// Columns of a GEMM accumulator tile: two vectors.
inline int gemm_tile_cols(const Halide::Target &t) { return 2 * t.natural_vector_size<float>(); }

// Rows of a GEMM accumulator tile: 2 x 6 = 12 accumulators + 2 B vectors + 1 broadcast fit 16
// registers (AVX2, SSE4.1); 2 x 12 = 24 + 3 fit AVX-512's 32.
inline int gemm_tile_rows(const Halide::Target &t) {
    return t.has_feature(Halide::Target::AVX512) ? 12 : 6;
}

// Rows of a per-step product's accumulator tile: the batch B, usually a multiple of 4 and often
// small (8, 16), is not padded to a multiple of 6.
inline int gemm_step_tile_rows(const Halide::Target &t) {
    return t.has_feature(Halide::Target::AVX512) ? 8 : 4;
}

// Steps of k per block: a B panel of tile_cols x k_block floats is 32 KiB (AVX2: 16 x 512;
// AVX-512: 32 x 256, not measured), as large as a 32 KiB L1 data cache. Measured on this
// machine against blocks of 256 (half of L1), with tools/peers/gemm_ab.sh: fewer block updates of c
// and packing passes win, 2-7% on every batched product of the benchmark shapes.
inline int gemm_k_block(const Halide::Target &t) {
    return t.has_feature(Halide::Target::AVX512) ? 256 : 512;
}

// The per-step products (B rows) keep all of k in one block up to 2048 (4H of H = 512): each
// block is one parallel loop, and 8 of them per step cost more than the L1 reuse they buy
// (BlockLSTMGrad at T=100, B=64, H=512).
inline int gemm_step_k_block(const Halide::Target &) { return 2048; }

// Columns per packed panel of the recurrent weights (generators/panels.cpp), the same on every
// CPU target so that the runtime knows the layout: a register tile of 8 (SSE4.1), 16 (AVX2) or
// 32 (AVX-512) columns reads half a panel, one or two.
constexpr int weight_panel_cols = 16;

// Register tiles per row block: the rows of A a packed panel is reused for (6 x 16 = 96 rows).
constexpr int gemm_row_block_tiles = 16;

constexpr int gemm_column_chunks = 2;

}  // namespace blocklstm::schedules
