// The float64 reference checked on its own: TF's golden numbers, finite differences of itself,
// padding, and the V1/V2 relations. If these fail, nothing else in the suites can be trusted.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "test_util.h"

namespace blt {
namespace {

// The worked example of docs/semantics.md (TF contrib testLSTMBlockCell): two stacked cells.
TEST(Reference, GoldenTwoLayerCell) {
    const Array x{{1, 2}, {1, 1}}, c0{{1, 2}, {0.1, 0.1}}, w{{4, 8}, std::vector<double>(32, 0.5)};
    const Array z2 = ref::zeros({2}), b = ref::zeros({8});
    const auto l1 = ref::lstm_block_cell(x, c0, c0, w, z2, z2, z2, b, 1.0, 0.0, false);
    const auto l2 = ref::lstm_block_cell(l1.h, c0, c0, w, z2, z2, z2, b, 1.0, 0.0, false);
    for (int k = 0; k < 2; ++k) {
        EXPECT_NEAR(l1.cs.data[k], 0.68967271, 1e-6);
        EXPECT_NEAR(l1.h.data[k], 0.44848421, 1e-6);
        EXPECT_NEAR(l2.cs.data[k], 0.39897051, 1e-6);
        EXPECT_NEAR(l2.h.data[k], 0.24024698, 1e-6);
    }
}

struct Combo {
    Layout layout;
    bool peephole;
};
class ReferenceFD : public ::testing::TestWithParam<Combo> {};

// The reference's analytic gradients against central differences of its own forward, in double.
// eps = 1e-5: truncation error ~eps²·|f'''| ≈ 1e-10, cancellation ~1e-16·|loss|/eps ≈ 1e-10, so
// 1e-7 relative is tight and still robust.
TEST_P(ReferenceFD, SequenceGradMatchesFiniteDifferences) {
    const Combo c = GetParam();
    const Shape s{4, 3, 3, 4, 3, 1.5, 0.0, 0.7, "fd"};
    BLT_SEED(seed, std::string("ReferenceFD/") + (c.layout == Layout::icfo ? "icfo" : "ifco") +
                       (c.peephole ? "/peephole" : "/plain"));
    Problem p = make_problem(seed, s, DType::f32, false, c.peephole, c.layout);
    p.fwd = ref::block_lstm(s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(), 0.0,
                            c.peephole, c.layout);  // unrounded: the FD below is in double
    const ref::SeqGradOut g = ref_seq_grad(p);
    auto loss = [&] {
        const auto f = ref::block_lstm(s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                       0.0, c.peephole, c.layout);
        return seq_loss(f.cs, f.h, p.cs_grad, p.h_grad);
    };
    const auto fd = finite_differences({&p.x, &p.cs_prev, &p.h_prev, &p.w, &p.wci, &p.wcf, &p.wco, &p.b}, loss, 1e-5);
    EXPECT_TRUE(close("x_grad", g.x_grad, fd[0], 1e-7));
    EXPECT_TRUE(close("cs_prev_grad", g.cs_prev_grad, fd[1], 1e-7));
    EXPECT_TRUE(close("h_prev_grad", g.h_prev_grad, fd[2], 1e-7));
    EXPECT_TRUE(close("w_grad", g.w_grad, fd[3], 1e-7));
    if (c.peephole) {
        EXPECT_TRUE(close("wci_grad", g.wci_grad, fd[4], 1e-7));
        EXPECT_TRUE(close("wcf_grad", g.wcf_grad, fd[5], 1e-7));
        EXPECT_TRUE(close("wco_grad", g.wco_grad, fd[6], 1e-7));
    } else {
        EXPECT_EQ(max_abs(g.wci_grad) + max_abs(g.wcf_grad) + max_abs(g.wco_grad), 0.0);
        EXPECT_EQ(max_abs(fd[4]) + max_abs(fd[5]) + max_abs(fd[6]), 0.0);
    }
    EXPECT_TRUE(close("b_grad", g.b_grad, fd[7], 1e-7));
    // x_grad past L is exactly zero.
    for (int64_t k = s.L * s.B * s.I; k < s.T * s.B * s.I; ++k) ASSERT_EQ(g.x_grad.data[k], 0.0);
}

// The gate order, read off each gate with w = 0 and a different bias per block: ICFO is
// [i | ci | f | o], IFCO [i | f | ci | o] (the blocks' order is the reference's own offsets
// otherwise, which V1EqualsV2WithSwappedBlocks cannot check).
TEST(Reference, GateOrderFromTheBias) {
    const int64_t H = 3;
    const Array x{{1, 1, 2}, {0.7, -0.2}}, state = ref::zeros({1, H}), w = ref::zeros({2 + H, 4 * H});
    const Array z = ref::zeros({H});
    Array b = ref::zeros({4 * H});
    for (int64_t k = 0; k < 4 * H; ++k) b.data[k] = 0.1 * (k / H + 1);  // blocks 0.1, 0.2, 0.3, 0.4
    auto sigma = [](double v) { return 1 / (1 + std::exp(-v)); };
    for (const auto &[layout, c_block, f_block] : {std::tuple<ref::Layout, int, int>{ref::Layout::icfo, 1, 2},
                                                   {ref::Layout::ifco, 2, 1}}) {
        const auto out = ref::block_lstm(1, x, state, state, w, z, z, z, b, 0.0, 0.0, false, layout);
        const auto cell = ref::lstm_block_cell(Array{{1, 2}, x.data}, state, state, w, z, z, z, b, 0.0, 0.0, false);
        for (int64_t j = 0; j < H; ++j) {
            EXPECT_DOUBLE_EQ(out.i.data[j], sigma(0.1));
            EXPECT_DOUBLE_EQ(out.ci.data[j], std::tanh(0.1 * (c_block + 1)));
            EXPECT_DOUBLE_EQ(out.f.data[j], sigma(0.1 * (f_block + 1)));
            EXPECT_DOUBLE_EQ(out.o.data[j], sigma(0.4));
            if (layout == ref::Layout::icfo) EXPECT_DOUBLE_EQ(cell.ci.data[j], std::tanh(0.2));  // the cell op is ICFO
        }
    }
}

TEST(Reference, CellGradMatchesFiniteDifferences) {
  for (const bool peephole : {false, true}) {
    const Combo c{Layout::icfo, peephole};
    SCOPED_TRACE(peephole ? "peephole" : "plain");
    const Shape s{1, 3, 3, 4, 1, 1.5, 0.0, 1.0, "fd"};
    BLT_SEED(seed, std::string("ReferenceFD/cell") + (c.peephole ? "/peephole" : "/plain"));
    Problem p = make_problem(seed, s, DType::f32, true, c.peephole, c.layout);
    p.fwd = ref::lstm_block_cell(p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, 1.0, 0.0, c.peephole);
    const ref::CellGradOut g = ref_cell_grad(p);
    auto loss = [&] {
        const auto f = ref::lstm_block_cell(p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, 1.0, 0.0,
                                            c.peephole);
        return seq_loss(f.cs, f.h, p.cs_grad, p.h_grad);
    };
    const auto fd = finite_differences({&p.x, &p.cs_prev, &p.h_prev, &p.wci, &p.wcf, &p.wco, &p.b}, loss, 1e-5);
    const Array xh = times_wT(g.dicfo, p.w);
    EXPECT_TRUE(close("dicfo·wᵀ[:, :I] vs dx", cols(xh, 0, s.I), fd[0], 1e-7));
    EXPECT_TRUE(close("cs_prev_grad", g.cs_prev_grad, fd[1], 1e-7));
    EXPECT_TRUE(close("dicfo·wᵀ[:, I:] vs dh_prev", cols(xh, s.I, s.I + s.H), fd[2], 1e-7));
    if (c.peephole) {
        EXPECT_TRUE(close("wci_grad", g.wci_grad, fd[3], 1e-7));
        EXPECT_TRUE(close("wcf_grad", g.wcf_grad, fd[4], 1e-7));
        EXPECT_TRUE(close("wco_grad", g.wco_grad, fd[5], 1e-7));
    }
    EXPECT_TRUE(close("column sums of dicfo vs db", column_sums(g.dicfo), fd[6], 1e-7));
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceFD,
                         ::testing::Values(Combo{Layout::icfo, false}, Combo{Layout::icfo, true},
                                           Combo{Layout::ifco, false}, Combo{Layout::ifco, true}),
                         [](const auto &info) {
                             return std::string(info.param.layout == Layout::icfo ? "icfo" : "ifco") +
                                    (info.param.peephole ? "_peephole" : "_plain");
                         });

TEST(Reference, EveryOutputZeroPastSeqLenMax) {
    const Shape s{5, 3, 2, 4, 2, 1, 0.5, 1.0, "padding"};
    BLT_SEED(seed, "Reference/padding");
    const Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
    for (const Array *a : {&p.fwd.i, &p.fwd.cs, &p.fwd.f, &p.fwd.o, &p.fwd.ci, &p.fwd.co, &p.fwd.h}) {
        for (int64_t k = 0; k < s.L * s.B * s.H; ++k) EXPECT_NE(a->data[k], 0.0);
        for (int64_t k = s.L * s.B * s.H; k < s.T * s.B * s.H; ++k) ASSERT_EQ(a->data[k], 0.0);
    }
    Shape z = s;
    z.L = 0;
    const Problem q = make_problem(seed, z, DType::f32, false, true, Layout::icfo);
    EXPECT_EQ(max_abs(q.fwd.cs) + max_abs(q.fwd.h) + max_abs(q.fwd.i), 0.0);
    const auto g = ref_seq_grad(q);
    for (const Array *a : {&g.x_grad, &g.cs_prev_grad, &g.h_prev_grad, &g.w_grad, &g.wci_grad, &g.wcf_grad,
                           &g.wco_grad, &g.b_grad})
        EXPECT_EQ(max_abs(*a), 0.0);
}

TEST(Reference, ClipIsAppliedOnlyWhenPositiveAndStraightThrough) {
    const Shape s{3, 2, 2, 3, 3, 5, 0.25, 1.0, "clip"};
    BLT_SEED(seed, "Reference/clip");
    const Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
    EXPECT_LE(max_abs(p.fwd.cs), 0.25 + 1e-7);
    EXPECT_NEAR(max_abs(p.fwd.cs), 0.25, 1e-7) << "the large weights should drive |cs| to the clip";
    Shape n = s;
    n.cell_clip = -1;
    const Problem q = make_problem(seed, n, DType::f32, false, true, Layout::icfo);
    EXPECT_GT(max_abs(q.fwd.cs), 0.25);
}

// docs/semantics.md (the ops and their layouts): V1 (forget_bias 0, no clip) == V2 with the c/f blocks of w and b swapped.
TEST(Reference, V1EqualsV2WithSwappedBlocks) {
    const Shape s{3, 2, 3, 5, 3, 1, 0.0, 0.0, "v1v2"};
    BLT_SEED(seed, "Reference/v1v2");
    Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
    const auto v1 = ref::block_lstm(3, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, 0, 0, true, Layout::icfo);
    const auto v2 = ref::block_lstm(3, p.x, p.cs_prev, p.h_prev, swap_cf(p.w), p.wci, p.wcf, p.wco, swap_cf(p.b), 0, 0,
                                    true, Layout::ifco);
    EXPECT_TRUE(close("h", v2.h, v1.h, 0));
    EXPECT_TRUE(close("cs", v2.cs, v1.cs, 0));
}

TEST(Reference, TensorRoundTrip) {
    const Array a{{2, 3}, {0.1, -2.5, 3.0, 1e-3, 65504, -0.0}};
    EXPECT_EQ(ref::to_array(ref::to_tensor(a, DType::f32)).data[1], -2.5);
    EXPECT_EQ(ref::to_array(ref::to_tensor(a, DType::f32)).data[0], static_cast<double>(0.1f));
    const Array h = ref::to_array(ref::to_tensor(a, DType::f16));
    EXPECT_EQ(h.shape, a.shape);
    EXPECT_EQ(h.data[4], 65504.0);
    EXPECT_NEAR(h.data[0], 0.1, 0.1 * 1e-3);
}

// ---- float16 conversions, against the compiler's ------------------------------------------------
// The library's float_to_half and half_to_float (used by the reference to round its inputs, and by
// every float16 test) against GCC's _Float16 conversions (libgcc's __truncsfhf2 and
// __extendhfsf2, or F16C's), an implementation of IEEE 754 written apart from ours.

uint16_t compiler_half(float v) {
    const volatile float in = v;  // volatile: converted at run time, not folded by the compiler
    const _Float16 h = static_cast<_Float16>(in);
    uint16_t bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
}

float compiler_float(uint16_t bits) {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof bits);
    const volatile _Float16 in = h;
    return static_cast<float>(in);
}

float float_of_bits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// One conversion of a float32 (given by its bits) against the compiler's: the same bits, or both
// a NaN (the payload may differ: ours makes every NaN quiet).
::testing::AssertionResult converts_as_the_compiler(uint32_t bits) {
    const float f = float_of_bits(bits);
    const uint16_t ours = blocklstm::float_to_half(f), want = compiler_half(f);
    const bool both_nan = (ours & 0x7c00u) == 0x7c00u && (ours & 0x3ffu) && std::isnan(f);
    if (ours == want || both_nan) return ::testing::AssertionSuccess();
    char text[160];
    std::snprintf(text, sizeof text, "float_to_half(%.9g, bits 0x%08x) = 0x%04x, the compiler gives 0x%04x",
                  static_cast<double>(f), bits, ours, want);
    return ::testing::AssertionFailure() << text;
}

TEST(Float16Conversion, EveryHalfToFloatAndBack) {
    for (uint32_t u = 0; u <= 0xffffu; ++u) {
        const uint16_t h = static_cast<uint16_t>(u);
        const float ours = blocklstm::half_to_float(h), want = compiler_float(h);
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(ours)) << "half 0x" << std::hex << u;
            continue;
        }
        ASSERT_EQ(std::memcmp(&ours, &want, sizeof ours), 0) << "half_to_float(0x" << std::hex << u << ")";
        ASSERT_EQ(blocklstm::float_to_half(ours), h) << "half 0x" << std::hex << u << " back from float";
    }
}

