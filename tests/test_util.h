// Shared helpers of the test suites: seeds, random problems, the float64 reference wiring and
// tolerance checks.
#pragma once

#include <gtest/gtest.h>

#include <blocklstm/blocklstm.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"
#include "generators/interface.h"
#include "schedules/tuning.h"
#include "schedules/panel_layout.h"
#include "schedules/step_tiles.h"
#include "test_env.h"

namespace blt {

using blocklstm::DType;
using blocklstm::Tensor;
using blocklstm::TensorView;
using blocklstm::reference::Array;
using blocklstm::reference::Layout;
namespace ref = blocklstm::reference;

// ---- Seeds ------------------------------------------------------------------------------------
// Every random stream is seeded from the name of what it generates (so a failure reproduces by
// re-running the same test), xor-ed with $BLOCKLSTM_TEST_SEED when set (to explore other data).
// The seed is printed on stdout and attached to every assertion failure via SCOPED_TRACE.
inline uint64_t seed_for(const std::string &what) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : what) {
        h ^= c;
        h *= 1099511628211ull;
    }
    if (const char *s = std::getenv("BLOCKLSTM_TEST_SEED")) h ^= std::strtoull(s, nullptr, 10);
    std::cout << "[ seed     ] " << what << " = " << h << std::endl;
    return h;
}
#define BLT_SEED(var, what)                          \
    const uint64_t var = ::blt::seed_for(what);      \
    SCOPED_TRACE(::testing::Message() << "random seed of '" << (what) << "' = " << var)

using Rng = std::mt19937_64;

