// The plan of each op call: the kernel families its time loop runs, in order, how often per call
// and what for, per device and dtype. The one home of that knowledge: the time loops take their
// kernels from it (PlanKernels, runtime/src/kernels.cpp), preflight checks a call's kernels
// against it before any output is written, `blocklstm list` and OpInfo::plan show it, and the
// tuner turns kernel times into op times with it (tune/families.cpp). Header-only data, so
// that the tuner reads the very same tables.
#pragma once

#include <blocklstm/blocklstm.h>

#include <cstdint>
#include <span>

#include "generators/interface.h"
#include "runtime/src/weight_grad_chunks.h"

namespace blocklstm::plan {

using kernel::Family;

// The four plans: a sequence's forward (BlockLSTM, BlockLSTMV2), the cell's forward
// (LSTMBlockCell: on the CPU in float32 its own kernel, elsewhere BlockLSTM's plan over one step), the cell's
// gradient, a sequence's gradient (BlockLSTMGrad, BlockLSTMGradV2).
enum class Kind { forward, cell, cell_grad, sequence_grad };

// How a CUDA call's recurrence runs its steps (blocklstm::CudaStep): fused, one Halide kernel per
// step with its recurrent product inside; or split, the product on cuBLAS in place, then a Halide
// kernel with the gate math alone. The split steps exist on CUDA for the forward ops and the
// sequence gradients (and the forward cell op, BlockLSTM's step there); their backward stores the
// gate gradients in the dtype (float16: every product that reads them runs float16 x float16 on
// cuBLAS's tensor cores); the cell's gradient runs its fused plan.
enum class Steps { fused, split };

constexpr bool has_split_steps(Kind kind, Device device, DType) {
    return device == Device::cuda && (kind == Kind::forward || kind == Kind::cell || kind == Kind::sequence_grad);
}

// How often a step runs in one call: once; once per time step (L; the cell op: 1); once per chunk
// of the CPU's float32 w_grad (its L*B rows of dgates in chunks: weight_grad_chunk_rows).
enum class Times { once, per_step, per_chunk };

// What a step computes: the same site may run another family on another device or dtype (the
// forward step: seq_fwd_step fused, seq_fwd_gates split). w_grad runs as one product over chunks
// on the CPU in float32 (w_grad), as its x and h products elsewhere (w_grad_x, w_grad_h).
enum class Site {
    w_x_panels, input_projection, w_h_panels, forward_step,                     // forward
    cell_forward,                                                               // the cell's forward
    cell_backward,                                                              // the cell's gradient
    w_transpose, w_x_t_panels, w_h_t_panels, backward_step, x_grad, h_prev_grad, dgates_panels, w_grad, w_grad_x,
    w_grad_h, reductions,                                                       // a sequence's gradient
    length_order,                                                               // with seq_lengths
};

struct Step {
    Site site;
    Family family;
    Times times;
    const char *does;
};

// The steps, each written once; the plans below list them. On CUDA the batched products run on
// cuBLAS where it loads (runtime/src/cublas.cpp), their Halide kernels otherwise.
namespace steps {
// clang-format off
inline constexpr Step w_x_panels{Site::w_x_panels, Family::panels, Times::once, "W_x packed into panels"};
inline constexpr Step input_projection{Site::input_projection, Family::gemm_nn_bias, Times::once, "xw = x . W_x + b, every step at once"};
inline constexpr Step w_h_panels{Site::w_h_panels, Family::panels, Times::once, "W_h packed into panels"};
inline constexpr Step forward_step{Site::forward_step, Family::seq_fwd_step, Times::per_step, "gates = xw[t] + h . W_h, then the gate math"};
inline constexpr Step cell_forward{Site::cell_forward, Family::cell_fwd, Times::once, "gates = b + [x | h_prev] . w (w read in place), then the gate math"};
inline constexpr Step cell_backward{Site::cell_backward, Family::cell_bwd, Times::once, "cs_prev_grad, dicfo and the peephole grads"};
inline constexpr Step w_transpose{Site::w_transpose, Family::transpose, Times::once, "w^T"};
inline constexpr Step w_x_t_panels{Site::w_x_t_panels, Family::panels_t, Times::once, "W_x^T packed into panels from w's rows (I > 0)"};
inline constexpr Step w_h_t_panels{Site::w_h_t_panels, Family::panels_t, Times::once, "W_h^T packed into panels"};
inline constexpr Step backward_step{Site::backward_step, Family::seq_bwd_step, Times::per_step, "dgates[t]: dgates[t+1] . W_h^T, the cell's backward math"};
inline constexpr Step backward_step_rows{Site::backward_step, Family::seq_bwd_step_rows, Times::per_step, "dgates[t]: dgates[t+1] . W_h^T, the cell's backward math on each row's inputs at its caller row"};
inline constexpr Step x_grad{Site::x_grad, Family::gemm_nn, Times::once, "x_grad = dgates . W_x^T (I > 0)"};
inline constexpr Step h_prev_grad{Site::h_prev_grad, Family::gemm_nn, Times::once, "h_prev_grad = dgates[0] . W_h^T"};
inline constexpr Step dgates_panels{Site::dgates_panels, Family::panels, Times::per_chunk, "a chunk of dgates packed into panels"};
inline constexpr Step w_grad_chunk{Site::w_grad, Family::gemm_tn_panels, Times::per_chunk, "w_grad += [x | h_prev]^T . the chunk, b_grad += its column sums (I > 0)"};
inline constexpr Step w_grad_x{Site::w_grad_x, Family::gemm_tn, Times::once, "w_grad[:I] = x^T . dgates (I > 0; on the CPU b_grad in its extra row)"};
inline constexpr Step w_grad_h{Site::w_grad_h, Family::gemm_tn, Times::once, "w_grad[I:] = h_prev^T . dgates"};
inline constexpr Step reductions{Site::reductions, Family::seq_bwd_reduce, Times::once, "the peephole grads, cs_prev_grad, b_grad where w_grad's product has not"};
inline constexpr Step forward_gates{Site::forward_step, Family::seq_fwd_gates, Times::per_step, "the gate math on xw[t] += h . W_h (cuBLAS, in place)"};
inline constexpr Step length_order{Site::length_order, Family::gather_rows, Times::once, "with seq_lengths: rows put in length order and back, packed by step"};
inline constexpr Step forward_step_rows{Site::forward_step, Family::seq_fwd_step_rows, Times::per_step, "gates = xw[t] + h . W_h, then the gate math, each row at its caller row (rows in length order: their own)"};
inline constexpr Step backward_gates{Site::backward_step, Family::seq_bwd_gates, Times::per_step, "dgates[t] (in the dtype): the cell's backward math after cuBLAS's dgates[t+1] . W_h^T"};
inline constexpr Step split_reductions{Site::reductions, Family::seq_bwd_reduce_split, Times::once, "the peephole grads, cs_prev_grad and b_grad from dgates in the dtype"};
// clang-format on
}  // namespace steps

inline constexpr Step kForwardCpu[] = {steps::w_x_panels, steps::input_projection, steps::w_h_panels,
                                       steps::forward_step_rows, steps::length_order};
inline constexpr Step kForwardCuda[] = {steps::input_projection, steps::forward_step, steps::length_order};
inline constexpr Step kCellCpuFloat32[] = {steps::cell_forward};
inline constexpr Step kCellGrad[] = {steps::cell_backward};
inline constexpr Step kSequenceGradCpuFloat32[] = {steps::w_h_t_panels, steps::backward_step_rows, steps::w_x_t_panels,
                                                   steps::x_grad,       steps::h_prev_grad,   steps::dgates_panels,
                                                   steps::w_grad_chunk, steps::reductions,    steps::length_order};
inline constexpr Step kSequenceGradCpuFloat16[] = {steps::w_h_t_panels, steps::backward_step_rows, steps::w_x_t_panels,
                                                   steps::x_grad,       steps::h_prev_grad,   steps::w_grad_x,
                                                   steps::w_grad_h,     steps::reductions,    steps::length_order};
inline constexpr Step kSequenceGradCuda[] = {steps::w_transpose, steps::backward_step, steps::x_grad, steps::h_prev_grad,
                                             steps::w_grad_x,    steps::w_grad_h,      steps::reductions,
                                             steps::length_order};
inline constexpr Step kForwardCudaSplit[] = {steps::input_projection, steps::forward_gates, steps::length_order};
inline constexpr Step kSequenceGradCudaSplit[] = {steps::w_transpose, steps::backward_gates, steps::x_grad,
                                                  steps::h_prev_grad, steps::w_grad_x,       steps::w_grad_h,
                                                  steps::split_reductions, steps::length_order};

constexpr std::span<const Step> plan_of(Kind kind, Device device, DType dtype, Steps steps = Steps::fused) {
    if (steps == Steps::split && has_split_steps(kind, device, dtype))
        return kind == Kind::sequence_grad ? std::span<const Step>(kSequenceGradCudaSplit)
                                           : std::span<const Step>(kForwardCudaSplit);
    const bool cpu = device == Device::cpu;
    switch (kind) {
    case Kind::forward: return cpu ? std::span<const Step>(kForwardCpu) : std::span<const Step>(kForwardCuda);
    case Kind::cell:
        if (cpu && dtype == DType::f32) return kCellCpuFloat32;
        return cpu ? std::span<const Step>(kForwardCpu) : std::span<const Step>(kForwardCuda);
    case Kind::cell_grad: return kCellGrad;
    case Kind::sequence_grad:
        if (!cpu) return kSequenceGradCuda;
        return dtype == DType::f32 ? std::span<const Step>(kSequenceGradCpuFloat32)
                                   : std::span<const Step>(kSequenceGradCpuFloat16);
    }
    return {};
}

// Where b_grad of a sequence's gradient comes from: on the CPU, with I > 0, with w_grad's product
// (float32: gemm_tn_panels sums each chunk's columns beside its product, 1/(I+H) of its work; float16:
// gemm_tn's extra row of the x product, which the spare rows of its last register tile compute
// anyway; a pass of its own read all of dgates again, 1.6 % of BlockLSTMGrad at 100,32,256);
// elsewhere from the reductions (cuBLAS has no such row).
constexpr bool b_grad_with_w_grad(Device device, int64_t input_size) {
    return device == Device::cpu && input_size > 0;
}

// The plan of an op by its registry entry (sequence, gradient).
constexpr Kind kind_of(bool sequence, bool gradient) {
    if (!gradient) return sequence ? Kind::forward : Kind::cell;
    return sequence ? Kind::sequence_grad : Kind::cell_grad;
}

// How many times a step runs in a call of `steps` time steps of `rows_per_step` rows of `cells`.
constexpr int64_t count(Times times, int64_t steps, int64_t rows_per_step, int64_t cells) {
    const int64_t chunk = detail::weight_grad_chunk_rows(rows_per_step, cells);
    switch (times) {
    case Times::once: return 1;
    case Times::per_step: return steps;
    case Times::per_chunk: return (steps * rows_per_step + chunk - 1) / chunk;
    }
    return 0;
}

constexpr const char *to_string(Times times) {
    switch (times) {
    case Times::once: return "1";
    case Times::per_step: return "L";
    case Times::per_chunk: return "C";
    }
    return "?";
}

}  // namespace blocklstm::plan
