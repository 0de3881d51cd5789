// The batched matrix products of the sequence ops (docs/design.md), run once per call:
//   nn_bias  c[M,N] (f32)   = a[M,K] (dtype) . b[K,N] (dtype) + bias[N]   input projection x.W_x + b
//            (the CPU's, weights=panels: b is W_x in the panels the runtime packs once per call,
//            generators/panels.cpp, which every chunk of steps' projection reads: packed by each
//            chunk's product it was 6 % of BlockLSTM at T,B,I=H 100,64,512, 25 chunks)
//   nn       c[M,N] (dtype) = a[M,K] (f32)   . b[K,N] (dtype)             x_grad, h_prev_grad (b = W^T)
//            (the CPU's, weights=panels: W_x^T or W_h^T in panels packed straight from w's rows,
//            generators/panels.cpp transpose=true, so no transpose of w runs)
//   tn       c[M,N] (dtype) = a[K,M]^T (dtype) . b[K,N] (f32)             w_grad = [x | h_prev_seq]^T . dgates
//            c may have more rows than a has columns: a's missing columns are ones, so c's row M
//            is 1^T . b = b's column sums (the CPU's float16 b_grad, the weight gradient of the
//            constant input 1, from the x product's last register tile, whose spare rows compute
//            it anyway unless the tile height divides M)
//   tn with weights=panels (gemm_tn_panels), the CPU's float32 w_grad and b_grad over one chunk
//   of the sequence (K rows of dgates), summed over the chunks:
//            c[I+H,N] (f32) = (accumulate ? c : 0) + [a | a_h][K,I+H]^T (f32) . b[K,N] (f32)
//            sums[N]  (f32) = (accumulate ? sums : 0) + 1^T . b
//            a and a_h are the chunk's rows of x [K,I] and of h_prev_seq [K,H] (with I = 0, a is
//            not read: any buffer of K rows), b the chunk of dgates in panels of 16 columns
//            (generators/panels.cpp), packed once for the whole product
// The float32 side is the runtime's workspace (projections, gate gradients); float16 variants
// round once, when c is stored.
#include "generators/common.h"
#include "schedules/schedule.h"

namespace blocklstm::gen {

enum class GemmForm { nn_bias, nn, tn };

class Gemm : public KernelGenerator<Gemm> {
public:
    GeneratorParam<Type> dtype{"dtype", Float(32)};
    GeneratorParam<GemmForm> form{"form", GemmForm::nn,
                                  {{"nn_bias", GemmForm::nn_bias},
                                   {"nn", GemmForm::nn},
                                   {"tn", GemmForm::tn}}};

    Input<Buffer<>> *a = nullptr, *a_h = nullptr, *b = nullptr, *bias = nullptr, *c_in = nullptr,
                    *sums_in = nullptr;
    Input<float> *accumulate = nullptr;  // b in panels: 0 (c = the product) or 1 (c += it)
    Output<Buffer<>> *c = nullptr, *sums = nullptr;
    // tn on AMX: b (the gate gradients) copied into AMX's pair panel, which the product reads. An
    // output (the runtime's scratch), not a Func of the kernel's own: Halide 21 matches the pair
    // panel's loads only in a buffer whose row stride it does not know (in its own allocation the
    // stride, 2, folds the pair rows into one dense load the AMX lowering does not take).
    Output<Buffer<>> *b_pairs = nullptr;

