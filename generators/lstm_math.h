// The LSTM gate math and its derivatives, written once as Halide expressions and used by every
// generator (docs/semantics.md: Forward, Backward). All arithmetic is float32: float16 variants convert
// on load and round once on store (docs/semantics.md). Association order follows TF's kernels.
#pragma once

#include <stdexcept>

#include "Halide.h"
#include "generators/interface.h"

namespace blocklstm::gen {

using Halide::Expr;

// Gate blocks of the 4H-wide gate dimension, in the order of the block index (0..3).
using kernel::Layout;
enum Gate { gate_i, gate_c, gate_f, gate_o };

// Block index of a gate in a layout: ICFO = [i | c | f | o], IFCO = [i | f | c | o].
inline int gate_block(Layout layout, Gate gate) {
    if (layout == Layout::any) throw std::invalid_argument("gate_block: the layout is the kernel's argument");
    if (layout == Layout::ifco && gate == gate_c) return 2;
    if (layout == Layout::ifco && gate == gate_f) return 1;
    return static_cast<int>(gate);
}

// The same where the layout may be Layout::any: the order `gate_order` (0 icfo, 1 ifco) moves c
// and f only.
inline Expr gate_block(Layout layout, Gate gate, const Expr &gate_order) {
    if (layout != Layout::any) return gate_block(layout, gate);
    if (gate == gate_c) return 1 + gate_order;
    if (gate == gate_f) return 2 - gate_order;
    return static_cast<int>(gate);
}

// Halide 21's exp is inlined and vectorised (max relative error 1.3e-7 on [-5, 5]); fast_exp
// (1.7e-6) failed TF's 1e-6 tolerance, and Halide's tanh calls libm's tanhf once per lane. Its
// 2^k comes from x / ln 2 converted to int, which saturates past 2^31: exp gave 0 for x = +inf, x
// past about 1.5e9 and NaN, so sigmoid(-inf) was 1 and a NaN in x or w came out as finite outputs,
// where TF's kernels and torch's give 0 and NaN. So sigmoid caps exp's argument at 89 (exp(89) is
// already inf in float32) and both activations pass a NaN through: the same bits for every
// other z (the cap and the selects cost BlockLSTM 2-4 % of its time at 50,8,128, 0-2 % at
// 200,16,256 and nothing measurable at 100,64,512 on an AMD Zen 3: docs/performance.md).
// z far below 0: exp(-z) -> inf gives sigmoid 0.
inline Expr sigmoid(const Expr &z) {
    return Halide::select(Halide::is_nan(z), z, 1.0f / (1.0f + Halide::exp(Halide::min(-z, 89.0f))));
}

// tanh(z) = sign(z) (1 - e) / (1 + e), e = exp(-2|z|) <= 1: no overflow, absolute error ~1e-7.
inline Expr tanh_act(const Expr &z) {
    Expr e = Halide::exp(-2.0f * Halide::abs(z));
    Expr t = (1.0f - e) / (1.0f + e);
    return Halide::select(Halide::is_nan(z), z, Halide::select(z < 0.0f, -t, t));
}

// Clip the new cell state only when cell_clip > 0 (TF: clip disabled for cell_clip <= 0). A NaN
// stays NaN, as through TF's min and max (Halide's clamp made it the clip).
inline Expr clip_cell(const Expr &cs, const Expr &cell_clip) {
    return Halide::select(cell_clip > 0.0f,
                          Halide::select(Halide::is_nan(cs), cs, Halide::clamp(cs, -cell_clip, cell_clip)), cs);
}

struct CellForward {
    Expr i, cs, f, o, ci, co, h;
};

// The activations of a forward step that read only its inputs, for one (batch row, unit): gate
// pre-activations (bias included) and the cell state entering the step. Peepholes: wci and wcf
// see cs_prev.
struct CellActivations {
    Expr i, ci, f;
};
inline CellActivations cell_activations(const Expr &gate_i_in, const Expr &gate_c_in, const Expr &gate_f_in,
                                        const Expr &cs_prev, const Expr &wci, const Expr &wcf,
                                        const Expr &forget_bias, bool use_peephole) {
    Expr zf = gate_f_in + forget_bias;
    return {sigmoid(use_peephole ? gate_i_in + cs_prev * wci : gate_i_in), tanh_act(gate_c_in),
            sigmoid(use_peephole ? zf + cs_prev * wcf : zf)};
}

// The rest of the step from its activations: the new cell state, its tanh, the output gate and
// h. Peepholes: wco sees the new, clipped cs.
inline CellForward cell_forward(const CellActivations &a, const Expr &gate_o_in, const Expr &cs_prev,
                                const Expr &wco, const Expr &cell_clip, bool use_peephole) {
    CellForward r;
    r.i = a.i;
    r.ci = a.ci;
    r.f = a.f;
    r.cs = clip_cell(r.i * r.ci + r.f * cs_prev, cell_clip);
    r.co = tanh_act(r.cs);
    r.o = sigmoid(use_peephole ? gate_o_in + r.cs * wco : gate_o_in);
    r.h = r.o * r.co;
    return r;
}

struct CellBackward {
    Expr di, dci, df, do_;  // gradients w.r.t. the gate pre-activations
    Expr cs_prev_grad;      // gradient w.r.t. the cell state entering the step
};

// One backward step from the stored activations (sigma' = s(1-s), tanh' = 1-t^2). dh and dcs_in
// are the total gradients reaching h and cs of this step. The cell clip is straight-through,
// as in TF (docs/semantics.md: Backward).
inline CellBackward cell_backward(const Expr &i, const Expr &f, const Expr &o, const Expr &ci,
                                  const Expr &co, const Expr &cs_prev, const Expr &wci,
                                  const Expr &wcf, const Expr &wco, const Expr &dh,
                                  const Expr &dcs_in, bool use_peephole) {
    CellBackward r;
    r.do_ = ((o * (1.0f - o)) * dh) * co;
    Expr dcs = (((1.0f - co * co) * dh) * o) + dcs_in;
    if (use_peephole) dcs = dcs + r.do_ * wco;
    r.dci = ((1.0f - ci * ci) * dcs) * i;
    r.df = ((f * (1.0f - f)) * dcs) * cs_prev;
    r.di = ((i * (1.0f - i)) * dcs) * ci;
    r.cs_prev_grad = dcs * f;
    if (use_peephole) r.cs_prev_grad = (r.cs_prev_grad + r.di * wci) + r.df * wcf;
    return r;
}

// The per-element terms summed into the peephole gradients (docs/semantics.md: Backward).
struct PeepholeGradTerms {
    Expr wci, wcf, wco;
};
inline PeepholeGradTerms peephole_grad_terms(const Expr &di, const Expr &df, const Expr &do_,
                                             const Expr &cs_prev, const Expr &cs) {
    return {di * cs_prev, df * cs_prev, do_ * cs};
}

}  // namespace blocklstm::gen
