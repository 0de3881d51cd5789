// TensorFlow's own test cases (TF's kernel tests), ported.
#include <cmath>
#include <map>
#include <tuple>

#include <blocklstm/ops.h>

#include "test_util.h"

namespace blt {
namespace {

using namespace blocklstm;

Tensor filled(DType dt, std::vector<int64_t> shape, double v) {
    Array a = ref::zeros(std::move(shape));
    std::fill(a.data.begin(), a.data.end(), v);
    return ref::to_tensor(a, dt);
}
Tensor f32(std::vector<int64_t> shape, double v = 0.0) { return filled(DType::f32, std::move(shape), v); }

// Asserts that `body` throws blocklstm::Error whose message names `op`.
template <typename F>
void expect_error(F &&body, const std::string &op, const std::string &fragment = "") {
    try {
        body();
        ADD_FAILURE() << op << ": expected blocklstm::Error, nothing thrown";
    } catch (const Error &e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(op), std::string::npos) << "message does not name the op: " << m;
        if (!fragment.empty()) {
            EXPECT_NE(m.find(fragment), std::string::npos) << "message lacks '" << fragment << "': " << m;
        }
    } catch (const std::exception &e) {
        ADD_FAILURE() << op << ": threw a non-blocklstm exception: " << e.what();
    }
}

// ---- [CT] testLSTMBlockCell: two stacked LSTMBlockCell layers, golden numbers ---------------
TEST(TFCases, TwoLayerLSTMBlockCellGolden) {
    const Tensor x = f32({1, 2}, 1.0), c0 = f32({1, 2}, 0.1), w = f32({4, 8}, 0.5), z = f32({2}), b = f32({8});
    const LSTMBlockCellAttrs attrs{1.0f, -1.0f, false};  // the wrappers' "no clip"
    const auto l1 = LSTMBlockCell(x, c0, c0, w, z, z, z, b, attrs);
    const auto l2 = LSTMBlockCell(l1.h, c0, c0, w, z, z, z, b, attrs);
    for (int k = 0; k < 2; ++k) {
        EXPECT_NEAR(l1.cs.data_as<float>()[k], 0.68967271, 1e-6);
        EXPECT_NEAR(l1.h.data_as<float>()[k], 0.44848421, 1e-6);
        EXPECT_NEAR(l2.cs.data_as<float>()[k], 0.39897051, 1e-6);
        EXPECT_NEAR(l2.h.data_as<float>()[k], 0.24024698, 1e-6);
    }
    // And with TF's raw-op default clip (3.0), which these values never reach.
    const auto d1 = LSTMBlockCell(x, c0, c0, w, z, z, z, b);
    EXPECT_TRUE(same_bits("cs with default clip", d1.cs, l1.cs));
}

// ---- [PGT] testBlockLSTMV1V2Consistency -------------------------------------------------------------
// T=1, B=1, I=1, H=8, uniform [0,1) data, cs_prev = h_prev, zero peepholes, V1 with forget_bias 0,
// cell_clip 0; V2 with the c/f blocks of w and b swapped. The forward must agree bitwise (the same
// float operations in the same order on the same values). TF's gradient assertion encodes its
// wiring bug (docs/semantics.md: TensorFlow's bugs); the correct relation is: BlockLSTMGradV2 on the swapped weights equals
// BlockLSTMGrad with the c/f blocks of w_grad and b_grad swapped, and the same other gradients.
struct V1V2 {
    int64_t T, B, I, H;
    bool peephole;
};
class V1V2Consistency : public ::testing::TestWithParam<V1V2> {};

TEST_P(V1V2Consistency, ForwardEqualAndGradientsPermuted) {
    const V1V2 c = GetParam();
    std::ostringstream what;
    what << "V1V2/T" << c.T << "B" << c.B << "I" << c.I << "H" << c.H << (c.peephole ? "p" : "");
    BLT_SEED(seed, what.str());
    Rng rng(seed);
    auto u = [&](std::vector<int64_t> s) { return rounded(uniform(rng, std::move(s), 0, 1), DType::f32); };
    const Array w = u({c.I + c.H, 4 * c.H}), b = u({4 * c.H}), x = u({c.T, c.B, c.I}), s0 = u({c.B, c.H});
    const Array pz = c.peephole ? u({c.H}) : ref::zeros({c.H});
    const Array gc = u({c.T, c.B, c.H}), gh = u({c.T, c.B, c.H});
    auto t = [](const Array &a) { return ref::to_tensor(a, DType::f32); };
    const Tensor tw = t(w), tb = t(b), tw2 = t(swap_cf(w)), tb2 = t(swap_cf(b)), tx = t(x), ts = t(s0), tp = t(pz),
                 tgc = t(gc), tgh = t(gh);
    const auto v1 = BlockLSTM(c.T, tx, ts, ts, tw, tp, tp, tp, tb, BlockLSTMAttrs{0.0f, 0.0f, c.peephole});
    const auto v2 = BlockLSTMV2(c.T, tx, ts, ts, tw2, tp, tp, tp, tb2, BlockLSTMV2Attrs{0.0f, c.peephole});
    EXPECT_TRUE(same_bits("cs", v1.cs, v2.cs));
    EXPECT_TRUE(same_bits("h", v1.h, v2.h));
    EXPECT_TRUE(same_bits("i", v1.i, v2.i));
    EXPECT_TRUE(same_bits("f", v1.f, v2.f));
    EXPECT_TRUE(same_bits("o", v1.o, v2.o));
    EXPECT_TRUE(same_bits("ci", v1.ci, v2.ci));
    EXPECT_TRUE(same_bits("co", v1.co, v2.co));

    const GradAttrs ga{c.peephole};
    const auto g1 = BlockLSTMGrad(c.T, tx, ts, ts, tw, tp, tp, tp, tb, v1.i, v1.cs, v1.f, v1.o, v1.ci, v1.co, v1.h,
                                  tgc, tgh, ga);
    const auto g2 = BlockLSTMGradV2(c.T, tx, ts, ts, tw2, tp, tp, tp, tb2, v2.i, v2.cs, v2.f, v2.o, v2.ci, v2.co,
                                    v2.h, tgc, tgh, ga);
    // The gate gradients are the same numbers in a permuted column order, so the element-wise
    // parts agree exactly; sums over the 4H gate columns (x_grad, h_prev_grad and everything
    // downstream of the recurrence) may associate differently: float32 tolerance.
    const double tol = 1e-6;
    EXPECT_TRUE(close("w_grad (c/f swapped)", swap_cf(ref::to_array(g1.w_grad)), ref::to_array(g2.w_grad), tol));
    EXPECT_TRUE(close("b_grad (c/f swapped)", swap_cf(ref::to_array(g1.b_grad)), ref::to_array(g2.b_grad), tol));
    EXPECT_TRUE(close("x_grad", g2.x_grad, ref::to_array(g1.x_grad), tol));
    EXPECT_TRUE(close("cs_prev_grad", g2.cs_prev_grad, ref::to_array(g1.cs_prev_grad), tol));
    EXPECT_TRUE(close("h_prev_grad", g2.h_prev_grad, ref::to_array(g1.h_prev_grad), tol));
    EXPECT_TRUE(close("wci_grad", g2.wci_grad, ref::to_array(g1.wci_grad), tol));
    EXPECT_TRUE(close("wcf_grad", g2.wcf_grad, ref::to_array(g1.wcf_grad), tol));
    EXPECT_TRUE(close("wco_grad", g2.wco_grad, ref::to_array(g1.wco_grad), tol));
    // And TF's wiring bug is not ours: for T=1 the unswapped V1 w_grad differs from V2's.
    EXPECT_FALSE(close("w_grad (unswapped)", ref::to_array(g1.w_grad), ref::to_array(g2.w_grad), tol));
}

INSTANTIATE_TEST_SUITE_P(TF, V1V2Consistency,
                         ::testing::Values(V1V2{1, 1, 1, 8, false},    // TF's exact case
                                           V1V2{3, 4, 5, 8, false},    // multi-step
                                           V1V2{3, 4, 5, 8, true}),    // with peepholes
                         [](const auto &info) {
                             const V1V2 &c = info.param;
                             return "T" + std::to_string(c.T) + "_B" + std::to_string(c.B) + "_I" +
                                    std::to_string(c.I) + "_H" + std::to_string(c.H) +
                                    (c.peephole ? "_peephole" : "_plain");
                         });

// ---- [PGT] testLSTMBlockCell: random sizes, cell and cell grad (CPU) vs the reference ---------------
TEST(TFCases, LSTMBlockCellRandomSizes) {
    BLT_SEED(seed, "TFCases/LSTMBlockCellRandomSizes");
    Rng rng(seed);
    for (int rep = 0; rep < 3; ++rep) {
        std::uniform_int_distribution<int64_t> d(1, 31);
        const Shape s{1, d(rng), d(rng), d(rng), 1, 1, 0.0, 1.0, "TF random"};
        SCOPED_TRACE(describe(s));
        const Problem p = make_problem(rng(), s, DType::f32, true, false, Layout::icfo);
        const Inputs in(p);
        // TF's assertAllClose default (rtol = atol = 1e-6) scaled like ours.
        expect_fwd(run_fwd(p, in), p.fwd, 1e-6);
        expect_cell_grad(run_cell_grad(p, in), ref_cell_grad(p), 1e-6);
    }
}

// ---- The error tests of rnn_grad_test.py ---------------------------------------------------------
struct SeqArgs {  // T=2, B=1, I=1, H=2
    int64_t T = 2, B = 1, I = 1, H = 2;
    Tensor x = f32({2, 1, 1}, 0.5), cs_prev = f32({1, 2}, 0.5), h_prev = f32({1, 2}, 0.5), w = f32({3, 8}, 0.5),
           wci = f32({2}), wcf = f32({2}), wco = f32({2}), b = f32({8}), act = f32({2, 1, 2}, 0.5);
};

TEST(TFCases, SeqLenMaxOutOfRange) {
    SeqArgs a;
    for (int64_t L : {int64_t{10}, int64_t{-1}}) {
        SCOPED_TRACE(L);
        expect_error([&] { BlockLSTM(L, a.x, a.cs_prev, a.h_prev, a.w, a.wci, a.wcf, a.wco, a.b); }, "BlockLSTM",
                     "seq_len_max");
        expect_error([&] { BlockLSTMV2(L, a.x, a.cs_prev, a.h_prev, a.w, a.wci, a.wcf, a.wco, a.b); }, "BlockLSTMV2",
                     "seq_len_max");
        expect_error(
            [&] {
                BlockLSTMGrad(L, a.x, a.cs_prev, a.h_prev, a.w, a.wci, a.wcf, a.wco, a.b, a.act, a.act, a.act, a.act,
                              a.act, a.act, a.act, a.act, a.act);
            },
            "BlockLSTMGrad", "seq_len_max");
    }
}

TEST(TFCases, CellRank1X) {
    const Tensor x = f32({2}), s = f32({1, 2}), w = f32({3, 8}), p = f32({2}), b = f32({8});
    expect_error([&] { LSTMBlockCell(x, s, s, w, p, p, p, b); }, "LSTMBlockCell", "'x'");
    expect_error([&] { LSTMBlockCellGrad(x, s, s, w, p, p, p, b, s, s, s, s, s, s, s, s); }, "LSTMBlockCellGrad", "'x'");
}

TEST(TFCases, CellWciRank2) {
    const Tensor x = f32({1, 1}), s = f32({1, 2}), w = f32({3, 8}), p = f32({2}), bad = f32({1, 2}), b = f32({8});
    expect_error([&] { LSTMBlockCell(x, s, s, w, bad, p, p, b); }, "LSTMBlockCell", "'wci'");
    expect_error([&] { LSTMBlockCellGrad(x, s, s, w, bad, p, p, b, s, s, s, s, s, s, s, s); }, "LSTMBlockCellGrad",
                 "'wci'");
}

TEST(TFCases, PeepholeLength3WithH2) {
    const Tensor x = f32({1, 1}), s = f32({1, 2}), w = f32({3, 8}), p = f32({2}), bad = f32({3}), b = f32({8});
    SeqArgs a;
    for (int which = 0; which < 3; ++which) {
        const char *name = which == 0 ? "'wci'" : which == 1 ? "'wcf'" : "'wco'";
        SCOPED_TRACE(name);
        const Tensor &ci = which == 0 ? bad : p, &cf = which == 1 ? bad : p, &co = which == 2 ? bad : p;
        expect_error([&] { LSTMBlockCell(x, s, s, w, ci, cf, co, b); }, "LSTMBlockCell", name);
        expect_error([&] { LSTMBlockCellGrad(x, s, s, w, ci, cf, co, b, s, s, s, s, s, s, s, s); }, "LSTMBlockCellGrad",
                     name);
        expect_error([&] { BlockLSTM(2, a.x, a.cs_prev, a.h_prev, a.w, ci, cf, co, a.b); }, "BlockLSTM", name);
        expect_error(
            [&] {
                BlockLSTMGrad(2, a.x, a.cs_prev, a.h_prev, a.w, ci, cf, co, a.b, a.act, a.act, a.act, a.act, a.act,
                              a.act, a.act, a.act, a.act);
            },
            "BlockLSTMGrad", name);
    }
}

TEST(TFCases, GradBiasLength4HPlus3) {
    SeqArgs a;
    const Tensor b = f32({11});
    expect_error(
        [&] {
            BlockLSTMGrad(2, a.x, a.cs_prev, a.h_prev, a.w, a.wci, a.wcf, a.wco, b, a.act, a.act, a.act, a.act, a.act,
                          a.act, a.act, a.act, a.act);
        },
        "BlockLSTMGrad", "'b'");
}

TEST(TFCases, CellGradH0) {
    const Tensor x = f32({1, 1}), s = f32({1, 0}), w = f32({1, 0}), p = f32({0}), b = f32({0});
    expect_error([&] { LSTMBlockCellGrad(x, s, s, w, p, p, p, b, s, s, s, s, s, s, s, s); }, "LSTMBlockCellGrad");
}

TEST(TFCases, GradV2ActivationsShorterThanSeqLenMax) {
    SeqArgs a;
    const Tensor short_act = f32({1, 1, 2}, 0.5);
    expect_error(
        [&] {
            BlockLSTMGradV2(2, a.x, a.cs_prev, a.h_prev, a.w, a.wci, a.wcf, a.wco, a.b, short_act, short_act,
                            short_act, short_act, short_act, short_act, short_act, a.act, a.act);
        },
        "BlockLSTMGradV2");
}

// ---- rnn_cell_test.py ---------------------------------------------------------------------------
TEST(TFCases, LSTMBlockCellErrorHandling) {
    const Tensor x = f32({28, 29}), cs = f32({28, 17}), h = f32({28, 17}), w = f32({46, 68}), wci = f32({}),
                 wcf = f32({17}), wco = f32({28, 17}), b = f32({68});
    expect_error([&] { LSTMBlockCell(x, cs, h, w, wci, wcf, wco, b, LSTMBlockCellAttrs{1.0f, 0.0f, false}); },
                 "LSTMBlockCell");
}

TEST(TFCases, LSTMBlockCellEmptyInputRaisesError) {
    const DType h = DType::f16;
    const Tensor x = filled(h, {2, 16}, 0), cs = filled(h, {2, 0}, 0), w = filled(h, {16, 0}, 0),
                 wci = filled(h, {5}, 0), wcf = filled(h, {16}, 0), wco = filled(h, {13}, 0), b = filled(h, {0}, 0);
    expect_error([&] { LSTMBlockCell(x, cs, cs, w, wci, wcf, wco, b, LSTMBlockCellAttrs{112.66590343649887f, 67.12389445926587f, false}); },
                 "LSTMBlockCell");
}

TEST(TFCases, LSTMBlockCellGradErrorHandling) {  // BlockLSTMGradV2 with a rank-3 cs_prev
    const Tensor v = f32({1, 1, 1}, 0.504355371), p = f32({1}, 0.504355371), w = f32({2, 4}, 0.504355371),
                 b = f32({4}, 0.504355371);
    expect_error([&] { BlockLSTMGradV2(1, v, v, f32({1, 1}), w, p, p, p, b, v, v, v, v, v, v, v, v, v); },
                 "BlockLSTMGradV2", "'cs_prev'");
}

TEST(TFCases, LSTMBlockInvalidArgument) {  // H = 0 (the seq_len_max shape part does not apply: it is an int64)
    const Tensor x = f32({1, 3, 15}), s = f32({3, 0}), w = f32({15, 0}), z = f32({0});
    expect_error([&] { BlockLSTM(1, x, s, s, w, z, z, z, z, BlockLSTMAttrs{-121.2f, -106.8f, false}); }, "BlockLSTM");
}

// ---- Beyond TF's own tests: what the op contract says past seq_len_max and of float16 attrs ------

// The inputs of `op` by TF name.
std::map<std::string, TensorView> named_inputs(const OpInfo &op, const Inputs &in) {
    const std::map<std::string, const Tensor *> all = {
        {"x", &in.x},   {"cs_prev", &in.cs_prev}, {"h_prev", &in.h_prev}, {"w", &in.w},   {"wci", &in.wci},
        {"wcf", &in.wcf}, {"wco", &in.wco},       {"b", &in.b},           {"i", &in.i},   {"cs", &in.cs},
        {"f", &in.f},   {"o", &in.o},             {"ci", &in.ci},         {"co", &in.co}, {"h", &in.h},
        {"cs_grad", &in.cs_grad}, {"h_grad", &in.h_grad}};
    std::map<std::string, TensorView> m;
    for (const OpArg &a : op.inputs) m[a.name] = all.at(a.name)->view();
    return m;
}

OpAttrs attrs_of(const OpInfo &op, const Problem &p) {
    OpAttrs a;
    if (op.forget_bias) a.forget_bias = static_cast<float>(p.s.forget_bias);
    if (op.cell_clip) a.cell_clip = static_cast<float>(p.s.cell_clip);
    a.use_peephole = p.peephole;
    return a;
}

// The op into outputs that hold `fill` before the call, as a caller's reused buffers do.
std::map<std::string, Tensor> into_filled(const OpInfo &op, const Problem &p, const Inputs &in, double fill) {
    std::map<std::string, Tensor> out;
    std::map<std::string, TensorView> views;
    for (const OpArg &a : op.outputs) {
        out.emplace(a.name, filled(p.dtype, a.dims({p.s.T, p.s.B, p.s.I, p.s.H}), fill));
        views[a.name] = out.at(a.name).view();
    }
    invoke(op.name, p.s.L, named_inputs(op, in), views, attrs_of(op, p));
    return out;
}

// Whether every element of `t` from flat index `from` on is zero.
bool zero_from(const Tensor &t, int64_t from) {
    const Array a = ref::to_array(t.view());
    return std::all_of(a.data.begin() + from, a.data.end(), [](double v) { return v == 0.0; });
}

// Output buffers that held other values (12345) come out as the allocating call's (zeroed) ones,
// for every op: every element written, the steps past seq_len_max zero (i, cs, f, o, ci, co, h;
// x_grad) and, without peepholes, the peephole gradients zero (LSTMBlockCellGrad's too).
TEST(ReusedOutputs, EveryOpWritesItsOutputsWhole) {
    const Shape s{5, 3, 4, 6, 2, 1, 3.0, 1.0, "L < T"};
    for (const OpInfo &op : blocklstm::ops()) {
        const Layout layout = op.layout == "ifco" ? Layout::ifco : Layout::icfo;
        for (DType dt : blocklstm::kFloatDTypes) {
            for (bool peephole : {false, true}) {
                SCOPED_TRACE(op.name + " " + to_string(dt) + (peephole ? " peephole" : ""));
                const Problem p = make_problem(seed_for("reused outputs"), s, dt, !op.sequence, peephole, layout);
                const Inputs in(p);
                const auto fresh = invoke(op.name, s.L, named_inputs(op, in), attrs_of(op, p));
                const auto reused = into_filled(op, p, in, 12345.0);
                for (const OpArg &a : op.outputs)
                    EXPECT_TRUE(same_bits(a.name, reused.at(a.name).view(), fresh.at(a.name).view()));
                if (op.sequence && !op.gradient) {
                    for (const OpArg &a : op.outputs)
                        EXPECT_TRUE(zero_from(reused.at(a.name), s.L * s.B * s.H)) << a.name << " past L";
                }
                if (op.sequence && op.gradient)
                    EXPECT_TRUE(zero_from(reused.at("x_grad"), s.L * s.B * s.I)) << "x_grad past L";
                if (op.gradient && !peephole)
                    for (const char *g : {"wci_grad", "wcf_grad", "wco_grad"})
                        EXPECT_TRUE(zero_from(reused.at(g), 0)) << g;
            }
        }
    }
}

// The gradient ops read nothing of the steps past seq_len_max: activations and output gradients
// there (zero from the forward op, or anything a caller left) do not change a bit.
TEST(SeqLenMax, GradIgnoresEveryInputPastIt) {
    const Shape s{5, 3, 4, 6, 2, 1, 3.0, 1.0, "L < T"};
    for (Layout layout : {Layout::icfo, Layout::ifco}) {
        for (DType dt : blocklstm::kFloatDTypes) {
            const Problem p = make_problem(seed_for("past L"), s, dt, false, true, layout);
            Problem garbage = p;
            for (Array *a : {&garbage.fwd.i, &garbage.fwd.cs, &garbage.fwd.f, &garbage.fwd.o, &garbage.fwd.ci,
                             &garbage.fwd.co, &garbage.fwd.h, &garbage.cs_grad, &garbage.h_grad})
                for (std::size_t k = s.L * s.B * s.H; k < a->data.size(); ++k) a->data[k] = 0.375 + double(k % 7);
            const Inputs in(p), in_garbage(garbage);
            const OpInfo &op = op_info(layout == Layout::icfo ? "BlockLSTMGrad" : "BlockLSTMGradV2");
            SCOPED_TRACE(op.name + " " + to_string(dt));
            const auto want = invoke(op.name, s.L, named_inputs(op, in), attrs_of(op, p));
            const auto got = invoke(op.name, s.L, named_inputs(op, in_garbage), attrs_of(op, p));
            for (const OpArg &a : op.outputs) EXPECT_TRUE(same_bits(a.name, got.at(a.name).view(), want.at(a.name).view()));
        }
    }
}

// float16 and bfloat16 ops convert forget_bias and cell_clip to their type before using them, as
// TF converts attrs to the element type: 0.1 and 0.3 give the bits of half(0.1) = 0.0999755859375
// and half(0.3) = 0.300048828125 (bfloat16: 0.10009765625 and 0.30078125). The attrs move every
// pre-activation and the clip is active, so using the unrounded values would flip the rounding of
// many of these 7 x 6144 outputs (the float32 op, checked below with the half-rounded attrs, does
// see the difference).
TEST(Float16Attrs, RoundedToTheTypeBeforeUse) {
    const Shape s{6, 16, 8, 64, 6, 4, 0.3, 0.1, "clip active, attrs not representable in 16 bits"};
    for (const char *name : {"BlockLSTM", "LSTMBlockCell"}) {
        const OpInfo &op = op_info(name);
        const bool cell = !op.sequence;
        for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
            SCOPED_TRACE(std::string(name) + " " + to_string(dt));
            auto rounded = [&](double v) { return round_to(dt == DType::f32 ? DType::f16 : dt, static_cast<float>(v)); };
            const Problem p = make_problem(seed_for("half attrs"), s, dt, cell, false, Layout::icfo);
            const Inputs in(p);
            OpAttrs rounded_attrs = attrs_of(op, p);
            rounded_attrs.forget_bias = rounded(s.forget_bias);
            rounded_attrs.cell_clip = rounded(s.cell_clip);
            const auto as_given = invoke(op.name, s.L, named_inputs(op, in), attrs_of(op, p));
            const auto as_rounded = invoke(op.name, s.L, named_inputs(op, in), rounded_attrs);
            int differing = 0;
            for (const OpArg &a : op.outputs) {
                const TensorView x = as_given.at(a.name).view(), y = as_rounded.at(a.name).view();
                if (dt != DType::f32) EXPECT_TRUE(same_bits(a.name, x, y));
                differing += std::memcmp(x.data, y.data, x.num_bytes()) != 0;
            }
            if (dt == DType::f32) EXPECT_GT(differing, 0) << "the attrs' half rounding does not reach the outputs";
        }
    }
}

