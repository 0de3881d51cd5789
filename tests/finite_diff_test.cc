// The library's gradient ops against finite differences:
//  (i)  float32 gradients vs central differences (in double) of the float64 reference forward —
//       checks our backward against the true derivative of the specified forward;
//  (ii) float32 gradients vs central differences of the library's own float32 forward ops —
//       checks that our forward and backward ops are consistent with each other.
// All four (layout × peephole) combinations, several steps, seq_len_max < T, no clip (the clip is
// straight-through in backward by specification, so it has no finite-difference counterpart;
// the variant suite covers it against the reference).
#include "test_util.h"

namespace blt {
namespace {

// (i): the finite differences are accurate to ~1e-10 (eps = 1e-5 in double). Our gradients are
// float32: each output carries a few float32 roundings (6e-8) of terms of size ≤ scale, summed
// over ≤ L·B = 9 terms and 4H = 20 gate columns, which stays below 1e-6·scale.
constexpr double kTightTol = 1e-6;
// (ii): eps = 1e-2 on float32 inputs. Truncation error of central differences ≈ eps²/6·|f'''|
// ≈ 2e-5·|f'''|; float32 rounding of the loss (≈ 100 terms of size ~1, error ~1e-6 in total)
// divided by 2·eps gives ~5e-5. 1e-2 relative leaves a wide margin for |f'''| of a few and
// still catches a missing or wrong term (those are O(1e-1) relative or more).
constexpr double kLooseTol = 1e-2;
constexpr double kLooseEps = 1e-2;

struct Combo {
    Layout layout;
    bool peephole;
};
std::string combo_name(const Combo &c) {
    return std::string(c.layout == Layout::icfo ? "icfo" : "ifco") + (c.peephole ? "_peephole" : "_plain");
}

class SeqGradFD : public ::testing::TestWithParam<Combo> {};

Shape fd_shape() { return {4, 3, 3, 5, 3, 1.5, 0.0, 0.7, "fd: T=4, L=3"}; }

// Our sequence gradient in `dtype` against central differences (eps 1e-5, in double) of the float64
// reference forward at the problem's inputs (rounded to dtype by make_problem), within `tol`.
void expect_matches_reference_fd(uint64_t seed, const Combo &c, DType dtype, double tol) {
    const Shape s = fd_shape();
    Problem p = make_problem(seed, s, dtype, false, c.peephole, c.layout);
    const Inputs in(p);
    const auto ours = run_seq_grad(p, in);
    auto loss = [&] {
        const auto f = ref::block_lstm(s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                       s.cell_clip, c.peephole, c.layout);
        return seq_loss(f.cs, f.h, p.cs_grad, p.h_grad);
    };
    const auto fd = finite_differences({&p.x, &p.cs_prev, &p.h_prev, &p.w, &p.wci, &p.wcf, &p.wco, &p.b}, loss, 1e-5);
    expect_seq_grad_matches(ours, fd, tol);
}

TEST_P(SeqGradFD, MatchesReferenceFiniteDifferences) {
    const Combo c = GetParam();
    BLT_SEED(seed, "SeqGradFD/reference/" + combo_name(c));
    expect_matches_reference_fd(seed, c, DType::f32, kTightTol);
}

// (i) in float16 and bfloat16: the inputs are rounded to the type (the reference's central
// differences are taken at those values) and the activations the gradient op reads are the
// reference forward's, rounded; the 16-bit gradients then differ from the true derivative by the
// roundings the variant suites allow (grad_tol), a missing or wrong term by far more.
TEST_P(SeqGradFD, SixteenBitTypesMatchReferenceFiniteDifferences) {
    const Combo c = GetParam();
    for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(blocklstm::to_string(dt));
        BLT_SEED(seed, "SeqGradFD/16-bit/" + combo_name(c));
        expect_matches_reference_fd(seed, c, dt, grad_tol(dt));
    }
}

// Central differences of a float32 library forward, perturbing the float32 inputs in place.
// The step actually taken (after rounding to float) is the denominator.
std::vector<Array> own_fd(const std::vector<Tensor *> &params, const std::function<double()> &loss) {
    std::vector<Array> grads;
    for (Tensor *t : params) {
        Array g = ref::zeros(t->shape());
        float *d = t->data_as<float>();
        for (int64_t k = 0; k < t->num_elements(); ++k) {
            const float v = d[k];
            const float up = v + static_cast<float>(kLooseEps), down = v - static_cast<float>(kLooseEps);
            d[k] = up;
            const double lu = loss();
            d[k] = down;
            const double ld = loss();
            d[k] = v;
            g.data[k] = (lu - ld) / (static_cast<double>(up) - static_cast<double>(down));
        }
        grads.push_back(std::move(g));
    }
    return grads;
}

TEST_P(SeqGradFD, MatchesOwnForwardFiniteDifferences) {
    const Combo c = GetParam();
    const Shape s = fd_shape();
    BLT_SEED(seed, "SeqGradFD/own/" + combo_name(c));
    Problem p = make_problem(seed, s, DType::f32, false, c.peephole, c.layout);
    Inputs in(p);
    // Our own forward (not the reference's) feeds our backward here.
    const auto fwd = run_fwd(p, in);
    in.i = fwd.i, in.cs = fwd.cs, in.f = fwd.f, in.o = fwd.o, in.ci = fwd.ci, in.co = fwd.co, in.h = fwd.h;
    const auto ours = run_seq_grad(p, in);
    auto loss = [&] {
        const auto f = run_fwd(p, in);
        return seq_loss(ref::to_array(f.cs), ref::to_array(f.h), p.cs_grad, p.h_grad);
    };
    const auto fd = own_fd({&in.x, &in.cs_prev, &in.h_prev, &in.w, &in.wci, &in.wcf, &in.wco, &in.b}, loss);
    expect_seq_grad_matches(ours, fd, kLooseTol);
}

INSTANTIATE_TEST_SUITE_P(All, SeqGradFD,
                         ::testing::Values(Combo{Layout::icfo, false}, Combo{Layout::icfo, true},
                                           Combo{Layout::ifco, false}, Combo{Layout::ifco, true}),
                         [](const auto &info) { return combo_name(info.param); });

// LSTMBlockCellGrad via LSTMBlockCell. dicfo is checked through what it implies (docs/semantics.md: Backward):
// its column sums are d/db and dicfo·wᵀ is d/d[x | h_prev].
class CellGradFD : public ::testing::TestWithParam<bool> {};

Shape cell_shape() { return {1, 3, 4, 5, 1, 1.5, 0.0, 1.0, "cell fd"}; }

void expect_cell_vs_fd(const blocklstm::LSTMBlockCellGradOutputs<Tensor> &g, const Array &w, int64_t I, int64_t H,
                       const std::vector<Array> &fd, double tol) {
    const Array dicfo = ref::to_array(g.dicfo);
    const Array xh = times_wT(dicfo, w);
    EXPECT_TRUE(close("dicfo·wᵀ[:, :I] (d/dx)", cols(xh, 0, I), fd[0], tol));
    EXPECT_TRUE(close("cs_prev_grad", g.cs_prev_grad, fd[1], tol));
    EXPECT_TRUE(close("dicfo·wᵀ[:, I:] (d/dh_prev)", cols(xh, I, I + H), fd[2], tol));
    EXPECT_TRUE(close("wci_grad", g.wci_grad, fd[3], tol));
    EXPECT_TRUE(close("wcf_grad", g.wcf_grad, fd[4], tol));
    EXPECT_TRUE(close("wco_grad", g.wco_grad, fd[5], tol));
    EXPECT_TRUE(close("column sums of dicfo (d/db)", column_sums(dicfo), fd[6], tol));
}

TEST_P(CellGradFD, MatchesReferenceFiniteDifferences) {
    const bool peep = GetParam();
    const Shape s = cell_shape();
    BLT_SEED(seed, std::string("CellGradFD/reference/") + (peep ? "peephole" : "plain"));
    Problem p = make_problem(seed, s, DType::f32, true, peep, Layout::icfo);
    const Inputs in(p);
    const auto ours = run_cell_grad(p, in);
    auto loss = [&] {
        const auto f = ref::lstm_block_cell(p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, s.forget_bias,
                                            s.cell_clip, peep);
        return seq_loss(f.cs, f.h, p.cs_grad, p.h_grad);
    };
    const auto fd = finite_differences({&p.x, &p.cs_prev, &p.h_prev, &p.wci, &p.wcf, &p.wco, &p.b}, loss, 1e-5);
    expect_cell_vs_fd(ours, p.w, s.I, s.H, fd, kTightTol);
}

TEST_P(CellGradFD, MatchesOwnForwardFiniteDifferences) {
    const bool peep = GetParam();
    const Shape s = cell_shape();
    BLT_SEED(seed, std::string("CellGradFD/own/") + (peep ? "peephole" : "plain"));
    Problem p = make_problem(seed, s, DType::f32, true, peep, Layout::icfo);
    Inputs in(p);
    const auto fwd = run_fwd(p, in);
    in.i = fwd.i, in.cs = fwd.cs, in.f = fwd.f, in.o = fwd.o, in.ci = fwd.ci, in.co = fwd.co, in.h = fwd.h;
    const auto ours = run_cell_grad(p, in);
    auto loss = [&] {
        const auto f = run_fwd(p, in);
        return seq_loss(ref::to_array(f.cs), ref::to_array(f.h), p.cs_grad, p.h_grad);
    };
    const auto fd = own_fd({&in.x, &in.cs_prev, &in.h_prev, &in.wci, &in.wcf, &in.wco, &in.b}, loss);
    expect_cell_vs_fd(ours, p.w, s.I, s.H, fd, kLooseTol);
}

INSTANTIATE_TEST_SUITE_P(All, CellGradFD, ::testing::Values(false, true),
                         [](const auto &info) { return std::string(info.param ? "peephole" : "plain"); });

}  // namespace
}  // namespace blt