inline int64_t count(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

inline Array uniform(Rng &rng, std::vector<int64_t> shape, double lo, double hi) {
    Array a = ref::zeros(std::move(shape));
    std::uniform_real_distribution<double> dist(lo, hi);
    for (double &v : a.data) v = dist(rng);
    return a;
}

// The value the library sees: rounded to dtype and read back.
inline Array rounded(const Array &a, DType dtype) { return ref::to_array(ref::to_tensor(a, dtype)); }

inline std::string shape_str(const std::vector<int64_t> &s) {
    std::ostringstream o;
    o << "[";
    for (std::size_t k = 0; k < s.size(); ++k) o << (k ? "," : "") << s[k];
    o << "]";
    return o.str();
}

inline double max_abs(const Array &a) {
    double m = 0;
    for (double v : a.data) m = std::max(m, std::abs(v));
    return m;
}

// max |ours - ref| <= tol * max(1, max finite |ref|) where ref is finite; where ref is NaN or an
// infinity, ours is the same (NaN and infinite inputs: docs/semantics.md, Precision).
inline ::testing::AssertionResult close(const std::string &name, const Array &ours, const Array &want,
                                        double tol) {
    if (ours.shape != want.shape)
        return ::testing::AssertionFailure() << name << ": shape " << shape_str(ours.shape)
                                             << ", expected " << shape_str(want.shape);
    double scale = 1;
    for (double v : want.data)
        if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    double worst = 0;
    std::size_t at = 0;
    for (std::size_t k = 0; k < want.data.size(); ++k) {
        const double o = ours.data[k], w = want.data[k];
        if (!std::isfinite(w)) {
            if (std::isnan(w) ? std::isnan(o) : o == w) continue;
            worst = INFINITY;
            at = k;
            break;
        }
        const double d = std::abs(o - w);
        if (!(d <= worst)) {  // also catches NaN
            worst = std::isnan(d) ? INFINITY : d;
            at = k;
        }
    }
    if (worst <= tol * scale) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << name << " " << shape_str(want.shape) << ": max |ours - ref| = " << worst << " at flat index "
           << at << " (ours " << ours.data[at] << ", ref " << want.data[at] << ") > " << tol << " * "
           << scale << " = " << tol * scale;
}
// A host copy of a tensor on any device.
inline Tensor on_host(const TensorView &t) {
    Tensor h(t.dtype, t.shape);
    blocklstm::copy(t, h);
    return h;
}
// Puts back, when it goes out of scope, the CUDA time loops' switches (set_cuda_step,
// set_cuda_graphs) that a test changes.
struct CudaSwitchesRestored {
    const blocklstm::CudaStep steps = blocklstm::cuda_step();
    const bool graphs = blocklstm::cuda_graphs();
    ~CudaSwitchesRestored() {
        blocklstm::set_cuda_step(steps);
        blocklstm::set_cuda_graphs(graphs);
    }
};

// `call` is refused for lack of CUDA kernels in its dtype (test_env.h: cuda_kernels_in).
inline ::testing::AssertionResult refused_for_lack_of_cuda_kernels(const std::function<void()> &call) {
    try {
        call();
    } catch (const std::exception &e) {
        if (std::string(e.what()).find("no compiled kernel") != std::string::npos) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << "refused for another reason: " << e.what();
    }
    return ::testing::AssertionFailure() << "ran although this build has no CUDA kernel in its dtype";
}
inline Tensor on_device(const TensorView &t, blocklstm::Device device) {
    Tensor d(t.dtype, t.shape, device);
    blocklstm::copy(t, d);
    return d;
}

inline ::testing::AssertionResult close(const std::string &name, const TensorView &ours, const Array &want,
                                        double tol) {
    if (ours.device != blocklstm::Device::cpu) return close(name, ref::to_array(on_host(ours)), want, tol);
    record_output_digest(name, ours);
    return close(name, ref::to_array(ours), want, tol);
}


// Bitwise equality of two host tensors.
inline ::testing::AssertionResult same_bits(const std::string &name, const TensorView &a, const TensorView &b) {
    if (a.shape != b.shape || a.dtype != b.dtype)
        return ::testing::AssertionFailure() << name << ": shapes/dtypes differ";
    if (a.num_bytes() && std::memcmp(a.data, b.data, a.num_bytes()) != 0) {
        const Array x = ref::to_array(a), y = ref::to_array(b);
        std::size_t k = 0;
        while (k < x.data.size() && std::memcmp(&x.data[k], &y.data[k], sizeof(double)) == 0) ++k;
        return ::testing::AssertionFailure() << name << ": differ first at flat index " << k << " ("
                                             << x.data[k] << " vs " << y.data[k] << ")";
    }
    return ::testing::AssertionSuccess();
}

// ---- Random problems ----------------------------------------------------------------------------

struct Shape {
    int64_t T, B, I, H, L;
    double weight_scale;  // weights ~ U(±weight_scale / sqrt(I+H))
    double cell_clip;
    double forget_bias;
    const char *note;
};
inline std::string describe(const Shape &s) {
    std::ostringstream o;
    o << "T=" << s.T << " B=" << s.B << " I=" << s.I << " H=" << s.H << " L=" << s.L
      << " wscale=" << s.weight_scale << " cell_clip=" << s.cell_clip << " forget_bias=" << s.forget_bias
      << " (" << s.note << ")";
    return o.str();
}

// The shapes every kernel variant is tested on (variants_test.cc; gpu_schedules_test.cc for the
// GPU schedules): H ∈ {1,2,7,8,16,17,33,64,65}, B ∈ {1,2,3,8,9,10,17,600}, I ∈ {0,1,3,5,16,31,300},
// T ∈ {1,2,5,7,40}; L = T, 0 and < T; the clip inactive (0, negative, TF's default 3 at small
// weights) and active (large weights); forget_bias default and not. Cell ops use B, I, H and the
// attrs only.
inline const std::vector<Shape> &variant_shapes() {
    static const std::vector<Shape> s = {
        {1, 1, 1, 1, 1, 1, 0.0, 1.0, "all ones"},
        {2, 3, 5, 7, 2, 1, 3.0, 1.0, "TF defaults, odd sizes"},
        {5, 8, 16, 8, 5, 1, 0.0, 0.5, "aligned sizes"},
        {5, 9, 31, 17, 3, 4, -1.0, -0.75, "L < T, negative clip = off"},  // |cs| past 1: a clip at |-1| shows
        {2, 17, 16, 16, 0, 1, 0.0, 1.0, "L = 0"},
        {5, 3, 0, 33, 4, 1, 0.0, 1.0, "I = 0, L < T"},
        {1, 8, 5, 64, 1, 1, 0.0, 2.0, "wide H"},
        {5, 9, 1, 33, 5, 4, 0.5, 1.0, "large weights, clip active"},
        {2, 1, 31, 64, 1, 1, 0.0, 0.0, "B = 1, L < T"},
        {5, 17, 5, 16, 5, 3, 1.0, 1.0, "large weights, clip active, B = 17"},
        // A CPU step of two rows runs in two-row tiles, and the rows past a step's whole register
        // tiles, where few, in a call of their own (schedules/step_tiles.h): B = 9 and 17 leave
        // one row past 8- and 4-row tiles, B = 10 two (alone past 8-row tiles, in a tile past
        // 4-row ones).
        {3, 2, 5, 12, 3, 1, 0.0, 1.0, "B = 2, two-row tiles"},
        {3, 10, 4, 9, 3, 1, 0.0, 1.0, "B = 10, two rows past the tiles"},
        // GEMMs past one block: L*B = 102 rows > one 96-row block (6-row tiles), and for the
        // AVX-512 geometry's k blocks of 256 (schedules/cpu_params.h) K = I = 300 and 4H = 260
        // each make two blocks.
        {7, 17, 300, 65, 6, 1, 0.0, 1.0, "multi-block GEMMs"},
        // Two k blocks for every geometry (at most 512 steps each): the input projection's K = I =
        // 600 and x_grad's K = 4H = 520 (float16's w_grad, K = L*B = 595, is the next shape).
        {2, 3, 600, 130, 2, 1, 0.0, 1.0, "two k blocks of 512"},
        // The CPU's float32 w_grad runs in chunks of 512 rows of dgates (L*B): 595 rows are two
        // chunks; with B = 600 the second chunk starts inside h_prev's rows of h_prev_seq.
        {40, 17, 5, 16, 35, 1, 0.0, 1.0, "w_grad over two chunks"},
        {2, 600, 3, 2, 2, 1, 0.0, 1.0, "a w_grad chunk starting inside h_prev"},
        // With 2 loop threads a backward of at most 8 rows of H <= 128 sums w_grad's chunks of 256
        // rows (counted from the last) beside its steps (runtime/src/weight_grad_chunks.h): 288
        // rows are two, the second summed after the steps.
        {40, 8, 5, 16, 36, 1, 0.0, 1.0, "8 rows, w_grad's chunks beside the steps"},
    };
    return s;
}

// A shape with a name a test can carry: the named shapes above by their note, the tile-boundary
// shapes below by what they sit on.
struct ShapeCase {
    std::string name;  // letters, digits and '_'
    Shape shape;
};

inline std::string identifier(const std::string &text) {
    std::string id;
    for (char c : text) {
        if (std::isalnum(static_cast<unsigned char>(c))) id += c;
        else if (!id.empty() && id.back() != '_') id += '_';
    }
    while (!id.empty() && id.back() == '_') id.pop_back();
    return id;
}

inline std::vector<ShapeCase> named_shapes() {
    std::vector<ShapeCase> cases;
    for (const Shape &s : variant_shapes()) cases.push_back({identifier(s.note), s});
    return cases;
}

// Which products a kernel's schedule tiles (runtime/families.inc), for the tile-boundary shapes it
// is tested on: the step's and the batched products' tiles (none for the other families).
using blocklstm::kernel::Products;

// Shapes on the edges of the CPU schedules' tiles, derived from the knobs of every tuning table
// compiled in (blocklstm::cpu_targets(), schedules/tuning.h) and the panel layout, so that they follow the schedules when
// the numbers change: for each tile size u of a product, a dimension of u - 1, u, 2u and 2u + 1
// (below, equal, a multiple, a multiple plus one), the other dimensions small. Per-step products
// (B rows, 4H or H columns, K = H or 4H): the step tile's rows, the tile's columns, the panel and
// its group, the step k block. Batched products (L*B or I+H rows, K = I, 4H or L*B): the tile's
// rows and its row block, the tile's columns, the k block in each of K = I, 4H and L*B (the CPU's
// float32 w_grad also runs in chunks of one k block's rows).
inline std::vector<ShapeCase> tile_boundary_shapes(Products products) {
    namespace sch = blocklstm::schedules;
    std::vector<ShapeCase> cases;
    auto seen = [&](const Shape &s) {
        return std::any_of(cases.begin(), cases.end(), [&](const ShapeCase &c) {
            const Shape &o = c.shape;
            return o.T == s.T && o.B == s.B && o.I == s.I && o.H == s.H && o.L == s.L;
        });
    };
    // `set(shape, v)` puts v into the dimension the tile size `unit` applies to; a shape already
    // derived from another tile keeps its first name.
    auto add_at = [&](const std::string &what, const std::vector<std::pair<const char *, int64_t>> &at,
                      const std::function<void(Shape &, int64_t)> &set) {
        for (const auto &[where, v] : at) {
            Shape s{2, 3, 5, 9, 2, 1, 0.0, 1.0, "tile boundary"};
            set(s, v);
            if (v < 1 || seen(s)) continue;
            cases.push_back({what + "_" + where, s});
        }
    };
    auto add = [&](const std::string &what, int64_t unit, const std::function<void(Shape &, int64_t)> &set) {
        add_at(what, {{"below", unit - 1}, {"equal", unit}, {"multiple", 2 * unit}, {"multiple_plus_one", 2 * unit + 1}},
               set);
    };
    auto batch = [](Shape &s, int64_t v) { s.B = v; };
    auto rows = [](Shape &s, int64_t v) { s.T = s.L = 1, s.B = v; };  // L*B = v
    auto units = [](Shape &s, int64_t v) { s.H = v; };  // columns H and 4H; K = H and 4H (unit / 4)
    auto units_and_inputs = [](Shape &s, int64_t v) { s.H = s.I = v; };
    auto inputs = [](Shape &s, int64_t v) { s.I = v; };  // K = I
    auto n = [](const char *what, int64_t size) { return what + std::to_string(size); };
    std::vector<sch::CpuTuning> tables;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets())
        tables.push_back(sch::parse_cpu_tuning(t.tuning_table, t.tuning));
    for (const sch::CpuTuning &g : tables) {
        if (products == Products::step) {
            add(n("step_tile_rows", g.gemm_step_tile_rows), g.gemm_step_tile_rows, batch);
            add(n("tile_cols", g.gemm_step_tile_cols()), g.gemm_step_tile_cols(), units);
            // Short tiles (schedules/step_tiles.h): each height's one tile; the shortest's one row
            // short too (a step of 3 rows in 4-row tiles); and two tiles of it, the second one row
            // short (9 rows in 8-row tiles: two of 5), where that is more than one whole tile.
            const int tile = g.gemm_step_tile_rows, shortest = blocklstm::step_tiles::shortest_tile_rows(tile);
            for (int h = shortest; shortest > 0 && h < tile; ++h) {
                std::vector<std::pair<const char *, int64_t>> at{{"one", h}};
                if (h == shortest) at.push_back({"one_short", h - 1});
                if (2 * h - 1 > tile) at.push_back({"two_short", 2 * h - 1});
                add_at(n("step_short_tile_rows", h), at, batch);
            }
            // Tall tiles: each height's one tile at H = 9 (4H = 36, a partial last tile), at 4H of
            // one tall tile's width and of one more vector.
            for (int h = tile + 1; h <= g.gemm_step_tall_tile_rows; ++h) {
                const int64_t cols = g.gemm_step_tall_tile_cols(h);
                add_at(n("step_tall_tile_rows", h), {{"one", h}}, batch);
                add_at(n("step_tall_tile_rows", h) + n("_cols", cols),
                       {{"one_tile", cols / 4}, {"and_a_vector", (cols + g.vector_floats) / 4}},
                       [h](Shape &s, int64_t v) { s.B = h, s.H = v; });
            }
            // Two rows in two-row tiles: a step of two, and two past two whole tiles (the
            // backward's step: a call of their own, step_tiles::rows_in_whole_tiles; the forward's
            // on the caller's rows: in its tiles, one call).
            if (tile > blocklstm::step_tiles::kFewRowsMax)
                add_at(n("step_two_row_tiles_below", tile), {{"alone", 2}, {"past_two_tiles", 2 * tile + 2}}, batch);
            // Rows of at most one tile read a weight matrix in place where its 4H columns fill
            // whole tiles (the cell op's kernel, generators/common.h), else its copy: 4H one tile,
            // two, and one unit short of a tile, at 1 and 2 rows (the one-row and two-row tiles'
            // twins) and a whole tile of rows.
            const int64_t cols = g.gemm_step_tile_cols(), tile_rows = g.gemm_step_tile_rows;
            const std::initializer_list<std::pair<const char *, int64_t>> in_place_units{
                {"whole", cols / 4}, {"twice", cols / 2}, {"short", cols / 4 - 1}};
            add_at(n("one_row_tile_cols", cols), in_place_units, [](Shape &s, int64_t v) { s.B = 1, s.H = v; });
            add_at(n("two_rows_tile_cols", cols), in_place_units, [](Shape &s, int64_t v) { s.B = 2, s.H = v; });
            add_at(n("tile_rows", tile_rows) + n("_in_place_cols", cols), in_place_units,
                   [tile_rows](Shape &s, int64_t v) { s.B = tile_rows, s.H = v; });
        } else if (products == Products::batched) {
            const int64_t row_block = int64_t{g.gemm_tile_rows} * g.gemm_row_block_tiles;
            add(n("tile_rows", g.gemm_tile_rows), g.gemm_tile_rows, rows);
            add(n("row_block", row_block), row_block, rows);
            add(n("tile_cols", g.gemm_tile_cols()), g.gemm_tile_cols(), units_and_inputs);
            add(n("k_block", g.gemm_k_block) + "_in_I", g.gemm_k_block, inputs);
            if (g.gemm_projection_k_block > 0)
                add(n("projection_k_block", g.gemm_projection_k_block) + "_in_I", g.gemm_projection_k_block, inputs);
            add(n("k_block", g.gemm_k_block) + "_in_4H", g.gemm_k_block / 4, units);
            add(n("k_block", g.gemm_k_block) + "_in_LB", g.gemm_k_block, rows);
        }
    }
    // One or two rows reading a weight matrix in place in stretches (schedules/step_tiles.h:
    // kStreamCols) where 4H is a multiple of one: one stretch, two, and 4H one unit short of a
    // stretch (the one-row tiles), the depth I + H one past a run of 4 steps of k.
    if (products == Products::step) {
        const int64_t stretch = blocklstm::step_tiles::kStreamCols;
        const std::initializer_list<std::pair<const char *, int64_t>> stretch_units{
            {"whole", stretch / 4}, {"twice", stretch / 2}, {"short", stretch / 4 - 1}};
        add_at(n("one_row_stream_cols", stretch), stretch_units, [](Shape &s, int64_t v) { s.B = 1, s.H = v; });
        add_at(n("two_rows_stream_cols", stretch), stretch_units, [](Shape &s, int64_t v) { s.B = 2, s.H = v; });
    }
    // AMX's tiles (a target with amx_products): 16 rows, 16 columns (4H), 32 deep (H per step, I
    // for the input projection), and the batched products' row blocks (schedules/panel_layout.h).
    const std::vector<blocklstm::CpuTarget> targets = blocklstm::cpu_targets();
    const bool amx = std::any_of(targets.begin(), targets.end(), [](const blocklstm::CpuTarget &t) { return t.amx_products; });
    if (amx) {
        namespace pl = blocklstm::panels;
        if (products == Products::step) {
            add(n("amx_tile_rows", pl::kAmxTileRows), pl::kAmxTileRows, batch);
            add(n("amx_tile_depth", pl::kAmxTileDepth), pl::kAmxTileDepth, units);
        } else if (products == Products::batched) {
            add(n("amx_tile_rows", pl::kAmxTileRows), pl::kAmxTileRows, rows);
            const int64_t row_block = int64_t{pl::kAmxTileRows} * pl::kAmxRowBlockTiles;
            add(n("amx_row_block", row_block), row_block, rows);
            add(n("amx_tile_depth", pl::kAmxTileDepth) + "_in_I", pl::kAmxTileDepth, inputs);
        }
        // A step's product runs in strips of kAmxStepStripCols columns, the batched ones in strips
        // of kAmxStripCols.
        const int strip = products == Products::step ? pl::kAmxStepStripCols : pl::kAmxStripCols;
        add(n("amx_tile_cols", pl::kAmxTileCols) + "_in_4H", pl::kAmxTileCols / 4, units);
        add(n("amx_strip_cols", strip) + "_in_4H", strip / 4, units);
        // The backward's products: dh and h_prev_grad H columns wide, x_grad I, all 4H deep.
        add(n("amx_tile_cols", pl::kAmxTileCols) + "_in_H", pl::kAmxTileCols, units);
        add(n("amx_strip_cols", strip) + "_in_H", strip, units);
        add(n("amx_tile_depth", pl::kAmxTileDepth) + "_in_4H", pl::kAmxTileDepth / 4, units);
        if (products == Products::batched) {
            add(n("amx_tile_cols", pl::kAmxTileCols) + "_in_I", pl::kAmxTileCols, inputs);
            add(n("amx_strip_cols", pl::kAmxStripCols) + "_in_I", pl::kAmxStripCols, inputs);
        }
    }
    if (products == Products::step) {
        add(n("panel", blocklstm::panels::kPanelCols), blocklstm::panels::kPanelCols, units);
        add(n("panel_group", blocklstm::panels::kPanelGroupCols), blocklstm::panels::kPanelGroupCols, units);
        for (const sch::CpuTuning &g : tables)
            add(n("step_k_block", g.gemm_step_k_block) + "_in_4H", g.gemm_step_k_block / 4, units);
    }
    return cases;
}

