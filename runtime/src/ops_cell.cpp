// LSTMBlockCell and LSTMBlockCellGrad (ICFO). The cell forward op on the CPU in float32 is one
// kernel, cell_fwd (b + [x | h_prev] . w with w read in place, then the gate math); elsewhere the
// sequence's forward step over one step.
#include <cstring>

#include "runtime/src/buf.h"
#include "runtime/src/exec.h"
#include "runtime/src/kernel_args.h"
#include "runtime/src/kernel_table.h"
#include "runtime/src/products.h"
#include "runtime/src/validate.h"
#include "schedules/step_tiles.h"

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

// TF's checks of the cell ops: ranks first, then sizes; the cell state must not be empty.
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
    check_state_and_weights(v, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, d.B, d.I,
                            d.H);
    check_int32_extent(v, "x", "a gate workspace [B, 4*cell_size]", saturating_product({d.B, 4, d.H}));
    return d;
}

std::vector<std::vector<int64_t>> cell_grad_shapes(const CellDims &d) {
    return {{d.B, d.H}, {d.B, 4 * d.H}, {d.H}, {d.H}, {d.H}};
}

Checked<CellDims> validate_cell(const CellInputs &in, const LSTMOutputs<TV> *out) {
    Validator v("LSTMBlockCell");
    const CellDims d = validate_cell_inputs(v, in);
    validate_forward_outputs(v, out, {d.B, d.H});
    return checked(v, d, std::vector<std::vector<int64_t>>(7, {d.B, d.H}));
}

Checked<CellDims> validate_cell_grad(const CellInputs &in, const CellActivations &act,
                                     const LSTMBlockCellGradOutputs<TV> *out) {
    Validator v("LSTMBlockCellGrad");
    const CellDims d = validate_cell_inputs(v, in);
    check_activations(v, act, {d.B, d.H});
    validate_outputs(v, out, cell_grad_shapes(d));
    return checked(v, d, cell_grad_shapes(d));
}

// LSTMBlockCell on the CPU in one kernel call (or two: a last row or two past whole register
// tiles in a call of their own, step_tiles.h). The product's rows [x | h_prev] are copied into
// one operand (B x (I+H) elements against 4H times as many multiply-adds); w is read in place:
// BlockLSTM's step over one call packed W_x's and W_h's panels first, 53 % of the call's time at
// B = 1, H = 256 (Intel Xeon 6).
void cell_forward_cpu(Exec &exec, const PlanKernels &kernels, DType dt, const CellDims &d, const CellInputs &in,
                      const LSTMOutputs<TV> &out, const LSTMBlockCellAttrs &attrs) {
    const int64_t B = d.B, I = d.I, H = d.H, es = static_cast<int64_t>(size_of(dt));
    Scratch x_h_prev(exec, B * (I + H) * es, Scratch::Fill::none);
    for (int64_t r = 0; r < B; ++r) {
        char *row = static_cast<char *>(x_h_prev.data()) + r * (I + H) * es;
        std::memcpy(row, static_cast<const char *>(in.x.data) + r * I * es, static_cast<std::size_t>(I * es));
        std::memcpy(row + I * es, static_cast<const char *>(in.h_prev.data) + r * H * es, static_cast<std::size_t>(H * es));
    }
    Scratch gates(exec, B * 4 * H * 4, Scratch::Fill::none);
    const Device dev = Device::cpu;
    Buf a(dev, x_h_prev.data(), dt, {B, I + H}), w = Buf::matrix(dev, in.w.data, dt, I + H, 4 * H, 4 * H);
    Buf b(dev, in.b.data, dt, {4 * H}), cs_prev(dev, in.cs_prev.data, dt, {B, H});
    Buf wci(dev, in.wci.data, dt, {H}), wcf(dev, in.wcf.data, dt, {H}), wco(dev, in.wco.data, dt, {H});
    Buf gates_buf = Buf::matrix(dev, gates.data(), DType::f32, B, 4 * H, 4 * H);
    const TV *outs[7] = {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h};
    // i, f, o, ci, co left out (inference): written into a scratch [B, H] each, never read.
    const bool only_state = left_out(out.i);
    Scratch unused(exec, only_state ? 5 * B * H * es : 0, Scratch::Fill::none);
    void *written_to[7];
    for (int k = 0, scratch = 0; k < 7; ++k)
        written_to[k] = left_out(*outs[k]) ? offset_bytes(unused.data(), scratch++ * B * H, dt) : outs[k]->data;
    std::vector<Buf> slices;
    for (void *data : written_to) slices.emplace_back(dev, data, dt, std::initializer_list<int64_t>{B, H});
    float fb = attr_in_dtype(attrs.forget_bias, dt), clip = attr_in_dtype(attrs.cell_clip, dt);
    KernelCall cell(kernels[Family::cell_fwd], exec);
    bind(cell, CellFwdArgs{.x_h_prev = a, .w = w, .b = b, .cs_prev = cs_prev, .wci = wci, .wcf = wcf, .wco = wco,
                           .forget_bias = fb, .cell_clip = clip,
                           .lstm = {&slices[0], &slices[1], &slices[2], &slices[3], &slices[4], &slices[5], &slices[6]},
                           .gates = gates_buf});
    const int tile_rows = cpu_target_knob(exec.cpu_target(), "gemm_step_tile_rows");
    step_tiles::each_call(B, tile_rows, [&](int64_t r0, int64_t count) {
        a.set_data(offset_bytes(x_h_prev.data(), r0 * (I + H), dt));
        cs_prev.set_data(offset_bytes(in.cs_prev.data, r0 * H, dt));
        gates_buf.set_data(gates.floats() + r0 * 4 * H);
        for (int k = 0; k < 7; ++k) slices[k].set_data(offset_bytes(written_to[k], r0 * H, dt));
        for (Buf *t : {&a, &cs_prev, &gates_buf}) t->set_rows(count);
        for (Buf &t : slices) t.set_rows(count);
        cell.run();
    });
}

}  // namespace