// ---- float16 and bfloat16: sums in float32 -------------------------------------------------------
// The 16-bit kernels add in float32 and round once (docs/semantics.md). A float16 sum stalls where
// its ulp reaches twice the addend (2048 x the addend; bfloat16: 256 x), which the tolerances of the
// random-input tests cannot see at their sizes; these sums run far past that point.

// The input projection over I = 4096 columns: x = 1 and the i gate's weights 2^-10 make z_i = 4
// (a float16 sum stops at 2: i = 0.881 instead of 0.982; a bfloat16 sum at 0.25: i = 0.562). The
// tolerance is one rounding of i = 0.982 to the type (bfloat16: 2^-9).
TEST(Float16Accumulation, InputProjection) {
    const int64_t B = 2, I = 4096, H = 1;
    Array w = ref::zeros({I + H, 4 * H});
    for (int64_t r = 0; r < I; ++r) w.data[r * 4 * H] = 1.0 / 1024;  // gate block 0 is i in ICFO and IFCO
    for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(to_string(dt));
        const Tensor w16 = ref::to_tensor(w, dt), zeros_bh = filled(dt, {B, H}, 0.0);
        const Tensor zeros_h = filled(dt, {H}, 0.0), b = filled(dt, {4 * H}, 0.0);
        const double want = 1.0 / (1.0 + std::exp(-4.0));
        const Tensor x_seq = filled(dt, {1, B, I}, 1.0), x_cell = filled(dt, {B, I}, 1.0);
        const auto v1 = BlockLSTM(1, x_seq, zeros_bh, zeros_bh, w16, zeros_h, zeros_h, zeros_h, b);
        const auto v2 = BlockLSTMV2(1, x_seq, zeros_bh, zeros_bh, w16, zeros_h, zeros_h, zeros_h, b);
        const auto cell = LSTMBlockCell(x_cell, zeros_bh, zeros_bh, w16, zeros_h, zeros_h, zeros_h, b);
        const double tol = dt == DType::f16 ? 1e-3 : 2e-3;
        for (const auto &[name, i] : {std::pair<const char *, const Tensor *>{"BlockLSTM", &v1.i},
                                      {"BlockLSTMV2", &v2.i}, {"LSTMBlockCell", &cell.i}})
            for (int64_t n = 0; n < B; ++n) EXPECT_NEAR(ref::to_array(*i).data[n], want, tol) << name << " row " << n;
    }
}

