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

// A matrix product (generators/common.h: matrix_product): `sum(x, y)` (x = column, contiguous;
// y = row) = init + the sum over k blocks `blocks` of `part(x, y, kb)`, each a product over one
// block `k` of k; `a_panel` and `b_panel` are the float32 operands of a block.
struct GemmFuncs {
    Func sum, part, a_panel, b_panel;
    Var x, y;
    RVar k, blocks;
    bool sum_is_output = true;
    bool pack_a = false;  // a's rows are not contiguous in k (a transposed operand)
};

// Register-blocked, packed, K-blocked GEMM. For each block of k (outermost, so one block's panels
// are what the caches hold): a B panel of gemm_tile_cols(t) columns x one k block is packed per
// (row block, column tile) and reused by gemm_row_block_tiles register tiles; an A panel of
// gemm_tile_rows(t) rows is packed per register tile when a is transposed (rows interleaved, so
// one cache line feeds all broadcasts of a k step; otherwise a's rows are read in place, each
// contiguous in k); the accumulator tile lives in vector registers for the whole block.
// The parallel loop covers row blocks x column tiles, so tall GEMMs (L*B rows) and short
// per-step products (B rows, 4H columns) both use every core.
inline void schedule_gemm_cpu(GemmFuncs g, const Target &t) {
    const int vec = t.natural_vector_size<float>();
    const int tile_cols = gemm_tile_cols(t);
    const int tile_rows = gemm_tile_rows(t);
    Var xo("xo"), yo("yo"), xi("xi"), yi("yi"), xv("xv"), xl("xl"), yb("yb"), tile("tile");
    Var x = g.x, y = g.y;

    if (!g.sum_is_output) g.sum.compute_root();
    g.sum.vectorize(x, vec, TailStrategy::GuardWithIf).parallel(y);
    g.sum.update()
        .tile(x, y, xo, yo, xi, yi, tile_cols, tile_rows, TailStrategy::GuardWithIf)
        .split(yo, yb, yo, gemm_row_block_tiles, TailStrategy::GuardWithIf)
        .reorder(xi, yi, yo, xo, yb, g.blocks)
        .fuse(xo, yb, tile)
        .parallel(tile)
        .split(xi, xl, xv, vec, TailStrategy::GuardWithIf)
        .vectorize(xv)
        .unroll(yi);

    // Accumulators: tile_cols/vec x tile_rows vector registers, constant extent even at the edges.
    g.part.compute_at(g.sum, yo)
        .bound_extent(x, tile_cols)
        .bound_extent(y, tile_rows)
        .vectorize(x, vec)
        .unroll(y);
    g.part.update()
        .reorder(x, y, g.k)
        .split(x, xl, xv, vec)
        .vectorize(xv)
        .unroll(xl)
        .unroll(y);

    if (g.pack_a) {
        const std::vector<Var> a_args = g.a_panel.args();  // (k, y)
        g.a_panel.compute_at(g.sum, yo)
            .bound_extent(a_args[1], tile_rows)
            .reorder_storage(a_args[1], a_args[0])
            .reorder(a_args[1], a_args[0])
            .unroll(a_args[1]);
    }
    g.b_panel.compute_at(g.sum, tile)
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
