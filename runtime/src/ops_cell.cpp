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
    Buf out_i(out.i.data, dt, {B, H}), out_cs(out.cs.data, dt, {B, H}), out_f(out.f.data, dt, {B, H});
    Buf out_o(out.o.data, dt, {B, H}), out_ci(out.ci.data, dt, {B, H}), out_co(out.co.data, dt, {B, H});
    Buf out_h(out.h.data, dt, {B, H});
    std::vector<float> gates = detail::workspace(B * 4 * H);
    Buf gates_buf = Buf::matrix(gates.data(), DType::f32, B, 4 * H, 4 * H);
    KernelCall(find_kernel("seq_fwd_step", dt, attrs.use_peephole, Layout::icfo))
        .buffer("gates", gates_buf)
        .scalar("forget_bias", &fb).scalar("cell_clip", &clip)
        .buffer("xw", xw_buf).buffer("h_prev", h_prev_buf).buffer("w_h", w_h)
        .buffer("cs_prev", cs_prev_buf).buffer("wci", wci_buf).buffer("wcf", wcf_buf)
        .buffer("wco", wco_buf)
        .buffer("lstm.0", out_i).buffer("lstm.1", out_cs).buffer("lstm.2", out_f)
        .buffer("lstm.3", out_o).buffer("lstm.4", out_ci).buffer("lstm.5", out_co)
        .buffer("lstm.6", out_h)
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
    auto rows_by_units = [&](const TV &t) { return Buf(t.data, dt, {B, H}); };
    Buf buf_cs_prev = rows_by_units(cs_prev), buf_i = rows_by_units(i), buf_cs = rows_by_units(cs), buf_f = rows_by_units(f), buf_o = rows_by_units(o);
    Buf buf_ci = rows_by_units(ci), buf_co = rows_by_units(co), buf_cs_grad = rows_by_units(cs_grad), buf_h_grad = rows_by_units(h_grad);
    Buf buf_wci(wci.data, dt, {H}), buf_wcf(wcf.data, dt, {H}), buf_wco(wco.data, dt, {H});
    Buf buf_cs_prev_grad = rows_by_units(out.cs_prev_grad);
    Buf buf_dicfo = Buf::gate_blocks(out.dicfo.data, dt, B, H);
    Buf buf_wci_grad(out.wci_grad.data, dt, {H}), buf_wcf_grad(out.wcf_grad.data, dt, {H});
    Buf buf_wco_grad(out.wco_grad.data, dt, {H});

    KernelCall call(find_kernel("cell_bwd", dt, attrs.use_peephole, Layout::icfo));
    call.buffer("cs_prev", buf_cs_prev).buffer("i", buf_i).buffer("cs", buf_cs).buffer("f", buf_f)
        .buffer("o", buf_o).buffer("ci", buf_ci).buffer("co", buf_co).buffer("cs_grad", buf_cs_grad)
        .buffer("h_grad", buf_h_grad).buffer("wci", buf_wci).buffer("wcf", buf_wcf).buffer("wco", buf_wco)
        .buffer("cs_prev_grad", buf_cs_prev_grad).buffer("dicfo", buf_dicfo);
    if (attrs.use_peephole) {
        call.buffer("peephole_grads.0", buf_wci_grad).buffer("peephole_grads.1", buf_wcf_grad)
            .buffer("peephole_grads.2", buf_wco_grad);
    }
    call.run();
    if (!attrs.use_peephole) {  // TF zero-fills the peephole grads
        detail::zero(out.wci_grad), detail::zero(out.wcf_grad), detail::zero(out.wco_grad);
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