// The weight and bias gradients sum B * L rows of the gate gradients: 16,384 equal rows here, so
// every sum is exactly 8192 x the sum of B = 1 (two steps of one row), up to the rounding of the
// two results to the type (4 roundings: float16 2e-3, bfloat16 1.6e-2).
TEST(Float16Accumulation, WeightBiasAndPeepholeGradients) {
    const int64_t T = 2, I = 1, H = 1, big = 8192;
    for (DType dt : {DType::f16, DType::bf16}) {
        for (bool v2 : {false, true})
            for (bool peephole : {false, true}) {
                SCOPED_TRACE(std::string(v2 ? "BlockLSTMGradV2" : "BlockLSTMGrad") + (peephole ? ", peephole " : " ") +
                             to_string(dt));
                const double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;
                auto grads = [&](int64_t B) {
                    const Tensor x = filled(dt, {T, B, I}, 1.0), cs_prev = filled(dt, {B, H}, 0.5);
                    const Tensor h_prev = filled(dt, {B, H}, 0.25), w = filled(dt, {I + H, 4 * H}, 0.3);
                    const Tensor p = filled(dt, {H}, 0.2), b = filled(dt, {4 * H}, 0.1);
                    const Tensor h_grad = filled(dt, {T, B, H}, 1.0), cs_grad = filled(dt, {T, B, H}, 0.5);
                    const auto f = v2 ? BlockLSTMV2(T, x, cs_prev, h_prev, w, p, p, p, b, {0.0f, peephole})
                                      : BlockLSTM(T, x, cs_prev, h_prev, w, p, p, p, b, {1.0f, 3.0f, peephole});
                    return v2 ? BlockLSTMGradV2(T, x, cs_prev, h_prev, w, p, p, p, b, f.i, f.cs, f.f, f.o, f.ci, f.co,
                                                f.h, cs_grad, h_grad, {peephole})
                              : BlockLSTMGrad(T, x, cs_prev, h_prev, w, p, p, p, b, f.i, f.cs, f.f, f.o, f.ci, f.co, f.h,
                                              cs_grad, h_grad, {peephole});
                };
                const auto one = grads(1), many = grads(big);
                int checked = 0;
                for (const auto &[name, a, b] :
                     {std::tuple<const char *, const Tensor *, const Tensor *>{"w_grad", &one.w_grad, &many.w_grad},
                      {"b_grad", &one.b_grad, &many.b_grad}, {"wci_grad", &one.wci_grad, &many.wci_grad},
                      {"wcf_grad", &one.wcf_grad, &many.wcf_grad}, {"wco_grad", &one.wco_grad, &many.wco_grad}}) {
                    const Array from_one = ref::to_array(*a), from_many = ref::to_array(*b);
                    for (std::size_t k = 0; k < from_one.data.size(); ++k) {
                        const double want = big * from_one.data[k];
                        EXPECT_NEAR(from_many.data[k], want, tol * std::fabs(want) + 1e-6) << name << "[" << k << "]";
                        checked += std::fabs(want) > 1.0;
                    }
                }
                EXPECT_GE(checked, peephole ? 10 : 8) << "too few sums large enough to tell";
            }
    }
}