// Inputs of one op call, already rounded to dtype (the reference sees exactly what the library
// sees). cell = true: the cell ops' shapes ([B,I], [B,H]), else the sequence ops' ([T,B,*]).
struct Problem {
    Shape s;
    DType dtype;
    bool cell;
    bool peephole;
    Layout layout;
    Array x, cs_prev, h_prev, w, wci, wcf, wco, b, cs_grad, h_grad;
    ref::LSTMOut fwd;  // the reference forward of these inputs, rounded to dtype

    double fb() const { return layout == Layout::ifco ? 0.0 : s.forget_bias; }
    Tensor t(const Array &a) const { return ref::to_tensor(a, dtype); }
};

// p.fwd: the reference forward of p's inputs, rounded to p's dtype (again after a test changes them).
inline void set_reference_forward(Problem &p) {
    if (p.cell)
        p.fwd = ref::lstm_block_cell(p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                     p.s.cell_clip, p.peephole);
    else
        p.fwd = ref::block_lstm(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                p.s.cell_clip, p.peephole, p.layout);
    for (Array *a : {&p.fwd.i, &p.fwd.cs, &p.fwd.f, &p.fwd.o, &p.fwd.ci, &p.fwd.co, &p.fwd.h})
        *a = rounded(*a, p.dtype);
}

