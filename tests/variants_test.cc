// Every line of the variant table (runtime/kernels.inc) against the float64 reference, through
// the ops that run it, over a list of shapes around the kernels' tile sizes.
#include <map>
#include <memory>
#include <set>

#include "test_util.h"

namespace blt {
namespace {

using blocklstm::Device;

struct Variant {
    std::string family, backend, dtype, flags, layout;
    std::string name() const { return family + "__" + backend + "_" + dtype + "_" + flags + "_" + layout; }
};

void PrintTo(const Variant &v, std::ostream *os) { *os << v.name(); }

const std::vector<Variant> &table() {
    static const std::vector<Variant> v = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout) Variant{#family, #backend, #dtype, #flags, #layout},
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
    };
    return v;
}

// Shapes: H ∈ {1,2,7,8,16,17,33,64,65}, B ∈ {1,3,8,9,17,600}, I ∈ {0,1,3,5,16,31,300},
// T ∈ {1,2,5,7,40}; L = T, 0 and < T; the clip inactive (0, negative, TF's default 3 at small
// weights) and active (large weights); forget_bias default and not. Cell ops use B, I, H and the
// attrs only.
const std::vector<Shape> &shapes() {
    static const std::vector<Shape> s = {
        {1, 1, 1, 1, 1, 1, 0.0, 1.0, "all ones"},
        {2, 3, 5, 7, 2, 1, 3.0, 1.0, "TF defaults, odd sizes"},
        {5, 8, 16, 8, 5, 1, 0.0, 0.5, "aligned sizes"},
        {5, 9, 31, 17, 3, 1, -1.0, -0.75, "L < T, negative clip = off"},
        {2, 17, 16, 16, 0, 1, 0.0, 1.0, "L = 0"},
        {5, 3, 0, 33, 4, 1, 0.0, 1.0, "I = 0, L < T"},
        {1, 8, 5, 64, 1, 1, 0.0, 2.0, "wide H"},
        {5, 9, 1, 33, 5, 4, 0.5, 1.0, "large weights, clip active"},
        {2, 1, 31, 64, 1, 1, 0.0, 0.0, "B = 1, L < T"},
        {5, 17, 5, 16, 5, 3, 1.0, 1.0, "large weights, clip active, B = 17"},
        // GEMMs past one block: K = I = 300 and 4H = 260 > 256 (a partial second k block),
        // L*B = 102 rows > one 96-row block (AVX2 schedule, schedules/cpu_params.h).
        {7, 17, 300, 65, 6, 1, 0.0, 1.0, "multi-block GEMMs"},
        // The CPU's float32 w_grad runs in chunks of 512 rows of dgates (L*B): 595 rows are two
        // chunks; with B = 600 the second chunk starts inside h_prev's rows of h_prev_seq.
        {40, 17, 5, 16, 35, 1, 0.0, 1.0, "w_grad over two chunks"},
        {2, 600, 3, 2, 2, 1, 0.0, 1.0, "a w_grad chunk starting inside h_prev"},
    };
    return s;
}

enum class Op { cell, cell_grad, seq, seq_grad };
struct Use {
    Op op;
    bool peephole;
    Layout layout;
};
const char *op_name(const Use &u) {
    switch (u.op) {
    case Op::cell: return "LSTMBlockCell";
    case Op::cell_grad: return "LSTMBlockCellGrad";
    case Op::seq: return u.layout == Layout::icfo ? "BlockLSTM" : "BlockLSTMV2";
    case Op::seq_grad: return u.layout == Layout::icfo ? "BlockLSTMGrad" : "BlockLSTMGradV2";
    }
    return "?";
}

// The ops (with attrs) that run a variant.
std::vector<Use> uses(const Variant &v) {
    const bool peep = v.flags == "peephole";
    std::vector<Layout> layouts;
    if (v.layout == "icfo" || v.layout == "any") layouts.push_back(Layout::icfo);
    if (v.layout == "ifco" || v.layout == "any") layouts.push_back(Layout::ifco);
    std::vector<Use> u;
    if (v.family == "cell_fwd") u.push_back({Op::cell, peep, Layout::icfo});
    if (v.family == "cell_bwd") u.push_back({Op::cell_grad, peep, Layout::icfo});
    if (v.family == "seq_fwd_step" || v.family == "panels") {
        for (Layout l : layouts) u.push_back({Op::seq, peep, l});
        // LSTMBlockCell is one ICFO forward step.
        if (v.layout != "ifco") u.push_back({Op::cell, peep, Layout::icfo});
    }
    if (v.family == "seq_bwd_step" || v.family == "seq_bwd_reduce" || v.family == "transpose" ||
        v.family == "panels_t")
        for (Layout l : layouts) u.push_back({Op::seq_grad, peep, l});
    if (v.family.rfind("gemm_", 0) == 0) {
        // The GEMMs serve the forward input projection and the backward products; run every op
        // with a GEMM, in both layouts, with and without peepholes.
        u.push_back({Op::cell, peep, Layout::icfo});
        for (Layout l : {Layout::icfo, Layout::ifco})
            for (bool p : {false, true}) {
                u.push_back({Op::seq, p, l});
                u.push_back({Op::seq_grad, p, l});
            }
    }
    return u;
}

// The library's outputs as reference arrays (host copies).
ref::LSTMOut as_ref(const blocklstm::LSTMOutputs<Tensor> &o) {
    auto a = [](const Tensor &t) { return ref::to_array(on_host(t)); };
    return {a(o.i), a(o.cs), a(o.f), a(o.o), a(o.ci), a(o.co), a(o.h)};
}
ref::SeqGradOut as_ref(const blocklstm::BlockLSTMGradOutputs<Tensor> &o) {
    auto a = [](const Tensor &t) { return ref::to_array(on_host(t)); };
    return {a(o.x_grad),   a(o.cs_prev_grad), a(o.h_prev_grad), a(o.w_grad),
            a(o.wci_grad), a(o.wcf_grad),     a(o.wco_grad),    a(o.b_grad)};
}
ref::CellGradOut as_ref(const blocklstm::LSTMBlockCellGradOutputs<Tensor> &o) {
    auto a = [](const Tensor &t) { return ref::to_array(on_host(t)); };
    return {a(o.cs_prev_grad), a(o.dicfo), a(o.wci_grad), a(o.wcf_grad), a(o.wco_grad)};
}

// One op on `device` against the float64 reference; a CUDA run also against the CPU result on
// the same inputs (both within the tolerance of the reference, so within it of each other).
void run_use(const Use &u, DType dtype, const Shape &s, uint64_t seed, Device device) {
    const Problem p = make_problem(seed, s, dtype, u.op == Op::cell || u.op == Op::cell_grad, u.peephole, u.layout);
    const Inputs in(p, device);
    const bool cuda = device == Device::cuda;
    std::unique_ptr<Inputs> host = cuda ? std::make_unique<Inputs>(p) : nullptr;
    switch (u.op) {
    case Op::cell:
    case Op::seq: {
        const auto ours = run_fwd(p, in);
        expect_fwd(ours, p.fwd, fwd_tol(dtype));
        if (cuda) { SCOPED_TRACE("cuda vs cpu"); expect_fwd(ours, as_ref(run_fwd(p, *host)), fwd_tol(dtype)); }
        break;
    }
    case Op::cell_grad: {
        const auto ours = run_cell_grad(p, in);
        expect_cell_grad(ours, ref_cell_grad(p), grad_tol(dtype));
        if (cuda) { SCOPED_TRACE("cuda vs cpu"); expect_cell_grad(ours, as_ref(run_cell_grad(p, *host)), grad_tol(dtype)); }
        break;
    }
    case Op::seq_grad: {
        const auto ours = run_seq_grad(p, in);
        expect_seq_grad(ours, ref_seq_grad(p), grad_tol(dtype));
        if (cuda) { SCOPED_TRACE("cuda vs cpu"); expect_seq_grad(ours, as_ref(run_seq_grad(p, *host)), grad_tol(dtype)); }
        break;
    }
    }
}

class Variants : public ::testing::TestWithParam<Variant> {};

TEST_P(Variants, MatchesReference) {
    const Variant &v = GetParam();
    const Device device = v.backend == "cuda" ? Device::cuda : Device::cpu;
    if (device == Device::cuda && skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    const DType dtype = v.dtype == "f16" ? DType::f16 : DType::f32;
    const auto us = uses(v);
    ASSERT_FALSE(us.empty()) << "no op is known to run kernel family '" << v.family << "'";
    // On CUDA the batched products run on cuBLAS by default; the GEMM kernels' own variants also
    // run with cuBLAS off, so the Halide GEMM kernels are tested on the GPU too.
    std::vector<blocklstm::CudaGemm> gemms{blocklstm::CudaGemm::cublas};
    if (device == Device::cuda && v.family.rfind("gemm_", 0) == 0) gemms.push_back(blocklstm::CudaGemm::halide);
    for (blocklstm::CudaGemm gemm : gemms) {
        blocklstm::set_cuda_gemm(gemm);
        for (const Use &u : us) {
            for (std::size_t k = 0; k < shapes().size(); ++k) {
                const Shape &s = shapes()[k];
                std::ostringstream what;
                what << v.name() << "/" << op_name(u) << (u.peephole ? "/peephole" : "/plain") << "/shape" << k;
                SCOPED_TRACE(op_name(u) + std::string(u.peephole ? " peephole " : " plain ") + describe(s) +
                             (gemm == blocklstm::CudaGemm::halide ? " (Halide GEMMs)" : ""));
                BLT_SEED(seed, what.str());
                try {
                    run_use(u, dtype, s, seed, device);
                } catch (const std::exception &e) {  // report, and go on with the other shapes
                    ADD_FAILURE() << "exception: " << e.what();
                }
                if (::testing::Test::HasFatalFailure()) break;
            }
        }
    }
    blocklstm::set_cuda_gemm(blocklstm::CudaGemm::cublas);
}

INSTANTIATE_TEST_SUITE_P(KernelsInc, Variants, ::testing::ValuesIn(table()),
                         [](const ::testing::TestParamInfo<Variant> &info) { return info.param.name(); });

// Every op runs some kernel of the table, so every op is tested here.
TEST(VariantTable, EveryOpIsCovered) {
    std::set<std::string> ops;
    for (const Variant &v : table())
        for (const Use &u : uses(v)) ops.insert(op_name(u));
    EXPECT_EQ(ops, (std::set<std::string>{"LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMV2",
                                          "BlockLSTMGrad", "BlockLSTMGradV2"}));
}

// The shapes above really exercise the clip where they claim to.
TEST(VariantShapes, ClipActiveWhereIntended) {
    for (const Shape &s : shapes()) {
        if (s.weight_scale <= 1 || s.cell_clip <= 0) continue;
        SCOPED_TRACE(describe(s));
        BLT_SEED(seed, std::string("VariantShapes/") + s.note);
        const Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
        int clipped = 0;
        for (double c : p.fwd.cs.data) clipped += std::abs(std::abs(c) - s.cell_clip) < 1e-6;
        EXPECT_GT(clipped, 0);
    }
}

// The library lists exactly the table's kernels.
TEST(VariantTable, LibraryListsEveryKernel) {
    std::set<std::string> want, have;
    for (const Variant &v : table())
        if (v.backend == "cpu" || blocklstm::cuda_built()) want.insert(v.name());  // BLOCKLSTM_CUDA
    for (const auto &k : blocklstm::kernels()) {
        have.insert(k.name);
        const std::string from_fields = k.family + "__" + blocklstm::to_string(k.backend) + "_" +
                                        (k.dtype == DType::f16 ? "f16" : "f32") + "_" +
                                        (k.peephole ? "peephole" : "plain") + "_" + k.layout;
        EXPECT_EQ(k.name, from_fields);
    }
    EXPECT_EQ(want, have);
}

// The CPU target the runtime picked is one that every CPU kernel was compiled for.
TEST(VariantTable, CpuTargetInUseIsCompiledIn) {
    const std::string target = blocklstm::cpu_target_in_use();
    std::cout << "[ target   ] " << target << std::endl;
    ASSERT_FALSE(target.empty());
    for (const auto &k : blocklstm::kernels()) {
        if (k.backend != blocklstm::Device::cpu) continue;
        EXPECT_NE(("," + k.targets + ",").find("," + target + ","), std::string::npos)
            << k.name << " has targets " << k.targets;
    }
}

}  // namespace
}  // namespace blt