void check_cell_forward(const std::vector<TV> &a, const LSTMOutputs<TV> &out) {
    (void)validate_cell({a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]}, &out);
}

void check_cell_grad(const std::vector<TV> &a, const LSTMBlockCellGradOutputs<TV> &out) {
    (void)validate_cell_grad({a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]},
                             {a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]}, &out);
}

}  // namespace detail

using detail::Buf;
using detail::Layout;

void LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                   const TV &wcf, const TV &wco, const TV &b, const LSTMOutputs<TV> &out,
                   const LSTMBlockCellAttrs &attrs) {
    const detail::CellInputs in{x, cs_prev, h_prev, w, wci, wcf, wco, b};
    const auto c = detail::validate_cell(in, &out);
    if (c.device == Device::cpu && c.dtype == DType::f32) {  // the plans (plans.h: kCellCpuFloat32)
        const detail::PlanKernels kernels(plan::Kind::cell, c.device, c.dtype, {attrs.use_peephole, Layout::icfo});
        detail::Exec exec(c.device, c.some_data);
        return detail::cell_forward_cpu(exec, kernels, c.dtype, c.dims, in, out, attrs);
    }
    // Elsewhere one cell step is BlockLSTM over one time step: the same input projection, step
    // kernel and attrs, on [1, ...] views of x and the outputs (the cell's stricter checks ran above).
    auto one_step = [](const TV &t) {
        TV v = t;
        if (!detail::left_out(t)) v.shape.insert(v.shape.begin(), 1);  // left out stays left out
        return v;
    };
    BlockLSTM(1, one_step(x), cs_prev, h_prev, w, wci, wcf, wco, b,
              {one_step(out.i), one_step(out.cs), one_step(out.f), one_step(out.o),
               one_step(out.ci), one_step(out.co), one_step(out.h)},
              BlockLSTMAttrs{attrs.forget_bias, attrs.cell_clip, attrs.use_peephole});
}