// Round to nearest, ties to even: for every pair of neighbouring halves (subnormals, the largest
// finite, and past it toward infinity included) the float32s at their midpoint and one and two
// float32 ulps either side of it, both signs; then every 65,521st float32 (a prime stride: every
// exponent, and mantissas of every pattern).
TEST(Float16Conversion, FloatToHalfRoundsToNearestEvenAsTheCompiler) {
    int64_t checked = 0;
    for (uint32_t u = 0; u < 0x7c00u; ++u) {
        const double lo = blocklstm::half_to_float(static_cast<uint16_t>(u));
        const double hi = u + 1 < 0x7c00u ? blocklstm::half_to_float(static_cast<uint16_t>(u + 1)) : 65536.0;
        const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits at most
        uint32_t m;
        std::memcpy(&m, &mid, sizeof m);
        for (uint32_t bits = m - 2; bits <= m + 2; ++bits)
            for (uint32_t sign : {0u, 0x80000000u}) {
                ASSERT_TRUE(converts_as_the_compiler(sign | bits));
                ++checked;
            }
    }
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 65521) {
        ASSERT_TRUE(converts_as_the_compiler(static_cast<uint32_t>(bits)));
        ++checked;
    }
    for (uint32_t bits : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x477fefffu,
                          0x477ff000u, 0x33000000u, 0x33000001u, 0x32ffffffu})  // inf, NaN, overflow, 2^-25
        ASSERT_TRUE(converts_as_the_compiler(bits));
    EXPECT_GT(checked, 2 * 5 * 31744 + 60000);
}

