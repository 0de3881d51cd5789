// How a CPU step product's rows go into register tiles: the one contract between the kernels
// (generators/common.h: matrix_product's one-row twin and short-tile twins, which a step kernel
// runs where its rows are few) and the runtime's backward loop and cell ops (runtime/src/), which
// give a step's last rows a call of their own where that pays. Free of Halide, so that the
// runtime includes it too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace blocklstm::step_tiles {

// A step's product over at most this many rows runs in tiles of one row (the product's one-row
// twin, two partial sums a vector). A register tile of the table's gemm_step_tile_rows computes all
// its rows whatever the rows that are real, while one row alone costs a fraction of it (BlockLSTM
// at T,I=H 100,256: B = 1 0.87 ms, B = 2 2.41 ms and B = 8 2.96 ms in 8-row tiles, so a row is
// 0.29 of a tile; 0.37 at H = 512).
constexpr int kOneRowTilesMax = 1;

// A step of two rows runs in tiles of two rows (a short tile's twin, below), which read the
// weights' panels once for both rows where two one-row tiles read them twice (BlockLSTMV2 at T, I
// = 200, 0: B = 2 in one-row tiles 1.6-1.8x the time of B = 1, AMD EPYC Zen 4). One or two rows
// are also the few that run apart from a step's whole tiles (rows_past_alone_max) and that read a
// weight matrix in place in stretches (kStreamCols).
constexpr int kFewRowsMax = 2;

// The columns of a stretch of a weight matrix that a step of at most kFewRowsMax rows reads
// in place (the cell op's w; schedules/schedule.h: GemmBlocking::in_place_stream_cols), k
// outermost, where its columns are a multiple of it. One row of LSTMBlockCell at I = H = 512 (w:
// 8 MiB) read w at 46 GB/s in one-row register tiles (two vectors of each row of w, 8 KiB apart);
// a JIT-compiled twin reading stretches of 512 columns, k outermost in runs of 4, at 116 GB/s (2
// threads, AMD EPYC Zen 4; stretches of 256 columns 106 GB/s, of 1024 139 GB/s but one task a
// thread at 4H = 2048 and one for both at 4H = 1024).
constexpr int kStreamCols = 512;

// Short tiles: a step of more than kFewRowsMax rows and fewer than two of the table's
// gemm_step_tile_rows runs in as few register tiles as that height allows, of as even a height
// as fills them (ceil(rows / tiles) rows each, at least shortest_tile_rows), a twin of the
// product per height (the kernels specialize on the rows). A register tile computes all its rows
// whatever the rows that are real, so in tiles of the table's height a step's rows past its
// whole tiles cost a whole tile: 12 rows in 8-row tiles cost 16, in two 6-row tiles 12. On a Zen 4
// (BlockLSTMV2 at T,I,H 200,0,256, the steps alone, old and new builds alternated twice, new/old
// time): B = 5 0.69-0.73, 6 0.82-0.85, 7 0.89-0.93, 10 0.74-0.80, 12 0.77-0.80, 14 0.84-0.86, 9
// (two tiles of 5 against 8 and one row alone) 1.00-1.06, 8 and 16 level. Tiles of fewer rows than
// half a tile are not worth a twin of their own (each twin and row range is a copy of the
// product's code), so a step of 3 rows runs in the shortest; nor are steps of two whole tiles'
// rows or more, where the rows past the whole tiles are a smaller share (and the runtime gives
// one or two of them a call of their own). AVX2's 4-row tiles have one short height, 3 rows (3
// rows in one tile, 5-6 in two), measured on the same Zen 4 running the AVX2 target's code: B = 3,
// 5 and 6 0.87-0.98x, 0.88-0.91x and 0.88-0.92x the time, B = 1, 7, 8 level (an AVX2 CPU of its
// own has not measured it).
constexpr int shortest_tile_rows(int tile_rows) {
    return tile_rows > kFewRowsMax + 1 ? std::max(kFewRowsMax + 1, (tile_rows + 1) / 2) : 0;
}

// Tall tiles: a step of more rows than the table's tiles hold, up to `tall_rows` (the table's
// gemm_step_tall_tile_rows; 0: none), runs in one register tile of all its rows, as many vectors
// wide as the table's tile has accumulators (CpuTuning::gemm_step_tall_tile_vectors): W_h's
// panels are read once for all the rows, not once for each of two short tiles. AVX2's 4 x 3
// vectors: 5 rows in a tile of 2 vectors (10 accumulators) where they ran in two tiles of 3 rows,
// BlockLSTM 0.86-0.88x and BlockLSTMGrad 0.85-0.90x the time at B = 5 (AMD Zen 3). Not 6 rows:
// LLVM spilled two of that tile's 12 accumulators in its k loop (1.19x the time; docs/tuning.md).

