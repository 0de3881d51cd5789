// What the generators, the runtime, the tuner and the tests agree on about a kernel, declared once:
// the kernel families (runtime/families.inc) as an enum with a record each, the gate layouts, how
// a kernel holds the recurrent weights, and every generator's argument names. A generator declares
// its inputs and outputs with these names, the runtime binds a call's buffers to them
// (runtime/src/kernel_args.h) and the tuner makes its buffers by them, so renaming an argument is
// a compile error wherever it is used, not a test failure.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace blocklstm::kernel {

// The gate block order of w, b and the gate gradients: TF's BlockLSTM and the cell ops i, c, f, o;
// the V2 ops i, f, c, o. A kernel compiled for `any` takes the order as its argument `gate_order`
// (the Layout's value: 0 icfo, 1 ifco), so one kernel serves both op versions: the CPU's step
// kernels, which the two layouts had doubled (198 kernels, a third of the build's generation time).
enum class Layout { icfo, ifco, any };

// Where a step's recurrent product is computed: inside its kernel (with the gate math), or outside
// it (a library product, e.g. cuBLAS, writes it in place; the kernel is the gate math alone); or
// (the forward cell op, cell_fwd) inside with the input's product too: b + [x | h_prev] . w, w
// read in place, so a call of one step packs no weights.
enum class RecurrentProduct { inside, outside, cell };

// The type the backward recurrence stores the gate gradients (dgates) in: float32, or the
// kernel's dtype (float16 on CUDA's split steps, as TF's GPU kernel stores them: the products
// that read them then run float16 x float16 on cuBLAS's tensor cores).
enum class GateGrads { float32, dtype };

// How a kernel holds the recurrent weights (kernels.inc's weights column; for gemm_nn_bias W_x, for
// gemm_tn_panels the gate gradients): packed float32 panels (generators/panels.cpp, schedules/panel_layout.h), the
// matrix in place, or none.
enum class Weights { none, panels, matrix };

// ---- The kernel families --------------------------------------------------------------------

enum class Family {
#define BLOCKLSTM_FAMILY(family, generator_params, products, variants) family,
#include "runtime/families.inc"
#undef BLOCKLSTM_FAMILY
};

// The matrix products a family's schedule tiles (families.inc's products column).
enum class Products { none, step, batched, sums };
// What its kernels.inc lines vary in besides dtype and backend (families.inc's variants column).
enum class Variants { none, layout, peephole_layout };

struct FamilyRecord {
    Family id;
    const char *name;              // e.g. "gemm_nn_bias"
    const char *generator_params;  // e.g. "gemm form=nn_bias": the generator, then its params
    Products products;
    Variants variants;

    std::string generator() const {
        const std::string_view s(generator_params);
        return std::string(s.substr(0, s.find(' ')));
    }
    bool has_peephole_variants() const { return variants == Variants::peephole_layout; }
    bool has_layout_variants() const { return variants != Variants::none; }
};

