// One forward LSTM step (docs/semantics.md: Forward): gates = xw + h_prev . W_h, then the gate math. xw = x.W_x + b
// is precomputed for all steps by one gemm (nn_bias); for LSTMBlockCell it is that gemm over one
// step. Writes the seven outputs i, cs, f, o, ci, co, h of the step. With product=outside
// (seq_fwd_gates) the caller has computed the pre-activations xw + h_prev . W_h (a library
// product writing into xw in place) and the kernel is the gate math alone. With product=cell
// (cell_fwd, the forward cell op on the CPU) the product is the cell's whole one, gates = b +
// [x | h_prev] . w with w read in place: BlockLSTM's step over one call packs W_x's and W_h's
// panels for one step (53 % of LSTMBlockCell's time at B = 1, H = 256). With caller_rows
// (seq_fwd_step_rows: seq_lengths on rows not in length order) the step runs the rows of its
// product in length order but reads h_prev and cs_prev and writes its outputs in the caller's rows,
// those it runs only: no copy of the outputs into the caller's rows after the steps (the rows that
// do not run get their zeros from the runtime, before the steps: zero_ranges.h).
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class SeqFwdStep : public KernelGenerator<SeqFwdStep> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<bool> use_peephole{"use_peephole", false};
    // any (kernels.inc's lines without a layout): the gate order is the argument gate_order.
    GeneratorParam<Layout> layout{"layout", Layout::any, layout_names};
    GeneratorParam<RecurrentProduct> product{"product", RecurrentProduct::inside, recurrent_product_names};
    GeneratorParam<bool> caller_rows{"caller_rows", false};

    Input<Buffer<>> *xw = nullptr, *h_prev = nullptr, *w_h = nullptr, *pre_activations = nullptr, *b = nullptr;
    Input<Buffer<>> *cs_prev, *wci, *wcf, *wco;
    Input<Buffer<>> *order = nullptr;                    // caller_rows: [rows run] int32
    Input<int32_t> *gate_order = nullptr;                // Layout::any: 0 icfo, 1 ifco
    Input<float> forget_bias{args::seq_fwd_step::forget_bias};
    Input<float> cell_clip{args::seq_fwd_step::cell_clip};
    Output<Buffer<>> *lstm;   // Tuple (i, cs, f, o, ci, co, h), each [B,H]
    Output<Buffer<>> *gates = nullptr;  // [B,4H] float32 pre-activations: the caller's workspace, so
                                        // a step allocates nothing (a fresh 512 KiB buffer per step
                                        // cost page faults: 15 % of BlockLSTM at T=100, B=64, H=512)

    void configure() {
        namespace a = args::seq_fwd_step;
        if (caller_rows && product != RecurrentProduct::inside)
            throw std::invalid_argument("caller_rows is for the step with its product inside (families.inc)");
        if (product == RecurrentProduct::outside) {
            require_weights({Weights::none});
            pre_activations = add_input<Buffer<>>(a::pre_activations, Float(32), 2);  // [B,4H]
            add_cell_inputs();
            lstm = add_output<Buffer<>>(a::lstm, std::vector<Type>(7, Type(dtype)), 2);
            return;
        }
        if (product == RecurrentProduct::cell) {
            require_weights({Weights::matrix});
            h_prev = add_input<Buffer<>>(a::x_h_prev, dtype, 2);  // [B,I+H] the product's rows: [x | h_prev]
            w_h = add_input<Buffer<>>(a::w, dtype, 2);            // [I+H,4H] w, in place
            b = add_input<Buffer<>>(a::b, dtype, 1);              // [4H]
            add_cell_inputs();
            lstm = add_output<Buffer<>>(a::lstm, std::vector<Type>(7, Type(dtype)), 2);
            gates = add_output<Buffer<>>(a::gates, Float(32), 2);
            return;
        }
        xw = add_input<Buffer<>>(a::xw, Float(32), 2);       // [B,4H] x.W_x + b (caller_rows: [rows run,4H])
        h_prev = add_input<Buffer<>>(a::h_prev, dtype, 2);   // [B,H]
        if (caller_rows) {
            order = add_input<Buffer<>>(a::order, Int(32), 1);  // [rows run]: the caller's row of each
        }
        // [H,4H] rows I.. of w: the matrix, or packed float32 panels (generators/panels.cpp)
        require_weights({Weights::panels, Weights::matrix});
        const bool panels = weights == Weights::panels;
        w_h = add_input<Buffer<>>(a::w_h, pairs() || amx() ? BFloat(16) : panels ? Float(32) : Type(dtype), panels ? 3 : 2);
        add_cell_inputs();
        lstm = add_output<Buffer<>>(a::lstm, std::vector<Type>(7, Type(dtype)), 2);
        gates = add_output<Buffer<>>(a::gates, Float(32), 2);
    }

    // W_h in bfloat16 pair panels, h . W_h in pairs of bfloat16 products (schedules/panel_layout.h).
    bool pairs() const {
        return weights == Weights::panels && panels::pair_panels(Type(dtype) == BFloat(16), bf16_dot_products);
    }

    // W_h in AMX's pair panel, h . W_h on AMX tiles (schedules/panel_layout.h: amx_panels).
    bool amx() const { return weights == Weights::panels && panels::amx_panels(Type(dtype) == BFloat(16), amx_products); }

    // The inputs of the gate math besides the pre-activations.
    void add_cell_inputs() {
        namespace a = args::seq_fwd_step;
        cs_prev = add_input<Buffer<>>(a::cs_prev, dtype, 2); // [B,H]
        wci = add_input<Buffer<>>(a::wci, dtype, 1);
        wcf = add_input<Buffer<>>(a::wcf, dtype, 1);
        wco = add_input<Buffer<>>(a::wco, dtype, 1);
        if (layout == Layout::any) gate_order = add_input<int32_t>(a::gate_order);
    }

    void generate() {
        Var x("x"), y("y"), j("j"), n("n");
        Expr H = cs_prev->dim(0).extent(), B = cs_prev->dim(1).extent();
        const schedules::Machine t = machine();
        if (product == RecurrentProduct::outside) {
            gate_math([&](Expr col, Expr row) { return (*pre_activations)(col, row); }, H, j, n);
            schedules::schedule_gate_math(*lstm, activations, j, n, t);
            return;
        }

        if (amx()) {
            declare_amx_panels(w_h, 4 * H, H);
            gates->dim(0).set_min(0);
            gates->dim(1).set_min(0);
        }
        const int panel_cols = amx() ? 0 : declare_panels(w_h, gates, weights == Weights::panels, pairs());
        // caller_rows: the product's rows are the rows run (xw's), in length order; the gate math's
        // the caller's B rows, each at its place among them.
        const Expr rows_run = caller_rows ? xw->dim(1).extent() : B;
        // (AMX's product stages its rows in whole tiles of 16, past the rows run: order clamped.)
        auto h_prev_k = [&](Expr k, Expr yy) {
            return (*h_prev)(k, caller_rows ? clamp((*order)(clamp(yy, 0, rows_run - 1)), 0, B - 1) : yy);
        };
        const bool cell = product == RecurrentProduct::cell;
        auto xw_init = [&](Expr xx, Expr yy) { return cell ? f32((*b)(xx)) : (*xw)(xx, yy); };
        Expr depth = cell ? h_prev->dim(0).extent() : H;  // the cell: I + H
        schedules::GemmBlocking blocking = schedules::gemm_blocking(schedules::GemmShape::step, t, pairs());
        // The cell's w read in place where one row tile would read each copy once.
        if (cell && !t.gpu()) {
            blocking.in_place_cols = t.cpu.gemm_step_tile_cols();
            blocking.in_place_rows = t.cpu.gemm_step_tile_rows;
            blocking.in_place_stream_cols = step_tiles::kStreamCols;
        }
        schedules::GemmFuncs p =
            amx() ? amx_product("gates", h_prev_k, Func(*w_h), xw_init, B, H, /*k_block=*/0, x, y, Func(*gates))
                  : matrix_product(
                        "gates", h_prev_k,
                        [&](Expr xx, Expr k) { return recurrent_weight(*w_h, panel_cols, xx, k, pairs()); }, xw_init,
                        rows_run, 4 * H, depth, blocking, /*b_padded=*/panel_cols > 0, x, y, Func(*gates));

        // xw's rows of the step come from memory (the input projection's chunk of several steps,
        // some MiB, out of L2), read where each row tile adds them: 4 rows of 96 bytes, 8 KiB apart
        // at H = 512, whose misses were 14 % of the step's product (BlockLSTM 100,64,512, perf, AMD
        // Zen 3). Prefetched a row tile ahead they are 7 %, and the step's product 0.85-0.96x its
        // time before at 100,64,512, 100,32,256 and 200,16,256 (docs/performance.md). Halide 21
        // prefetches the first line of each row only (its prefetch loop steps 64 elements, not 64
        // bytes), which is what is left.
        std::function<void(Stage, const VarOrRVar &, Expr)> prefetch_xw;
        if (!cell)
            prefetch_xw = [&](Stage s, const VarOrRVar &tiles, Expr ahead) { s.prefetch(*xw, tiles, tiles, ahead); };
        schedules::schedule_gemm(p,
                                 {.shape = schedules::GemmShape::step,
                                  .cols = 4 * H,
                                  .rows = rows_run,
                                  .b_in_panels = panel_cols > 0 || amx(),
                                  .a_converted = Type(dtype) != Float(32),
                                  .prefetch_init = prefetch_xw},
                                 t);
        if (!caller_rows) {
            gate_math([&](Expr col, Expr row) { return (*gates)(col, row); }, H, j, n);
            schedules::schedule_gate_math(*lstm, activations, j, n, t);
            return;
        }
        // The caller's rows: the gate math on the rows run, in length order (the product's), each
        // writing its caller's row; the rows that stop are left as they are. A select over all B
        // rows computed the math of the rows that stop too (at 50,8,128 with lengths spread over
        // [T/4, T], the gate math was 10 % of BlockLSTM's samples, 5.5 % in length order), and
        // their zeros written here, a serial pass a step, 4.5 % at 200,16,256 (perf, AMD Zen 4).
        const Type ty = dtype;
        RDom run(0, rows_run, "run");
        (*lstm)(j, n) = Tuple(std::vector<Expr>(7, undef(ty)));
        gate_math([&](Expr col, Expr row) { return (*gates)(col, row); }, H, j, n,
                  [&](Expr row) { return clamp((*order)(row), 0, B - 1); }, run);
        schedules::schedule_gate_math_rows(*lstm, activations, j, run, t);
    }

    // lstm(j, n): the gate math on the pre-activations `pre(column, row)`. The three activations
    // that only read the step's inputs (i, ci, f) are a stage of their own, `activations`, which
    // the CPU schedule computes once per vector of units: inlined into the seven outputs, LLVM kept
    // 7-8 exp and division chains a vector where 5 are needed, and the peephole's cs (read by o)
    // made the gate math 1.3x the plain one's time (B = 64, H = 512, one core); staged, 0.85x.
    // On the caller's rows: the gate math's rows n are the rows run (`rows`, an update of lstm),
    // each the caller's row caller(n).
    void gate_math(const std::function<Expr(Expr, Expr)> &pre, const Expr &H, const Var &j, const Var &n,
                   const std::function<Expr(Expr)> &caller = nullptr, const std::optional<RDom> &rows = std::nullopt) {
        // (gate_order clamped: a block past the four would be read out of the pre-activations)
        const Expr gates_order = gate_order ? clamp(Expr(*gate_order), 0, 1) : Expr();
        auto gate = [&](Gate g, const Expr &row) { return pre(j + gate_block(layout, g, gates_order) * H, row); };
        auto state_row = [&](const Expr &row) { return caller ? caller(row) : row; };
        const CellActivations a = cell_activations(gate(gate_i, n), gate(gate_c, n), gate(gate_f, n),
                                                   f32((*cs_prev)(j, state_row(n))), f32((*wci)(j)), f32((*wcf)(j)),
                                                   forget_bias, use_peephole);
        activations(j, n) = Tuple(a.i, a.ci, a.f);
        const Expr row = rows ? Expr(rows->x) : Expr(n);
        const CellForward r = cell_forward({activations(j, row)[0], activations(j, row)[1], activations(j, row)[2]},
                                           gate(gate_o, row), f32((*cs_prev)(j, state_row(row))), f32((*wco)(j)),
                                           cell_clip, use_peephole);
        const Type ty = dtype;
        (*lstm)(j, state_row(row)) = Tuple(stored(ty, r.i), stored(ty, r.cs), stored(ty, r.f), stored(ty, r.o),
                                           stored(ty, r.ci), stored(ty, r.co), stored(ty, r.h));
    }

    Func activations{"activations"};  // (i, ci, f) of unit j, row n: gate_math
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::SeqFwdStep, seq_fwd_step)
