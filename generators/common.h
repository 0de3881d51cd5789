// Pieces shared by the generators: generator parameters and the matrix-product pattern.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "Halide.h"
#include "generators/lstm_math.h"

namespace blocklstm::gen {

using namespace Halide;

inline const std::map<std::string, Layout> layout_names{{"icfo", Layout::icfo},
                                                        {"ifco", Layout::ifco}};

inline Expr f32(const Expr &e) { return cast<float>(e); }

// acc(x, y) = init(x, y) + sum_k a(k, y) * b(x, k), accumulated in float32. `panel` is b converted
// to float32 (the schedule packs it). Reads past the last row / column are clamped to it, so the
// schedule may compute whole register tiles at the edges; those lanes are never stored.
struct MatrixProduct {
    Func acc, panel;
    RDom k;
};

inline MatrixProduct matrix_product(const std::string &name,
                                    const std::function<Expr(Expr k, Expr y)> &a,
                                    const std::function<Expr(Expr x, Expr k)> &b,
                                    const std::function<Expr(Expr x, Expr y)> &init,
                                    const Expr &rows, const Expr &cols, const Expr &depth,
                                    const Var &x, const Var &y) {
    MatrixProduct p{Func(name + "_acc"), Func(name + "_panel"), RDom(0, depth, name + "_k")};
    Expr xc = min(x, cols - 1), yc = min(y, rows - 1);
    p.panel(x, y) = f32(b(xc, y));
    p.acc(x, y) = f32(init(xc, yc));
    p.acc(x, y) += f32(a(p.k, yc)) * p.panel(x, p.k);
    return p;
}

}  // namespace blocklstm::gen
