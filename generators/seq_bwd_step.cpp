// One step of the backward recurrence (docs/design.md), in reverse time:
//   dh      = h_grad[t] + dgates[t+1] . W_h^T          (the recurrent product)
//   dcs_in  = cs_grad[t] + dcs_carry
//   cell backward math -> dgates[t] (kept for all t) and the new dcs_carry.
// Everything else (x_grad, w_grad, b_grad, peephole grads) is batched after the loop. With
// product=outside (seq_bwd_gates) the caller has computed dgates[t+1] . W_h^T (a library product)
// and the kernel adds h_grad[t] and runs the cell math alone. With caller_rows (seq_bwd_step_rows:
// the CPU's step) the step's rows are in length order (dgates, the carry and dh: the rows run), while
// its per-step inputs (h_grad, cs_grad, i, f, o, ci, co, cs_prev) are the caller's rows, each row
// run read at its caller's row `order`: rows not in length order are not copied into it before the
// steps (the identity where they are).
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class SeqBwdStep : public KernelGenerator<SeqBwdStep> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<bool> use_peephole{"use_peephole", false};
    // any (kernels.inc's lines without a layout): the gate order is the argument gate_order.
    GeneratorParam<Layout> layout{"layout", Layout::any, layout_names};
    GeneratorParam<RecurrentProduct> product{"product", RecurrentProduct::inside, recurrent_product_names};
    GeneratorParam<GateGrads> gate_grads{"gate_grads", GateGrads::float32, gate_grads_names};
    GeneratorParam<bool> caller_rows{"caller_rows", false};

    Input<Buffer<>> *dgates_next = nullptr, *w_h_t = nullptr, *dh_product = nullptr;
    Input<Buffer<>> *order = nullptr;  // caller_rows: [rows run] int32, the caller's row of each
    Input<Buffer<>> *h_grad, *cs_grad, *dcs_carry;
    Input<Buffer<>> *i, *f, *o, *ci, *co, *cs_prev, *wci, *wcf, *wco;
    Input<int32_t> *gate_order = nullptr;  // Layout::any: 0 icfo, 1 ifco
    Output<Buffer<>> *dgates, *dcs_carry_out;
    Output<Buffer<>> *dh = nullptr;  // [B,H] float32: the caller's workspace, so a step allocates nothing

    void configure() {
        namespace a = args::seq_bwd_step;
        if (product == RecurrentProduct::cell)
            throw std::invalid_argument("seq_bwd_step: product=cell is the forward cell op's (seq_fwd_step)");
        if (gate_grads == GateGrads::dtype && product == RecurrentProduct::inside)
            throw std::invalid_argument("seq_bwd_step: gate_grads=dtype needs product=outside (the product "
                                        "inside reads dgates[t+1] as float32, but for bfloat16 on AMX)");
        if (caller_rows && product != RecurrentProduct::inside)
            throw std::invalid_argument("seq_bwd_step: caller_rows is for the step with its product inside (families.inc)");
        if (product == RecurrentProduct::outside) {
            require_weights({Weights::none});
            dh_product = add_input<Buffer<>>(a::dh_product, Float(32), 2);  // [B,H]
            add_cell_arguments();
            return;
        }
        dgates_next = add_input<Buffer<>>(a::dgates_next, gate_grads_type(), 2);  // [B,4H], zeros at t = L-1
        // [4H,H] = W_h^T: the matrix, or packed float32 panels (generators/panels.cpp)
        require_weights({Weights::panels, Weights::matrix});
        const bool panels = weights == Weights::panels;
        w_h_t = add_input<Buffer<>>(a::w_h_t, pairs() || amx() ? BFloat(16) : panels ? Float(32) : Type(dtype), panels ? 3 : 2);
        if (caller_rows) order = add_input<Buffer<>>(a::order, Int(32), 1);
        add_cell_arguments();
        dh = add_output<Buffer<>>(a::dh, Float(32), 2);
    }

    // float32, or the dtype: the split steps' (gate_grads=dtype), and bfloat16 on AMX
    // (schedules/panel_layout.h: bf16_gate_grads).
    Type gate_grads_type() const {
        const bool in_dtype = gate_grads == GateGrads::dtype ||
                              (weights == Weights::panels && panels::bf16_gate_grads(Type(dtype) == BFloat(16), amx_products));
        return in_dtype ? Type(dtype) : Float(32);
    }

    // W_h^T in bfloat16 pair panels, dgates[t+1] . W_h^T in pairs of bfloat16 products, the gate
    // gradients rounded to bfloat16 as they enter it (schedules/panel_layout.h).
    bool pairs() const {
        return weights == Weights::panels && panels::pair_panels(Type(dtype) == BFloat(16), bf16_dot_products);
    }

    // W_h^T in AMX's pair panel, dgates[t+1] . W_h^T on AMX tiles, the gate gradients rounded to
    // bfloat16 as they enter it (schedules/panel_layout.h: amx_panels).
    bool amx() const {
        return weights == Weights::panels && panels::amx_panels(Type(dtype) == BFloat(16), amx_products);
    }

    // The cell math's inputs besides the recurrent product, and its outputs.
    void add_cell_arguments() {
        namespace a = args::seq_bwd_step;
        h_grad = add_input<Buffer<>>(a::h_grad, dtype, 2);                // [B,H]
        cs_grad = add_input<Buffer<>>(a::cs_grad, dtype, 2);
        dcs_carry = add_input<Buffer<>>(a::dcs_carry, Float(32), 2);
        i = add_input<Buffer<>>(a::i, dtype, 2);
        f = add_input<Buffer<>>(a::f, dtype, 2);
        o = add_input<Buffer<>>(a::o, dtype, 2);
        ci = add_input<Buffer<>>(a::ci, dtype, 2);
        co = add_input<Buffer<>>(a::co, dtype, 2);
        cs_prev = add_input<Buffer<>>(a::cs_prev, dtype, 2);
        wci = add_input<Buffer<>>(a::wci, dtype, 1);
        wcf = add_input<Buffer<>>(a::wcf, dtype, 1);
        wco = add_input<Buffer<>>(a::wco, dtype, 1);
        if (layout == Layout::any) gate_order = add_input<int32_t>(a::gate_order);
        dgates = add_output<Buffer<>>(a::dgates, gate_grads_type(), 3);  // (j, gate block, n) of [B,4H]
        dcs_carry_out = add_output<Buffer<>>(a::dcs_carry_out, Float(32), 2);
    }

    void generate() {
        Var x("x"), y("y"), j("j"), n("n"), g("g");
        // B: the rows the step runs (caller_rows: `order`'s, fewer than the caller's rows of h_grad).
        Expr H = h_grad->dim(0).extent(), B = caller_rows ? order->dim(0).extent() : h_grad->dim(1).extent();
        const schedules::Machine t = machine();
        if (product == RecurrentProduct::outside) {
            cell_math((*dh_product)(j, n) + f32((*h_grad)(j, n)), j, g, n);
            schedules::schedule_gate_blocks_and(*dgates, *dcs_carry_out, j, g, n, Type(dtype), t);
            return;
        }

        if (amx()) {
            declare_amx_panels(w_h_t, H, 4 * H);
            dh->dim(0).set_min(0);
            dh->dim(1).set_min(0);
        }
        const int panel_cols = amx() ? 0 : declare_panels(w_h_t, dh, weights == Weights::panels, pairs());
        auto dgates_k = [&](Expr k, Expr yy) {
            Expr d = (*dgates_next)(k, yy);
            return pairs() || amx() ? cast(BFloat(16), d) : f32(d);
        };
        // (AMX's product stages its rows in whole tiles of 16, past the rows run: yy clamped.)
        auto h_grad_init = [&](Expr xx, Expr yy) {
            return (*h_grad)(xx, caller_rows ? caller_row(clamp(yy, 0, B - 1)) : yy);
        };
        schedules::GemmFuncs p =
            amx() ? amx_product("dh", dgates_k, Func(*w_h_t), h_grad_init, B, 4 * H, /*k_block=*/0, x, y, Func(*dh))
                  : matrix_product(
                        "dh", dgates_k,
                        [&](Expr xx, Expr k) { return recurrent_weight(*w_h_t, panel_cols, xx, k, pairs()); },
                        h_grad_init, B, H, 4 * H, schedules::gemm_blocking(schedules::GemmShape::step, machine(), pairs()),
                        /*b_padded=*/panel_cols > 0, x, y, Func(*dh));

        cell_math((*dh)(j, n), j, g, n);
        schedules::schedule_gemm(
            p, {.shape = schedules::GemmShape::step, .cols = H, .b_in_panels = panel_cols > 0 || amx()}, t);
        // The cell math (no transcendentals) is inlined into both outputs: recomputing it is
        // cheaper than a [5, B, H] buffer written and read back every step.
        schedules::schedule_gate_blocks_and(*dgates, *dcs_carry_out, j, g, n, Type(dtype), t);
    }

    // The caller's row of the step's row n (caller_rows), else n.
    Expr caller_row(const Expr &row) const {
        return caller_rows ? clamp((*order)(row), 0, h_grad->dim(1).extent() - 1) : row;
    }

    // dgates and dcs_carry_out from the step's total gradient of h, `dh`.
    void cell_math(const Expr &dh_total, const Var &j, const Var &g, const Var &n) {
        auto in = [&](Input<Buffer<>> *b) { return f32((*b)(j, caller_row(n))); };
        CellBackward r = cell_backward(in(i), in(f), in(o), in(ci), in(co), in(cs_prev),
                                       f32((*wci)(j)), f32((*wcf)(j)), f32((*wco)(j)), dh_total,
                                       in(cs_grad) + (*dcs_carry)(j, n), use_peephole);
        const CellGrads cell(r, j, n);
        const Expr gates_order = gate_order ? Expr(*gate_order) : Expr();
        (*dgates)(j, g, n) = stored(gate_grads_type(), cell.gate_blocks(layout, j, g, n, gates_order));
        (*dcs_carry_out)(j, n) = cell.cs_prev_grad(j, n);
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::SeqBwdStep, seq_bwd_step)
