// BlockLSTM, BlockLSTMV2, BlockLSTMGrad, BlockLSTMGradV2: the time loops of DESIGN.md §3.
// Only the recurrence runs per step; the input projection (forward) and x_grad, w_grad, b_grad
// and the peephole grads (backward) are batched over the whole sequence.
#include <algorithm>
#include <cstring>

#include "runtime/src/internal.h"

namespace blocklstm {
namespace detail {
namespace {

struct SeqInputs {
    int64_t seq_len_max;
    const TV &x, &cs_prev, &h_prev, &w, &wci, &wcf, &wco, &b;
};
struct SeqDims {
    int64_t T, B, I, H, L;
};
// The forward activations and output gradients the grad ops take, in TF's order.
struct SeqActivations {
    const TV &i, &cs, &f, &o, &ci, &co, &h, &cs_grad, &h_grad;
    template <typename F>
    void each(F &&fn) const {
        fn("i", i), fn("cs", cs), fn("f", f), fn("o", o), fn("ci", ci), fn("co", co), fn("h", h),
            fn("cs_grad", cs_grad), fn("h_grad", h_grad);
    }
};

// The checks of spec §6.3 / §6.4 / §6.5 on the nine inputs shared by all sequence ops. The cell
// size comes from cs_prev (forward) or from w (grad, as TF does).
SeqDims validate_sequence_inputs(Validator &v, const SeqInputs &in, bool cell_size_from_w) {
    check_inputs(v, {{"x", in.x, 3}, {"cs_prev", in.cs_prev, 2}, {"h_prev", in.h_prev, 2},
                     {"w", in.w, 2}, {"wci", in.wci, 1}, {"wcf", in.wcf, 1}, {"wco", in.wco, 1},
                     {"b", in.b, 1}});

    SeqDims d{in.x.shape[0], in.x.shape[1], in.x.shape[2], 0, in.seq_len_max};
    if (cell_size_from_w) {
        if (in.w.shape[1] <= 0 || in.w.shape[1] % 4 != 0) {
            v.fail_arg("w", "has shape " + shape_string(in.w.shape) +
                                ": expected a positive multiple of 4 columns (4 * cell size)");
        }
        d.H = in.w.shape[1] / 4;
    } else {
        d.H = in.cs_prev.shape[1];
        if (d.H == 0) {
            v.fail_arg("cs_prev", "has shape " + shape_string(in.cs_prev.shape) +
                                      ": expected a cell size of at least 1");
        }
    }
    check_state_and_weights(v, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, d.B, d.I,
                            d.H);
    if (d.L < 0 || d.L > d.T) {
        v.fail_arg("seq_len_max", "is " + std::to_string(d.L) + ": expected a value in [0, " +
                                      std::to_string(d.T) + "] (x has " + std::to_string(d.T) +
                                      " time steps)");
    }
    check_int32_extent(v, "x", "a gate workspace [T*B, 4*cell_size]", saturating_product({d.T, d.B, 4, d.H}));
    return d;
}

std::vector<std::vector<int64_t>> forward_shapes(const SeqDims &d) {
    return std::vector<std::vector<int64_t>>(7, {d.T, d.B, d.H});
}

std::vector<std::vector<int64_t>> grad_shapes(const SeqDims &d) {
    return {{d.T, d.B, d.I}, {d.B, d.H}, {d.B, d.H}, {d.I + d.H, 4 * d.H},
            {d.H},           {d.H},      {d.H},      {4 * d.H}};
}

SeqDims validate_forward(const char *op, const SeqInputs &in, const LSTMOutputs<TV> *out,
                         DType *dtype) {
    Validator v(op);
    SeqDims d = validate_sequence_inputs(v, in, false);
    validate_outputs(v, out, forward_shapes(d));
    *dtype = v.dtype();
    return d;
}

SeqDims validate_grad(const char *op, const SeqInputs &in, const SeqActivations &act,
                      const BlockLSTMGradOutputs<TV> *out, DType *dtype) {
    Validator v(op);
    SeqDims d = validate_sequence_inputs(v, in, true);
    check_activations(v, act, {d.T, d.B, d.H});
    validate_outputs(v, out, grad_shapes(d));
    *dtype = v.dtype();
    return d;
}

// ---- forward ------------------------------------------------------------------------------------

void run_forward(const char *op, Layout layout, const SeqInputs &in, const LSTMOutputs<TV> &out,
                 float forget_bias, float cell_clip, bool use_peephole) {
    DType dt;
    const SeqDims d = validate_forward(op, in, &out, &dt);
    const int64_t B = d.B, I = d.I, H = d.H, L = d.L;
    const KernelEntry &step_kernel = find_kernel("seq_fwd_step", dt, use_peephole, layout);

    // Every output is zero past seq_len_max (TF leaves i, f, o, ci, co unwritten there).
    each_output(out, [&](const char *, const TV &t) { zero_steps(t, L); });
    if (L == 0 || B == 0) return;

    // xw = x . W_x + b for all L steps in one GEMM.
    std::vector<float> xw = workspace(L * B * 4 * H);
    input_projection(dt, in.x.data, L * B, I, H, in.w.data, in.b.data, xw.data());

    // The recurrence: one seq_fwd_step per step; step t reads the outputs of step t-1.
    float fb = attr_in_dtype(forget_bias, dt), clip = attr_in_dtype(cell_clip, dt);
    Buf xw_t = Buf::matrix(xw.data(), DType::f32, B, 4 * H, 4 * H);
    Buf h_prev(in.h_prev.data, dt, {B, H}), cs_prev(in.cs_prev.data, dt, {B, H});
    Buf w_h = Buf::matrix(offset_bytes(in.w.data, I * 4 * H, dt), dt, H, 4 * H, 4 * H);
    Buf wci(in.wci.data, dt, {H}), wcf(in.wcf.data, dt, {H}), wco(in.wco.data, dt, {H});
    const TV *outs[7] = {&out.i, &out.cs, &out.f, &out.o, &out.ci, &out.co, &out.h};
    std::vector<Buf> slices;
    for (const TV *t : outs) slices.emplace_back(t->data, dt, std::initializer_list<int64_t>{B, H});

    std::vector<float> gates = workspace(B * 4 * H);  // one step's pre-activations, reused
    Buf gates_buf = Buf::matrix(gates.data(), DType::f32, B, 4 * H, 4 * H);

    KernelCall step(step_kernel);
    step.scalar("forget_bias", &fb).scalar("cell_clip", &clip).buffer("gates", gates_buf);
    step.buffer("xw", xw_t).buffer("h_prev", h_prev).buffer("w_h", w_h).buffer("cs_prev", cs_prev);
    step.buffer("wci", wci).buffer("wcf", wcf).buffer("wco", wco);
    const char *names[7] = {"lstm.0", "lstm.1", "lstm.2", "lstm.3", "lstm.4", "lstm.5", "lstm.6"};
    for (int k = 0; k < 7; ++k) step.buffer(names[k], slices[k]);

    const int64_t slice = B * H;
    for (int64_t t = 0; t < L; ++t) {
        xw_t.set_host(xw.data() + t * B * 4 * H);
        if (t > 0) {
            h_prev.set_host(offset_bytes(out.h.data, (t - 1) * slice, dt));
            cs_prev.set_host(offset_bytes(out.cs.data, (t - 1) * slice, dt));
        }
        for (int k = 0; k < 7; ++k) slices[k].set_host(offset_bytes(outs[k]->data, t * slice, dt));
        step.run();
    }
}

// dst[cols, rows] = src[rows, cols]^T, in 32 x 32 blocks so both sides stay in cache.
template <typename T>
void transpose(const T *src, T *dst, int64_t rows, int64_t cols) {
    constexpr int64_t block = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        for (int64_t c0 = 0; c0 < cols; c0 += block) {
            for (int64_t r = r0; r < std::min(r0 + block, rows); ++r) {
                for (int64_t c = c0; c < std::min(c0 + block, cols); ++c) dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
}

// ---- backward -----------------------------------------------------------------------------------

void run_grad(const char *op, Layout layout, const SeqInputs &in, const SeqActivations &act,
              const BlockLSTMGradOutputs<TV> &out, bool use_peephole) {
    DType dt;
    const SeqDims d = validate_grad(op, in, act, &out, &dt);
    const int64_t B = d.B, I = d.I, H = d.H, L = d.L;
    const std::size_t es = size_of(dt);
    const KernelEntry &step_kernel = find_kernel("seq_bwd_step", dt, use_peephole, layout);
    const KernelEntry &gemm_nn = find_kernel("gemm_nn", dt, false, layout);
    const KernelEntry &gemm_tn = find_kernel("gemm_tn", dt, false, layout);
    const KernelEntry &reduce_kernel = find_kernel("seq_bwd_reduce", dt, use_peephole, layout);

    zero_steps(out.x_grad, L);
    if (!use_peephole) {
        zero(out.wci_grad), zero(out.wcf_grad), zero(out.wco_grad);
    }
    if (L == 0 || B == 0) {  // nothing flows back: every gradient is zero
        each_output(out, [&](const char *, const TV &t) { zero(t); });
        return;
    }

    // w^T [4H, I+H], so that the products with W_x^T and W_h^T read contiguous rows. A copy of
    // 4H(I+H) elements per call, against 2 L B 4H (I+H) multiply-adds.
    std::vector<std::byte> w_t(static_cast<std::size_t>(4 * H * (I + H)) * es);
    if (dt == DType::f16) {
        transpose(static_cast<const uint16_t *>(in.w.data), reinterpret_cast<uint16_t *>(w_t.data()), I + H, 4 * H);
    } else {
        transpose(static_cast<const uint32_t *>(in.w.data), reinterpret_cast<uint32_t *>(w_t.data()), I + H, 4 * H);
    }

    // The recurrence, reverse time: dgates[t] for every t, the cell-state carry ping-pongs.
    std::vector<float> dgates = workspace(L * B * 4 * H), zeros = workspace(B * 4 * H);
    std::vector<float> carry[2] = {workspace(B * H), workspace(B * H)};
    Buf dnext = Buf::matrix(zeros.data(), DType::f32, B, 4 * H, 4 * H);
    Buf w_h_t = Buf::matrix(w_t.data() + I * es, dt, 4 * H, H, I + H);
    Buf h_grad(nullptr, dt, {B, H}), cs_grad(nullptr, dt, {B, H});
    Buf i(nullptr, dt, {B, H}), f(nullptr, dt, {B, H}), o(nullptr, dt, {B, H});
    Buf ci(nullptr, dt, {B, H}), co(nullptr, dt, {B, H}), cs_prev(nullptr, dt, {B, H});
    Buf wci(in.wci.data, dt, {H}), wcf(in.wcf.data, dt, {H}), wco(in.wco.data, dt, {H});
    Buf carry_in(nullptr, DType::f32, {B, H}), carry_out(nullptr, DType::f32, {B, H});
    Buf dgates_t = Buf::gate_blocks(nullptr, DType::f32, B, H);
    std::vector<float> dh = workspace(B * H);  // one step's total gradient of h, reused
    Buf dh_buf = Buf::matrix(dh.data(), DType::f32, B, H, H);

    KernelCall step(step_kernel);
    step.buffer("dgates_next", dnext).buffer("w_h_t", w_h_t).buffer("h_grad", h_grad);
    step.buffer("cs_grad", cs_grad).buffer("dcs_carry", carry_in);
    step.buffer("i", i).buffer("f", f).buffer("o", o).buffer("ci", ci).buffer("co", co);
    step.buffer("cs_prev", cs_prev).buffer("wci", wci).buffer("wcf", wcf).buffer("wco", wco);
    step.buffer("dgates", dgates_t).buffer("dcs_carry_out", carry_out).buffer("dh", dh_buf);

    const int64_t slice = B * H;
    for (int64_t t = L - 1; t >= 0; --t) {
        auto at = [&](const TV &x, int64_t step_index) { return offset_bytes(x.data, step_index * slice, dt); };
        if (t < L - 1) dnext.set_host(dgates.data() + (t + 1) * B * 4 * H);
        h_grad.set_host(at(act.h_grad, t));
        cs_grad.set_host(at(act.cs_grad, t));
        i.set_host(at(act.i, t)), f.set_host(at(act.f, t)), o.set_host(at(act.o, t));
        ci.set_host(at(act.ci, t)), co.set_host(at(act.co, t));
        cs_prev.set_host(t == 0 ? in.cs_prev.data : at(act.cs, t - 1));
        carry_in.set_host(carry[t % 2].data());
        carry_out.set_host(carry[(t + 1) % 2].data());
        dgates_t.set_host(dgates.data() + t * B * 4 * H);
        step.run();
    }
    std::vector<float> &final_carry = carry[1];  // written by the step t = 0

    // Batched over the sequence.
    Buf dgates_all = Buf::matrix(dgates.data(), DType::f32, L * B, 4 * H, 4 * H);
    if (I > 0) {  // x_grad[0:L] = dgates . W_x^T
        Buf w_x_t = Buf::matrix(w_t.data(), dt, 4 * H, I, I + H);
        Buf x_grad = Buf::matrix(out.x_grad.data, dt, L * B, I, I);
        KernelCall(gemm_nn).buffer("a", dgates_all).buffer("b", w_x_t).buffer("c", x_grad).run();
    }
    {  // h_prev_grad = dgates[0] . W_h^T
        Buf dgates_0 = Buf::matrix(dgates.data(), DType::f32, B, 4 * H, 4 * H);
        Buf h_prev_grad = Buf::matrix(out.h_prev_grad.data, dt, B, H, H);
        KernelCall(gemm_nn).buffer("a", dgates_0).buffer("b", w_h_t).buffer("c", h_prev_grad).run();
    }
    if (I > 0) {  // w_grad[0:I] = x[0:L]^T . dgates
        Buf x_seq = Buf::matrix(in.x.data, dt, L * B, I, I);
        Buf w_grad_x = Buf::matrix(out.w_grad.data, dt, I, 4 * H, 4 * H);
        KernelCall(gemm_tn).buffer("a", x_seq).buffer("b", dgates_all).buffer("c", w_grad_x).run();
    }
    {  // w_grad[I:I+H] = h_prev_seq^T . dgates, h_prev_seq = [h_prev, h[0], ..., h[L-2]]
        std::vector<std::byte> h_seq(static_cast<std::size_t>(L * B * H) * es);
        std::memcpy(h_seq.data(), in.h_prev.data, slice * es);
        if (L > 1) std::memcpy(h_seq.data() + slice * es, act.h.data, (L - 1) * slice * es);
        Buf a = Buf::matrix(h_seq.data(), dt, L * B, H, H);
        Buf w_grad_h = Buf::matrix(offset_bytes(out.w_grad.data, I * 4 * H, dt), dt, H, 4 * H, 4 * H);
        KernelCall(gemm_tn).buffer("a", a).buffer("b", dgates_all).buffer("c", w_grad_h).run();
    }
    {  // b_grad, the peephole grads and cs_prev_grad
        Buf cs_seq(act.cs.data, dt, {L, B, H});
        Buf cs_prev_all(in.cs_prev.data, dt, {B, H});
        Buf carry_final(final_carry.data(), DType::f32, {B, H});
        Buf b_grad(out.b_grad.data, dt, {4 * H});
        Buf cs_prev_grad(out.cs_prev_grad.data, dt, {B, H});
        Buf wci_grad(out.wci_grad.data, dt, {H}), wcf_grad(out.wcf_grad.data, dt, {H});
        Buf wco_grad(out.wco_grad.data, dt, {H});
        KernelCall reduce(reduce_kernel);
        reduce.buffer("dgates", dgates_all).buffer("cs", cs_seq).buffer("cs_prev", cs_prev_all);
        reduce.buffer("dcs_carry", carry_final).buffer("b_grad", b_grad);
        reduce.buffer("cs_prev_grad", cs_prev_grad);
        if (use_peephole) {
            reduce.buffer("peephole_grads.0", wci_grad).buffer("peephole_grads.1", wcf_grad);
            reduce.buffer("peephole_grads.2", wco_grad);
        }
        reduce.run();
    }
}

}  // namespace

void input_projection(DType dt, const void *x, int64_t rows, int64_t input_size,
                      int64_t cell_size, const void *w, const void *b, float *xw) {
    const int64_t I = input_size, G = 4 * cell_size;
    // With I = 0 the product is empty, but a Halide kernel cannot be handed an operand of extent 0
    // that it indexes: x . W_x is then an exact zero, computed from one zero column.
    std::vector<std::byte> zero_x, zero_w;
    if (I == 0) {
        zero_x.assign(static_cast<std::size_t>(rows) * size_of(dt), std::byte{0});
        zero_w.assign(static_cast<std::size_t>(G) * size_of(dt), std::byte{0});
        x = zero_x.data(), w = zero_w.data();
    }
    const int64_t depth = std::max<int64_t>(I, 1);
    Buf a = Buf::matrix(const_cast<void *>(x), dt, rows, depth, depth);
    Buf w_x = Buf::matrix(const_cast<void *>(w), dt, depth, G, G);
    Buf bias(const_cast<void *>(b), dt, {G});
    Buf c = Buf::matrix(xw, DType::f32, rows, G, G);
    KernelCall(find_kernel("gemm_nn_bias", dt, false, Layout::icfo))
        .buffer("a", a).buffer("b", w_x).buffer("bias", bias).buffer("c", c).run();
}

}  // namespace detail

using detail::Layout;
using detail::SeqActivations;
using detail::SeqInputs;

#define BLOCKLSTM_SEQ_INPUT_PARAMS                                                               \
    int64_t seq_len_max, const TV &x, const TV &cs_prev, const TV &h_prev, const TV &w,          \
        const TV &wci, const TV &wcf, const TV &wco, const TV &b
#define BLOCKLSTM_SEQ_ACT_PARAMS                                                                 \
    const TV &i, const TV &cs, const TV &f, const TV &o, const TV &ci, const TV &co, const TV &h, \
        const TV &cs_grad, const TV &h_grad
#define BLOCKLSTM_SEQ_INPUTS SeqInputs{seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b}
#define BLOCKLSTM_SEQ_ACTS SeqActivations{i, cs, f, o, ci, co, h, cs_grad, h_grad}

void BlockLSTM(BLOCKLSTM_SEQ_INPUT_PARAMS, const LSTMOutputs<TV> &out, const BlockLSTMAttrs &attrs) {
    detail::run_forward("BlockLSTM", Layout::icfo, BLOCKLSTM_SEQ_INPUTS, out, attrs.forget_bias,
                        attrs.cell_clip, attrs.use_peephole);
}

LSTMOutputs<Tensor> BlockLSTM(BLOCKLSTM_SEQ_INPUT_PARAMS, const BlockLSTMAttrs &attrs) {
    DType dt;
    auto d = detail::validate_forward("BlockLSTM", BLOCKLSTM_SEQ_INPUTS, nullptr, &dt);
    auto out = detail::allocate_outputs<LSTMOutputs>(dt, detail::forward_shapes(d));
    BlockLSTM(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, detail::views(out), attrs);
    return out;
}

void BlockLSTMV2(BLOCKLSTM_SEQ_INPUT_PARAMS, const LSTMOutputs<TV> &out, const BlockLSTMV2Attrs &attrs) {
    detail::run_forward("BlockLSTMV2", Layout::ifco, BLOCKLSTM_SEQ_INPUTS, out, 0.0f,
                        attrs.cell_clip, attrs.use_peephole);
}

LSTMOutputs<Tensor> BlockLSTMV2(BLOCKLSTM_SEQ_INPUT_PARAMS, const BlockLSTMV2Attrs &attrs) {
    DType dt;
    auto d = detail::validate_forward("BlockLSTMV2", BLOCKLSTM_SEQ_INPUTS, nullptr, &dt);
    auto out = detail::allocate_outputs<LSTMOutputs>(dt, detail::forward_shapes(d));
    BlockLSTMV2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, detail::views(out), attrs);
    return out;
}

void BlockLSTMGrad(BLOCKLSTM_SEQ_INPUT_PARAMS, BLOCKLSTM_SEQ_ACT_PARAMS,
                   const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs) {
    detail::run_grad("BlockLSTMGrad", Layout::icfo, BLOCKLSTM_SEQ_INPUTS, BLOCKLSTM_SEQ_ACTS, out,
                     attrs.use_peephole);
}

BlockLSTMGradOutputs<Tensor> BlockLSTMGrad(BLOCKLSTM_SEQ_INPUT_PARAMS, BLOCKLSTM_SEQ_ACT_PARAMS,
                                           const GradAttrs &attrs) {
    DType dt;
    auto d = detail::validate_grad("BlockLSTMGrad", BLOCKLSTM_SEQ_INPUTS, BLOCKLSTM_SEQ_ACTS,
                                   nullptr, &dt);
    auto out = detail::allocate_outputs<BlockLSTMGradOutputs>(dt, detail::grad_shapes(d));
    BlockLSTMGrad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                  cs_grad, h_grad, detail::views(out), attrs);
    return out;
}

void BlockLSTMGradV2(BLOCKLSTM_SEQ_INPUT_PARAMS, BLOCKLSTM_SEQ_ACT_PARAMS,
                     const BlockLSTMGradOutputs<TV> &out, const GradAttrs &attrs) {
    detail::run_grad("BlockLSTMGradV2", Layout::ifco, BLOCKLSTM_SEQ_INPUTS, BLOCKLSTM_SEQ_ACTS,
                     out, attrs.use_peephole);
}

BlockLSTMGradOutputs<Tensor> BlockLSTMGradV2(BLOCKLSTM_SEQ_INPUT_PARAMS, BLOCKLSTM_SEQ_ACT_PARAMS,
                                             const GradAttrs &attrs) {
    DType dt;
    auto d = detail::validate_grad("BlockLSTMGradV2", BLOCKLSTM_SEQ_INPUTS, BLOCKLSTM_SEQ_ACTS,
                                   nullptr, &dt);
    auto out = detail::allocate_outputs<BlockLSTMGradOutputs>(dt, detail::grad_shapes(d));
    BlockLSTMGradV2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, detail::views(out), attrs);
    return out;
}

}  // namespace blocklstm