    void configure() {
        namespace n = args::gemm;
        const Type f32_type = Float(32);
        require_weights({Weights::none, Weights::panels});
        const bool panels = weights == Weights::panels, w_grad_chunk = panels && form == GemmForm::tn;
        // The gate gradients (nn's a, tn's b) in float32, or bfloat16 on AMX
        // (schedules/panel_layout.h: bf16_gate_grads).
        const bool gate_grads_f32 = !panels::bf16_gate_grads(Type(dtype) == BFloat(16), amx_products);
        const bool a_is_f32 = (form == GemmForm::nn && gate_grads_f32) || w_grad_chunk;
        const bool b_is_f32 = (form == GemmForm::tn && gate_grads_f32) || panels;
        const bool c_is_f32 = form == GemmForm::nn_bias || w_grad_chunk;
        a = add_input<Buffer<>>(n::a, a_is_f32 ? f32_type : Type(dtype), 2);
        if (w_grad_chunk) a_h = add_input<Buffer<>>(n::a_h, f32_type, 2);
        b = add_input<Buffer<>>(n::b, pairs() || amx_panels() ? BFloat(16) : b_is_f32 ? f32_type : Type(dtype), panels ? 3 : 2);
        if (form == GemmForm::nn_bias) bias = add_input<Buffer<>>(n::bias, dtype, 1);
        if (w_grad_chunk) {
            // c and sums themselves: read before they are written
            c_in = add_input<Buffer<>>(n::c_in, f32_type, 2);
            sums_in = add_input<Buffer<>>(n::sums_in, f32_type, 1);
            accumulate = add_input<float>(n::accumulate);
        }
        c = add_output<Buffer<>>(n::c, c_is_f32 ? f32_type : Type(dtype), 2);
        if (w_grad_chunk) sums = add_output<Buffer<>>(n::sums, f32_type, 1);
        if (amx() && form == GemmForm::tn) b_pairs = add_output<Buffer<>>(n::b_pairs, BFloat(16), 3);
    }

    // b (W_x, W_x^T or W_h^T) in bfloat16 pair panels, as the products run in pairs
    // (schedules/panel_layout.h).
    bool pairs() const {
        return weights == Weights::panels && form != GemmForm::tn &&
               panels::pair_panels(Type(dtype) == BFloat(16), bf16_dot_products);
    }

    // The product on AMX tiles (schedules/panel_layout.h: amx_panels), b (W_x, W_x^T or W_h^T) in
    // AMX's pair panel (amx_panels): the input projection's x is bfloat16 already, the gate
    // gradients of x_grad's and h_prev_grad's products are rounded to bfloat16 as they are copied
    // into whole tiles, w_grad's (tn: b) as they are copied into b_pairs.
    bool amx() const {
        return (weights == Weights::panels ? form != GemmForm::tn : form == GemmForm::tn) &&
               panels::amx_panels(Type(dtype) == BFloat(16), amx_products);
    }
    bool amx_panels() const { return amx() && weights == Weights::panels; }  // b is the runtime's panel

