// The recurrent weights as packed panels, once per call, for the CPU's per-step products:
// out(xi, k, xo) = b(xo * P + xi, k) in float32, P = panels::kPanelCols, zero past the last
// column, in panels::panel_count(columns) panels (schedules/panel_layout.h). Each panel (P columns x all of k) is contiguous, so a step's product streams its
// weights instead of packing them again at every step (at B = 8 that packing cost as much as the
// product itself).
//   panels    b(x, k) = in(x, k): in's rows are k     (forward: W_h,   [H, 4H])
//   panels_t  b(x, k) = in(k, x): in's rows are x     (backward: W_h^T, read from W_h's rows)
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

class Panels : public KernelGenerator<Panels> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<bool> transpose{"transpose", false};

    Input<Buffer<>> *in = nullptr;
    Output<Buffer<>> *out = nullptr;

    bool pairs() const { return panels::pair_panels(Type(dtype) == BFloat(16), bf16_dot_products); }
    // The weights of the products on AMX's tiles (W_x, W_h; W_x^T, W_h^T): one pair panel the
    // product's width.
    bool amx() const { return panels::amx_panels(Type(dtype) == BFloat(16), amx_products); }

    void configure() {
        require_weights({Weights::panels});
        in = add_input<Buffer<>>(args::panels::in, dtype, 2);
        out = add_output<Buffer<>>(args::panels::out, pairs() || amx() ? BFloat(16) : Float(32), 3);
    }

    void generate() {
        const int P = panels::kPanelCols;
        Expr cols = transpose ? in->dim(1).extent() : in->dim(0).extent();
        Expr depth = transpose ? in->dim(0).extent() : in->dim(1).extent();
        if (amx()) {  // out(kk, x, k) = b(x, 2 k + kk)
            declare_amx_panels(out, cols, depth);
            Var kk("kk"), x("x"), k("k");
            (*out)(kk, x, k) = amx_pair([&](Expr xx, Expr kx) { return transpose ? (*in)(kx, xx) : (*in)(xx, kx); },
                                        cols, depth, kk, x, k);
            schedules::schedule_amx_panels(*out, kk, x, k, machine());
            return;
        }
        out->dim(0).set_min(0).set_extent(pairs() ? 2 * P : P);
        out->dim(2).set_min(0).set_extent(panels::panel_count(cols));
        Var xi("xi"), k("k"), xo("xo");
        if (pairs()) {  // xi is 2 * column + kk here
            Expr x = xo * P + xi / 2, xc = min(x, cols - 1), k2 = 2 * k + xi % 2, k2c = min(k2, depth - 1);
            Expr value = transpose ? (*in)(k2c, xc) : (*in)(xc, k2c);
            (*out)(xi, k, xo) = select(x < cols && k2 < depth, value, cast(BFloat(16), 0));
        } else {
            Expr x = xo * P + xi, xc = min(x, cols - 1);
            Expr value = transpose ? (*in)(k, xc) : (*in)(xc, k);
            (*out)(xi, k, xo) = select(x < cols, f32(value), 0.0f);
        }
        schedules::schedule_panels(*out, in->in(), xi, k, xo, transpose, pairs(), machine());
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::Panels, panels)