inline Problem make_problem(uint64_t seed, const Shape &s, DType dtype, bool cell, bool peephole,
                            Layout layout) {
    Rng rng(seed);
    Problem p{s, dtype, cell, peephole, layout, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    const int64_t T = s.T, B = s.B, I = s.I, H = s.H;
    const double ws = s.weight_scale / std::sqrt(static_cast<double>(std::max<int64_t>(1, I + H)));
    auto r = [&](std::vector<int64_t> shape, double a) { return rounded(uniform(rng, std::move(shape), -a, a), dtype); };
    p.x = cell ? r({B, I}, 1) : r({T, B, I}, 1);
    p.cs_prev = r({B, H}, 1);
    p.h_prev = r({B, H}, 1);
    p.w = r({I + H, 4 * H}, ws);
    p.wci = r({H}, 1);
    p.wcf = r({H}, 1);
    p.wco = r({H}, 1);
    p.b = r({4 * H}, 1);
    p.cs_grad = cell ? r({B, H}, 1) : r({T, B, H}, 1);
    p.h_grad = cell ? r({B, H}, 1) : r({T, B, H}, 1);
    set_reference_forward(p);
    return p;
}

// The library's tensors of a problem's inputs, on the CPU or copied to a CUDA device.
struct Inputs {
    Tensor x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad, h_grad;
    explicit Inputs(const Problem &p, blocklstm::Device device = blocklstm::Device::cpu)
        : x(p.t(p.x)), cs_prev(p.t(p.cs_prev)), h_prev(p.t(p.h_prev)), w(p.t(p.w)), wci(p.t(p.wci)),
          wcf(p.t(p.wcf)), wco(p.t(p.wco)), b(p.t(p.b)), i(p.t(p.fwd.i)), cs(p.t(p.fwd.cs)),
          f(p.t(p.fwd.f)), o(p.t(p.fwd.o)), ci(p.t(p.fwd.ci)), co(p.t(p.fwd.co)), h(p.t(p.fwd.h)),
          cs_grad(p.t(p.cs_grad)), h_grad(p.t(p.h_grad)) {
        if (device == blocklstm::Device::cpu) return;
        for (Tensor *t : {&x, &cs_prev, &h_prev, &w, &wci, &wcf, &wco, &b, &i, &cs, &f, &o, &ci, &co, &h,
                          &cs_grad, &h_grad})
            *t = on_device(*t, device);
    }
};

// The reference's answers for a problem.
inline ref::SeqGradOut ref_seq_grad(const Problem &p) {
    return ref::block_lstm_grad(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fwd.i,
                                p.fwd.cs, p.fwd.f, p.fwd.o, p.fwd.ci, p.fwd.co, p.fwd.h, p.cs_grad,
                                p.h_grad, p.peephole, p.layout);
}
inline ref::CellGradOut ref_cell_grad(const Problem &p) {
    return ref::lstm_block_cell_grad(p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fwd.i,
                                     p.fwd.cs, p.fwd.f, p.fwd.o, p.fwd.ci, p.fwd.co, p.cs_grad,
                                     p.h_grad, p.peephole);
}

// The library's answers for a problem (allocating overloads).
inline blocklstm::LSTMOutputs<Tensor> run_fwd(const Problem &p, const Inputs &in) {
    const auto fb = static_cast<float>(p.s.forget_bias);
    const auto clip = static_cast<float>(p.s.cell_clip);
    if (p.cell)
        return blocklstm::LSTMBlockCell(in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                        blocklstm::LSTMBlockCellAttrs{fb, clip, p.peephole});
    if (p.layout == Layout::icfo)
        return blocklstm::BlockLSTM(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                    blocklstm::BlockLSTMAttrs{fb, clip, p.peephole});
    return blocklstm::BlockLSTMV2(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                  blocklstm::BlockLSTMV2Attrs{clip, p.peephole});
}
inline blocklstm::BlockLSTMGradOutputs<Tensor> run_seq_grad(const Problem &p, const Inputs &in) {
    if (p.layout == Layout::icfo)
        return blocklstm::BlockLSTMGrad(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco,
                                        in.b, in.i, in.cs, in.f, in.o, in.ci, in.co, in.h, in.cs_grad,
                                        in.h_grad, blocklstm::GradAttrs{p.peephole});
    return blocklstm::BlockLSTMGradV2(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco,
                                      in.b, in.i, in.cs, in.f, in.o, in.ci, in.co, in.h, in.cs_grad,
                                      in.h_grad, blocklstm::GradAttrs{p.peephole});
}
inline blocklstm::LSTMBlockCellGradOutputs<Tensor> run_cell_grad(const Problem &p, const Inputs &in) {
    return blocklstm::LSTMBlockCellGrad(in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                        in.i, in.cs, in.f, in.o, in.ci, in.co, in.cs_grad, in.h_grad,
                                        blocklstm::GradAttrs{p.peephole});
}

// ---- seq_lengths (blocklstm's extension of the sequence ops) ------------------------------------

// The lengths as the op takes them, and capped at L as the reference takes them.
struct Lengths {
    Tensor tensor;
    std::vector<int64_t> capped;
    Lengths(const std::vector<int64_t> &values, int64_t L, bool int64)
        : tensor(int64 ? DType::i64 : DType::i32, {static_cast<int64_t>(values.size())}) {
        for (std::size_t b = 0; b < values.size(); ++b) {
            if (int64) tensor.data_as<int64_t>()[b] = values[b];
            else tensor.data_as<int32_t>()[b] = static_cast<int32_t>(values[b]);
            capped.push_back(std::min(values[b], L));
        }
    }
};

// The float64 reference forward with lengths (zeros past each), rounded to the dtype.
inline ref::LSTMOut ref_forward(const Problem &p, const std::vector<int64_t> &lengths) {
    ref::LSTMOut f = ref::block_lstm(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                     p.s.cell_clip, p.peephole, p.layout, &lengths);
    for (Array *a : {&f.i, &f.cs, &f.f, &f.o, &f.ci, &f.co, &f.h}) *a = rounded(*a, p.dtype);
    return f;
}

// The ops run into outputs that hold NaN in every byte (0xFF: NaN in float32, float16 and
// bfloat16), not into the allocating forms' fresh zeroed tensors: the zeros past each row's length
// must be written by the op, not left from the allocation.
inline Tensor nan_filled(blocklstm::Device device, DType dtype, std::vector<int64_t> shape) {
    Tensor t(dtype, std::move(shape));
    std::memset(t.data(), 0xFF, t.num_bytes());
    return device == blocklstm::Device::cpu ? t : on_device(t, device);
}

// The sequence forward op with seq_lengths (or none) into outputs of NaN.
inline blocklstm::LSTMOutputs<Tensor> run_forward(const Problem &p, const Inputs &in, const TensorView *lengths) {
    const auto fb = static_cast<float>(p.s.forget_bias), clip = static_cast<float>(p.s.cell_clip);
    const std::vector<int64_t> seq{p.s.T, p.s.B, p.s.H};
    auto nan = [&] { return nan_filled(in.x.device(), p.dtype, seq); };
    blocklstm::LSTMOutputs<Tensor> out{nan(), nan(), nan(), nan(), nan(), nan(), nan()};
    const blocklstm::LSTMOutputs<TensorView> views{out.i, out.cs, out.f, out.o, out.ci, out.co, out.h};
    if (p.layout == Layout::icfo)
        blocklstm::BlockLSTM(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, views,
                             {fb, clip, p.peephole}, lengths);
    else
        blocklstm::BlockLSTMV2(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, views,
                               {clip, p.peephole}, lengths);
    return out;
}

// The sequence gradient op with seq_lengths (or none) into outputs of NaN.
inline blocklstm::BlockLSTMGradOutputs<Tensor> run_grad(const Problem &p, const Inputs &in, const TensorView *lengths) {
    using Fn = void (*)(int64_t, const TensorView &, const TensorView &, const TensorView &, const TensorView &,
                        const TensorView &, const TensorView &, const TensorView &, const TensorView &,
                        const TensorView &, const TensorView &, const TensorView &, const TensorView &,
                        const TensorView &, const TensorView &, const TensorView &, const TensorView &,
                        const TensorView &, const blocklstm::BlockLSTMGradOutputs<TensorView> &,
                        const blocklstm::GradAttrs &, const TensorView *);
    const Fn fn = p.layout == Layout::icfo ? static_cast<Fn>(&blocklstm::BlockLSTMGrad)
                                           : static_cast<Fn>(&blocklstm::BlockLSTMGradV2);
    const int64_t T = p.s.T, B = p.s.B, I = p.s.I, H = p.s.H;
    auto nan = [&](std::vector<int64_t> shape) { return nan_filled(in.x.device(), p.dtype, std::move(shape)); };
    blocklstm::BlockLSTMGradOutputs<Tensor> out{nan({T, B, I}), nan({B, H}), nan({B, H}), nan({I + H, 4 * H}),
                                                nan({H}),       nan({H}),    nan({H}),    nan({4 * H})};
    fn(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, in.i, in.cs, in.f, in.o, in.ci, in.co,
       in.h, in.cs_grad, in.h_grad,
       {out.x_grad, out.cs_prev_grad, out.h_prev_grad, out.w_grad, out.wci_grad, out.wcf_grad, out.wco_grad,
        out.b_grad},
       {p.peephole}, lengths);
    return out;
}

// Tolerances, as a fraction of max(1, max |ref|) of each output.
//  float32: inputs are exactly representable, the library rounds each stored value once and its
//    sums run over at most a few hundred terms here: 1e-5 leaves ~two orders of magnitude of
//    headroom over the observed error while still catching any wrong term (O(1e-2) or more).
//  float16: the reference sees the half-rounded inputs; the library does float32 math but
//    stores every output as half (the recurrent state h and cs included, which the next step
//    reads back), i.e. one relative rounding of 2^-11 ≈ 4.9e-4 per stored value; intermediates
//    between kernels (gate gradients, the cell-state carry, the input projection) stay float32.
//    Sequence forward ops feed rounded states back up to T = 5 times, and the gradient ops read
//    the rounded activations at every step and sum over time, so the error grows to a few ulps
//    of half: 4e-3 (≈ 8 half ulps) for forward and 1e-2 for gradients.
//  bfloat16: the same, with 8 bits of mantissa instead of 11: one relative rounding of
//    2^-8 ≈ 3.9e-3 per stored value. The forward's worst case is the 35-step recurrence without
//    a clip, whose cell state grows to ~6 and is rounded back in at every step (3.3e-2 observed):
//    6.25e-2 (16 roundings) for forward; the gradient ops read the rounded activations once per
//    step, and where the products run on bfloat16 pairs (AVX512-BF16) the gate gradients enter
//    them rounded to bfloat16 (3.8e-3 and 6.7e-3 observed; on AMX the backward stores them so,
//    and b_grad and the peephole grads sum the rounded values): 3.2e-2 (8 roundings). A wrong term is
//    caught by the float32 and float16 variants of the same generator code; these tolerances catch
//    a wrong conversion, type or pair.
inline double fwd_tol(DType d) { return d == DType::f32 ? 1e-5 : d == DType::bf16 ? 6.25e-2 : 4e-3; }
inline double grad_tol(DType d) { return d == DType::f32 ? 1e-5 : d == DType::bf16 ? 3.2e-2 : 1e-2; }

inline void expect_fwd(const blocklstm::LSTMOutputs<Tensor> &ours, const ref::LSTMOut &want, double tol) {
    EXPECT_TRUE(close("i", ours.i, want.i, tol));
    EXPECT_TRUE(close("cs", ours.cs, want.cs, tol));
    EXPECT_TRUE(close("f", ours.f, want.f, tol));
    EXPECT_TRUE(close("o", ours.o, want.o, tol));
    EXPECT_TRUE(close("ci", ours.ci, want.ci, tol));
    EXPECT_TRUE(close("co", ours.co, want.co, tol));
    EXPECT_TRUE(close("h", ours.h, want.h, tol));
}
inline void expect_seq_grad(const blocklstm::BlockLSTMGradOutputs<Tensor> &ours, const ref::SeqGradOut &want,
                            double tol) {
    EXPECT_TRUE(close("x_grad", ours.x_grad, want.x_grad, tol));
    EXPECT_TRUE(close("cs_prev_grad", ours.cs_prev_grad, want.cs_prev_grad, tol));
    EXPECT_TRUE(close("h_prev_grad", ours.h_prev_grad, want.h_prev_grad, tol));
    EXPECT_TRUE(close("w_grad", ours.w_grad, want.w_grad, tol));
    EXPECT_TRUE(close("wci_grad", ours.wci_grad, want.wci_grad, tol));
    EXPECT_TRUE(close("wcf_grad", ours.wcf_grad, want.wcf_grad, tol));
    EXPECT_TRUE(close("wco_grad", ours.wco_grad, want.wco_grad, tol));
    EXPECT_TRUE(close("b_grad", ours.b_grad, want.b_grad, tol));
}
inline void expect_cell_grad(const blocklstm::LSTMBlockCellGradOutputs<Tensor> &ours, const ref::CellGradOut &want,
                             double tol) {
    EXPECT_TRUE(close("cs_prev_grad", ours.cs_prev_grad, want.cs_prev_grad, tol));
    EXPECT_TRUE(close("dicfo", ours.dicfo, want.dicfo, tol));
    EXPECT_TRUE(close("wci_grad", ours.wci_grad, want.wci_grad, tol));
    EXPECT_TRUE(close("wcf_grad", ours.wcf_grad, want.wcf_grad, tol));
    EXPECT_TRUE(close("wco_grad", ours.wco_grad, want.wco_grad, tol));
}

// The library's op of a problem (the forward op, or with `gradient` its gradient op) against the
// float64 reference, at the dtype's tolerances.
inline void expect_op_matches_reference(const Problem &p, const Inputs &in, bool gradient) {
    if (!gradient) return expect_fwd(run_fwd(p, in), p.fwd, fwd_tol(p.dtype));
    if (p.cell) return expect_cell_grad(run_cell_grad(p, in), ref_cell_grad(p), grad_tol(p.dtype));
    expect_seq_grad(run_seq_grad(p, in), ref_seq_grad(p), grad_tol(p.dtype));
}

// Swap the c and f column blocks of the last axis (width 4H): ICFO <-> IFCO.
inline Array swap_cf(const Array &a) {
    Array r = a;
    const int64_t W = a.shape.back(), H = W / 4, rows = W ? static_cast<int64_t>(a.data.size()) / W : 0;
    for (int64_t n = 0; n < rows; ++n)
        for (int64_t j = 0; j < H; ++j) std::swap(r.data[n * W + H + j], r.data[n * W + 2 * H + j]);
    return r;
}

}  // namespace blt

