#include "tools/tune/families.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <stdexcept>

#include "runtime/src/weight_grad_chunks.h"
#include "schedules/panel_layout.h"

namespace blocklstm::tune {

using Halide::Buffer;

std::string LstmShape::text() const {
    return std::to_string(T) + "," + std::to_string(B) + "," + std::to_string(I) + "," + std::to_string(H);
}

namespace {

// A float32 buffer of the given extents (innermost first), uniform in [lo, hi).
Buffer<> random(std::mt19937 &rng, std::vector<int> extents, float lo = -1.0f, float hi = 1.0f) {
    Buffer<float> b(extents);
    std::uniform_real_distribution<float> u(lo, hi);
    b.for_each_value([&](float &v) { v = u(rng); });
    return b;
}

Buffer<> empty_like(std::vector<int> extents) { return Buffer<float>(extents); }

// An output of no elements with a host pointer, as the runtime passes one: Halide takes a call
// whose output has no host pointer for a bounds query and computes nothing.
Buffer<> no_elements() {
    Buffer<float> one(1);
    one.crop(0, 0, 0);
    return one;
}

// Packed weight panels of a [depth, cols] operand (generators/panels.cpp): panel_count(cols)
// panels of kPanelCols columns, zero past the last column as the runtime packs them.
Buffer<> random_panels(std::mt19937 &rng, int cols, int depth) {
    Buffer<float> b(panels::kPanelCols, depth, panels::panel_count(cols));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    b.for_each_element([&](int xi, int k, int xo) {
        b(xi, k, xo) = xo * panels::kPanelCols + xi < cols ? u(rng) : 0.0f;
    });
    return b;
}

constexpr int kChunkRows = int(detail::kWeightGradChunkRows);

int weight_grad_chunks(const LstmShape &s) {
    const int rows = s.T * s.B;
    return (rows + kChunkRows - 1) / kChunkRows;
}

const std::vector<std::string> batched_knobs{"vector_floats",        "gemm_tile_rows",
                                             "gemm_tile_vectors",    "gemm_k_block",
                                             "gemm_row_block_tiles", "gemm_column_chunks",
                                             "gemm_columns_inner"};
const std::vector<std::string> step_knobs{"vector_floats", "gemm_tile_vectors", "gemm_step_tile_rows",
                                          "gemm_step_k_block", "gemm_row_block_tiles"};

auto never = [](const LstmShape &) { return 0; };
auto once = [](const LstmShape &) { return 1; };
auto per_step = [](const LstmShape &s) { return s.T; };

// The buffers of each generator's call at a shape, as the runtime passes them
// (runtime/src/ops_sequence.cpp). The per-step products read W_h in packed panels on the CPU and
// as a matrix on the GPU.

// xw = x . W_x + b (the input projection).
Call input_projection(const LstmShape &s, std::mt19937 &rng) {
    Call c;
    c.buffers["a"] = random(rng, {s.I, s.T * s.B});
    c.buffers["b"] = random(rng, {4 * s.H, s.I});
    c.buffers["bias"] = random(rng, {4 * s.H});
    c.buffers["c"] = empty_like({4 * s.H, s.T * s.B});
    return c;
}

// x_grad = dgates . W_x^T.
Call input_grad(const LstmShape &s, std::mt19937 &rng) {
    Call c;
    c.buffers["a"] = random(rng, {4 * s.H, s.T * s.B});
    c.buffers["b"] = random(rng, {s.I, 4 * s.H});
    c.buffers["c"] = empty_like({s.I, s.T * s.B});
    return c;
}

Call forward_step(const LstmShape &s, std::mt19937 &rng, bool panels) {
    Call c;
    c.buffers["xw"] = random(rng, {4 * s.H, s.B});
    c.buffers["h_prev"] = random(rng, {s.H, s.B});
    c.buffers["w_h"] = panels ? random_panels(rng, 4 * s.H, s.H) : random(rng, {4 * s.H, s.H});  // W_h [H, 4H]
    c.buffers["cs_prev"] = random(rng, {s.H, s.B});
    for (const char *p : {"wci", "wcf", "wco"}) c.buffers[p] = random(rng, {s.H});
    c.scalars["forget_bias"] = 1.0f;
    c.scalars["cell_clip"] = 3.0f;
    for (int k = 0; k < 7; ++k) c.buffers["lstm." + std::to_string(k)] = empty_like({s.H, s.B});
    c.buffers["gates"] = empty_like({4 * s.H, s.B});
    return c;
}

Call backward_step(const LstmShape &s, std::mt19937 &rng, bool panels) {
    Call c;
    c.buffers["dgates_next"] = random(rng, {4 * s.H, s.B});
    c.buffers["w_h_t"] = panels ? random_panels(rng, s.H, 4 * s.H) : random(rng, {s.H, 4 * s.H});  // W_h^T [4H, H]
    for (const char *p : {"h_grad", "cs_grad", "dcs_carry", "cs_prev", "ci", "co"}) c.buffers[p] = random(rng, {s.H, s.B});
    for (const char *p : {"i", "f", "o"}) c.buffers[p] = random(rng, {s.H, s.B}, 0.0f, 1.0f);
    for (const char *p : {"wci", "wcf", "wco"}) c.buffers[p] = random(rng, {s.H});
    c.buffers["dgates"] = empty_like({s.H, 4, s.B});
    c.buffers["dcs_carry_out"] = empty_like({s.H, s.B});
    c.buffers["dh"] = empty_like({s.H, s.B});
    return c;
}

// The reductions after the backward loop. On the CPU b_grad is w_grad's extra row, so the
// runtime passes it empty (with a host pointer).
Call reductions(const LstmShape &s, std::mt19937 &rng, bool peephole, bool b_grad_elsewhere) {
    Call c;
    c.buffers["dgates"] = random(rng, {4 * s.H, s.T * s.B});
    c.buffers["cs"] = random(rng, {s.H, s.B, s.T});
    c.buffers["cs_prev"] = random(rng, {s.H, s.B});
    c.buffers["dcs_carry"] = random(rng, {s.H, s.B});
    c.buffers["b_grad"] = b_grad_elsewhere ? no_elements() : empty_like({4 * s.H});
    c.buffers["cs_prev_grad"] = empty_like({s.H, s.B});
    if (peephole)
        for (int k = 0; k < 3; ++k) c.buffers["peephole_grads." + std::to_string(k)] = empty_like({s.H});
    return c;
}

}  // namespace

std::vector<Family> cpu_families() {
    using namespace std::placeholders;
    std::vector<Family> f;
    // The input projection, once per BlockLSTM.
    f.push_back({"gemm_nn_bias", "gemm", {{"form", "nn_bias"}, {"dtype", "float32"}}, batched_knobs,
                 input_projection, once, never, never});
    // One forward step, T per BlockLSTM; one backward step, T per BlockLSTMGrad.
    f.push_back({"seq_fwd_step", "seq_fwd_step", {{"dtype", "float32"}, {"weights", "panels"}}, step_knobs,
                 std::bind(forward_step, _1, _2, true), per_step, never, never});
    f.push_back({"seq_bwd_step", "seq_bwd_step", {{"dtype", "float32"}, {"weights", "panels"}}, step_knobs,
                 std::bind(backward_step, _1, _2, true), never, per_step, per_step});
    // x_grad, once per BlockLSTMGrad.
    f.push_back({"gemm_nn", "gemm", {{"form", "nn"}, {"dtype", "float32"}}, batched_knobs, input_grad, never,
                 once, once});
    // w_grad's x product over one chunk of dgates (and b_grad's extra row); the h product has
    // the same shape where I = H, so a BlockLSTMGrad runs two per chunk.
    f.push_back({"gemm_tn_panels", "gemm", {{"form", "tn"}, {"dtype", "float32"}, {"weights", "panels"}},
                 batched_knobs,
                 [](const LstmShape &s, std::mt19937 &rng) {
                     const int n = std::min(s.T * s.B, kChunkRows);
                     Call c;
                     c.buffers["a"] = random(rng, {s.I, n});
                     c.buffers["b"] = random_panels(rng, 4 * s.H, n);
                     c.buffers["c_in"] = random(rng, {4 * s.H, s.I + 1});
                     c.scalars["accumulate"] = 1.0f;
                     c.buffers["c"] = empty_like({4 * s.H, s.I + 1});
                     return c;
                 },
                 never, [](const LstmShape &s) { return 2 * weight_grad_chunks(s); },
                 [](const LstmShape &s) { return 2 * weight_grad_chunks(s); }});
    // The peephole sums after the backward loop, once per BlockLSTMGrad with peepholes.
    f.push_back({"seq_bwd_reduce", "seq_bwd_reduce",
                 {{"dtype", "float32"}, {"use_peephole", "true"}, {"layout", "icfo"}},
                 {"vector_floats", "column_sum_vectors"}, std::bind(reductions, _1, _2, true, true), never, never,
                 once});
    return f;
}

std::vector<Family> gpu_families() {
    using namespace std::placeholders;
    const std::vector<std::string> batched{"batched_cols_per_thread", "batched_rows_per_thread",
                                           "batched_thread_rows"};
    const std::vector<std::string> step{"step_cols_per_thread", "step_rows_per_thread", "step_thread_rows",
                                        "step_k_block", "elementwise_cols", "elementwise_rows"};
    const std::vector<std::string> sums{"sum_rows_per_chunk", "elementwise_cols", "elementwise_rows"};
    std::vector<Family> f;
    // The per-step products with their gate math: the recurrence, T launches per op.
    f.push_back({"seq_fwd_step", "seq_fwd_step", {{"dtype", "float32"}, {"weights", "matrix"}}, step,
                 std::bind(forward_step, _1, _2, false), per_step, never, never});
    f.push_back({"seq_bwd_step", "seq_bwd_step", {{"dtype", "float32"}, {"weights", "matrix"}}, step,
                 std::bind(backward_step, _1, _2, false), never, per_step, per_step});
    // After the recurrence: b_grad and cs_prev_grad, and with peepholes their three sums.
    f.push_back({"seq_bwd_reduce", "seq_bwd_reduce", {{"dtype", "float32"}}, sums,
                 std::bind(reductions, _1, _2, false, false), never, once, never});
    f.push_back({"seq_bwd_reduce_peephole", "seq_bwd_reduce",
                 {{"dtype", "float32"}, {"use_peephole", "true"}, {"layout", "icfo"}}, sums,
                 std::bind(reductions, _1, _2, true, false), never, never, once});
    // The batched products, which cuBLAS does where it loads (so not tuned unless asked for with
    // --families): the input projection, x_grad, and w_grad's two products (x and h_prev_seq;
    // I = H at the default shapes). h_prev_grad's product of B rows is left out.
    f.push_back({"gemm_nn_bias", "gemm", {{"form", "nn_bias"}, {"dtype", "float32"}}, batched, input_projection,
                 once, never, never, false});
    f.push_back({"gemm_nn", "gemm", {{"form", "nn"}, {"dtype", "float32"}}, batched, input_grad, never, once, once,
                 false});
    f.push_back({"gemm_tn", "gemm", {{"form", "tn"}, {"dtype", "float32"}}, batched,
                 [](const LstmShape &s, std::mt19937 &rng) {
                     Call c;
                     c.buffers["a"] = random(rng, {s.I, s.T * s.B});
                     c.buffers["b"] = random(rng, {4 * s.H, s.T * s.B});
                     c.buffers["c"] = empty_like({4 * s.H, s.I});
                     return c;
                 },
                 never, [](const LstmShape &) { return 2; }, [](const LstmShape &) { return 2; }, false});
    return f;
}

std::vector<Family> select_families(const std::vector<Family> &all, const std::vector<std::string> &only) {
    std::vector<Family> out;
    if (only.empty()) {
        std::copy_if(all.begin(), all.end(), std::back_inserter(out), [](const Family &f) { return f.by_default; });
        return out;
    }
    for (const std::string &name : only) {
        auto it = std::find_if(all.begin(), all.end(), [&](const Family &f) { return f.name == name; });
        if (it == all.end()) {
            std::string names;
            for (const Family &f : all) names += (names.empty() ? "" : ", ") + f.name;
            throw std::invalid_argument("--families: unknown family '" + name + "' (expected: " + names + ")");
        }
        out.push_back(*it);
    }
    return out;
}

}  // namespace blocklstm::tune
