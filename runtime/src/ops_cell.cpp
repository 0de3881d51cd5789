// LSTMBlockCell and LSTMBlockCellGrad (ICFO). The cell forward op is the sequence's forward step
// for one step: gemm_nn_bias (x . W_x + b) then seq_fwd_step (h_prev . W_h + the gate math).
#include <cstring>

#include "runtime/src/internal.h"

namespace blocklstm {
namespace detail {
namespace {

struct CellInputs {
    const TV &x, &cs_prev, &h_prev, &w, &wci, &wcf, &wco, &b;
};
struct CellDims {
    int64_t B, I, H;
};
struct CellActivations {
    const TV &i, &cs, &f, &o, &ci, &co, &cs_grad, &h_grad;
    template <typename F>
    void each(F &&fn) const {
        fn("i", i), fn("cs", cs), fn("f", f), fn("o", o), fn("ci", ci), fn("co", co),
            fn("cs_grad", cs_grad), fn("h_grad", h_grad);
    }
};

// Spec §6.1 / §6.2 / §6.5: ranks first, then sizes; the cell state must not be empty.
CellDims validate_cell_inputs(Validator &v, const CellInputs &in) {
    check_inputs(v, {{"x", in.x, 2}, {"cs_prev", in.cs_prev, 2}, {"h_prev", in.h_prev, 2},
                     {"w", in.w, 2}, {"wci", in.wci, 1}, {"wcf", in.wcf, 1}, {"wco", in.wco, 1},
                     {"b", in.b, 1}});
    CellDims d{in.x.shape[0], in.x.shape[1], in.cs_prev.shape[1]};
    v.shape("cs_prev", in.cs_prev, {d.B, -1});
    if (d.B == 0 || d.H == 0) {
        v.fail_arg("cs_prev", "is empty (shape " + shape_string(in.cs_prev.shape) +
                                  "): expected at least one batch row and one unit");
    }
    v.shape("h_prev", in.h_prev, {d.B, d.H});
    v.shape("w", in.w, {d.I + d.H, 4 * d.H});
    v.shape("wci", in.wci, {d.H});
    v.shape("wcf", in.wcf, {d.H});
    v.shape("wco", in.wco, {d.H});
    v.shape("b", in.b, {4 * d.H});
    check_int32_extent(v, "x", "a gate workspace [B, 4*cell_size]", saturating_product({d.B, 4, d.H}));
    return d;
}

std::vector<std::vector<int64_t>> cell_grad_shapes(const CellDims &d) {
    return {{d.B, d.H}, {d.B, 4 * d.H}, {d.H}, {d.H}, {d.H}};
}

CellDims validate_cell(const CellInputs &in, const LSTMOutputs<TV> *out, DType *dtype) {
    Validator v("LSTMBlockCell");
    CellDims d = validate_cell_inputs(v, in);
    validate_outputs(v, out, std::vector<std::vector<int64_t>>(7, {d.B, d.H}));
    *dtype = v.dtype();
    return d;
}

CellDims validate_cell_grad(const CellInputs &in, const CellActivations &act,
                            const LSTMBlockCellGradOutputs<TV> *out, DType *dtype) {
    Validator v("LSTMBlockCellGrad");
    CellDims d = validate_cell_inputs(v, in);
    act.each([&](const char *name, const TV &t) { v.rank(name, t, 2); });
    act.each([&](const char *name, const TV &t) { v.tensor(name, t); });
    act.each([&](const char *name, const TV &t) { v.shape(name, t, {d.B, d.H}); });
    validate_outputs(v, out, cell_grad_shapes(d));
    *dtype = v.dtype();
    return d;
}

}  // namespace
}  // namespace detail

using detail::Buf;
using detail::KernelCall;
using detail::Layout;
using detail::find_kernel;

void LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                   const TV &wcf, const TV &wco, const TV &b, const LSTMOutputs<TV> &out,
                   const LSTMBlockCellAttrs &attrs) {
    DType dt;
    const auto d = detail::validate_cell({x, cs_prev, h_prev, w, wci, wcf, wco, b}, &out, &dt);
    const int64_t B = d.B, I = d.I, H = d.H;

    std::vector<float> xw = detail::workspace(B * 4 * H);
    detail::input_projection(dt, x.data, B, I, H, w.data, b.data, xw.data());
    Buf xw_buf = Buf::matrix(xw.data(), DType::f32, B, 4 * H, 4 * H);
    float fb = detail::attr_in_dtype(attrs.forget_bias, dt);
    float clip = detail::attr_in_dtype(attrs.cell_clip, dt);
    Buf h_prev_buf(h_prev.data, dt, {B, H}), cs_prev_buf(cs_prev.data, dt, {B, H});
    Buf w_h = Buf::matrix(detail::offset_bytes(w.data, I * 4 * H, dt), dt, H, 4 * H, 4 * H);
    Buf wci_buf(wci.data, dt, {H}), wcf_buf(wcf.data, dt, {H}), wco_buf(wco.data, dt, {H});
    Buf o_i(out.i.data, dt, {B, H}), o_cs(out.cs.data, dt, {B, H}), o_f(out.f.data, dt, {B, H});
    Buf o_o(out.o.data, dt, {B, H}), o_ci(out.ci.data, dt, {B, H}), o_co(out.co.data, dt, {B, H});
    Buf o_h(out.h.data, dt, {B, H});
    std::vector<float> gates = detail::workspace(B * 4 * H);
    Buf gates_buf = Buf::matrix(gates.data(), DType::f32, B, 4 * H, 4 * H);
    KernelCall(find_kernel("seq_fwd_step", dt, attrs.use_peephole, Layout::icfo))
        .buffer("gates", gates_buf)
        .scalar("forget_bias", &fb).scalar("cell_clip", &clip)
        .buffer("xw", xw_buf).buffer("h_prev", h_prev_buf).buffer("w_h", w_h)
        .buffer("cs_prev", cs_prev_buf).buffer("wci", wci_buf).buffer("wcf", wcf_buf)
        .buffer("wco", wco_buf)
        .buffer("lstm.0", o_i).buffer("lstm.1", o_cs).buffer("lstm.2", o_f).buffer("lstm.3", o_o)
        .buffer("lstm.4", o_ci).buffer("lstm.5", o_co).buffer("lstm.6", o_h)
        .run();
}

