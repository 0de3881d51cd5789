// GPU schedules, kept apart from the algorithms in generators/ and from the CPU schedules in
// cpu.h: CUDA in the library, OpenCL for their twins in the tests (PoCL). Every loop of a GPU
// kernel is mapped to GPU blocks and threads: the runtime hands the kernels device pointers only,
// so nothing may run on the host (tests/gpu_schedules_test.cc runs the twins that way).
#pragma once

#include <vector>

#include "Halide.h"
#include "schedules/cpu.h"  // GemmFuncs, GemmUse
#include "schedules/tuning.h"

namespace blocklstm::schedules {

using namespace Halide;

// Tiles (x, y) into thread blocks of cols x rows, the blocks numbered in one grid dimension: CUDA
// allows 2^31 - 1 blocks in x but 65,535 in y, and y here is often the L*B rows of a sequence
// (8-row blocks in y would stop at L*B = 524,280). Returns the block variable. Func or Stage.
template <typename F>
Var gpu_tile_flat(F &&f, Var x, Var y, Var xi, Var yi, int cols, int rows) {
    Var xo("xo"), yo("yo"), block("block");
    f.tile(x, y, xo, yo, xi, yi, cols, rows, TailStrategy::GuardWithIf)
        .fuse(xo, yo, block)
        .gpu_blocks(block)
        .gpu_threads(xi, yi);
    return block;
}

// A matrix product (generators/common.h: matrix_product): `part` holds a thread's register tile
// of dot products, the operand panels are inlined (read straight from global memory: the columns'
// operand coalesced across the warp, the rows' operand broadcast), and `sum` adds them to its
// initial value.
// A thread block is 32 threads along the columns, each rx adjacent columns (so a warp's loads of
// a weight row are one coalesced segment), times thread_rows along the rows; the rows' operand is
// the same for a whole warp (a broadcast load).
// One k block (k_blocks false): each thread runs the whole depth and `sum` adds its tile (two
// launches: the initial value, the product). Several (the product built with a k_block and
// init_apart): each k block's tiles are computed in parallel, one launch, into a float32
// workspace of depth / k_block planes, and `sum` adds the planes in order to its initial value,
// one output per thread (three launches): a step's B x H outputs are too few threads to cover a
// depth of 4H one product after another.
inline void schedule_gemm_cuda(GemmFuncs g, bool sum_is_output, int rx, int ry, int thread_rows,
                               bool k_blocks = false) {
    const int tile_cols = 32 * rx, tile_rows = thread_rows * ry;
    Var xo("xo"), yo("yo"), xi("xi"), yi("yi"), xt("xt"), yt("yt"), xr("xr"), yr("yr"), block("block");
    Var x = g.x, y = g.y;

    // The accumulators: rx x ry registers per thread, constant extent even at the edges.
    auto accumulators_at = [&](Func f, Var at) {
        g.part.compute_at(f, at)
            .bound_extent(x, rx)
            .bound_extent(y, ry)
            .unroll(x)
            .unroll(y);
        g.part.update().reorder(x, y, g.k).unroll(x).unroll(y);
    };
    if (!sum_is_output) g.sum.compute_root();
    gpu_tile_flat(g.sum, x, y, xi, yi, 32, 8);  // the initial value
    if (k_blocks) {
        Func planes = g.part.in(g.sum);
        const std::vector<Var> args = planes.args();  // (x, y, kb)
        Var kb = args[2], tile("tile");
        planes.compute_root()
            .tile(x, y, xo, yo, xi, yi, tile_cols, tile_rows, TailStrategy::GuardWithIf)
            .split(xi, xt, xr, rx, TailStrategy::GuardWithIf)
            .split(yi, yt, yr, ry, TailStrategy::GuardWithIf)
            .reorder(xr, yr, xt, yt, xo, yo, kb)
            .unroll(xr)
            .unroll(yr)
            .fuse(xo, yo, tile)
            .fuse(tile, kb, block)  // one grid dimension, as gpu_tile_flat
            .gpu_blocks(block)
            .gpu_threads(xt, yt);
        accumulators_at(planes, xt);
        Stage add = g.sum.update();
        add.reorder(g.blocks, x, y);
        gpu_tile_flat(add, x, y, xi, yi, 32, 8);
        return;
    }
    g.sum.update()
        .tile(x, y, xo, yo, xi, yi, tile_cols, tile_rows, TailStrategy::GuardWithIf)
        .split(xi, xt, xr, rx, TailStrategy::GuardWithIf)
        .split(yi, yt, yr, ry, TailStrategy::GuardWithIf)
        .reorder(g.blocks, xr, yr, xt, yt, xo, yo)
        .unroll(xr)
        .unroll(yr)
        .fuse(xo, yo, block)  // one grid dimension, as gpu_tile_flat
        .gpu_blocks(block)
        .gpu_threads(xt, yt);
    accumulators_at(g.sum, xt);
}

// Element-wise stages over (unit j, batch row n).
inline void schedule_elementwise_cuda(Func f, Var j, Var n, const CudaTuning &tuning) {
    gpu_tile_flat(f, j, n, Var("ji"), Var("ni"), tuning.elementwise_cols, tuning.elementwise_rows);
}

// A 3-D element-wise output (j, gate, n): the four gate blocks in one thread, so the shared
// per-element work (dcs) is computed once.
inline void schedule_gate_blocks_cuda(Func f, Var j, Var gate, Var n, const CudaTuning &tuning) {
    f.reorder(gate, j, n).bound(gate, 0, 4).unroll(gate);
    schedule_elementwise_cuda(f, j, n, tuning);
}

// The gate blocks and a 2-D output of the same units of a kernel in `dtype`: a kernel each, or
// (gate_outputs_one_kernel: 1, or 2 and a 16-bit dtype) one kernel, the same tiles, each thread
// computing `other` after its gate blocks.
inline void schedule_gate_blocks_and_cuda(Func gates, Func other, Var j, Var gate, Var n, Type dtype,
                                          const CudaTuning &tuning) {
    schedule_gate_blocks_cuda(gates, j, gate, n, tuning);
    schedule_elementwise_cuda(other, j, n, tuning);
    const int one_kernel = tuning.gate_outputs_one_kernel;
    if (one_kernel == 1 || (one_kernel == 2 && dtype.bits() == 16))
        other.compute_with(gates, Var("ji"));  // the thread loop of both
}

// A sum over rows (one or two row variables) into a vector indexed by x. The rows are split into chunks
// summed in parallel (rfactor), then the chunk sums are added in order: the result does not
// depend on the launch, and a long sequence still fills the GPU.
inline void schedule_column_sum_cuda(Func sum, Func out, Var x, const std::vector<RVar> &rows,
                                     const CudaTuning &tuning) {
    Var xo("xo"), xi("xi"), chunk("chunk");
    RVar all_rows = rows.front(), chunk_of("chunk_of"), in_chunk("in_chunk");
    Stage update = sum.update();
    if (rows.size() == 2) {  // (row, step): one run of rows, so chunks span steps
        all_rows = RVar("all_rows");
        update.fuse(rows[0], rows[1], all_rows);
    }
    Func partial = update.split(all_rows, chunk_of, in_chunk, tuning.sum_rows_per_chunk,
                                TailStrategy::GuardWithIf)
                       .rfactor(chunk_of, chunk);
    gpu_tile_flat(partial.compute_root(), x, chunk, xi, Var("ci"), 32, 4);
    gpu_tile_flat(partial.update(), x, chunk, xi, Var("ci"), 32, 4);
    sum.compute_root().gpu_tile(x, xo, xi, 64, TailStrategy::GuardWithIf);
    sum.update().gpu_tile(x, xo, xi, 64, TailStrategy::GuardWithIf);
    out.gpu_tile(x, xo, xi, 64, TailStrategy::GuardWithIf);
}

// A transpose out(x, y) = in(y, x): a 32 x 32 tile of the input is staged in shared memory by
// coalesced row reads, then written out by coalesced row writes.
inline void schedule_transpose_cuda(Func out, Func staged, Var x, Var y) {
    const Var block = gpu_tile_flat(out, x, y, Var("xi"), Var("yi"), 32, 32);
    const std::vector<Var> args = staged.args();
    // Rows of 33 floats: a warp reads a column of the tile, 32 rows apart, so a 32-float row
    // would put all 32 reads in one shared-memory bank (32-way conflict); 33 spreads them over all.
    staged.compute_at(out, block)
        .store_in(MemoryType::GPUShared)
        .align_storage(args[0], 33)
        .gpu_threads(args[0], args[1]);
}

}  // namespace blocklstm::schedules
