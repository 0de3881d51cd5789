// Tile sizes of the CUDA schedules (Halide CUDA backend, PTX for sm_80, which the driver
// JIT-compiles for the H100's sm_90 on first use).
#pragma once

namespace blocklstm::schedules {

// One thread block of a matrix product is warps along the columns (32 threads, each owning
// cols_per_thread adjacent columns, so a warp's loads of a weight row are one coalesced 512-byte
// segment) times thread_rows along the rows; a thread keeps cols_per_thread x rows_per_thread
// accumulators in registers for all of k. The rows' operand is the same for a whole warp
// (a broadcast load).
struct CudaGemmTile {
    int cols_per_thread, rows_per_thread, thread_rows;
};

// The batched products (L*B rows): 4 x 8 accumulators per thread, 128 x 64 outputs per block.
constexpr CudaGemmTile cuda_batched_tile{4, 8, 8};

// The per-step products (B rows): small tiles, so that B = 16..128 rows still make enough blocks
// to cover the GPU's 132 multiprocessors (B = 64, 4H = 2048: 128 blocks).
constexpr CudaGemmTile cuda_step_tile{4, 2, 4};

// Element-wise kernels: 64 units x 4 rows per block of 256 threads.
constexpr int cuda_elementwise_cols = 64, cuda_elementwise_rows = 4;

// Column sums: rows are summed in chunks of this many (one thread each, in parallel), then the
// chunk sums in order: deterministic, and L*B = 6400 rows become 100 parallel partial sums.
constexpr int cuda_sum_rows_per_chunk = 64;

}  // namespace blocklstm::schedules
