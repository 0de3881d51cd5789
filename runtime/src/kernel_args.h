// The typed calls of the kernel families: one struct per generator with a field per argument,
// each bound to the name the generator gives it (generators/interface.h), so that the time loops
// never spell an argument's name. Every required argument is a reference: leaving one out is a
// compile error, as is a name the generators no longer have. For example:
//     KernelCall step(kernels.at(Family::seq_fwd_step), exec);
//     bind(step, SeqFwdStepArgs{.xw = xw, .h_prev = h_prev, ...});
#pragma once

#include <array>

#include "generators/interface.h"
#include "runtime/src/kernel_table.h"

namespace blocklstm::detail {

// seq_fwd_step: gates = xw + h_prev . W_h, then the gate math, writing one step's seven outputs.
struct SeqFwdStepArgs {
    Buf &xw, &h_prev, &w_h, &cs_prev, &wci, &wcf, &wco;
    float &forget_bias, &cell_clip;
    std::array<Buf *, 7> lstm;  // the step's i, cs, f, o, ci, co, h
    Buf &gates;                        // the caller's workspace of one step's pre-activations
    Layout layout;                     // the op's gate layout (KernelCall::gate_order)
};
inline void bind(KernelCall &call, const SeqFwdStepArgs &x) {
    namespace a = kernel::args::seq_fwd_step;
    call.buffer(a::xw, x.xw).buffer(a::h_prev, x.h_prev).buffer(a::w_h, x.w_h).buffer(a::cs_prev, x.cs_prev);
    call.buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.scalar(a::forget_bias, &x.forget_bias).scalar(a::cell_clip, &x.cell_clip);
    for (int k = 0; k < 7; ++k) call.buffer(kernel::tuple_element(a::lstm, k), *x.lstm[k]);
    call.buffer(a::gates, x.gates).gate_order(x.layout);
}

// seq_fwd_step_rows (the CPU's every step): the step on the caller's rows (with seq_lengths on
// rows not in length order; otherwise `order` is the identity): xw and gates hold the rows run in
// length order, h_prev, cs_prev and lstm the caller's B rows (the step writes the rows it runs only).
struct SeqFwdStepRowsArgs {
    SeqFwdStepArgs step;
    Buf &order;  // int32: the caller's row of each row run
};
inline void bind(KernelCall &call, const SeqFwdStepRowsArgs &x) {
    namespace a = kernel::args::seq_fwd_step;
    bind(call, x.step);
    call.buffer(a::order, x.order);
}

// cell_fwd: gates = b + x_h_prev . w (x_h_prev = [x | h_prev], w read in place), then the gate
// math, writing the cell's seven outputs.
struct CellFwdArgs {
    Buf &x_h_prev, &w, &b, &cs_prev, &wci, &wcf, &wco;
    float &forget_bias, &cell_clip;
    std::array<Buf *, 7> lstm;  // i, cs, f, o, ci, co, h
    Buf &gates;                 // the caller's workspace of the pre-activations
};
inline void bind(KernelCall &call, const CellFwdArgs &x) {
    namespace a = kernel::args::seq_fwd_step;
    call.buffer(a::x_h_prev, x.x_h_prev).buffer(a::w, x.w).buffer(a::b, x.b).buffer(a::cs_prev, x.cs_prev);
    call.buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.scalar(a::forget_bias, &x.forget_bias).scalar(a::cell_clip, &x.cell_clip);
    for (int k = 0; k < 7; ++k) call.buffer(kernel::tuple_element(a::lstm, k), *x.lstm[k]);
    call.buffer(a::gates, x.gates);
}

// seq_fwd_gates: the gate math alone, on the step's pre-activations xw[t] + h . W_h (computed
// in place by a library product).
struct SeqFwdGatesArgs {
    Buf &pre_activations, &cs_prev, &wci, &wcf, &wco;
    float &forget_bias, &cell_clip;
    std::array<Buf *, 7> lstm;  // the step's i, cs, f, o, ci, co, h
};
inline void bind(KernelCall &call, const SeqFwdGatesArgs &x) {
    namespace a = kernel::args::seq_fwd_step;
    call.buffer(a::pre_activations, x.pre_activations).buffer(a::cs_prev, x.cs_prev);
    call.buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.scalar(a::forget_bias, &x.forget_bias).scalar(a::cell_clip, &x.cell_clip);
    for (int k = 0; k < 7; ++k) call.buffer(kernel::tuple_element(a::lstm, k), *x.lstm[k]);
}

// seq_bwd_step: one step of the backward recurrence, writing dgates[t] and the next carry.
struct SeqBwdStepArgs {
    Buf &dgates_next, &w_h_t, &h_grad, &cs_grad, &dcs_carry, &i, &f, &o, &ci, &co, &cs_prev, &wci, &wcf, &wco;
    Buf &dgates, &dcs_carry_out;
    Buf &dh;  // the caller's workspace of one step's total gradient of h
    Layout layout;  // the op's gate layout (KernelCall::gate_order)
};
inline void bind(KernelCall &call, const SeqBwdStepArgs &x) {
    namespace a = kernel::args::seq_bwd_step;
    call.buffer(a::dgates_next, x.dgates_next).buffer(a::w_h_t, x.w_h_t).buffer(a::h_grad, x.h_grad);
    call.buffer(a::cs_grad, x.cs_grad).buffer(a::dcs_carry, x.dcs_carry);
    call.buffer(a::i, x.i).buffer(a::f, x.f).buffer(a::o, x.o).buffer(a::ci, x.ci).buffer(a::co, x.co);
    call.buffer(a::cs_prev, x.cs_prev).buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.buffer(a::dgates, x.dgates).buffer(a::dcs_carry_out, x.dcs_carry_out).buffer(a::dh, x.dh);
    call.gate_order(x.layout);
}

// seq_bwd_step_rows: the CPU's backward step, its per-step inputs (h_grad, cs_grad, i, f, o, ci,
// co, cs_prev) the caller's rows, each row run read at its caller row `order`.
struct SeqBwdStepRowsArgs {
    SeqBwdStepArgs step;
    Buf &order;  // int32 [rows run]
};
inline void bind(KernelCall &call, const SeqBwdStepRowsArgs &x) {
    bind(call, x.step);
    call.buffer(kernel::args::seq_bwd_step::order, x.order);
}

// seq_bwd_gates: the cell's backward math alone, after a library product's dgates[t+1] . W_h^T.
struct SeqBwdGatesArgs {
    Buf &dh_product, &h_grad, &cs_grad, &dcs_carry, &i, &f, &o, &ci, &co, &cs_prev, &wci, &wcf, &wco;
    Buf &dgates, &dcs_carry_out;
};
inline void bind(KernelCall &call, const SeqBwdGatesArgs &x) {
    namespace a = kernel::args::seq_bwd_step;
    call.buffer(a::dh_product, x.dh_product).buffer(a::h_grad, x.h_grad).buffer(a::cs_grad, x.cs_grad);
    call.buffer(a::dcs_carry, x.dcs_carry);
    call.buffer(a::i, x.i).buffer(a::f, x.f).buffer(a::o, x.o).buffer(a::ci, x.ci).buffer(a::co, x.co);
    call.buffer(a::cs_prev, x.cs_prev).buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.buffer(a::dgates, x.dgates).buffer(a::dcs_carry_out, x.dcs_carry_out);
}

// seq_bwd_reduce: b_grad, cs_prev_grad and, with peepholes, wci_grad, wcf_grad, wco_grad.
struct SeqBwdReduceArgs {
    Buf &dgates, &cs, &cs_prev, &dcs_carry;
    Buf &b_grad, &cs_prev_grad;
    std::array<Buf *, 3> peephole_grads{};  // wci_grad, wcf_grad, wco_grad: the peephole variants' only
    Layout layout;                          // the op's gate layout (KernelCall::gate_order; peepholes only)
};
inline void bind(KernelCall &call, const SeqBwdReduceArgs &x) {
    namespace a = kernel::args::seq_bwd_reduce;
    call.buffer(a::dgates, x.dgates).buffer(a::cs, x.cs).buffer(a::cs_prev, x.cs_prev);
    call.buffer(a::dcs_carry, x.dcs_carry).buffer(a::b_grad, x.b_grad).buffer(a::cs_prev_grad, x.cs_prev_grad);
    for (int k = 0; k < 3; ++k)
        if (x.peephole_grads[k]) call.buffer(kernel::tuple_element(a::peephole_grads, k), *x.peephole_grads[k]);
    if (x.peephole_grads[0]) call.gate_order(x.layout);
}

// cell_bwd: LSTMBlockCellGrad's cs_prev_grad, dicfo and, with peepholes, its peephole gradients.
struct CellBwdArgs {
    Buf &cs_prev, &i, &cs, &f, &o, &ci, &co, &cs_grad, &h_grad, &wci, &wcf, &wco;
    Buf &cs_prev_grad, &dicfo;
    std::array<Buf *, 3> peephole_grads{};  // wci_grad, wcf_grad, wco_grad: the peephole variants' only
};
inline void bind(KernelCall &call, const CellBwdArgs &x) {
    namespace a = kernel::args::cell_bwd;
    call.buffer(a::cs_prev, x.cs_prev).buffer(a::i, x.i).buffer(a::cs, x.cs).buffer(a::f, x.f).buffer(a::o, x.o);
    call.buffer(a::ci, x.ci).buffer(a::co, x.co).buffer(a::cs_grad, x.cs_grad).buffer(a::h_grad, x.h_grad);
    call.buffer(a::wci, x.wci).buffer(a::wcf, x.wcf).buffer(a::wco, x.wco);
    call.buffer(a::cs_prev_grad, x.cs_prev_grad).buffer(a::dicfo, x.dicfo);
    for (int k = 0; k < 3; ++k)
        if (x.peephole_grads[k]) call.buffer(kernel::tuple_element(a::peephole_grads, k), *x.peephole_grads[k]);
}

// gemm (gemm_nn_bias, gemm_nn, gemm_tn): c = a . b (+ bias); each form takes the arguments of
// generators/gemm.cpp's table.
struct GemmArgs {
    Buf &a, &b;
    Buf *bias = nullptr;  // gemm_nn_bias
    Buf &c;
    Buf *b_pairs = nullptr;  // gemm_tn on AMX: the scratch b is copied into (generators/gemm.cpp)
};
inline void bind(KernelCall &call, const GemmArgs &x) {
    namespace a = kernel::args::gemm;
    call.buffer(a::a, x.a).buffer(a::b, x.b).buffer(a::c, x.c);
    if (x.bias) call.buffer(a::bias, *x.bias);
    if (x.b_pairs) call.buffer(a::b_pairs, *x.b_pairs);
}
// gemm_tn_panels, one chunk of w_grad's product: c = (accumulate ? c : 0) + [x | h]^T . b and
// sums = (accumulate ? sums : 0) + 1^T . b, b the chunk of dgates in panels; c and sums are also
// read, before they are written (generators/gemm.cpp).
struct WeightGradChunkArgs {
    Buf &x, &h, &b;
    float *accumulate;
    Buf &c, &sums;
};
inline void bind(KernelCall &call, const WeightGradChunkArgs &x) {
    namespace a = kernel::args::gemm;
    call.buffer(a::a, x.x).buffer(a::a_h, x.h).buffer(a::b, x.b).scalar(a::accumulate, x.accumulate);
    call.buffer(a::c_in, x.c).buffer(a::c, x.c).buffer(a::sums_in, x.sums).buffer(a::sums, x.sums);
}

// transpose: out = in^T. panels, panels_t: in packed into float32 panels (generators/panels.cpp).
struct TransposeArgs {
    Buf &in, &out;
};
inline void bind(KernelCall &call, const TransposeArgs &x) {
    call.buffer(kernel::args::transpose::in, x.in).buffer(kernel::args::transpose::out, x.out);
}
struct PanelsArgs {
    Buf &in, &out;
};
inline void bind(KernelCall &call, const PanelsArgs &x) {
    call.buffer(kernel::args::panels::in, x.in).buffer(kernel::args::panels::out, x.out);
}

// gather_rows: out[r, :] = index[r] >= 0 ? in[index[r], :] : 0 (generators/gather_rows.cpp).
struct GatherRowsArgs {
    Buf &in, &index, &out;
};
inline void bind(KernelCall &call, const GatherRowsArgs &x) {
    namespace a = kernel::args::gather_rows;
    call.buffer(a::in, x.in).buffer(a::index, x.index).buffer(a::out, x.out);
}

// A kernel run once with its arguments: run(kernel, exec, GemmArgs{...}).
template <typename Args>
void run(const KernelEntry &kernel, Exec &exec, const Args &args) {
    KernelCall call(kernel, exec);
    bind(call, args);
    call.run();
}

}  // namespace blocklstm::detail
