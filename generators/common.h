// Pieces shared by the generators: generator parameters and the matrix-product pattern.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "Halide.h"
#include "generators/lstm_math.h"
#include "schedules/schedule.h"
#include "schedules/step_tiles.h"

namespace blocklstm::gen {

using namespace Halide;

using kernel::GateGrads;
using kernel::RecurrentProduct;
using kernel::Weights;

inline const std::map<std::string, RecurrentProduct> recurrent_product_names{{"inside", RecurrentProduct::inside},
                                                                            {"outside", RecurrentProduct::outside},
                                                                            {"cell", RecurrentProduct::cell}};
inline const std::map<std::string, GateGrads> gate_grads_names{{"float32", GateGrads::float32},
                                                               {"dtype", GateGrads::dtype}};
namespace args = kernel::args;

// A stored value as float32; with bf16_by_bits (GPU targets) a bfloat16 by its bits, a float32's
// high 16: Halide 21's CUDA back end aborts on a bfloat16 cast (LLVM "Invalid cast!"). On the CPU
// Halide's cast, which its bfloat16 dot products (vdpbf16ps) are matched from: the bit form there
// made the bfloat16 ops 3-4x slower.
inline Expr f32(const Expr &e, bool bf16_by_bits = false) {
    if (!bf16_by_bits || !e.type().is_bfloat()) return cast<float>(e);
    return reinterpret<float>(cast<uint32_t>(reinterpret<uint16_t>(e)) << 16);
}

// A value stored as t; on a GPU target a bfloat16 by bits (f32's reason), rounded to nearest even,
// NaN kept a quiet NaN; elsewhere Halide's cast, which Halide 21 lowers to integer operations on
// every CPU target (AVX512-BF16's vcvtneps2bf16 too is not matched: about 6 instructions a vector),
// but for float16 without F16C a NaN kept a NaN (below).
inline Expr stored_as(Type t, const Expr &e, const Target &target) {
    if (t == Float(16) && !target.has_gpu_feature() && !target.has_feature(Target::F16C)) {
        // Without F16C (the SSE4.1 target) Halide 21 casts to float16 by integer operations that
        // turn a NaN into an infinity: a NaN is stored a quiet NaN of its sign, as vcvtps2ph does.
        Expr f = cast<float>(e);
        Expr nan = reinterpret(t, cast<uint16_t>(((reinterpret<uint32_t>(f) >> 16) & 0x8000) | 0x7E00));
        return select(is_nan(f), nan, cast(t, f));
    }
    if (!t.is_bfloat() || !target.has_gpu_feature()) return cast(t, e);
    Expr f = cast<float>(e), u = reinterpret<uint32_t>(f);
    Expr nearest_even = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
    return reinterpret(t, cast<uint16_t>(select(is_nan(f), (u >> 16) | 0x40, nearest_even)));
}

// The base of every kernel generator: the generator params every kernel of kernels.inc is given
// — the tuning table its schedules read (`tuning_table`, its name, and `tuning`, its knobs as
// "name:value,...": schedules/tuning.h; CMake passes them) and `weights` — and the Machine its
// schedules are fitted to.
template <typename T>
class KernelGenerator : public Generator<T> {
public:
    GeneratorParam<std::string> tuning_table{"tuning_table", ""};
    GeneratorParam<std::string> tuning{"tuning", ""};
    GeneratorParam<Weights> weights{"weights", Weights::none,
                                    {{"none", Weights::none}, {"panels", Weights::panels}, {"matrix", Weights::matrix}}};
    // The bfloat16 kernels' products in pairs of bfloat16 products (schedules/cpu_targets.json's
    // bf16_dot_products; CMake passes it to the bfloat16 kernels of such a target).
    GeneratorParam<bool> bf16_dot_products{"bf16_dot_products", false};
    // The bfloat16 kernels' forward products on AMX tiles (schedules/cpu_targets.json's
    // amx_products; CMake passes it to the bfloat16 kernels of such a target).
    GeneratorParam<bool> amx_products{"amx_products", false};

protected:
    // A stored value as float32, and the float32 value e stored as t, for this generator's target.
    Expr f32(const Expr &e) const { return gen::f32(e, this->get_target().has_gpu_feature()); }
    Expr stored(Type t, const Expr &e) const { return stored_as(t, e, this->get_target()); }
    schedules::Machine machine() const {
        schedules::Machine m =
            schedules::machine(this->get_target(), tuning_table, tuning, this->using_autoscheduler());
        m.bf16_dot_products = bf16_dot_products;
        m.amx_products = amx_products;
        return m;
    }
    // The weights this generator can hold; another is a build error pointing at kernels.inc.
    void require_weights(std::initializer_list<Weights> allowed) const {
        for (Weights w : allowed)
            if (w == weights) return;
        static const char *const names[] = {"none", "panels", "matrix"};
        throw std::invalid_argument(std::string("this generator takes no weights=") +
                                    names[static_cast<int>(Weights(weights))] + " (kernels.inc's weights column)");
    }
};

inline const std::map<std::string, Layout> layout_names{
    {"icfo", Layout::icfo}, {"ifco", Layout::ifco}, {"any", Layout::any}};

// The gate gradients placed by gate block (0..3) in a layout's order: dgates(j, block, n). With
// Layout::any in the order `gate_order` (0 icfo, 1 ifco).
inline Expr gate_gradient_blocks(Layout layout, const Expr &block, const Expr &di,
                                 const Expr &dci, const Expr &df, const Expr &do_, const Expr &gate_order = Expr()) {
    if (layout == Layout::any)
        return select(gate_order == 1, gate_gradient_blocks(Layout::ifco, block, di, dci, df, do_),
                      gate_gradient_blocks(Layout::icfo, block, di, dci, df, do_));
    std::vector<Expr> blocks(4);
    blocks[gate_block(layout, gate_i)] = di;
    blocks[gate_block(layout, gate_c)] = dci;
    blocks[gate_block(layout, gate_f)] = df;
    blocks[gate_block(layout, gate_o)] = do_;
    return mux(block, blocks);
}

// One step's cell gradients as a Func of (j, n) that several outputs read (the gate gradients, the
// gradient of the entering cell state, the peephole sums), each field by name.
struct CellGrads {
    Func f{"cell_grads"};  // Tuple (di, dci, df, do, cs_prev_grad)
    CellGrads(const CellBackward &r, const Var &j, const Var &n) {
        f(j, n) = Tuple(r.di, r.dci, r.df, r.do_, r.cs_prev_grad);
    }
    Expr di(const Expr &j, const Expr &n) const { return f(j, n)[0]; }
    Expr df(const Expr &j, const Expr &n) const { return f(j, n)[2]; }
    Expr do_(const Expr &j, const Expr &n) const { return f(j, n)[3]; }
    Expr cs_prev_grad(const Expr &j, const Expr &n) const { return f(j, n)[4]; }
    // dgates(j, block, n): the four gate gradients in the layout's block order (Layout::any:
    // gate_order's).
    Expr gate_blocks(Layout layout, const Expr &j, const Expr &block, const Expr &n,
                     const Expr &gate_order = Expr()) const {
        return gate_gradient_blocks(layout, block, f(j, n)[0], f(j, n)[1], f(j, n)[2], f(j, n)[3], gate_order);
    }
};

// sums(j) = Tuple (wci_grad, wcf_grad, wco_grad) in float32: the peephole terms summed over the
// reduction domain they are written in (batch rows, or (rows, steps)), in order.
inline Func peephole_sums(const PeepholeGradTerms &terms, const Var &j) {
    Func sums("peephole_sums");
    sums(j) = Tuple(0.0f, 0.0f, 0.0f);
    sums(j) = Tuple(sums(j)[0] + terms.wci, sums(j)[1] + terms.wcf, sums(j)[2] + terms.wco);
    return sums;
}

// The panel width of a product's b operand (0: no panels, the weight matrix on the GPU). With
// panels (pairs: bfloat16 pair panels, schedules/panel_layout.h), their layout is declared: the panel width, zero origins of the panels and of the product
// (so a column's place in its panel is static), and the panel count the runtime allocates for the
// product's columns (schedules/panel_layout.h), checked on every call.
template <typename PanelsInput, typename ProductOutput>
int declare_panels(PanelsInput *panels, ProductOutput *product, bool in_panels, bool pairs = false) {
    if (!in_panels) return 0;
    panels->dim(0).set_min(0).set_extent(pairs ? 2 * panels::kPanelCols : panels::kPanelCols);
    panels->dim(1).set_min(0);
    panels->dim(2).set_min(0).set_extent(panels::panel_count(product->dim(0).extent()));
    product->dim(0).set_min(0);
    product->dim(1).set_min(0);
    return panels::kPanelCols;
}

// The b(x, k) operand of a step's recurrent product: element (x, k) of weight panels
// w(xi, k, xo) (panel_cols > 0, see generators/panels.cpp), of bfloat16 pair panels
// w(2 xi + k % 2, k / 2, xo) (pairs), or of the weight matrix w(x, k).
inline Expr recurrent_weight(const Func &w, int panel_cols, const Expr &x, const Expr &k, bool pairs = false) {
    if (panel_cols == 0) return w(x, k);
    if (pairs) return w(2 * (x % panel_cols) + k % 2, k / 2, x / panel_cols);
    return w(x % panel_cols, k, x / panel_cols);
}

// A reduction over depth steps of k in equal blocks of at most k_block steps (the last one padded
// by less than one step per block): H = 128 runs one block of 128, not a block of k_block half
// zeros. k_block 0: all of depth in one block. At least one block, even for an empty depth: the
// first block writes the initial value.
struct KBlocks {
    Expr count, size;
};
inline KBlocks k_blocks(const Expr &depth, int k_block) {
    Expr count = k_block > 0 ? max((depth + (k_block - 1)) / k_block, 1) : Expr(1);
    return {count, k_block > 0 ? (depth + count - 1) / count : depth};
}

// Element (kk, x, k) of AMX's pair panel of b(x, k), `cols` columns over `depth` k: b(x, 2 k + kk)
// in bfloat16, zero past the last column and k.
inline Expr amx_pair(const std::function<Expr(Expr x, Expr k)> &b, const Expr &cols, const Expr &depth,
                     const Var &kk, const Var &x, const Var &k) {
    Expr k2 = 2 * k + kk;
    Expr value = cast(BFloat(16), b(min(x, cols - 1), min(k2, depth - 1)));
    return select(x < cols && k2 < depth, value, cast(BFloat(16), 0));
}

// Declares the AMX pair panel of a product with `cols` columns over `depth` k: zero origins (as
// AMX's lowering needs them) and the extents the runtime allocates, checked on every call
// (blocked: for amx_product's k blocks).
template <typename PanelsInput>
void declare_amx_panels(PanelsInput *w, const Expr &cols, const Expr &depth, bool blocked = false) {
    w->dim(0).set_min(0).set_extent(2);
    w->dim(1).set_min(0).set_extent(panels::amx_panel_cols(cols));
    w->dim(2).set_min(0).set_extent(blocked ? panels::amx_blocked_pairs(depth) : panels::amx_panel_pairs(depth));
}

// sum(x, y) = init(x, y) + sum_k a(k, y) * b(x, k) on AMX tiles: a bfloat16, b in AMX's pair
// panel b_pairs(kk, x, k) = b(x, 2 k + kk) (schedules/panel_layout.h: amx_panels), float32 sums.
// a_panel(k, y) is a in whole tiles, zero past its last row and k, so the tiles at the edges add
// exact zeros; part(x, y) the product over all of k (the padded depth; b's panel is zero there
// too), in the form Halide 21 lowers to tileloadd / tdpbf16ps / tilestored (schedules/cpu.h:
// schedule_gemm_amx). k_block > 0 (w_grad's product, whose depth is the sequence's rows): part(x,
// y, kb) over block kb of k_block steps of k, sum = init + the blocks' parts, so that a block of a
// row block's rows and of a strip's columns stay in L2 (all 6400 k at once: each tile read 400
// KiB from memory); b_pairs then holds amx_blocked_pairs(depth) pair rows. b's pair row is
// written k_block / 2 * kb + k / 2, not (k_block * kb + k) / 2, which Halide's AMX lowering does
// not recognise.
inline schedules::GemmFuncs amx_product(const std::string &name, const std::function<Expr(Expr k, Expr y)> &a,
                                        const Func &b_pairs, const std::function<Expr(Expr x, Expr y)> &init,
                                        const Expr &rows, const Expr &depth, int k_block, const Var &x,
                                        const Var &y, std::optional<Func> sum) {
    Var k("k"), kb("kb");
    const bool blocked = k_block > 0;
    RDom kr(0, blocked ? Expr(k_block) : 2 * panels::amx_panel_pairs(depth), name + "_k");
    RDom blocks(0, blocked ? (depth + (k_block - 1)) / k_block : Expr(1), name + "_kb");
    schedules::GemmFuncs p{sum ? *sum : Func(name + "_sum"), Func(name + "_part"), Func(name + "_a_tiles"),
                           Func(name + "_b_unused"), x, y, kr.x, blocks.x, std::nullopt};
    p.amx = true;
    p.amx_k_blocks = blocked;
    Expr a_value = a(min(likely(k), max(depth - 1, 0)), min(likely(y), rows - 1));
    p.a_panel(k, y) = select(likely(k < depth) && likely(y < rows), a_value, cast(a_value.type(), 0));
    if (!blocked) {
        p.part(x, y) = 0.0f;
        p.part(x, y) += cast<float>(p.a_panel(kr.x, y)) * cast<float>(b_pairs(kr.x % 2, x, kr.x / 2));
        p.sum(x, y) = cast<float>(init(x, y)) + p.part(x, y);
        return p;
    }
    p.part(x, y, kb) = 0.0f;
    p.part(x, y, kb) += cast<float>(p.a_panel(k_block * kb + kr.x, y)) *
                        cast<float>(b_pairs(kr.x % 2, x, k_block / 2 * kb + kr.x / 2));
    p.sum(x, y) = cast<float>(init(x, y));
    p.sum(x, y) += p.part(x, y, blocks.x);
    return p;
}

// sum(x, y) = init(x, y) + sum_k a(k, y) * b(x, k), accumulated in float32, with the reduction
// blocked: part(x, y, kb) is the product over one block of k_block steps of k (k_block 0: one
// block of all of k), so a register tile
// of part and the packed operand panels of one block stay in L1 (docs/performance.md: packing and cache
// blocking of K are where the other half of GEMM speed lives). The panels are float32 views of a
// and b, both zero past the last k, so a partial last block adds exact zeros (never inf * 0).
// The panels are laid out for the schedule's register tiles: a_panel(yi, k, yo) holds row
// yo * panel_rows + yi and b_panel(xi, k, xo) column xo * panel_cols + xi, so a schedule that
// stores many tiles' panels at once keeps each tile's panel contiguous (0: no tiles,
// a_panel(y, k, 0) and b_panel(x, k, 0)). With blocking.bf16_pairs (bfloat16 a and b) the panels
// stay bfloat16 and hold pairs of k side by side, a_panel(kk, yi, k, yo) and b_panel(kk, xi, k,
// xo) for k = 2 k + kk, and the product runs over the pairs: a float32 sum of two products at a
// time (vdpbf16ps).
// Reads past the last row / column / k are clamped (min(likely(...)) lets Halide split off the
// edge iterations), so a schedule may compute whole register tiles and blocks at the edges;
// b_padded: b may be read past its last column up to the end of a panel (zeros there), so its
// columns are not clamped and a step's product reads b's panels in whole vectors.
// define_a_panel, if given, defines a's panel in place of `a` (a panel made from two inputs): the
// layout above, over every k up to k_extent (the blocks' steps; zeros past depth) and every row
// of whole tiles (rows past the last one as the last one).
inline schedules::GemmFuncs matrix_product(const std::string &name,
                                    const std::function<Expr(Expr k, Expr y)> &a,
                                    const std::function<Expr(Expr x, Expr k)> &b,
                                    const std::function<Expr(Expr x, Expr y)> &init,
                                    const Expr &rows, const Expr &cols, const Expr &depth,
                                    const schedules::GemmBlocking &blocking, bool b_padded,
                                    const Var &x, const Var &y,
                                    std::optional<Func> sum = std::nullopt,
                                    const std::function<void(Func a_panel, Expr k_extent)> &define_a_panel = nullptr) {
    const int panel_rows = blocking.panel_rows, panel_cols = blocking.panel_cols;
    const bool pairs = blocking.bf16_pairs, by_bits = blocking.bf16_by_bits;
    KBlocks kbs = k_blocks(depth, blocking.k_block);
    if (pairs) kbs.size = (kbs.size + 1) / 2 * 2;  // whole pairs of k in a block
    const Expr block_size = kbs.size;
    // k in a block, or (bf16_pairs) the pair kk and the pairs k of a block: k = 2 k + kk.
    RDom k_in_block = pairs ? RDom(0, 2, 0, kbs.size / 2, name + "_k") : RDom(0, kbs.size, name + "_k");
    RDom blocks(0, kbs.count, name + "_kb");
    schedules::GemmFuncs p{sum ? *sum : Func(name + "_sum"), Func(name + "_part"),
                           Func(name + "_a_panel"), Func(name + "_b_panel"), x, y,
                           pairs ? k_in_block.y : k_in_block.x, blocks.x,
                           pairs ? std::optional<RVar>(k_in_block.x) : std::nullopt};
    Var k("k"), kb("kb"), xo("xo"), yo("yo"), kk("kk");
    Expr xc = min(likely(x), cols - 1), yc = min(likely(y), rows - 1);
    Expr panel_x = panel_cols > 0 ? xo * panel_cols + x : x;
    Expr panel_y = panel_rows > 0 ? yo * panel_rows + y : y;
    Expr b_x = b_padded ? panel_x : min(likely(panel_x), cols - 1);
    Expr a_kk, b_kk, b_in_place;
    if (pairs && blocking.in_place_cols > 0) throw std::invalid_argument(name + ": b in place takes no bfloat16 pairs");
    if (pairs) {
        // bfloat16 operands, unconverted, with the two k of a pair side by side: a_panel(kk, y, k,
        // yo) and b_panel(kk, x, k, yo) hold k = 2 k + kk, each pair one 32-bit word, as a
        // bfloat16 dot product (vdpbf16ps) reads them; zero past depth, so a partial pair adds
        // exact zeros.
        if (define_a_panel) throw std::invalid_argument(name + ": bfloat16 pairs take a in place");
        Expr k2 = 2 * k + kk, k2c = min(likely(k2), max(depth - 1, 0));
        Expr a_value = a(k2c, min(likely(panel_y), rows - 1));
        p.a_panel(kk, y, k, yo) = select(likely(k2 < depth), a_value, cast(a_value.type(), 0));
        Expr b_value = b(b_x, k2c);
        p.b_panel(kk, x, k, xo) = select(likely(k2 < depth), b_value, cast(b_value.type(), 0));
        Expr kp = kb * (block_size / 2) + k_in_block.y;
        a_kk = f32(panel_rows > 0 ? p.a_panel(k_in_block.x, y % panel_rows, kp, y / panel_rows)
                                  : p.a_panel(k_in_block.x, y, kp, 0));
        b_kk = f32(panel_cols > 0 ? p.b_panel(k_in_block.x, x % panel_cols, kp, x / panel_cols)
                                  : p.b_panel(k_in_block.x, x, kp, 0));
    } else {
        Expr kc = min(likely(k), max(depth - 1, 0));
        if (define_a_panel) {
            define_a_panel(p.a_panel, kbs.count * kbs.size);
        } else {
            p.a_panel(y, k, yo) = select(likely(k < depth), f32(a(kc, min(likely(panel_y), rows - 1)), by_bits), 0.0f);
        }
        p.b_panel(x, k, xo) = select(likely(k < depth), f32(b(b_x, kc), by_bits), 0.0f);
        Expr kk_ = kb * block_size + k_in_block.x;
        a_kk = panel_rows > 0 ? p.a_panel(y % panel_rows, kk_, y / panel_rows) : p.a_panel(y, kk_, 0);
        b_kk = panel_cols > 0 ? p.b_panel(x % panel_cols, kk_, x / panel_cols) : p.b_panel(x, kk_, 0);
        if (blocking.in_place_cols > 0) {
            // b read in place where one register tile holds all the rows and the columns fill
            // whole tiles: each element of b is then read once, and its copy per tile costs more
            // than the product (the cell at B = 1, 4 and 8, H = 256: 0.30x, 0.53x and 0.73x the
            // time without it; at B = 16 1.03x, 64 1.45x, where several row tiles reuse the
            // copy). No tile then reads past cols, so x needs no clamp (one per lane is a gather).
            Expr b_value = b(unsafe_promise_clamped(x, 0, cols - 1), min(likely(kk_), max(depth - 1, 0)));
            b_in_place = select(likely(kk_ < depth), f32(b_value, by_bits), 0.0f);
            p.in_place = rows <= blocking.in_place_rows && cols % blocking.in_place_cols == 0;
            if (blocking.in_place_stream_cols > 0) {
                p.stream_cols = blocking.in_place_stream_cols;
                p.stream = rows <= step_tiles::kFewRowsMax && cols % p.stream_cols == 0;
            }
        }
    }
    if (blocking.single_row) p.single = rows <= step_tiles::kOneRowTilesMax;
    // Tall tiles only where b is padded: in the other branches a tall twin's narrower tiles reach
    // past their branch's tile by up to a tile's width less a vector (schedules/cpu.h), which b's
    // panels hold (their slack), and a copy of b per tile would have to be that much wider.
    const int tall_rows = b_padded ? blocking.tall_tiles_up_to : 0;
    for (const step_tiles::ShortTileRows &range : step_tiles::short_tile_rows(blocking.short_tiles_below, tall_rows)) {
        auto twin = std::find_if(p.short_tiles.begin(), p.short_tiles.end(), [&](const auto &t) { return t.rows == range.height; });
        if (twin == p.short_tiles.end()) twin = p.short_tiles.insert(twin, {.rows = range.height});
        twin->when.push_back(step_tiles::in_range(rows, range));
    }
    std::sort(p.short_tiles.begin(), p.short_tiles.end(), [](const auto &a, const auto &b) { return a.rows < b.rows; });
    // The product's register tiles (part) and their twins for a step of one row (part_single)
    // and for its short tiles, two rows' included (schedules/step_tiles.h): sum reads the one for
    // its rows (the schedule specializes sum on the conditions).
    auto product_of = [&](const std::string &what, const Expr &b_value) {
        Func f(name + what);
        f(x, y, kb) = 0.0f;
        f(x, y, kb) += a_kk * b_value;
        return f;
    };
    auto tiles = [&](const std::string &suffix, const Expr &b_value, Func &whole, Func &single,
                     Func schedules::GemmFuncs::ShortTiles::*twin) {
        auto product = [&](const std::string &what) { return product_of(what + suffix, b_value); };
        whole = product("_part");
        Expr chosen = whole(x, y, blocks);
        if (blocking.single_row) {
            single = product("_part_single_row");
            chosen = select(p.single, single(x, y, blocks), chosen);
        }
        for (schedules::GemmFuncs::ShortTiles &s : p.short_tiles) {
            s.*twin = product("_part_rows" + std::to_string(s.rows));
            for (const Expr &when : s.when) chosen = select(when, (s.*twin)(x, y, blocks), chosen);
        }
        return chosen;
    };
    Expr part = tiles("", b_kk, p.part, p.part_single, &schedules::GemmFuncs::ShortTiles::part);
    // The same tiles again, reading b in place (the schedule specializes sum on in_place first),
    // and for one or two rows b's rows in stretches (the schedule specializes on stream first).
    if (p.in_place.defined()) {
        Expr in_place = tiles("_in_place", b_in_place, p.part_in_place, p.part_single_in_place,
                              &schedules::GemmFuncs::ShortTiles::part_in_place);
        if (p.stream.defined()) {
            p.part_stream = product_of("_part_stream", b_in_place);
            in_place = select(p.stream, p.part_stream(x, y, blocks), in_place);
        }
        part = select(p.in_place, in_place, part);
    }
    if (blocking.k_block > 0 && !blocking.init_apart) {
        // Blocked k (the CPU): the initial value joins the first block's update, so that no pass
        // of its own writes c before the products do (a parallel loop that zeroed w_grad and
        // x_grad, 1 % of BlockLSTMGrad at 50,8,128). The select reads c's old value, unused, in
        // the first block.
        p.sum(x, y) = undef<float>();
        Expr before = select(blocks.x == 0, f32(init(xc, yc), by_bits), p.sum(x, y));
        p.sum(x, y) = before + part;
    } else {
        p.sum(x, y) = f32(init(xc, yc), by_bits);
        p.sum(x, y) += part;
    }
    return p;
}

// sum(x) = init(x) + sum_k b(x, k): the column sums of b, in float32, blocked over k as
// matrix_product blocks it and added in its order (each block from zero, then onto the sum), so
// they equal, bit for bit, a product row whose a is all ones (w_grad's product: b_grad, the
// weight gradient of the constant input 1). b past depth is not read. part(x, kb) is one block's
// sum; sum is a Func of the generator's (an output that is only stored: schedules read it back
// from a buffer of their own, schedules/cpu.h: schedule_column_sums_cpu).
struct ColumnSums {
    Func sum, part;
};
inline ColumnSums column_sums(const std::string &name, const std::function<Expr(Expr x, Expr k)> &b,
                              const std::function<Expr(Expr x)> &init, const Expr &depth, int k_block,
                              const Var &x, bool bf16_by_bits) {
    const KBlocks kbs = k_blocks(depth, k_block);
    RDom k_in_block(0, kbs.size, name + "_k"), blocks(0, kbs.count, name + "_kb");
    Var kb("kb");
    ColumnSums s{Func(name), Func(name + "_part")};
    Expr k = kb * kbs.size + k_in_block;
    s.part(x, kb) = 0.0f;
    s.part(x, kb) += select(likely(k < depth), f32(b(x, min(likely(k), max(depth - 1, 0))), bf16_by_bits), 0.0f);
    s.sum(x) = f32(init(x), bf16_by_bits);
    s.sum(x) += s.part(x, blocks);
    return s;
}

}  // namespace blocklstm::gen