#include <functional>

namespace blt {

// Central finite differences of loss() with respect to every element of every params[k].
inline std::vector<Array> finite_differences(const std::vector<Array *> &params,
                                             const std::function<double()> &loss, double eps) {
    std::vector<Array> grads;
    for (Array *a : params) {
        Array g = ref::zeros(a->shape);
        for (std::size_t k = 0; k < a->data.size(); ++k) {
            const double v = a->data[k];
            a->data[k] = v + eps;
            const double up = loss();
            a->data[k] = v - eps;
            const double down = loss();
            a->data[k] = v;
            g.data[k] = (up - down) / (2 * eps);
        }
        grads.push_back(std::move(g));
    }
    return grads;
}

// A sequence grad op's outputs against finite differences `fd` of the 8 inputs it differentiates, in
// the order x, cs_prev, h_prev, w, wci, wcf, wco, b.
inline void expect_seq_grad_matches(const blocklstm::BlockLSTMGradOutputs<Tensor> &ours, const std::vector<Array> &fd,
                                    double tol) {
    EXPECT_TRUE(close("x_grad", ours.x_grad, fd[0], tol));
    EXPECT_TRUE(close("cs_prev_grad", ours.cs_prev_grad, fd[1], tol));
    EXPECT_TRUE(close("h_prev_grad", ours.h_prev_grad, fd[2], tol));
    EXPECT_TRUE(close("w_grad", ours.w_grad, fd[3], tol));
    EXPECT_TRUE(close("wci_grad", ours.wci_grad, fd[4], tol));  // all zero without peephole
    EXPECT_TRUE(close("wcf_grad", ours.wcf_grad, fd[5], tol));
    EXPECT_TRUE(close("wco_grad", ours.wco_grad, fd[6], tol));
    EXPECT_TRUE(close("b_grad", ours.b_grad, fd[7], tol));
}

// Σ (cs·Gc + h·Gh): the loss whose gradient the grad ops compute for cs_grad = Gc, h_grad = Gh.
inline double seq_loss(const Array &cs, const Array &h, const Array &Gc, const Array &Gh) {
    double s = 0;
    for (std::size_t k = 0; k < cs.data.size(); ++k) s += cs.data[k] * Gc.data[k] + h.data[k] * Gh.data[k];
    return s;
}

// dicfo -> the gradients it implies (docs/semantics.md: Backward): column sums (b_grad) and dicfo·wᵀ (xh_grad).
inline Array column_sums(const Array &d) {
    const int64_t W = d.shape.back();
    Array r = ref::zeros({W});
    for (std::size_t k = 0; k < d.data.size(); ++k) r.data[k % W] += d.data[k];
    return r;
}
inline Array matmul(const Array &a, const Array &b) {  // [M,K]·[K,N]
    const int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
    Array c = ref::zeros({M, N});
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t n = 0; n < N; ++n) c.data[m * N + n] += a.data[m * K + k] * b.data[k * N + n];
    return c;
}
inline Array transposed(const Array &a) {  // of a rank-2 array
    const int64_t R = a.shape[0], C = a.shape[1];
    Array t = ref::zeros({C, R});
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) t.data[c * R + r] = a.data[r * C + c];
    return t;
}
inline Array times_wT(const Array &d, const Array &w) {  // [B,4H]·[I+H,4H]ᵀ -> [B,I+H]
    return matmul(d, transposed(w));
}
inline Array cols(const Array &a, int64_t c0, int64_t c1) {  // a[:, c0:c1] of a rank-2 array
    const int64_t B = a.shape[0], W = a.shape[1];
    Array r = ref::zeros({B, c1 - c0});
    for (int64_t n = 0; n < B; ++n)
        for (int64_t c = c0; c < c1; ++c) r.data[n * (c1 - c0) + c - c0] = a.data[n * W + c];
    return r;
}

}  // namespace blt