LSTMOutputs<Tensor> LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                                  const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                  const LSTMBlockCellAttrs &attrs) {
    DType dt;
    const auto d = detail::validate_cell({x, cs_prev, h_prev, w, wci, wcf, wco, b}, nullptr, &dt);
    auto out = detail::allocate_outputs<LSTMOutputs>(
        dt, std::vector<std::vector<int64_t>>(7, {d.B, d.H}));
    LSTMBlockCell(x, cs_prev, h_prev, w, wci, wcf, wco, b, detail::views(out), attrs);
    return out;
}

void LSTMBlockCellGrad(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                       const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
                       const TV &f, const TV &o, const TV &ci, const TV &co, const TV &cs_grad,
                       const TV &h_grad, const LSTMBlockCellGradOutputs<TV> &out,
                       const GradAttrs &attrs) {
    DType dt;
    const auto d = detail::validate_cell_grad({x, cs_prev, h_prev, w, wci, wcf, wco, b},
                                              {i, cs, f, o, ci, co, cs_grad, h_grad}, &out, &dt);
    const int64_t B = d.B, H = d.H;
    auto bh = [&](const TV &t) { return Buf(t.data, dt, {B, H}); };
    Buf b_cs_prev = bh(cs_prev), b_i = bh(i), b_cs = bh(cs), b_f = bh(f), b_o = bh(o);
    Buf b_ci = bh(ci), b_co = bh(co), b_cs_grad = bh(cs_grad), b_h_grad = bh(h_grad);
    Buf b_wci(wci.data, dt, {H}), b_wcf(wcf.data, dt, {H}), b_wco(wco.data, dt, {H});
    Buf b_cs_prev_grad = bh(out.cs_prev_grad);
    Buf b_dicfo = Buf::gate_blocks(out.dicfo.data, dt, B, H);
    Buf b_wci_grad(out.wci_grad.data, dt, {H}), b_wcf_grad(out.wcf_grad.data, dt, {H});
    Buf b_wco_grad(out.wco_grad.data, dt, {H});

    KernelCall call(find_kernel("cell_bwd", dt, attrs.use_peephole, Layout::icfo));
    call.buffer("cs_prev", b_cs_prev).buffer("i", b_i).buffer("cs", b_cs).buffer("f", b_f)
        .buffer("o", b_o).buffer("ci", b_ci).buffer("co", b_co).buffer("cs_grad", b_cs_grad)
        .buffer("h_grad", b_h_grad).buffer("wci", b_wci).buffer("wcf", b_wcf).buffer("wco", b_wco)
        .buffer("cs_prev_grad", b_cs_prev_grad).buffer("dicfo", b_dicfo);
    if (attrs.use_peephole) {
        call.buffer("peephole_grads.0", b_wci_grad).buffer("peephole_grads.1", b_wcf_grad)
            .buffer("peephole_grads.2", b_wco_grad);
    }
    call.run();
    if (!attrs.use_peephole) {  // TF zero-fills the peephole grads
        std::memset(out.wci_grad.data, 0, out.wci_grad.num_bytes());
        std::memset(out.wcf_grad.data, 0, out.wcf_grad.num_bytes());
        std::memset(out.wco_grad.data, 0, out.wco_grad.num_bytes());
    }
}

LSTMBlockCellGradOutputs<Tensor> LSTMBlockCellGrad(
    const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci, const TV &wcf,
    const TV &wco, const TV &b, const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
    const TV &co, const TV &cs_grad, const TV &h_grad, const GradAttrs &attrs) {
    DType dt;
    const auto d = detail::validate_cell_grad({x, cs_prev, h_prev, w, wci, wcf, wco, b},
                                              {i, cs, f, o, ci, co, cs_grad, h_grad}, nullptr, &dt);
    auto out = detail::allocate_outputs<LSTMBlockCellGradOutputs>(dt, detail::cell_grad_shapes(d));
    LSTMBlockCellGrad(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad,
                      detail::views(out), attrs);
    return out;
}

}  // namespace blocklstm