// ---- Long sequences -----------------------------------------------------------------------------
// T = 2000 steps (the variant shapes stop at 40): the state carried through every step, rounded to
// the dtype each time, and the weight gradients' sums over L * B = 4000 rows, where an error that
// accumulates along the sequence (a drifting state, a sum that stalls) would show. Every sequence
// op, both dtypes, peepholes, the clip active. The forward tolerances are the short sequences': the
// state's error is damped by f < 1 at every step (measured: 1.8e-7 in float32, one half ulp
// 4.9e-4 in float16). The float32 weight gradients sum 4000 rows where the short shapes sum at
// most a few hundred: a rounding error that grows as sqrt(n) ulps is ~4e-6 there (measured up to
// 4.3e-6), so 5e-5, still far below a wrong or missing term (1e-2); float16's 1e-2 (measured 3e-4).
TEST(LongSequences, EverySequenceOpAgainstTheReference) {
    const Shape s{2000, 2, 3, 4, 2000, 2, 0.8, 1.0, "T = 2000"};
    for (const OpInfo &op : blocklstm::ops()) {
        if (!op.sequence) continue;
        const Layout layout = op.layout == "ifco" ? Layout::ifco : Layout::icfo;
        for (DType dt : blocklstm::kFloatDTypes) {
            SCOPED_TRACE(op.name + " " + to_string(dt) + ", T = 2000");
            const Problem p = make_problem(seed_for("long sequences"), s, dt, false, true, layout);
            ASSERT_GE(max_abs(p.fwd.cs), 0.79) << "the clip (0.8) never acts";
            const Inputs in(p);
            if (op.gradient)
                expect_seq_grad(run_seq_grad(p, in), ref_seq_grad(p), dt == DType::f32 ? 5e-5 : grad_tol(dt));
            else
                expect_fwd(run_fwd(p, in), p.fwd, fwd_tol(dt));
        }
    }
}

}  // namespace
}  // namespace blt
