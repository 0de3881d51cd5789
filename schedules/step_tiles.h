// How a CPU step product's rows go into register tiles: the one contract between the kernels
// (generators/common.h: matrix_product's one-row twin, which a step kernel runs where its rows are
// few) and the runtime's time loops (runtime/src/ops_sequence.cpp), which give a step's last rows
// a call of their own where that pays. Free of Halide, so that the runtime includes it too.
#pragma once

#include <algorithm>
#include <cstdint>

namespace blocklstm::step_tiles {

// A step's product over at most this many rows runs in tiles of one row. A register tile of the
// table's gemm_step_tile_rows computes all its rows whatever the rows that are real, while one row
// alone costs a fraction of it (BlockLSTM at T,I=H 100,256: B = 1 0.87 ms, B = 2 2.41 ms and B = 8
// 2.96 ms in 8-row tiles, so a row is 0.29 of a tile; 0.37 at H = 512): two rows alone cost less
// than a tile, three about as much.
constexpr int kOneRowTilesMax = 2;

// A step of more than kOneRowTilesMax rows and at most half a tile runs in tiles of half the
// rows: a register tile computes all its rows, so 3 or 4 rows cost a whole 8-row tile (BlockLSTM
// at T,I=H 100,256 on an Emerald Rapids: B = 3 3.5 ms, B = 4 4.4, B = 8 5.1), while a half tile
// costs about half (B = 4 0.71x the time, 3 0.93x; BlockLSTMGrad 0.89x). Not past whole tiles:
// three half tiles for 12 rows were slower than two whole ones (1.1x at H = 512, each half tile
// streaming W_h's panel from L2 as a whole tile does). Tiles of 4 rows or fewer have no half, nor
// tiles of an odd number of rows, which two half tiles would not fill exactly.
constexpr int half_tile_rows(int tile_rows) {
    return tile_rows % 2 == 0 && tile_rows / 2 > kOneRowTilesMax ? tile_rows / 2 : 0;
}
// Whether a step of `rows` rows runs in half tiles of `half_rows` rows (half_tile_rows; 0: none).
// (A template, so that the kernels' condition, a Halide Expr of the step's rows, is this one.)
template <typename Rows>
constexpr auto in_half_tiles(const Rows &rows, int half_rows) {
    return rows > kOneRowTilesMax && rows <= half_rows;
}

// The most rows past a step's whole tiles of `tile_rows` rows that run alone, in one-row tiles
// (at most kOneRowTilesMax, the twin's rows), rather than in one more tile: a row alone costs
// about as much as three rows of a tile (0.29-0.37 of an 8-row tile, above), so rows past run
// alone where three times them is fewer than a tile's rows. 8-row tiles: 1 or 2 rows. AVX2's
// 4-row tiles: 1 row, measured on a Zen 3 (BlockLSTM at T 100, I = H 256 and 512, least of 5
// alternations): one row past alone 0.82-1.02x the time of one call in whole tiles (B = 5, 9,
// 13), two rows past alone 0.97-1.20x (B = 6, 10, 14).
constexpr int64_t rows_past_alone_max(int64_t tile_rows) {
    return tile_rows > 0 ? std::min<int64_t>(kOneRowTilesMax, (tile_rows - 1) / 3) : 0;
}

// The rows of a step in whole tiles of `tile_rows` rows: `rows` itself, or, where the rows past
// the last whole tile are rows_past_alone_max or fewer, the rows before them, and those rows then
// go in a call of their own (one-row tiles). 17 rows in 8-row tiles: 16, then 1 (the 17th alone
// costs 0.3-0.4 of the third tile it would take).
constexpr int64_t rows_in_whole_tiles(int64_t rows, int64_t tile_rows) {
    const int64_t past = tile_rows > 0 ? rows % tile_rows : 0;
    return rows > tile_rows && past > 0 && past <= rows_past_alone_max(tile_rows) ? rows - past : rows;
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
