// Pieces shared by the generators: generator parameters and the matrix-product pattern.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "Halide.h"
#include "generators/lstm_math.h"

namespace blocklstm::gen {

using namespace Halide;

inline const std::map<std::string, Layout> layout_names{{"icfo", Layout::icfo},
                                                        {"ifco", Layout::ifco}};

inline Expr f32(const Expr &e) { return cast<float>(e); }

// The gate gradients placed by gate block (0..3) in a layout's order: dgates(j, block, n).
inline Expr gate_gradient_blocks(Layout layout, const Expr &block, const Expr &di,
                                 const Expr &dci, const Expr &df, const Expr &do_) {
    std::vector<Expr> blocks(4);
    blocks[gate_block(layout, gate_i)] = di;
    blocks[gate_block(layout, gate_c)] = dci;
    blocks[gate_block(layout, gate_f)] = df;
    blocks[gate_block(layout, gate_o)] = do_;
    return mux(block, blocks);
}

// sums(j) = Tuple (wci_grad, wcf_grad, wco_grad) in float32: the peephole terms summed over the
// reduction domain they are written in (batch rows, or (rows, steps)), in order.
inline Func peephole_sums(const PeepholeGradTerms &terms, const Var &j) {
    Func sums("peephole_sums");
    sums(j) = Tuple(0.0f, 0.0f, 0.0f);
    sums(j) = Tuple(sums(j)[0] + terms.wci, sums(j)[1] + terms.wcf, sums(j)[2] + terms.wco);
    return sums;
}

// sum(x, y) = init(x, y) + sum_k a(k, y) * b(x, k), accumulated in float32, with the reduction
// blocked: part(x, y, kb) is the product over one block of k_block steps of k (k_block 0: one
// block of all of k), so a register tile
// of part and the packed operand panels of one block stay in L1 (DESIGN.md §4: packing and cache
// blocking of K are where the other half of GEMM speed lives). The panels are float32 views of a
// and b, both zero past the last k, so a partial last block adds exact zeros (never inf * 0).
// Reads past the last row / column / k are clamped (min(likely(...)) lets Halide split off the
// edge iterations), so a schedule may compute whole register tiles and blocks at the edges.
struct MatrixProduct {
    Func sum, part, a_panel, b_panel;
    RDom k_in_block, blocks;
};

inline MatrixProduct matrix_product(const std::string &name,
                                    const std::function<Expr(Expr k, Expr y)> &a,
                                    const std::function<Expr(Expr x, Expr k)> &b,
                                    const std::function<Expr(Expr x, Expr y)> &init,
                                    const Expr &rows, const Expr &cols, const Expr &depth,
                                    int k_block, const Var &x, const Var &y,
                                    std::optional<Func> sum = std::nullopt) {
    // depth in equal blocks of at most k_block steps (the last one is padded by less than one
    // step per block): H = 128 runs one block of 128, not a block of k_block half zeros.
    // k_block 0: all of depth in one block.
    Expr num_blocks = k_block > 0 ? (depth + (k_block - 1)) / k_block : Expr(1);  // x / 0 == 0
    Expr block_size = k_block > 0 ? (depth + num_blocks - 1) / num_blocks : depth;
    MatrixProduct p{sum ? *sum : Func(name + "_sum"), Func(name + "_part"),
                    Func(name + "_a_panel"), Func(name + "_b_panel"),
                    RDom(0, block_size, name + "_k"), RDom(0, num_blocks, name + "_kb")};
    Var k("k"), kb("kb");
    Expr xc = min(likely(x), cols - 1), yc = min(likely(y), rows - 1);
    Expr kc = min(likely(k), max(depth - 1, 0));
    p.a_panel(k, y) = select(likely(k < depth), f32(a(kc, yc)), 0.0f);
    p.b_panel(x, k) = select(k < depth, f32(b(xc, kc)), 0.0f);
    Expr kk = kb * block_size + p.k_in_block;
    p.part(x, y, kb) = 0.0f;
    p.part(x, y, kb) += p.a_panel(kk, y) * p.b_panel(x, kk);
    p.sum(x, y) = f32(init(xc, yc));
    p.sum(x, y) += p.part(x, y, p.blocks);
    return p;
}

}  // namespace blocklstm::gen