    void generate() {
        Var x("x"), y("y");  // column, row of c
        const bool transpose_a = form == GemmForm::tn;
        const int b_panel_cols = amx() ? 0 : declare_panels(b, c, weights == Weights::panels, pairs());
        // The runtime's buffers start at 0; known here, a column's place in its packed panel
        // (x % panel_cols) is known at compile time.
        c->dim(0).set_min(0);
        c->dim(1).set_min(0);
        Expr rows = c->dim(1).extent(), cols = c->dim(0).extent();
        Expr depth = a_h ? a_h->dim(1).extent() : transpose_a ? a->dim(1).extent() : a->dim(0).extent();
        const schedules::Machine t = machine();
        const auto batched = schedules::GemmShape::batched;
        // bfloat16 kernels, on a target with bf16_dot_products, run the products in pairs of bfloat16
        // products: the float32 operand (the gate gradients of x_grad's and w_grad's products) is
        // rounded to bfloat16 as it is packed; on AMX as it is copied into whole tiles or b_pairs.
        const schedules::GemmBlocking blocking =
            schedules::gemm_blocking(batched, t, /*bf16_operands=*/Type(dtype) == BFloat(16),
                                     /*projection=*/form == GemmForm::nn_bias);
        auto operand = [&](Expr e) { return blocking.bf16_pairs || amx() ? cast(BFloat(16), e) : e; };
        // A float32 c is the accumulator itself; a float16 c is one rounding of it.
        const bool c_is_f32 = c->types()[0] == Float(32);
        const std::optional<Func> c_sum = c_is_f32 ? std::optional<Func>(Func(*c)) : std::nullopt;
        auto a_k = [&](Expr k, Expr yy) {
            if (!transpose_a) return operand((*a)(k, yy));
            Expr a_cols = a->dim(0).extent();
            return operand(select(likely(yy < a_cols), (*a)(min(yy, a_cols - 1), k), stored(a->type(), 1)));
        };
        auto c_init = [&](Expr xx, Expr yy) {
            if (c_in) return select(*accumulate != 0.0f, (*c_in)(xx, yy), 0.0f);
            return bias ? f32((*bias)(xx)) : Expr(0.0f);
        };
        schedules::GemmFuncs p;
        if (amx_panels()) {
            declare_amx_panels(b, cols, depth);
            p = amx_product("c", a_k, Func(*b), c_init, rows, depth, /*k_block=*/0, x, y, c_sum);
        } else if (b_pairs) {  // w_grad: k is the sequence's rows, in blocks
            declare_amx_panels(b_pairs, cols, depth, /*blocked=*/true);
            Var kk("kk"), bx("bx"), bk("bk");
            (*b_pairs)(kk, bx, bk) = amx_pair([&](Expr xx, Expr k) { return (*b)(xx, k); }, cols, depth, kk, bx, bk);
            schedules::schedule_amx_panels(*b_pairs, kk, bx, bk, t);
            p = amx_product("c", a_k, Func(*b_pairs), c_init, rows, depth, panels::kAmxDepthBlock, x, y, c_sum);
        } else {
            p = matrix_product(
                "c", a_k, [&](Expr xx, Expr k) { return operand(recurrent_weight(*b, b_panel_cols, xx, k, pairs())); },
                c_init, rows, cols, depth, blocking, /*b_padded=*/b_panel_cols > 0, x, y, c_sum,
                a_h ? std::function<void(Func, Expr)>([&](Func a_panel, Expr k_extent) {
                    // A = [x | h_prev_seq]: its panel's tiles from h's rows, then from x's over the
                    // first I rows, each input read in dense rows (one select between the two at
                    // every element of the packing cost BlockLSTMGrad 2-6 %).
                    const int tile = blocking.panel_rows;
                    Expr h_cols = a_h->dim(0).extent(), x_cols = rows - h_cols, tiles = (rows + tile - 1) / tile;
                    Var yi, k, yo;
                    a_panel(yi, k, yo) = undef<float>();
                    RDom h_tiles(0, tile, 0, k_extent, x_cols / tile, tiles - x_cols / tile, "h_tiles");
                    Expr h_row = h_tiles.z * tile + h_tiles.x - x_cols;
                    Expr from_h = (*a_h)(min(max(likely(h_row), 0), h_cols - 1), min(likely(h_tiles.y), depth - 1));
                    a_panel(h_tiles.x, h_tiles.y, h_tiles.z) = select(likely(h_tiles.y < depth), from_h, 0.0f);
                    RDom x_tiles(0, tile, 0, k_extent, 0, (x_cols + tile - 1) / tile, "x_tiles");
                    Expr x_row = x_tiles.z * tile + x_tiles.x;
                    Expr from_x = (*a)(min(likely(x_row), a->dim(0).extent() - 1), min(likely(x_tiles.y), depth - 1));
                    a_panel(x_tiles.x, x_tiles.y, x_tiles.z) =
                        select(likely(x_row < x_cols), select(likely(x_tiles.y < depth), from_x, 0.0f),
                               a_panel(x_tiles.x, x_tiles.y, x_tiles.z));
                })
                     : nullptr);
        }
        if (!c_is_f32) (*c)(x, y) = stored(c->types()[0], p.sum(x, y));

        if (sums) {
            sums->dim(0).set_min(0);
            gen::ColumnSums s = column_sums(
                "column_sums", [&](Expr xx, Expr k) { return recurrent_weight(*b, b_panel_cols, xx, k); },
                [&](Expr xx) { return select(*accumulate != 0.0f, (*sums_in)(xx), 0.0f); }, depth,
                blocking.k_block, x, blocking.bf16_by_bits);
            (*sums)(x) = s.sum(x);
            schedules::schedule_column_sums(*sums, s.sum, s.part, x, t);
        }
        schedules::schedule_gemm(p,
                                 {.shape = batched,
                                  .cols = cols,
                                  .sum_is_output = c_is_f32,
                                  .a_rows_contiguous = !transpose_a,
                                  .b_in_panels = b_panel_cols > 0 || amx_panels(),
                                  .a_from_two_inputs = a_h != nullptr,
                                  .a_converted = a->type() != Float(32)},
                                 t);
        if (!c_is_f32) schedules::schedule_elementwise(*c, x, y, t);
    }
};

}  // namespace blocklstm::gen

HALIDE_REGISTER_GENERATOR(blocklstm::gen::Gemm, gemm)