// bfloat16 is float32's upper half: float32 -> bfloat16 rounds to the nearer of the two bfloat16s
// around it (the truncation and the next one up in magnitude, whose distances double arithmetic
// gives exactly), ties to the even one; past the largest finite, infinity counts as 2^128. Every
// 65,521st float32 and every tie, both signs; NaN stays NaN; every bfloat16 goes to float and back.
TEST(BFloat16Conversion, RoundsToNearestEven) {
    auto want_of = [](uint32_t bits) {
        const uint32_t abs = bits & 0x7fffffffu, lo = abs >> 16;
        const double x = float_of_bits(abs), below = float_of_bits(lo << 16);
        const double above = lo + 1 == 0x7f80u ? std::ldexp(1.0, 128) : float_of_bits((lo + 1) << 16);
        const bool up = x - below > above - x || (x - below == above - x && (lo & 1u));
        return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | (up ? lo + 1 : lo));
    };
    int64_t checked = 0;
    auto check = [&](uint32_t bits) {
        const float f = float_of_bits(bits);
        const uint16_t ours = blocklstm::float_to_bfloat16(f);
        if (std::isnan(f)) {
            ASSERT_TRUE(std::isnan(blocklstm::bfloat16_to_float(ours))) << std::hex << bits;
        } else {
            ASSERT_EQ(ours, want_of(bits)) << "float_to_bfloat16 of bits 0x" << std::hex << bits;
        }
        ++checked;
    };
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 65521) check(static_cast<uint32_t>(bits));
    for (uint32_t hi = 0; hi < 0x7f80u; ++hi)  // the ties, and a float32 ulp either side
        for (uint32_t sign : {0u, 0x80000000u})
            for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) check(sign | hi << 16 | low);
    for (uint32_t bits : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7f7fffffu, 0x00000001u})
        check(bits);
    EXPECT_GT(checked, 6 * 0x7f80 + 60000);
    for (uint32_t u = 0; u <= 0xffffu; ++u) {
        const auto b = static_cast<uint16_t>(u);
        const float f = blocklstm::bfloat16_to_float(b);
        const uint32_t want_bits = u << 16;
        ASSERT_EQ(std::memcmp(&f, &want_bits, sizeof f), 0) << "bfloat16_to_float(0x" << std::hex << u << ")";
        if (!std::isnan(f)) ASSERT_EQ(blocklstm::float_to_bfloat16(f), b) << std::hex << u;
    }
}

}  // namespace
}  // namespace blt
