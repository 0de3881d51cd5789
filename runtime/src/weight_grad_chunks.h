// How the CPU's float32 w_grad is split: its own header, free of the runtime's other internals,
// because `blocklstm tune` (tune/families.cpp) times the same chunks.
#pragma once

#include <cstdint>

namespace blocklstm::detail {

// Rows of dgates per chunk of the CPU's float32 w_grad (ops_sequence.cpp: weight_grads_in_chunks):
// one k block of its product in the AVX2 table (schedules/tuned/x86-64-avx2.json: gemm_k_block);
// chunks of 1024 were slower (docs/tuning.md).
constexpr int64_t kWeightGradChunkRows = 512;

}  // namespace blocklstm::detail
