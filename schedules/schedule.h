// The schedules the generators call: each picks the CPU (cpu.h) or the CUDA (cuda.h) schedule by
// the target being compiled, so an algorithm in generators/ is written once for both.
#pragma once

#include <vector>

#include "Halide.h"
#include "schedules/cpu.h"
#include "schedules/cuda.h"

namespace blocklstm::schedules {

inline bool is_cuda(const Halide::Target &t) { return t.has_feature(Halide::Target::CUDA); }

// Steps of k per block of a matrix product (0: all of k in one block). On the GPU a thread keeps
// its accumulators in registers for the whole dot product, so there is nothing to block for.
inline int matrix_product_k_block(GemmFuncs::Shape shape, const Halide::Target &t) {
    if (is_cuda(t)) return 0;
    return shape == GemmFuncs::Shape::batched ? gemm_k_block(t) : gemm_step_k_block(t);
}

inline void schedule_gemm(const GemmFuncs &g, const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_gemm_cpu(g, t);
    schedule_gemm_cuda(g, g.shape == GemmFuncs::Shape::batched ? cuda_batched_tile : cuda_step_tile);
}

inline void schedule_elementwise(Halide::Func f, Halide::Var j, Halide::Var n,
                                 const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_elementwise_cpu(f, j, n, t);
    schedule_elementwise_cuda(f, j, n);
}

inline void schedule_gate_blocks(Halide::Func f, Halide::Var j, Halide::Var gate, Halide::Var n,
                                 const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_gate_blocks_cpu(f, j, gate, n, t);
    schedule_gate_blocks_cuda(f, j, gate, n);
}

inline void schedule_column_sum(Halide::Func sum, Halide::Var x,
                                const std::vector<Halide::RVar> &rows, const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_column_sum_cpu(sum, x, rows, t);
    schedule_column_sum_cuda(sum, x, rows);
}

// out(x, y) = staged(y, x), staged a copy of the input (a shared-memory tile on the GPU).
inline void schedule_transpose(Halide::Func out, Halide::Func staged, Halide::Var x, Halide::Var y,
                               const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_transpose_cpu(out, x, y, t);
    schedule_transpose_cuda(out, staged, x, y);
}

}  // namespace blocklstm::schedules