LSTMOutputs<Tensor> LSTMBlockCell(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,
                                  const TV &wci, const TV &wcf, const TV &wco, const TV &b,
                                  const LSTMBlockCellAttrs &attrs) {
    return detail::into_new_outputs<LSTMOutputs>(
        [&](auto *none) { return detail::validate_cell({x, cs_prev, h_prev, w, wci, wcf, wco, b}, none); },
        [&](const LSTMOutputs<TV> &out) { LSTMBlockCell(x, cs_prev, h_prev, w, wci, wcf, wco, b, out, attrs); });
}

void LSTMBlockCellGrad(const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci,
                       const TV &wcf, const TV &wco, const TV &b, const TV &i, const TV &cs,
                       const TV &f, const TV &o, const TV &ci, const TV &co, const TV &cs_grad,
                       const TV &h_grad, const LSTMBlockCellGradOutputs<TV> &out,
                       const GradAttrs &attrs) {
    const auto c = detail::validate_cell_grad({x, cs_prev, h_prev, w, wci, wcf, wco, b},
                                              {i, cs, f, o, ci, co, cs_grad, h_grad}, &out);
    const DType dt = c.dtype;
    const Device dev = c.device;
    const int64_t B = c.dims.B, H = c.dims.H;
    const detail::PlanKernels kernels(plan::Kind::cell_grad, dev, dt, {attrs.use_peephole, Layout::icfo});
    detail::Exec exec(dev, c.some_data);
    auto rows_by_units = [&](const TV &t) { return Buf(dev, t.data, dt, {B, H}); };
    auto units = [&](const TV &t) { return Buf(dev, t.data, dt, {H}); };
    Buf buf_cs_prev = rows_by_units(cs_prev), buf_i = rows_by_units(i), buf_cs = rows_by_units(cs);
    Buf buf_f = rows_by_units(f), buf_o = rows_by_units(o), buf_ci = rows_by_units(ci);
    Buf buf_co = rows_by_units(co), buf_cs_grad = rows_by_units(cs_grad), buf_h_grad = rows_by_units(h_grad);
    Buf buf_wci = units(wci), buf_wcf = units(wcf), buf_wco = units(wco);
    Buf buf_cs_prev_grad = rows_by_units(out.cs_prev_grad);
    Buf buf_dicfo = Buf::gate_blocks(dev, out.dicfo.data, dt, B, H);
    Buf buf_wci_grad = units(out.wci_grad), buf_wcf_grad = units(out.wcf_grad);
    Buf buf_wco_grad = units(out.wco_grad);

    detail::CellBwdArgs args{.cs_prev = buf_cs_prev, .i = buf_i, .cs = buf_cs, .f = buf_f, .o = buf_o,
                             .ci = buf_ci, .co = buf_co, .cs_grad = buf_cs_grad, .h_grad = buf_h_grad,
                             .wci = buf_wci, .wcf = buf_wcf, .wco = buf_wco, .cs_prev_grad = buf_cs_prev_grad,
                             .dicfo = buf_dicfo};
    if (attrs.use_peephole) args.peephole_grads = {&buf_wci_grad, &buf_wcf_grad, &buf_wco_grad};
    detail::run(kernels[detail::Family::cell_bwd], exec, args);
    if (!attrs.use_peephole) {  // TF zero-fills the peephole grads
        detail::zero(exec, out.wci_grad), detail::zero(exec, out.wcf_grad), detail::zero(exec, out.wco_grad);
    }
}

LSTMBlockCellGradOutputs<Tensor> LSTMBlockCellGrad(
    const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w, const TV &wci, const TV &wcf,
    const TV &wco, const TV &b, const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci,
    const TV &co, const TV &cs_grad, const TV &h_grad, const GradAttrs &attrs) {
    return detail::into_new_outputs<LSTMBlockCellGradOutputs>(
        [&](auto *none) {
            return detail::validate_cell_grad({x, cs_prev, h_prev, w, wci, wcf, wco, b},
                                              {i, cs, f, o, ci, co, cs_grad, h_grad}, none);
        },
        [&](const LSTMBlockCellGradOutputs<TV> &out) {
            LSTMBlockCellGrad(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad,
                              h_grad, out, attrs);
        });
}

}  // namespace blocklstm
