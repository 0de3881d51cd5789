// LSTMBlockCellGrad (docs/semantics.md: Backward): one application of the cell backward math with dcs_in = cs_grad
// and dh = h_grad, writing cs_prev_grad, dicfo and (with peepholes) the batch sums of the
// peephole gradients. x, h_prev, w and b take no part in the math; the runtime validates them.
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class CellBwd : public KernelGenerator<CellBwd> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<bool> use_peephole{"use_peephole", false};
    GeneratorParam<Layout> layout{"layout", Layout::icfo, layout_names};

    Input<Buffer<>> *cs_prev, *i, *cs, *f, *o, *ci, *co, *cs_grad, *h_grad, *wci, *wcf, *wco;
    Output<Buffer<>> *cs_prev_grad, *dicfo, *peephole_grads = nullptr;

    void configure() {
        namespace a = args::cell_bwd;
        for (auto [slot, name] : {std::pair{&cs_prev, a::cs_prev}, {&i, a::i}, {&cs, a::cs},
                                  {&f, a::f}, {&o, a::o}, {&ci, a::ci}, {&co, a::co},
                                  {&cs_grad, a::cs_grad}, {&h_grad, a::h_grad}}) {
            *slot = add_input<Buffer<>>(name, dtype, 2);  // [B,H]
        }
        wci = add_input<Buffer<>>(a::wci, dtype, 1);
        wcf = add_input<Buffer<>>(a::wcf, dtype, 1);
        wco = add_input<Buffer<>>(a::wco, dtype, 1);
        cs_prev_grad = add_output<Buffer<>>(a::cs_prev_grad, dtype, 2);
        dicfo = add_output<Buffer<>>(a::dicfo, dtype, 3);  // (j, gate block, n) of [B,4H]
        if (use_peephole) {  // Tuple (wci_grad, wcf_grad, wco_grad), each [H]
            peephole_grads = add_output<Buffer<>>(a::peephole_grads,
                                                  std::vector<Type>(3, Type(dtype)), 1);
        }
    }

    void generate() {
        Var j("j"), n("n"), g("g");
        auto in = [&](Input<Buffer<>> *b) { return f32((*b)(j, n)); };
        CellBackward r = cell_backward(in(i), in(f), in(o), in(ci), in(co), in(cs_prev),
                                       f32((*wci)(j)), f32((*wcf)(j)), f32((*wco)(j)),
                                       in(h_grad), in(cs_grad), use_peephole);
        const CellGrads cell(r, j, n);

        const Type t = dtype;
        (*dicfo)(j, g, n) = stored(t, cell.gate_blocks(layout, j, g, n));
        (*cs_prev_grad)(j, n) = stored(t, cell.cs_prev_grad(j, n));

        const schedules::Machine m = machine();
        schedules::schedule_shared_stage(cell.f, j, n, m);
        schedules::schedule_gate_blocks(*dicfo, j, g, n, m);
        schedules::schedule_elementwise(*cs_prev_grad, j, n, m);

        if (use_peephole) {
            RDom rows(0, cs_prev->dim(1).extent(), "rows");
            PeepholeGradTerms terms = peephole_grad_terms(
                cell.di(j, rows), cell.df(j, rows), cell.do_(j, rows), f32((*cs_prev)(j, rows)), f32((*cs)(j, rows)));
            Func sums = peephole_sums(terms, j);
            (*peephole_grads)(j) = Tuple(stored(t, sums(j)[0]), stored(t, sums(j)[1]),
                                         stored(t, sums(j)[2]));
            schedules::schedule_column_sum(sums, *peephole_grads, j, {rows.x}, m);
        }
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::CellBwd, cell_bwd)
