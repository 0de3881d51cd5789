// After the backward loop (docs/design.md): the reductions over the whole sequence.
//   b_grad[g]    = sum over (t, n) of dgates[t, n, g]
//   wci_grad[j]  = sum of di * cs_prev_t, wcf_grad = sum of df * cs_prev_t, wco_grad = sum of do * cs[t]
//                  (cs_prev_t = cs_prev at t = 0, else cs[t-1]; only with peepholes)
//   cs_prev_grad = the final cell-state carry, rounded to dtype.
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class SeqBwdReduce : public KernelGenerator<SeqBwdReduce> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<bool> use_peephole{"use_peephole", false};
    // any (kernels.inc's lines without a layout): with peepholes the gate order is the argument
    // gate_order (without them the sums read no gate block)
    GeneratorParam<Layout> layout{"layout", Layout::any, layout_names};
    GeneratorParam<GateGrads> gate_grads{"gate_grads", GateGrads::float32, gate_grads_names};

    Input<Buffer<>> *dgates, *cs, *cs_prev, *dcs_carry;
    Input<int32_t> *gate_order = nullptr;  // Layout::any with peepholes: 0 icfo, 1 ifco
    Output<Buffer<>> *b_grad, *cs_prev_grad, *peephole_grads = nullptr;

    void configure() {
        namespace a = args::seq_bwd_reduce;
        // [L*B, 4H], float32 or the dtype (generators/interface.h: GateGrads; bfloat16 on AMX:
        // schedules/panel_layout.h: bf16_gate_grads)
        const bool in_dtype = gate_grads == GateGrads::dtype || panels::bf16_gate_grads(Type(dtype) == BFloat(16), amx_products);
        dgates = add_input<Buffer<>>(a::dgates, in_dtype ? Type(dtype) : Float(32), 2);
        cs = add_input<Buffer<>>(a::cs, dtype, 3);              // [L,B,H]
        cs_prev = add_input<Buffer<>>(a::cs_prev, dtype, 2);    // [B,H]
        dcs_carry = add_input<Buffer<>>(a::dcs_carry, Float(32), 2);
        // [4H], or empty where w_grad's product computed it (the CPU runtime, I > 0)
        b_grad = add_output<Buffer<>>(a::b_grad, dtype, 1);
        cs_prev_grad = add_output<Buffer<>>(a::cs_prev_grad, dtype, 2);
        if (use_peephole && layout == Layout::any) gate_order = add_input<int32_t>(a::gate_order);
        if (use_peephole) {  // Tuple (wci_grad, wcf_grad, wco_grad), each [H]
            peephole_grads = add_output<Buffer<>>(a::peephole_grads,
                                                  std::vector<Type>(3, Type(dtype)), 1);
        }
    }

    void generate() {
        Var x("x"), j("j"), n("n");
        const Type t = dtype;
        const schedules::Machine m = machine();

        RDom rows(0, dgates->dim(1).extent(), "rows");
        Func bias_sum("bias_sum");
        bias_sum(x) = 0.0f;
        bias_sum(x) += f32((*dgates)(x, rows));
        (*b_grad)(x) = stored(t, bias_sum(x));
        schedules::schedule_column_sum(bias_sum, *b_grad, x, {rows.x}, m);

        (*cs_prev_grad)(j, n) = stored(t, (*dcs_carry)(j, n));
        schedules::schedule_elementwise(*cs_prev_grad, j, n, m);

        if (use_peephole) {
            Expr H = cs->dim(0).extent(), B = cs->dim(1).extent();
            RDom r(0, B, 0, cs->dim(2).extent(), "steps");  // (n, t)
            Expr row = r.y * B + r.x;
            // (gate_order clamped: a block past the four would be read out of dgates)
            const Expr order = gate_order ? clamp(Expr(*gate_order), 0, 1) : Expr();
            auto gate = [&](Gate g) { return f32((*dgates)(j + gate_block(layout, g, order) * H, row)); };
            Expr cs_prev_t = select(r.y == 0, f32((*cs_prev)(j, r.x)),
                                    f32((*cs)(j, r.x, max(r.y - 1, 0))));
            PeepholeGradTerms terms = peephole_grad_terms(gate(gate_i), gate(gate_f),
                                                          gate(gate_o), cs_prev_t,
                                                          f32((*cs)(j, r.x, r.y)));
            Func sums = peephole_sums(terms, j);
            (*peephole_grads)(j) = Tuple(stored(t, sums(j)[0]), stored(t, sums(j)[1]),
                                         stored(t, sums(j)[2]));
            schedules::schedule_column_sum(sums, *peephole_grads, j, {r.x, r.y}, m);
        }
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::SeqBwdReduce, seq_bwd_reduce)