// The height of the register tiles a step of `rows` rows runs in (1: one-row tiles; 2: two-row
// tiles, where the table's are taller; `rows` itself in a tall tile).
constexpr int64_t step_tile_height(int64_t rows, int tile_rows, int tall_rows = 0) {
    if (rows <= kOneRowTilesMax) return 1;
    if (rows <= kFewRowsMax && tile_rows > kFewRowsMax) return kFewRowsMax;
    if (rows > tile_rows && rows <= tall_rows) return rows;
    const int shortest = shortest_tile_rows(tile_rows);
    if (shortest == 0 || rows >= 2 * tile_rows) return tile_rows;
    const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
    return std::max<int64_t>((rows + tiles - 1) / tiles, shortest);
}

// The steps that run in short (or tall) tiles: rows first..last in tiles of `height` rows, one
// range of rows each, in order of rows (8-row tiles: 2 in 2, 3-4 in 4, 5, 6, 7, then 9-10 in 5,
// 11-12 in 6, 13-14 in 7; AVX2's 4-row tiles with its tall ones of 5 rows: 2 in 2, 3 in 3, 5 in 5,
// 6 in 3). Tall tiles hold fewer than two of the table's tiles' rows (CpuTuning's rule).
struct ShortTileRows {
    int first, last;  // ints, as Halide's Exprs compare with them
    int height;
};
inline std::vector<ShortTileRows> short_tile_rows(int tile_rows, int tall_rows = 0) {
    std::vector<ShortTileRows> ranges;
    for (int rows = kOneRowTilesMax + 1; rows < 2 * tile_rows; ++rows) {
        const auto height = static_cast<int>(step_tile_height(rows, tile_rows, tall_rows));
        if (height == tile_rows) continue;
        if (!ranges.empty() && ranges.back().height == height && ranges.back().last == rows - 1) ranges.back().last = rows;
        else ranges.push_back({rows, rows, height});
    }
    return ranges;
}
// Whether a step of `rows` rows is in `range` (a template, so that the kernels' condition, a
// Halide Expr of the step's rows, is this one). A range of rows, one specialization each: Halide's
// simplifier tells ranges apart, so each branch computes only its own twin; with a condition on
// the even height (== 5, == 6, ...) it could not, and every branch computed every twin.
template <typename Rows>
constexpr auto in_range(const Rows &rows, const ShortTileRows &range) {
    return rows >= range.first && rows <= range.last;
}

// The most rows past a step's whole tiles of `tile_rows` rows that run alone, in one-row or
// two-row tiles (at most kFewRowsMax), rather than in one more tile: a row alone costs
// about as much as three rows of a tile (0.29-0.37 of an 8-row tile, above), so rows past run
// alone where three times them is fewer than a tile's rows. 8-row tiles: 1 or 2 rows. AVX2's
// 4-row tiles: 1 row, measured on a Zen 3 (BlockLSTM at T 100, I = H 256 and 512, least of 5
// alternations): one row past alone 0.82-1.02x the time of one call in whole tiles (B = 5, 9,
// 13), two rows past alone 0.97-1.20x (B = 6, 10, 14).
constexpr int64_t rows_past_alone_max(int64_t tile_rows) {
    return tile_rows > 0 ? std::min<int64_t>(kFewRowsMax, (tile_rows - 1) / 3) : 0;
}

// The rows of a step in whole tiles of `tile_rows` rows: `rows` itself, or, where the rows past
// the last whole tile are rows_past_alone_max or fewer, the rows before them, and those rows then
// go in a call of their own (one-row or two-row tiles). 17 rows in 8-row tiles: 16, then 1 (the 17th alone
// costs 0.3-0.4 of the third tile it would take). A step that runs in short tiles stays whole:
// 9 rows in 8-row tiles run in two of 5.
constexpr int64_t rows_in_whole_tiles(int64_t rows, int64_t tile_rows) {
    const int64_t past = tile_rows > 0 ? rows % tile_rows : 0;
    const int64_t whole_from = shortest_tile_rows(static_cast<int>(tile_rows)) > 0 ? 2 * tile_rows : tile_rows;
    return rows > whole_from && past > 0 && past <= rows_past_alone_max(tile_rows) ? rows - past : rows;
}

// The calls of a step of `rows` rows: run(first row, rows) for the rows in whole tiles, then
// for the rows past them where rows_in_whole_tiles leaves some.
template <typename Run>
void each_call(int64_t rows, int64_t tile_rows, Run run) {
    const int64_t whole = rows_in_whole_tiles(rows, tile_rows);
    run(int64_t{0}, whole);
    if (whole < rows) run(whole, rows - whole);
}

}  // namespace blocklstm::step_tiles
