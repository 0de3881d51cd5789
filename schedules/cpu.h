// CPU schedules, kept apart from the algorithms in generators/. Every generator builds its Funcs
// and hands them here; nothing in this file changes what is computed, only how.
//
// Each CPU kernel is compiled for several x86 targets (CMake: BLOCKLSTM_CPU_TARGETS), so the
// tile sizes below are taken from the register budget of the target being compiled.
#pragma once

#include "Halide.h"
#include "schedules/cpu_params.h"

namespace blocklstm::schedules {

using namespace Halide;

// A matrix product: `out(x, y)` (x = column, contiguous; y = row) is a pointwise function of
// `acc`, the float32 accumulator acc(x, y) = init; acc(x, y) += a(k, y) * panel(x, k) over `k`.
// `panel` is the B operand converted to float32; `a` reads are clamped to the last row and
// `panel` reads to the last column by the algorithm, so a tile may run past the edges.
struct GemmFuncs {
    Func out;    // the consumer (an output, or an internal Func computed at root)
    Func acc;    // the accumulator: pure init + one update over k
    Func panel;  // B operand as float32, packed per column tile
    Var x, y;    // out's and acc's pure vars
    RVar k;      // acc's reduction
    bool out_is_output = true;
};

// Register-blocked, packed GEMM: an accumulator tile of gemm_tile_cols(t) x gemm_tile_rows(t)
// lives in vector registers across the whole k loop; the B panel of a column tile is packed into a
// contiguous [K][tile_cols] float32 buffer once per (row block, column tile) and reused by
// gemm_row_block_tiles register tiles; the parallel loop covers row blocks x column tiles, so both
// tall GEMMs (L*B rows) and short per-step products (B rows, 4H columns) use both cores.
inline void schedule_gemm_cpu(GemmFuncs g, const Target &t) {
    const int vec = t.natural_vector_size<float>();
    const int tile_cols = gemm_tile_cols(t);
    const int tile_rows = gemm_tile_rows(t);
    Var xo("xo"), yo("yo"), xi("xi"), yi("yi"), xv("xv"), xl("xl"), yb("yb"), tile("tile");
    Var x = g.x, y = g.y;

    if (!g.out_is_output) g.out.compute_root();
    g.out.tile(x, y, xo, yo, xi, yi, tile_cols, tile_rows, TailStrategy::GuardWithIf)
        .split(yo, yb, yo, gemm_row_block_tiles, TailStrategy::GuardWithIf)
        .reorder(xi, yi, yo, xo, yb)
        .fuse(xo, yb, tile)
        .parallel(tile)
        .split(xi, xl, xv, vec, TailStrategy::GuardWithIf)
        .vectorize(xv)
        .unroll(yi);

    // Accumulators: tile_cols/vec x tile_rows vector registers, constant extent even at the edges.
    g.acc.compute_at(g.out, yo)
        .bound_extent(x, tile_cols)
        .bound_extent(y, tile_rows)
        .vectorize(x, vec)
        .unroll(y);
    g.acc.update()
        .reorder(x, y, g.k)
        .split(x, xl, xv, vec)
        .vectorize(xv)
        .unroll(xl)
        .unroll(y);

    g.panel.compute_at(g.out, tile)
        .bound_extent(x, tile_cols)
        .vectorize(x, vec);
}

// Element-wise stages over (unit j, batch row n): vectors along j, rows in parallel.
inline void schedule_elementwise_cpu(Func f, Var j, Var n, const Target &t) {
    const int vec = t.natural_vector_size<float>();
    f.vectorize(j, vec, TailStrategy::GuardWithIf).parallel(n);
}

// A 3-D element-wise output (j, gate, n), e.g. the gate gradients: vectors along j, the four
// gate blocks unrolled so the shared per-element work (dcs) is computed once.
inline void schedule_gate_blocks_cpu(Func f, Var j, Var gate, Var n, const Target &t) {
    const int vec = t.natural_vector_size<float>();
    f.reorder(gate, j, n)
        .bound(gate, 0, 4)
        .unroll(gate)
        .vectorize(j, vec, TailStrategy::GuardWithIf)
        .parallel(n);
}

// A sum over (rows r) into a vector indexed by x: vectors along x, sequential over rows so the
// result is deterministic; chunks of x in parallel.
inline void schedule_column_sum_cpu(Func sum, Var x, const std::vector<RVar> &rows,
                                    const Target &t) {
    const int vec = t.natural_vector_size<float>();
    Var xo("xo"), xi("xi");
    sum.compute_root()
        .split(x, xo, xi, vec * 4, TailStrategy::GuardWithIf)
        .parallel(xo)
        .vectorize(xi, vec, TailStrategy::GuardWithIf);
    std::vector<VarOrRVar> order{xi};
    order.insert(order.end(), rows.begin(), rows.end());
    order.push_back(xo);
    sum.update()
        .split(x, xo, xi, vec * 4, TailStrategy::GuardWithIf)
        .reorder(order)
        .parallel(xo)
        .vectorize(xi, vec, TailStrategy::GuardWithIf);
}

}  // namespace blocklstm::schedules
