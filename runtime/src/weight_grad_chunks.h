// How the CPU's float32 w_grad is split, and which calls are small enough to run their steps on one
// thread: its own header, free of the runtime's other internals, because `blocklstm tune`
// (tune/families.cpp, through plans.h) counts and times the same chunks.
#pragma once

#include <cstdint>

namespace blocklstm::detail {

// Steps on the FMAs small enough that, on 2 loop threads, a call runs them on one thread, without a
// fork, and its batched products on the other beside them (ops_sequence.cpp:
// side_by_side_chunk_steps; docs/performance.md): at most 8 rows of H <= 128 (W_h's 256 KiB, 512
// Ki multiply-adds a step at 8 rows), or H <= 64 and up to B * H = 4096 units a step in the
// forward, 2048 in the backward. Measured on an Intel Xeon 6 VM (2 vCPUs, float32,
// BLOCKLSTM_SIDE_BY_SIDE=on against the default, least of 3, T = 100): BlockLSTM 0.75x the time at
// B,H = 16,64, 0.89x at 32,64, 0.94x at 64,64, 0.78x at 64,32, 0.85x at 128,32, but 1.10x at 12,128
// and 1.03x at 24,128; BlockLSTMGrad 0.84x at 16,64, 0.96x at 32,64, 0.92x at 64,32, but 1.04x at
// 64,64 (float16 0.69-0.87x at those that gain). The forward's 8 rows go up to the table's
// one_thread_forward_cells instead of 128 (`forward_cells`): on an AMD Zen 3 (the AVX2 table's 64)
// BlockLSTM's steps of H = 96 and 128 split over both threads, each core reading half of W_h from
// its own L2, took 0.85-0.91x the time at 100,1,128, 500,1,128 and 50,8,128 (the two rules'
// builds alternated in one process, docs/performance.md); BlockLSTMGrad's 0.82-0.98x at T = 100
// to 300 but 1.01-1.10x at T = 500 (B = 1, 2), where the steps' thread had w_grad's chunks beside
// it: it keeps 128.
constexpr int64_t kOneThreadBackwardCells = 128;
constexpr bool steps_on_one_thread(int64_t batch, int64_t cells, bool backward, int64_t forward_cells) {
    return (batch <= 8 && cells <= (backward ? kOneThreadBackwardCells : forward_cells)) ||
           (cells <= 64 && batch * cells <= (backward ? 2048 : 4096));
}

// Where the backward's steps run on one thread and are small (at most 8 rows of H <= 128), w_grad's
// chunks are summed beside them too, on the thread that has x_grad's product of the rows done:
// the chunks it has not summed when the steps end run after them, as all did before. Up to 4 rows
// on an Intel Xeon 6 (0.77-0.88x the time at 500,1,128, 200,4,128 and 100,2,128; level at
// 50,8,128); on an AMD Zen 3 with 5-8 rows 0.89-0.93x at 100,6,128, 0.95x at 300,7,96, 0.95-0.99x
// at 100,8,128 and 200,8,96, 0.97-0.99x at 200,8,128 and 500,8,128, level at 50,8,128 (0.98-1.02x),
// 100,8,64, 50,5,128 and with spread lengths (bench/builds_ab.cpp, two runs; docs/performance.md).
constexpr bool weight_grads_beside_steps(int64_t batch, int64_t cells) { return batch <= 8 && cells <= 128; }

// Rows of dgates per chunk of the CPU's float32 w_grad (ops_sequence.cpp: WeightGradChunks): one
// k block of its product in the AVX2 table (schedules/tuned/x86-64-avx2.json: gemm_k_block);
// chunks of 1024 were slower (docs/tuning.md). Where they are summed beside the steps, chunks of
// 256 rows counted from the last row, so that the backward's recurrence (in reverse time)
// finishes them in the order they are summed and the other thread sums each while the recurrence
// goes on; the same chunks on any number of threads, so that the sums are the same bits.
constexpr int64_t kWeightGradChunkRows = 512;
constexpr int64_t kWeightGradChunkRowsBeside = 256;

constexpr int64_t weight_grad_chunk_rows(int64_t batch, int64_t cells) {
    return weight_grads_beside_steps(batch, cells) ? kWeightGradChunkRowsBeside : kWeightGradChunkRows;
}

}  // namespace blocklstm::detail
