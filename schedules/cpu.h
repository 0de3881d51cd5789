// CPU schedules, kept apart from the algorithms in generators/. Every generator builds its Funcs
// and hands them here; nothing in this file changes what is computed, only how.
//
// Each CPU kernel is compiled for several x86 targets (CMake: BLOCKLSTM_CPU_TARGETS); every tile
// size below comes from the tuning table it is compiled with (schedules/tuning.h), the target's
// own unless the build names another.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "Halide.h"
#include "schedules/panel_layout.h"
#include "schedules/step_tiles.h"
#include "schedules/tuning.h"

namespace blocklstm::schedules {

using namespace Halide;

// The Funcs of a matrix product (generators/common.h: matrix_product): `sum(x, y)` (x = column,
// contiguous; y = row) = init + the sum over k blocks `blocks` of `part(x, y, kb)`, each a product
// over one block `k` of k; `a_panel` and `b_panel` are the float32 operands of a block.
struct GemmFuncs {
    Func sum, part, a_panel, b_panel;
    Var x, y;
    RVar k, blocks;
    // With bfloat16 pairs (GemmBlocking::bf16_pairs) k counts pairs and k_pair is the k of a pair.
    std::optional<RVar> k_pair;
    // A step's product in one-row tiles (GemmBlocking::single_row): part's twin, which sum reads
    // where the step has few rows (schedules/step_tiles.h); undefined otherwise.
    Func part_single;
    Expr single;  // the condition: the step's rows are that few
    // A step's product in short tiles (GemmBlocking::short_tiles_below): a twin of part per height
    // of `rows` rows, which sum reads on the ranges of a step's rows that go into tiles of that
    // height (`when`, one condition a range: step_tiles::short_tile_rows), and its twin reading b
    // in place (see in_place).
    struct ShortTiles {
        int rows;
        std::vector<Expr> when;
        Func part, part_in_place;
    };
    std::vector<ShortTiles> short_tiles;  // by increasing height
    // Where b is read in place (GemmBlocking::in_place_cols), the condition, and the tiles' twins
    // that read it so (sum reads them there); undefined otherwise.
    Expr in_place;
    Func part_in_place, part_single_in_place;
    // Where b is read in place and the step's rows are one or two (GemmBlocking::
    // in_place_stream_cols), the condition and the twin that reads b's rows in stretches of
    // stream_cols columns, k outermost (sum reads it there); undefined otherwise.
    Expr stream;
    Func part_stream;
    int stream_cols = 0;
    // On AMX's tiles (generators/common.h: amx_product): part(x, y) is the whole product over k, a_panel(k, y)
    // a's copy in whole tiles; b_panel is unused. amx_k_blocks: part(x, y, kb) is block kb's
    // (generators/common.h: amx_product), sum's update adds them over `blocks`.
    bool amx = false;
    bool amx_k_blocks = false;
};

// step: few rows (B, once per time step); A is read in place. batched: a product over the whole
// sequence (L*B rows or depth), parallel over work items (row block x column chunk); two loop
// orders, by GemmUse::a_rows_contiguous (schedule_gemm_cpu).
enum class GemmShape { step, batched };

// How a product is used and stored, which its schedule follows; written by field name
// (`{.shape = GemmShape::step, .cols = H}`).
struct GemmUse {
    GemmShape shape = GemmShape::step;
    Expr cols;  // extent of x (batched: splits the columns into the table's column chunks)
    // A step's rows (y's extent), where given: its row block then holds no more row tiles than its
    // rows fill, and prefetch_init runs only where a block has more than two (tile_loops below).
    Expr rows;
    // sum is the kernel's output; otherwise it is an intermediate that an output rounds.
    bool sum_is_output = true;
    // a(k, y) is stored row-major (k contiguous): its rows can be read in place. Otherwise
    // (a transposed operand) a batched product packs it.
    bool a_rows_contiguous = true;
    // b is read from weight panels packed once per call (generators/panels.cpp): nothing to pack.
    bool b_in_panels = false;
    // a's panel comes from two inputs, each in updates over whole register tiles (w_grad's
    // [x | h_prev_seq], generators/gemm.cpp): made once per call, each input copied in dense rows
    // (docs/tuning.md: a select between them per element was 2-6 % of BlockLSTMGrad).
    bool a_from_two_inputs = false;
    // a is stored in another type than float32 (float16): converted once into a float32 panel
    // (a step's product: per call; a batched one: per work item and k block), not at every use.
    bool a_converted = false;
    // A step's initial value read from memory where its tiles add it (the input projection's rows
    // of the step): given, it prefetches the region of the row tile `ahead` tiles on that the
    // initial value reads, at the loop of the row tiles (prefetch_init(stage, row_tiles, ahead)
    // calls stage.prefetch on the input), so that its lines arrive during the tile's k loop.
    std::function<void(Halide::Stage, const Halide::VarOrRVar &, Halide::Expr)> prefetch_init;
};

// Register-blocked, packed, K-blocked GEMM. B is packed in panels of the tile's columns x
// one k block, each reused by the row block's register tiles; where A is packed, its panel
// interleaves the rows of a register tile, so one cache line feeds the broadcasts of a k step;
// the accumulator tile lives in vector registers for the whole k block. The batched products
// pack per work item or per call (see the two loop orders below); the per-step products read A
// in place and B from the weight panels packed once per call.
inline void schedule_accumulators(const GemmFuncs &g, Func part, Var at, int tile_cols, int tile_rows, bool batched,
                                  bool single_row, int vec, bool partition_k, int partial_sums = 1);

inline void schedule_gemm_cpu(GemmFuncs g, const GemmUse &use, const CpuTuning &tuning) {
    const bool batched = use.shape == GemmShape::batched;
    const int vec = tuning.vector_floats;
    const int tile_cols = batched ? tuning.gemm_tile_cols() : tuning.gemm_step_tile_cols();
    const int tile_rows = batched ? tuning.gemm_tile_rows : tuning.gemm_step_tile_rows;
    Var xo("xo"), yo("yo"), xi("xi"), yi("yi"), xv("xv"), xl("xl"), yb("yb"), tile("tile");
    Var x = g.x, y = g.y;

    // sum's pure stage is empty on the CPU: the initial value (bias, h_grad, the input
    // projection, or zero) is added in the first k block's update (generators/common.h).
    if (!use.sum_is_output) g.sum.compute_root();
    Stage update = g.sum.update();
    // Each short twin (GemmFuncs::short_tiles) is computed at a loop of its own height, `ys[i]` over
    // at most short_tiles[i].rows rows, which every branch of the specializations below has:
    // Halide infers a twin's rows in each branch, also in those that never read it, and there they
    // must fit its bound too. So every branch splits its tile's rows once for each height, the
    // tallest outermost; those loops only add a tile's accumulators into sum.
    std::vector<Var> ys;
    for (const GemmFuncs::ShortTiles &t : g.short_tiles) ys.emplace_back("y" + std::to_string(t.rows));
    // Tall twins (taller than the table's tiles, schedules/step_tiles.h) are narrower than the
    // others, and a twin's columns must fit its bound in every branch too. So where there are
    // any, every branch also splits its tile's columns, `xc`: the tall twins' loops go inside it,
    // the others' (the table's tiles' own then too, at `y_tile`) outside it. A branch of tall
    // tiles takes all its columns in one xc and puts the tall loops outermost; any other branch
    // takes one vector an xc and puts the others' loops outermost.
    const bool tall_tiles = !batched && std::any_of(g.short_tiles.begin(), g.short_tiles.end(),
                                                    [&](const auto &t) { return t.rows > tile_rows; });
    Var y_tile("y" + std::to_string(tile_rows)), xc("xc");
    auto twin_cols = [&](int rows) { return rows > tile_rows ? tuning.gemm_step_tall_tile_cols(rows) : tile_cols; };
    // The row loops of the tall twins (tall) or of the others (!tall), by increasing height.
    auto row_loops = [&](bool tall) {
        std::vector<std::pair<Var, int>> loops;
        for (std::size_t i = 0; i < ys.size(); ++i)
            if ((g.short_tiles[i].rows > tile_rows) == tall) loops.emplace_back(ys[i], g.short_tiles[i].rows);
        if (tall_tiles && !tall) {
            loops.emplace_back(y_tile, tile_rows);
            std::sort(loops.begin(), loops.end(), [](const auto &a, const auto &b) { return a.second < b.second; });
        }
        return loops;
    };
    // In a branch of tiles of `rows` rows, a height's loop covers all of them where they fit its
    // height, one at a time where not: splits that divide exactly, so no loop needs a guard (splits
    // by each height, guarded, made 64 unrolled copies of an 8-row tile's rows to prune). In the
    // short tiles' branches the rows are a loop, not unrolled: they only add a tile's accumulators
    // into sum, once a k block, and unrolled in every branch they doubled the kernels' code and
    // build time.
    auto short_loops = [&](Stage s, Var xi, Var yi, int rows, int cols) {
        const bool tall_branch = rows > tile_rows;
        int inner = rows;
        for (const bool tall : {tall_branch, !tall_branch}) {
            const std::vector<std::pair<Var, int>> loops = row_loops(tall);
            for (std::size_t i = loops.size(); i-- > 0;) {
                inner = loops[i].second >= inner ? inner : 1;
                s.split(yi, loops[i].first, yi, inner);
            }
        }
        if (tall_tiles) s.split(xi, xc, xi, tall_branch ? cols : vec);
    };
    // The loops innermost first: `inner`, the short tiles' loops, then `outer`.
    auto rows_then = [&](int rows, std::vector<VarOrRVar> inner, std::vector<VarOrRVar> outer) {
        std::vector<VarOrRVar> order = inner;
        if (!tall_tiles) {
            order.insert(order.end(), ys.begin(), ys.end());
        } else {
            const bool tall_branch = rows > tile_rows;
            for (const auto &[var, height] : row_loops(!tall_branch)) order.push_back(var);
            order.push_back(xc);
            for (const auto &[var, height] : row_loops(tall_branch)) order.push_back(var);
        }
        order.insert(order.end(), outer.begin(), outer.end());
        return order;
    };
    // A step's one-row twin over a group of `one_row_tiles` column tiles (tuning.h: whole weight
    // panels), a loop `xo2` of the group's tiles under the rows `yo` in every branch: Halide
    // computes each twin at a loop that all branches have and takes its region over all of them,
    // so part is computed at xo2 (one tile in either branch; the general branch's groups are one
    // tile) and part_single at yo (the group's columns in the one-row branch).
    const int one_row_tiles = g.part_single.defined() && use.b_in_panels ? tuning.gemm_one_row_task_tiles() : 1;
    const bool one_row_groups = one_row_tiles > 1;
    Var xoo("xoo"), xo2("xo2");
    // A step's loops over its tiles, innermost first: the tile's columns and rows, the short
    // tiles' loops, the column tiles of a one-row group (`group` of them in the one-row branch,
    // one elsewhere), the row tiles, then the parallel tasks (column tiles or groups x row blocks)
    // and the k blocks.
    auto step_tiles_of = [&](Stage s, int group, int rows) {
        if (one_row_groups) {
            if (group > 1) s.split(xo, xoo, xo2, group, TailStrategy::GuardWithIf);
            else s.split(xo, xoo, xo2, group);
            s.reorder(rows_then(rows, {xi, yi}, {xo2, yo, xoo, yb, g.blocks})).fuse(xoo, yb, tile);
        } else {
            s.reorder(rows_then(rows, {xi, yi}, {yo, xo, yb, g.blocks})).fuse(xo, yb, tile);
        }
    };
    // A short or one-row branch's k blocks in one loop: Halide would otherwise split off the first
    // block (which adds the initial value, generators/common.h) into a parallel loop of its own, a
    // second copy of the branch's code, where a step's depth is one block up to gemm_step_k_block
    // (2048). Not the table's tiles, kept as they were: there the one loop reads sum's old value in
    // the first block too, and measured 1-4 % slower at B = 8 and 16, H = 256 (at the edge of this
    // VM's noise).
    auto blocks_in_one_loop = [&](Stage s) { s.partition(g.blocks, Partition::Never); };
    // A branch in one-row tiles, `group` column tiles a task, the tasks in parallel or not.
    auto one_row_loops = [&](Stage s, int group, bool parallel) {
        s.tile(x, y, xo, yo, xi, yi, tile_cols, 1, TailStrategy::GuardWithIf)
            .split(yo, yb, yo, tuning.gemm_row_block_tiles, TailStrategy::GuardWithIf);
        short_loops(s, xi, yi, 1, tile_cols);
        step_tiles_of(s, group, 1);
        s.split(xi, xl, xv, vec).vectorize(xv);
        if (parallel) s.parallel(tile);
        blocks_in_one_loop(s);
    };
    // The loops of a stage: the specializations for few rows, then the general tiles. With b in place
    // (GemmFuncs::in_place) twice, in the in-place branch first (the other reads b's copy).
    auto tile_loops = [&](Stage s, bool in_place) {
        // One or two rows reading b in place in stretches: part_stream, computed per k block
        // before the tiles (its own parallel loop, below), which here only add it into sum: one-row
        // tiles on one thread, 4H sums (a fork costs more). Its loops stay the other branches'
        // tiles, so that what they compute at them keeps its bounds here too.
        if (in_place && g.stream.defined()) one_row_loops(s.specialize(g.stream), 1, false);
        // One row (B = 1: speech and streaming models; a step's last row, which the runtime calls
        // apart) reads part_single, in tiles of one row: the general tiles would compute all their
        // rows, 1 of 8 useful (two rows run in the shortest short tiles, below). Specialized
        // before the general schedule below, which the specialization would otherwise copy.
        if (g.part_single.defined()) one_row_loops(s.specialize(g.single), one_row_tiles, true);
        for (const GemmFuncs::ShortTiles &t : g.short_tiles) {
            for (const Expr &when : t.when) {
                // A step whose rows go into tiles of t.rows (2 to 7 rows in one tile; 9 to 14 rows
                // in two of 5 to 7; a step of spread lengths as its rows end) reads that twin, laid
                // out as the general tiles below, as many more tiles a row block as it has fewer rows.
                Stage short_tiles = s.specialize(when);
                short_tiles.tile(x, y, xo, yo, xi, yi, twin_cols(t.rows), t.rows, TailStrategy::GuardWithIf)
                    .split(yo, yb, yo, std::max(1, tuning.gemm_row_block_tiles * tile_rows / t.rows),
                           TailStrategy::GuardWithIf);
                short_loops(short_tiles, xi, yi, t.rows, twin_cols(t.rows));
                step_tiles_of(short_tiles, 1, t.rows);
                short_tiles.split(xi, xl, xv, vec, TailStrategy::GuardWithIf)
                    .vectorize(xv)
                    .parallel(tile);
                blocks_in_one_loop(short_tiles);
            }
        }
        // A step's row block: the table's, or as many row tiles as its rows fill where fewer. Each
        // iteration of a block's tile loop runs the next tile's prefetch (prefetch_init), also those
        // past the rows, whose tiles a guard skips: at 8 rows, 14 of a block's 16 on AVX2.
        Expr row_block = tuning.gemm_row_block_tiles;
        if (!batched && use.rows.defined())
            row_block = clamp((use.rows + tile_rows - 1) / tile_rows, 1, tuning.gemm_row_block_tiles);
        s.tile(x, y, xo, yo, xi, yi, tile_cols, tile_rows, TailStrategy::GuardWithIf)
            .split(yo, yb, yo, row_block, TailStrategy::GuardWithIf);
        short_loops(s, xi, yi, tile_rows, tile_cols);
        // The table's tiles' rows unrolled as before (a loop measured 1-6 % slower at B = 16 and 32,
        // H = 256 and 512, at the edge of this VM's noise).
        for (const Var &v : ys) s.unroll(v);
        if (batched) s.reorder(xi, yi, yo, xo, yb, g.blocks);
        else step_tiles_of(s, 1, tile_rows);
        // The prefetch only where a row block has more than two row tiles: with two (8 rows on AVX2)
        // its one useful prefetch a task cost more than it saved. Elsewhere `ahead` points past the
        // rows, which the prefetch's guard (Halide's GuardWithIf) skips. Both measured on an AMD
        // Zen 3: BlockLSTM 0.88-0.95x the time at 50,8,128, 0.97-0.99x at B = 8 to 32 of H = 128 and
        // 256, level at 100,64,512 (docs/performance.md, "The step's row blocks").
        if (!batched && use.prefetch_init) {
            const Expr past_the_rows = 1 << 20;
            use.prefetch_init(s, yo, use.rows.defined() ? select(use.rows > 2 * tile_rows, 1, past_the_rows) : Expr(1));
        }
        s.split(xi, xl, xv, vec, TailStrategy::GuardWithIf)
            .vectorize(xv)
            .unroll(yi);
        // A batched product's tile fully unrolled, in its accumulators' zeroing too: with a loop over
        // a tile's vectors LLVM zeroed the accumulators through a 1 KiB memset and a stack round trip
        // per tile and k block (2.7 % of BlockLSTM on a Zen 4, perf); unrolled, they stay in
        // registers: the batched products 1-5 % faster. The per-step products were level or slower.
        if (batched) s.unroll(xl);
        if (!batched) s.parallel(tile);
    };
    if (g.in_place.defined()) tile_loops(update.specialize(g.in_place), true);
    tile_loops(update, false);
    // The tile loop the accumulators are computed at: the inner one of the two tile loops.
    Var inner_tiles = yo;
    if (batched) {
        Var xc("xc"), work("work");
        // The two tile loops, innermost first, as the table orders them (tuning.h).
        const bool columns_inner = tuning.gemm_columns_inner != 0;
        auto tiles_then = [&](std::vector<VarOrRVar> outer) {
            std::vector<VarOrRVar> order{xo};
            if (columns_inner) order.push_back(yo);
            order.insert(order.end(), outer.begin(), outer.end());
            return order;
        };
        if (columns_inner) inner_tiles = xo;
        Expr col_tiles = (use.cols + tile_cols - 1) / tile_cols;
        update.split(xo, xc, xo, (col_tiles + tuning.gemm_column_chunks - 1) / tuning.gemm_column_chunks,
                     TailStrategy::GuardWithIf);
        // Packing: a's panel (rows interleaved per register tile) and b's panels (one contiguous
        // panel per column tile, in parallel over the panels), each made at `at`.
        auto pack_a_at = [&](LoopLevel at) {
            const std::vector<Var> a_args = g.a_panel.args();  // (yi, k, yo); pairs: (kk, yi, k, yo)
            if (g.k_pair) {
                g.a_panel.compute_at(at)
                    .bound(a_args[0], 0, 2)
                    .bound_extent(a_args[1], tile_rows)
                    .unroll(a_args[0])
                    .unroll(a_args[1]);
                return;
            }
            g.a_panel.compute_at(at)
                .bound_extent(a_args[0], tile_rows)
                .reorder(a_args[0], a_args[1], a_args[2])
                .unroll(a_args[0]);
        };
        auto pack_b_at = [&](LoopLevel at) {
            const std::vector<Var> b_args = g.b_panel.args();  // (xi, k, xo); pairs: (kk, xi, k, xo)
            if (g.k_pair) {  // a pair of b's rows interleaved, in whole vectors of the panel
                Var pair_col("pair_col");
                g.b_panel.compute_at(at)
                    .bound(b_args[0], 0, 2)
                    .bound_extent(b_args[1], tile_cols)
                    .fuse(b_args[0], b_args[1], pair_col)
                    .vectorize(pair_col, 2 * vec)
                    .parallel(b_args[3]);
                return;
            }
            g.b_panel.compute_at(at)
                .bound_extent(b_args[0], tile_cols)
                .vectorize(b_args[0], vec)
                .parallel(b_args[2]);
        };
        if (use.a_rows_contiguous) {
            // c has the many rows (T*B) and b is a weight matrix: each work item (row block x
            // column chunk) runs all k blocks on its block of c, which stays in L2 instead of
            // being swept from memory once per k block; b is packed whole, once, unless it comes
            // in the runtime's panels (W_x, W_x^T, W_h^T: packed once per op call). float32 rows
            // of a are read in place (a packed copy costs more than the L2 reuse it buys);
            // float16 ones are converted once per work item and k block, as are bfloat16 pairs.
            update.reorder(tiles_then({g.blocks, yb, xc})).fuse(yb, xc, work).parallel(work);
            if (use.a_converted || g.k_pair) pack_a_at(LoopLevel(g.sum, g.blocks));
            if (!use.b_in_panels) pack_b_at(LoopLevel::root());
        } else {
            // GotoBLAS order: the A panel of a whole row block (96 rows x one k block, 192 KiB,
            // L2) is packed once and reused by every column tile; the row blocks run in
            // parallel; b is packed once per k block for all row blocks. Measured on this
            // machine: transposed-A products 19 -> 31 GFLOP per core-second (OpenBLAS: 31-36).
            update.reorder(tiles_then({yb, xc})).fuse(yb, xc, work).parallel(work);
            if (use.a_from_two_inputs) {
                // Once per call, not per work item: a tile's rows are one dense vector of each
                // input (the update's first RVar is the tile row).
                g.a_panel.compute_root();
                for (int u = 0; u < g.a_panel.num_update_definitions(); ++u) {
                    const auto row_k_tile = g.a_panel.update(u).get_schedule().rvars();
                    g.a_panel.update(u)
                        .vectorize(RVar(row_k_tile[0].var))
                        .parallel(RVar(row_k_tile[2].var));
                }
            } else {
                pack_a_at(LoopLevel(g.sum, work));
            }
            if (!use.b_in_panels) pack_b_at(LoopLevel(g.sum, g.blocks));
        }
    } else {
        // a's rows are read in place; row blocks x column tiles in parallel (tile_loops), so a
        // product with few rows (B, per step) still spreads its 4H columns over the cores.
        if (g.k_pair) {  // h_prev's pairs, zero past depth: B x H bfloat16 per step
            const std::vector<Var> a_args = g.a_panel.args();  // (kk, y, k, 0)
            g.a_panel.compute_root().bound(a_args[0], 0, 2).unroll(a_args[0]);
        } else if (use.a_converted) {
            const std::vector<Var> a_args = g.a_panel.args();  // (y, k, 0)
            g.a_panel.compute_root().vectorize(a_args[1], vec, TailStrategy::GuardWithIf);
        }
        if (use.b_in_panels) {
            // Columns from 0: each tile starts a panel, read in whole vectors.
            g.sum.bound(x, 0, use.cols);
        } else {
            g.b_panel.compute_at(g.sum, tile).bound_extent(x, tile_cols).vectorize(x, vec);
        }
    }

    // Accumulators: tile_cols/vec x tile_rows vector registers, constant extent even at the edges.
    // A step's k loop has edges to partition away where it reads a in place (its rows clamped) or b
    // from the panels; a converted a with b copied per tile (the cell's w, past one row tile) has none.
    const bool partition_k = !batched && (use.b_in_panels || !use.a_converted);
    auto accumulators = [&](Func part, Func single, Func GemmFuncs::ShortTiles::*twin, bool partition) {
        schedule_accumulators(g, part, tall_tiles ? y_tile : one_row_groups ? xo2 : inner_tiles, tile_cols, tile_rows,
                              batched, /*single_row=*/false, vec, partition);
        if (single.defined())
            schedule_accumulators(g, single, inner_tiles, one_row_tiles * tile_cols, 1, false, /*single_row=*/true,
                                  vec, partition, tuning.gemm_one_row_partial_sums(one_row_tiles));
        for (std::size_t i = 0; i < ys.size(); ++i)
            schedule_accumulators(g, g.short_tiles[i].*twin, ys[i], twin_cols(g.short_tiles[i].rows),
                                  g.short_tiles[i].rows, false, /*single_row=*/false, vec, partition);
    };
    accumulators(g.part, g.part_single, &GemmFuncs::ShortTiles::part, partition_k);
    // The twins reading b in place have edges again: their k is clamped. They are tiles of the same
    // width: Halide infers a twin's columns in every branch, also where it is not read, and there
    // they must fit its bound (tiles of a power of two of AVX2's 3 vectors failed so).
    if (g.in_place.defined()) accumulators(g.part_in_place, g.part_single_in_place, &GemmFuncs::ShortTiles::part_in_place, true);
    if (g.stream.defined()) {
        // All of a k block's sums before the tiles read them (a loop all branches have: a twin
        // computed at the tiles would span a stretch there, past the bounds of what the tiles
        // compute), in parallel over stretches of stream_cols columns, each of b's rows read a
        // stretch at a time: k outermost in runs of 4 (a sum read and written once a run, 4 of
        // b's rows streamed at once), a stretch's columns innermost in vectors, in L1, then the
        // rows (the second reads the stretch from L1). Its columns and rows are left to bounds
        // inference (all of sum's where it runs).
        RVar ko("ko"), ki("ki");
        Var xs("xs"), xr("xr"), xrl("xrl"), xrv("xrv");
        g.part_stream.compute_at(g.sum, g.blocks).vectorize(x, vec, TailStrategy::GuardWithIf);
        g.part_stream.update()
            .split(x, xs, xr, g.stream_cols, TailStrategy::GuardWithIf)
            .split(xr, xrl, xrv, vec, TailStrategy::GuardWithIf)
            .split(g.k, ko, ki, 4, TailStrategy::GuardWithIf)
            .reorder(ki, xrv, xrl, y, ko, xs)
            .vectorize(xrv)
            .unroll(ki)
            .parallel(xs);
    }
}

// part (or, single_row, part_single; or a short twin, whose rows are those of one short tile): a
// register tile of tile_cols x tile_rows accumulators, at `at`.
inline void schedule_accumulators(const GemmFuncs &g, Func part, Var at, int tile_cols, int tile_rows, bool batched,
                                  bool single_row, int vec, bool partition_k, int partial_sums) {
    Var x = g.x, y = g.y, xl("xl"), xv("xv");
    part.compute_at(g.sum, at).bound_extent(x, tile_cols);
    // The single-row twin's rows are left to bounds inference: the general branch of the
    // specialization reads none, and a bound there would be checked against its 8-row tiles.
    if (!single_row) part.bound_extent(y, tile_rows);
    part.split(x, xl, xv, vec)
        .vectorize(xv)
        .unroll(y);
    if (batched) part.unroll(xl);  // see the tile's unrolling above
    if (g.k_pair) {
        // A pair of k innermost, reduced into each float32 lane: with AVX512-BF16 one vdpbf16ps
        // per vector of the tile and pair of k, its two bfloat16 products summed into the lane.
        part.update()
            .reorder(*g.k_pair, x, y, g.k)
            .split(x, xl, xv, vec)
            .atomic()
            .vectorize(*g.k_pair)
            .vectorize(xv)
            .unroll(xl)
            .unroll(y);
        return;
    }
    if (single_row && partial_sums == 2) {
        // One row: two partial sums per vector (even and odd k), so twice the FMA chains run at once
        // (CpuTuning::gemm_one_row_partial_sums).
        RVar ko("ko"), ki("ki");
        Var u("u");
        Func partial = part.update().split(g.k, ko, ki, 2, TailStrategy::GuardWithIf).rfactor(ki, u);
        partial.compute_at(g.sum, at).bound_extent(x, tile_cols).bound(u, 0, 2)  // y unbound: see above
            .split(x, xl, xv, vec).vectorize(xv).unroll(xl).unroll(u);
        partial.update().reorder(u, x, y, ko).split(x, xl, xv, vec).vectorize(xv).unroll(xl).unroll(u);
        part.update().split(x, xl, xv, vec).vectorize(xv).unroll(xl);
        return;
    }
    part.update()
        .reorder(x, y, g.k)
        .split(x, xl, xv, vec)
        .vectorize(xv)
        .unroll(xl)
        .unroll(y);
    if (single_row) return;  // one row has no partial tile (below)
    // A step's partial tile (its rows past the whole tiles, GuardWithIf) runs outside the tile
    // loop's steady state, whose k loop Halide does not partition by itself: there every k step
    // kept its clamps and masked loads (BlockLSTMV2 at T,I,H 100,0,256, B = 12: 9.4 -> 6.2 ms,
    // Emerald Rapids).
    if (partition_k) part.update().partition(g.k, Partition::Always);
}

// A product on AMX tiles (generators/common.h: amx_product): part is one accumulator tile of 16 x
// 16 float32 at a time (Halide 21 lowers one per loop nest) over all of k (or of a k block) in
// steps of 32 (one tdpbf16ps each), stored (tilestored) into a strip of kAmxStripCols columns (a
// step's product: kAmxStepStripCols) x a
// row block, which sum then adds to its initial value (with k blocks: the blocks in turn, each
// block's strips in parallel). The strips run in parallel with the
// rows inner, so a strip of b (32 columns x all of k: 32 KiB at k = 512) stays in L1 while the
// row block's tiles read it; a batched product's row blocks of kAmxRowBlockTiles tiles keep a's
// block in L2 (6400 rows at once swept all of a from memory once per strip). a's copy in whole
// tiles is made once per call, in parallel for a batched product (a step's few rows alone: a
// parallel loop of one or two tasks cost it 4 us a step at B = 8). `amx`: the target has AMX; without (a check target) the same loops run on
// vectors, so the layouts and the tile edges are tested on any CPU.
inline void schedule_gemm_amx(GemmFuncs g, const GemmUse &use, const CpuTuning &tuning, bool amx) {
    constexpr int kRows = panels::kAmxTileRows, kCols = panels::kAmxTileCols, kDepth = panels::kAmxTileDepth;
    const int vec = tuning.vector_floats;
    Var x = g.x, y = g.y, xo("xo"), xi("xi"), yo("yo"), yi("yi");
    if (!use.sum_is_output) g.sum.compute_root();
    // With k blocks sum's update adds the tiles of each block: its initial value alone first.
    Stage strips = g.sum;
    if (g.amx_k_blocks) {
        g.sum.vectorize(x, vec, TailStrategy::GuardWithIf).parallel(y);
        strips = g.sum.update();
    }
    // The strips in parallel: a batched product's inside each row block (and k block), not fused
    // with the row blocks, whose loop's bounds Halide infers past b's last column (a tile of them
    // past, then the panel's extent check fails).
    const bool batched = use.shape == GemmShape::batched;
    strips.split(x, xo, xi, batched ? panels::kAmxStripCols : panels::kAmxStepStripCols, TailStrategy::GuardWithIf);
    if (batched) {
        strips.split(y, yo, yi, kRows * panels::kAmxRowBlockTiles, TailStrategy::GuardWithIf);
        if (g.amx_k_blocks) {
            strips.reorder(xi, yi, xo, g.blocks, yo);
        } else {
            strips.reorder(xi, yi, xo, yo);
        }
    } else {
        strips.reorder(xi, y, xo);
    }
    strips.parallel(xo).vectorize(xi, vec, TailStrategy::GuardWithIf);

    const std::vector<Var> a_args = g.a_panel.args();  // (k, y)
    Var ayo("ayo"), ayi("ayi"), ako("ako"), aki("aki");
    g.a_panel.compute_root().split(a_args[1], ayo, ayi, kRows, TailStrategy::RoundUp);
    if (use.a_rows_contiguous) {
        // The k loop partitioned in the last row tile too, whose rows past the step's are zeros:
        // Halide partitions no loop inside another's epilogue by itself, and there k's clamp made
        // every vector a gather of 32 lanes (6 % of bfloat16 BlockLSTM at 100,1,512, perf).
        g.a_panel.split(a_args[0], ako, aki, 2 * vec, TailStrategy::GuardWithIf)
            .vectorize(aki)
            .partition(ako, Partition::Always);
    } else {  // a read transposed (w_grad's x and h): 16 x 16 blocks, vectors both ways, shuffled
        g.a_panel.split(a_args[0], ako, aki, kRows, TailStrategy::GuardWithIf).reorder(aki, ayi, ako, ayo).vectorize(aki).vectorize(ayi);
    }
    if (batched) g.a_panel.parallel(ayo);

    // The tiles' store: a pure copy, as AMX's lowering requires. On the stack: a step's strip is
    // 2 KiB per 16 rows, which every parallel task of every step took from the heap (malloc and
    // free 9 % of bfloat16 BlockLSTM at 100,1,512, perf); past 16 KiB Halide's pseudo-stack
    // takes it from the heap once per task.
    Func tiles = g.part.in(g.sum);
    tiles.compute_at(g.sum, xo)
        .store_in(MemoryType::Stack)
        .tile(x, y, xi, yi, kCols, kRows, TailStrategy::RoundUp)
        .reorder(xi, yi, y, x);
    RVar ko("ko"), ki("ki");
    if (amx) {
        tiles.vectorize(xi).vectorize(yi);
        g.part.compute_at(tiles, y).store_in(MemoryType::AMXTile).tile(x, y, xi, yi, kCols, kRows).vectorize(xi).vectorize(yi);
        g.part.update()
            .tile(x, y, xi, yi, kCols, kRows, TailStrategy::RoundUp)
            .split(g.k, ko, ki, kDepth)
            .reorder({ki, xi, yi, ko, x, y})
            .atomic()
            .vectorize(ki)
            .vectorize(xi)
            .vectorize(yi);
        return;
    }
    tiles.vectorize(xi, vec);
    g.part.compute_at(tiles, y).bound_extent(x, kCols).bound_extent(y, kRows).vectorize(x, vec);
    g.part.update().reorder(x, y, g.k).vectorize(x, vec);
}

// Element-wise stages over (unit j, batch row n): vectors along j, rows in parallel.
inline void schedule_elementwise_cpu(Func f, Var j, Var n, const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    f.vectorize(j, vec, TailStrategy::GuardWithIf).parallel(n);
}

// The forward gate math (generators/seq_fwd_step.cpp: gate_math) as schedule_elementwise_cpu,
// with its first stage (i, ci, f) computed once per vector of units, in registers.
inline void schedule_gate_math_cpu(Func lstm, Func activations, Var j, Var n, const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    Var jo("jo"), ji("ji");
    lstm.split(j, jo, ji, vec, TailStrategy::GuardWithIf).vectorize(ji).parallel(n);
    activations.compute_at(lstm, jo).vectorize(j, vec, TailStrategy::GuardWithIf);
}

// schedule_gate_math_cpu as lstm's update over the rows run (each writes a caller's row of its
// own: `order` is a permutation, so the rows in parallel do not race).
inline void schedule_gate_math_rows_cpu(Func lstm, Func activations, Var j, RDom run, const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    Var jo("jo"), ji("ji");
    lstm.update(0)
        .split(j, jo, ji, vec, TailStrategy::GuardWithIf)
        .reorder(ji, jo, run.x)
        .vectorize(ji)
        .allow_race_conditions()
        .parallel(run.x);
    activations.compute_at(lstm, jo).vectorize(j, vec, TailStrategy::GuardWithIf);
}

// A 3-D element-wise output (j, gate, n), e.g. the gate gradients: vectors along j, the four
// gate blocks unrolled so the shared per-element work (dcs) is computed once.
inline void schedule_gate_blocks_cpu(Func f, Var j, Var gate, Var n, const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    f.reorder(gate, j, n)
        .bound(gate, 0, 4)
        .unroll(gate)
        .vectorize(j, vec, TailStrategy::GuardWithIf)
        .parallel(n);
}

// The gate gradients and one more per-element output of the same cell math (j, n), e.g. the
// cell-state carry: both in one parallel loop over the rows, so a step forks once for them.
inline void schedule_gate_blocks_and_cpu(Func gates, Func other, Var j, Var gate, Var n,
                                         const CpuTuning &tuning) {
    schedule_gate_blocks_cpu(gates, j, gate, n, tuning);
    schedule_elementwise_cpu(other, j, n, tuning);
    other.compute_with(gates, n);
}

// A sum over (rows r) into a vector indexed by x: vectors along x, sequential over rows so the
// result is deterministic. Chunks of column_sum_vectors vectors run in parallel, each with its
// sums on the stack; inside a chunk, groups of vectors are summed over all rows with their
// accumulators in registers (as many as fill 3/4 of them, the rest for the terms: 4 vectors of
// three sums, 8 of one, on AVX2). Adams2019 showed the way (blocklstm tune --baseline
// autoschedulers, docs/tuning.md): the peephole sums at 100,64,512 took 4.5 ms with its 4-vector
// groups, 5.9 with ours, which added each row to a whole chunk of sums in memory; now 3.5.
inline void schedule_column_sum_cpu(Func sum, Func out, Var x, const std::vector<RVar> &rows,
                                    const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    const int chunk = vec * tuning.column_sum_vectors;
    const int values = sum.outputs();  // a Tuple's sums each take a register per vector
    int group = 1;
    while (group * 2 * values <= tuning.registers() * 3 / 4 && tuning.column_sum_vectors % (group * 2) == 0)
        group *= 2;  // groups divide the chunk: a partial group would run guarded, as scalars
    Var xo("xo"), xi("xi"), xg("xg"), xv("xv"), xu("xu"), xl("xl");
    out.split(x, xo, xi, chunk, TailStrategy::GuardWithIf)
        .parallel(xo)
        .vectorize(xi, vec, TailStrategy::GuardWithIf);
    sum.compute_at(out, xo).vectorize(x, vec, TailStrategy::GuardWithIf);
    std::vector<VarOrRVar> order{xl, xu};
    order.insert(order.end(), rows.begin(), rows.end());
    order.push_back(xg);
    sum.update()
        .split(x, xg, xv, vec * group, TailStrategy::GuardWithIf)
        .split(xv, xu, xl, vec, TailStrategy::GuardWithIf)
        .reorder(order)
        .vectorize(xl)
        .unroll(xu);
}

// out(x) = sum(x), the column sums of a product's b panels in k blocks (part(x, kb), one block):
// chunks of column_sum_vectors vectors in parallel, each summed in a buffer of its own, then stored
// once. Summed in the output itself, the update's read-back of it would be an aligned vector load
// (schedules/schedule.h: machine) of a buffer the caller may align to its elements only.
// A pass over one chunk of dgates: 1/(I+H) of its product's work.
inline void schedule_column_sums_cpu(Func out, Func sum, Func part, Var x, const CpuTuning &tuning) {
    const int vec = tuning.vector_floats;
    Var xo("xo"), xi("xi");
    out.split(x, xo, xi, vec * tuning.column_sum_vectors, TailStrategy::GuardWithIf)
        .parallel(xo)
        .vectorize(xi, vec, TailStrategy::GuardWithIf);
    sum.compute_at(out, xo).vectorize(x, vec, TailStrategy::GuardWithIf);
    sum.update().vectorize(x, vec, TailStrategy::GuardWithIf);
    part.compute_at(out, xo).vectorize(x, vec, TailStrategy::GuardWithIf);
    part.update().vectorize(x, vec, TailStrategy::GuardWithIf);
}

// Rows copied by an index (generators/gather_rows.cpp): vectors along the row, tasks of 64 rows
// (BlockLSTM at 100,32,256 with spread lengths: a task per row, 3,200 of 1 KB, 10.3 ms; a memcpy
// per row 8.5 ms; tasks of 64 rows 7.0 ms).
inline void schedule_gather_rows_cpu(Func out, Var c, Var r, const CpuTuning &tuning) {
    Var ro("ro"), ri("ri");
    out.vectorize(c, tuning.vector_floats, TailStrategy::GuardWithIf)
        .split(r, ro, ri, 64, TailStrategy::GuardWithIf)
        .parallel(ro);
}

// Weight panels out(xi, k, xo) (generators/panels.cpp) from `source`, the input's wrapper
// (inlined unless scheduled here): panels in parallel. A transposed source (W^T: a panel's k run
// along W's rows) is staged a square tile of one vector at a time: the panel's rows loaded along k
// into a block on the stack, which the panel's vectors read across. Read across W's rows
// directly, each vector a gather of 16 rows, the packing of W^T (14 % of BlockLSTMGrad at
// 100,1,512) had slowed 2.5x once W outgrew L2 (the JIT, a Zen 4, 2 threads, W [I+H, 4H] float32,
// least of 5 rounds: 1024 x 2048 0.67 -> 0.27 ms, 512 x 1024 0.165 -> 0.066 ms, 256 x 512 0.019
// -> 0.017 ms; tiles of 32 or 64 k 1.05-1.2x slower than 16; the AVX2 target's 8-lane code on the
// same CPU 0.44 -> 0.33, 0.106 -> 0.082, 0.015 -> 0.016 ms).
inline void schedule_panels_cpu(Func out, Func source, Var xi, Var k, Var xo, bool transposed, bool pairs,
                                const CpuTuning &tuning) {
    const int vec = pairs ? 2 * tuning.vector_floats : tuning.vector_floats;  // pairs: 2 columns' k each
    out.bound(xi, 0, pairs ? 2 * panels::kPanelCols : panels::kPanelCols);
    if (transposed) {  // a panel's k run along the input's rows
        out.parallel(xo);
        Var ki("ki"), ko("ko");
        if (pairs) {  // a tile of vec / 2 pairs of k: one vector of the source's k (bfloat16 on a Zen 4:
                      // 1024 x 2048 0.72 -> 0.26 ms, level at 512 x 1024 and below)
            out.split(k, ko, ki, vec / 2, TailStrategy::GuardWithIf).vectorize(xi, vec).unroll(ki);
        } else {
            Var xii("xii"), xio("xio");
            out.tile(xi, k, xio, ko, xii, ki, vec, vec, TailStrategy::GuardWithIf)
                .vectorize(xii)
                .unroll(ki);
        }
        const Var along_k = source.args()[0], rows = source.args()[1];
        source.compute_at(out, ko)
            .bound_storage(along_k, vec)
            .bound_storage(rows, panels::kPanelCols)  // constant: on the stack, not a heap block per tile
            .vectorize(along_k, vec, TailStrategy::GuardWithIf);  // 4H may be below a vector
    } else {
        // Each row of `in` read in runs of 8 panels (512 bytes), not one panel's 64 bytes a row:
        // the rows lie a row stride (16 KiB at 4H = 4096) apart, so a panel at a time touched a
        // new page with every load and ran at the loads' latency (W_x and W_h of 100,64,512:
        // 27 % of LSTMBlockCell at B = 64 that way).
        Var xoo("xoo"), xoi("xoi");
        out.vectorize(xi, vec)
            .split(xo, xoo, xoi, 8, TailStrategy::GuardWithIf)
            .reorder(xi, xoi, k, xoo)
            .unroll(xoi)
            .parallel(xoo);
    }
}

// AMX's pair panel out(kk, x, k) = b(x, 2 k + kk) (generators/panels.cpp, and w_grad's copy of
// the gate gradients in generators/gemm.cpp): a pair of b's rows loaded in vectors along x and
// stored as one interleaved vector, the pair rows in parallel. Halide interleaves the two stores
// only where it knows out's x stride is the pair's 2: the runtime packs every pair panel dense, so
// the schedule requires it (with the stride unknown each 16-bit lane was a store of its own: the
// packing was 70 % of a one-step BlockLSTM at B = 16, H = 256, and 9 % of BlockLSTMGrad at
// 50,64,512). Where b's columns are w's rows (W^T) the loads gather: such a panel is packed once
// per call (3 % of BlockLSTMGrad at 50,64,512).
inline void schedule_amx_panels_cpu(Func out, Var kk, Var x, Var k, const CpuTuning &tuning) {
    out.bound(kk, 0, 2).reorder(kk, x, k).parallel(k);
    out.specialize(out.output_buffer().dim(1).stride() == 2)
        .vectorize(x, tuning.vector_floats, TailStrategy::GuardWithIf)
        .unroll(kk);
    out.specialize_fail("an AMX pair panel is packed dense: its x stride is 2");
}

}  // namespace blocklstm::schedules
