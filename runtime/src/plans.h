// The plan of each op call: the kernel families its time loop runs, in order, how often per call
// and what for, per device and dtype. The one home of that knowledge: the time loops take their
// kernels from it (PlanKernels, runtime/src/kernels.cpp), preflight checks a call's kernels
// against it before any output is written, `blocklstm list` and OpInfo::plan show it, and the
// tuner turns kernel times into op times with it (tools/tune/families.cpp). Header-only data, so
// that the tuner reads the very same tables.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <span>

#include "generators/interface.h"
#include "runtime/src/weight_grad_chunks.h"

namespace blocklstm::plan {

using kernel::Family;

// The three plans: a forward op (BlockLSTM, BlockLSTMV2 and LSTMBlockCell, which runs one step of
// BlockLSTM), the cell's gradient, a sequence's gradient (BlockLSTMGrad, BlockLSTMGradV2).
enum class Kind { forward, cell_grad, sequence_grad };

// How often a family runs in one call: once; twice; once per step (L; the cell op: 1); once per
// chunk of the CPU's float32 w_grad (its L*B rows of dgates in chunks of kWeightGradChunkRows), or
// twice per chunk. With I = 0 the x products (one of "twice") are left out.
enum class Times { once, twice, per_step, per_chunk, twice_per_chunk };

struct Step {
    Family family;
    Times times;
    const char *does;
};

// clang-format off
inline constexpr Step kForwardCpu[] = {
    {Family::gemm_nn_bias, Times::once, "xw = x . W_x + b, every step at once"},
    {Family::panels, Times::once, "W_h packed into panels"},
    {Family::seq_fwd_step, Times::per_step, "gates = xw[t] + h . W_h, then the gate math"},
};
inline constexpr Step kForwardCuda[] = {
    {Family::gemm_nn_bias, Times::once, "xw = x . W_x + b, every step at once (cuBLAS where it loads)"},
    {Family::seq_fwd_step, Times::per_step, "gates = xw[t] + h . W_h, then the gate math"},
};
inline constexpr Step kCellGrad[] = {
    {Family::cell_bwd, Times::once, "the cell's backward math: cs_prev_grad, dicfo, the peephole grads"},
};
inline constexpr Step kSequenceGradCpuFloat32[] = {
    {Family::transpose, Times::once, "w^T"},
    {Family::panels_t, Times::once, "W_h^T packed into panels"},
    {Family::seq_bwd_step, Times::per_step, "dgates[t] from dgates[t+1] . W_h^T and the cell's backward math"},
    {Family::gemm_nn, Times::twice, "x_grad = dgates . W_x^T, h_prev_grad = dgates[0] . W_h^T"},
    {Family::panels, Times::per_chunk, "a chunk of dgates packed into panels"},
    {Family::gemm_tn_panels, Times::twice_per_chunk, "w_grad += [x | h_prev]^T . the chunk, and b_grad"},
    {Family::seq_bwd_reduce, Times::once, "the peephole grads and cs_prev_grad"},
};
inline constexpr Step kSequenceGradCpuFloat16[] = {
    {Family::transpose, Times::once, "w^T"},
    {Family::panels_t, Times::once, "W_h^T packed into panels"},
    {Family::seq_bwd_step, Times::per_step, "dgates[t] from dgates[t+1] . W_h^T and the cell's backward math"},
    {Family::gemm_nn, Times::twice, "x_grad = dgates . W_x^T, h_prev_grad = dgates[0] . W_h^T"},
    {Family::gemm_tn, Times::twice, "w_grad = [x | h_prev]^T . dgates, and b_grad"},
    {Family::seq_bwd_reduce, Times::once, "the peephole grads and cs_prev_grad"},
};
inline constexpr Step kSequenceGradCuda[] = {
    {Family::transpose, Times::once, "w^T"},
    {Family::seq_bwd_step, Times::per_step, "dgates[t] from dgates[t+1] . W_h^T and the cell's backward math"},
    {Family::gemm_nn, Times::twice, "x_grad = dgates . W_x^T, h_prev_grad = dgates[0] . W_h^T (cuBLAS where it loads)"},
    {Family::gemm_tn, Times::twice, "w_grad = [x | h_prev]^T . dgates (cuBLAS where it loads)"},
    {Family::seq_bwd_reduce, Times::once, "b_grad, the peephole grads and cs_prev_grad"},
};
// clang-format on

constexpr std::span<const Step> plan_of(Kind kind, Device device, DType dtype) {
    const bool cpu = device == Device::cpu;
    switch (kind) {
    case Kind::forward: return cpu ? std::span<const Step>(kForwardCpu) : std::span<const Step>(kForwardCuda);
    case Kind::cell_grad: return kCellGrad;
    case Kind::sequence_grad:
        if (!cpu) return kSequenceGradCuda;
        return dtype == DType::f32 ? std::span<const Step>(kSequenceGradCpuFloat32)
                                   : std::span<const Step>(kSequenceGradCpuFloat16);
    }
    return {};
}

// The plan of an op by its registry entry (sequence, gradient).
constexpr Kind kind_of(bool sequence, bool gradient) {
    return !gradient ? Kind::forward : sequence ? Kind::sequence_grad : Kind::cell_grad;
}

// How many times a step runs in a call of `steps` time steps of `rows_per_step` rows each.
constexpr int64_t count(Times times, int64_t steps, int64_t rows_per_step) {
    const int64_t chunks = (steps * rows_per_step + detail::kWeightGradChunkRows - 1) / detail::kWeightGradChunkRows;
    switch (times) {
    case Times::once: return 1;
    case Times::twice: return 2;
    case Times::per_step: return steps;
    case Times::per_chunk: return chunks;
    case Times::twice_per_chunk: return 2 * chunks;
    }
    return 0;
}

constexpr const char *to_string(Times times) {
    switch (times) {
    case Times::once: return "1";
    case Times::twice: return "2";
    case Times::per_step: return "L";
    case Times::per_chunk: return "C";
    case Times::twice_per_chunk: return "2C";
    }
    return "?";
}

}  // namespace blocklstm::plan
