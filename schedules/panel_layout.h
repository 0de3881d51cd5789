// The packed-panel layout of the CPU products' operands (generators/panels.cpp): the one contract
// between the sizes the runtime allocates (runtime/src/ops_sequence.cpp) and the extents the CPU
// schedules read (schedules/cpu.h). Free of Halide, so that the runtime includes it too; the
// generators declare panel_count as the required extent of every panel buffer, so a runtime that
// allocated fewer panels gets Halide's constraint error, never a read past its allocation.
#pragma once

namespace blocklstm::panels {

// Columns per packed panel, the same for every CPU geometry.
constexpr int kPanelCols = 16;

// A register tile of a product reads all of its columns, past the operand's last column at the
// edge (the panels hold zeros there). Tiles are 8 (SSE4.1), 16 or 24 (AVX2: the batched and the
// step products) or 32 (AVX-512) columns wide, and every geometry's tile width must divide
// kPanelGroupCols (schedules/tuning.h checks it when a kernel is generated). Panels are allocated
// in groups of kPanelGroupCols columns: a tile whose width divides the group width lies inside one
// group, so the tile holding the last column ends at or before the end of that column's group, and
// no tile of any geometry reads a panel that was not allocated. (Counting panels by kPanelCols
// alone let AVX-512's 32-column tiles read one panel too far whenever the column count was not a
// multiple of 32.) 96 = 3 x 32 admits tiles of 3 AVX2 vectors, for 3 % more panels at 4H = 2048.
constexpr int kPanelGroupCols = 96;
static_assert(kPanelGroupCols % kPanelCols == 0, "a panel group is whole panels");

// And this many columns past the last group: a step's one-row twin runs over groups of whole
// panels (schedules/tuning.h: gemm_one_row_task_tiles; AVX2's 48 columns where its other tiles
// are 24), and Halide checks the weights' bounds over the regions of every branch of a kernel,
// so the twin's region at the general branch's last tile, never read, reaches past that tile by
// up to this many columns. Zero, as every column past the operand's last.
constexpr int kOneRowSlackCols = 48;
static_assert(kOneRowSlackCols % kPanelCols == 0, "the slack is whole panels");

// Panels of an operand with `cols` columns: int64_t in the runtime, Halide::Expr in the generators.
template <typename Int>
Int panel_count(const Int &cols) {
    return (cols + (kPanelGroupCols - 1)) / kPanelGroupCols * (kPanelGroupCols / kPanelCols) +
           kOneRowSlackCols / kPanelCols;
}

// The bfloat16 weights of a step's product (the forward's W_h, the backward's W_h^T) are packed in
// pairs of k on a target with bf16_dot_products (schedules/cpu_targets.json), for vdpbf16ps: pair
// panel xo holds b(xo * P + xi, 2 k + kk) at (2 xi + kk, k), bfloat16, zero past the last column
// and k; a panel is then 2 P bfloat16 wide and ceil(depth / 2) pairs deep, the bytes of a float32
// panel of half the depth.
constexpr bool pair_panels(bool bf16_weights, bool bf16_dot_products) { return bf16_weights && bf16_dot_products; }

// On a target with amx_products (schedules/cpu_targets.json) the bfloat16 products (the input
// projection's W_x, a forward step's W_h, a backward step's and h_prev_grad's W_h^T, x_grad's
// W_x^T; w_grad's gate gradients, copied by its kernel) run on AMX tiles, whose bfloat16 product (tdpbf16ps)
// multiplies a tile of 16 rows x 32 k of a by 16 pair rows of b: b(x, 2 k + kk) at (kk, x, k),
// one pair panel the width of the product, as Halide 21's AMX lowering reads it (its pattern
// does not recognise narrower panels: docs/performance.md). Zero past the last column up to a
// whole strip of a step's product (kAmxStepStripCols, the widest) and kAmxRowSlackCols more, and
// past the last k up to a whole tile's depth (kAmxTileDepth).
constexpr int kAmxTileRows = 16, kAmxTileCols = 16, kAmxTileDepth = 32;
// The columns of a product's parallel task (schedules/cpu.h: schedule_gemm_amx), two tiles: a
// step at B = 8, H = 128 took 5.9 us against 11.3 in strips of one tile, at B = 64, H = 512 181
// against 214 (Halide's JIT, 2 threads, an Emerald Rapids).
constexpr int kAmxStripCols = 2 * kAmxTileCols;
// A step's product in strips of four tiles (half the tasks; a's tile loaded once for four of b):
// bfloat16 BlockLSTM 0.95x the time at 100,64,512, 100,8,256 and 100,1,512, 0.97-0.99x at
// 50,8,128 and 100,32,256, BlockLSTMGrad level; the batched products in strips of four too lost
// 2-6 % in the backward (least of 5 and 3 alternations, an Intel Xeon with AMX, 2026-12-01).
constexpr int kAmxStepStripCols = 4 * kAmxTileCols;
static_assert(kAmxStepStripCols % kAmxStripCols == 0, "a panel of whole step strips is whole strips");
// A batched product's rows go to AMX in blocks of this many tiles (schedules/cpu.h:
// schedule_gemm_amx): 256 rows of a at k = 512 are 256 KiB, half an L2 of 2 MiB.
constexpr int kAmxRowBlockTiles = 16;
constexpr bool amx_panels(bool bf16_weights, bool amx_products) { return bf16_weights && amx_products; }
// There the bfloat16 backward also stores the gate gradients (dgates) in bfloat16, as TF's kernel
// stores dicfo in the op's dtype: every product that reads them (each step's dh, x_grad's,
// h_prev_grad's, w_grad's) rounded them to bfloat16 as it copied them into AMX's tiles anyway, so
// only b_grad and the peephole grads, sums of them, see the rounding; the steps write half the
// bytes and the copies read half.
constexpr bool bf16_gate_grads(bool bf16, bool amx_products) { return bf16 && amx_products; }
// And one tile's columns more, never read: a pair row of whole strips is an even number of cache
// lines (8 KiB at 4H = 2048), so the 16 pair rows one tile load reads fell into one set of the
// L1 (a power of two apart) and a strip of b never stayed there; a row of an odd number of lines
// puts them in 16 sets. A product of 1024 x 2048 x 512 ran at 550 GFLOP/s on one core, 950 with
// the odd row (bench/amx_product.sh --pad-cols 16; Intel Xeon with AMX, 2026-12-01).
constexpr int kAmxRowSlackCols = kAmxTileCols;
template <typename Int>
Int amx_panel_cols(const Int &cols) {
    return (cols + (kAmxStepStripCols - 1)) / kAmxStepStripCols * kAmxStepStripCols + kAmxRowSlackCols;
}
template <typename Int>
Int amx_panel_pairs(const Int &depth) {  // pair rows: the depth in whole tiles, halved
    return (depth + (kAmxTileDepth - 1)) / kAmxTileDepth * (kAmxTileDepth / 2);
}

// w_grad's product on AMX (depth: the sequence's rows) runs over k in blocks of this many steps
// (generators/common.h: amx_product), its pair panel then whole blocks deep: all 6400 k of
// 100,64,512 at once, BlockLSTMGrad in bfloat16 took 271 ms, in blocks of 512 157 (Emerald Rapids).
constexpr int kAmxDepthBlock = 512;
template <typename Int>
Int amx_blocked_pairs(const Int &depth) {
    return (depth + (kAmxDepthBlock - 1)) / kAmxDepthBlock * (kAmxDepthBlock / 2);
}

}  // namespace blocklstm::panels