inline constexpr FamilyRecord kFamilies[] = {
#define BLOCKLSTM_FAMILY(family, generator_params, products, variants) \
    {Family::family, #family, generator_params, Products::products, Variants::variants},
#include "runtime/families.inc"
#undef BLOCKLSTM_FAMILY
};
inline constexpr std::size_t kFamilyCount = std::size(kFamilies);

// The records are in the enum's order, so a family's record is at its index.
constexpr bool families_in_enum_order() {
    for (std::size_t k = 0; k < kFamilyCount; ++k)
        if (static_cast<std::size_t>(kFamilies[k].id) != k) return false;
    return true;
}
static_assert(families_in_enum_order(), "runtime/families.inc: the records and the enum disagree");

constexpr const FamilyRecord &record(Family f) { return kFamilies[static_cast<std::size_t>(f)]; }
constexpr const char *name(Family f) { return record(f).name; }

inline std::optional<Family> family_named(std::string_view name) {
    for (const FamilyRecord &r : kFamilies)
        if (name == r.name) return r.id;
    return std::nullopt;
}

// ---- Each generator's arguments, by name ------------------------------------------------------
// A Tuple output's buffers are "<name>.0", "<name>.1", ... (tuple_element).

inline std::string tuple_element(const char *output, int k) { return std::string(output) + "." + std::to_string(k); }

namespace args {

// generators/seq_fwd_step.cpp: one forward step.
namespace seq_fwd_step {
inline constexpr const char xw[] = "xw", h_prev[] = "h_prev", w_h[] = "w_h", cs_prev[] = "cs_prev", wci[] = "wci",
                            wcf[] = "wcf", wco[] = "wco", forget_bias[] = "forget_bias", cell_clip[] = "cell_clip",
                            lstm[] = "lstm", gates[] = "gates";
// Layout::any: the gate order, int32 (0 icfo, 1 ifco).
inline constexpr const char gate_order[] = "gate_order";
// With the product outside (seq_fwd_gates): the step's pre-activations xw[t] + h . W_h, an input.
inline constexpr const char pre_activations[] = "pre_activations";
// The cell's whole product (cell_fwd): gates = b + x_h_prev . w, x_h_prev = [x | h_prev].
inline constexpr const char x_h_prev[] = "x_h_prev", w[] = "w", b[] = "b";
// On the caller's rows (seq_fwd_step_rows): the caller's row of each row the step runs, in length
// order (runtime/src/step_rows.h: order).
inline constexpr const char order[] = "order";
}  // namespace seq_fwd_step

// generators/seq_bwd_step.cpp: one step of the backward recurrence.
namespace seq_bwd_step {
inline constexpr const char dgates_next[] = "dgates_next", w_h_t[] = "w_h_t", h_grad[] = "h_grad",
                            cs_grad[] = "cs_grad", dcs_carry[] = "dcs_carry", i[] = "i", f[] = "f", o[] = "o",
                            ci[] = "ci", co[] = "co", cs_prev[] = "cs_prev", wci[] = "wci", wcf[] = "wcf",
                            wco[] = "wco", dgates[] = "dgates", dcs_carry_out[] = "dcs_carry_out", dh[] = "dh";
// Layout::any: the gate order, int32 (0 icfo, 1 ifco).
inline constexpr const char gate_order[] = "gate_order";
// With the product outside (seq_bwd_gates): dgates[t+1] . W_h^T, an input (h_grad is added inside).
inline constexpr const char dh_product[] = "dh_product";
// On the caller's rows (seq_bwd_step_rows): the caller's row of each row the step runs, in length
// order (runtime/src/step_rows.h: order).
inline constexpr const char order[] = "order";
}  // namespace seq_bwd_step

// generators/seq_bwd_reduce.cpp: the reductions after the backward recurrence.
namespace seq_bwd_reduce {
inline constexpr const char dgates[] = "dgates", cs[] = "cs", cs_prev[] = "cs_prev", dcs_carry[] = "dcs_carry",
                            b_grad[] = "b_grad", cs_prev_grad[] = "cs_prev_grad", peephole_grads[] = "peephole_grads";
// Layout::any with peepholes: the gate order, int32 (0 icfo, 1 ifco).
inline constexpr const char gate_order[] = "gate_order";
}  // namespace seq_bwd_reduce

// generators/cell_bwd.cpp: LSTMBlockCellGrad.
namespace cell_bwd {
inline constexpr const char cs_prev[] = "cs_prev", i[] = "i", cs[] = "cs", f[] = "f", o[] = "o", ci[] = "ci",
                            co[] = "co", cs_grad[] = "cs_grad", h_grad[] = "h_grad", wci[] = "wci", wcf[] = "wcf",
                            wco[] = "wco", cs_prev_grad[] = "cs_prev_grad", dicfo[] = "dicfo",
                            peephole_grads[] = "peephole_grads";
}  // namespace cell_bwd

// generators/gemm.cpp: the batched products (gemm_nn_bias, gemm_nn, gemm_tn, gemm_tn_panels).
namespace gemm {
inline constexpr const char a[] = "a", a_h[] = "a_h", b[] = "b", bias[] = "bias", c_in[] = "c_in",
                            sums_in[] = "sums_in", accumulate[] = "accumulate", c[] = "c", sums[] = "sums",
                            b_pairs[] = "b_pairs";
}  // namespace gemm

// generators/transpose.cpp and generators/panels.cpp (panels, panels_t).
namespace transpose {
inline constexpr const char in[] = "in", out[] = "out";
}  // namespace transpose
namespace panels {
inline constexpr const char in[] = "in", out[] = "out";
}  // namespace panels

// generators/gather_rows.cpp.
namespace gather_rows {
inline constexpr const char in[] = "in", index[] = "index", out[] = "out";
}  // namespace gather_rows

}  // namespace args
}  // namespace blocklstm::kernel
