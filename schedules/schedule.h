// The schedules the generators call: each picks the CPU (cpu.h) or the CUDA (cuda.h) schedule by
// the target being compiled, so an algorithm in generators/ is written once for both.
#pragma once

#include <stdexcept>
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

// Rows / columns per packed panel of a matrix product's operands (0: no panels): the CPU's
// batched products pack their operands in one panel per register tile.
inline int matrix_product_panel_rows(GemmFuncs::Shape shape, const Halide::Target &t) {
    if (is_cuda(t) || shape != GemmFuncs::Shape::batched) return 0;
    return gemm_tile_rows(t);
}

inline int matrix_product_panel_cols(GemmFuncs::Shape shape, const Halide::Target &t) {
    if (is_cuda(t) || shape != GemmFuncs::Shape::batched) return 0;
    return gemm_tile_cols(t);
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

// gates as in schedule_gate_blocks and `other` (j, n) element-wise, in one loop over n on the CPU.
inline void schedule_gate_blocks_and(Halide::Func gates, Halide::Func other, Halide::Var j,
                                     Halide::Var gate, Halide::Var n, const Halide::Target &t) {
    if (!is_cuda(t)) return schedule_gate_blocks_and_cpu(gates, other, j, gate, n, t);
    schedule_gate_blocks_cuda(gates, j, gate, n);
    schedule_elementwise_cuda(other, j, n);
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

// The CPU's per-step products read their recurrent weights from packed panels
// (generators/panels.cpp, float32, weight_panel_cols wide), made once per call; the GPU's read the
// weight matrix in place.
inline bool step_weights_in_panels(const Halide::Target &t) { return !is_cuda(t); }

// Packed weight panels exist for the CPU's per-step products only.
inline void schedule_panels(Halide::Func out, Halide::Var xi, Halide::Var k, Halide::Var xo,
                            bool transposed, const Halide::Target &t) {
    if (is_cuda(t)) throw std::invalid_argument("panels: the CUDA products read the weights in place");
    schedule_panels_cpu(out, xi, k, xo, transposed, t);
}

}  // namespace blocklstm::schedules
