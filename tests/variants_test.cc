// Every line of the variant table (runtime/kernels.inc) against the float64 reference, through
// the ops that run it: one test per kernel x op x shape case, named
// <kernel>.<Op>_<plain|peephole>__<shape case>, over the named shapes and the tile-boundary
// shapes derived from the schedules' tile parameters (test_util.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include <blocklstm/ops.h>

#include "test_util.h"
#include "runtime/src/weight_grad_chunks.h"
#include "runtime/src/x86_features.h"

namespace blt {
namespace {

using blocklstm::Device;

struct Variant {
    std::string family, backend, dtype, flags, layout;
    std::string name() const { return family + "__" + backend + "_" + dtype + "_" + flags + "_" + layout; }
    // The products its family's schedule tiles (runtime/families.inc), which pick its
    // tile-boundary shapes; the CUDA kernels' tiles are not the CPU geometries'.
    Products products() const {
        if (backend != "cpu") return Products::none;
        return blocklstm::kernel::record(*blocklstm::kernel::family_named(family)).products;
    }
};

const std::vector<Variant> &table() {
    static const std::vector<Variant> v = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, weights) \
    Variant{#family, #backend, #dtype, #flags, #layout},
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
    };
    return v;
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

// The steps on the caller's rows, which only the sequence ops run, here with seq_lengths on rows not
// in length order: the forward's runs only so; the backward's (the CPU's backward step) also on rows
// in length order, each its own caller row, as every other CPU test of the gradient ops runs it.
bool caller_rows_family(const Variant &v) { return v.family == "seq_fwd_step_rows" || v.family == "seq_bwd_step_rows"; }

// The ops (with attrs) that run a variant: those whose kernel families (blocklstm/ops.h) hold its
// family on its backend and dtype, in its layout; with and without peepholes unless the family
// has peephole variants.
std::vector<Use> uses(const Variant &v) {
    const Device device = v.backend == "cuda" ? Device::cuda : Device::cpu;
    const DType dtype = blocklstm::dtype_named(v.dtype);
    const bool by_peephole = std::any_of(table().begin(), table().end(), [&](const Variant &k) {
        return k.family == v.family && k.flags == "peephole";
    });
    std::vector<Use> u;
    for (const blocklstm::OpInfo &op : blocklstm::ops()) {
        const std::vector<std::string> families = op.kernel_families(device, dtype);
        if (std::find(families.begin(), families.end(), v.family) == families.end()) continue;
        if (v.layout != "any" && v.layout != op.layout) continue;
        if (caller_rows_family(v) && !op.sequence) continue;
        const Op kind = op.sequence ? (op.gradient ? Op::seq_grad : Op::seq) : (op.gradient ? Op::cell_grad : Op::cell);
        const Layout layout = op.layout == "ifco" ? Layout::ifco : Layout::icfo;
        for (bool peephole : {false, true})
            if (!by_peephole || peephole == (v.flags == "peephole")) u.push_back({kind, peephole, layout});
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

// Lengths for the step on the caller's rows: rising with the row and wrapping every T rows (T, T - 1,
// ..., 1 from the last row back), so that all B rows run the first step (the product's tiles at B
// rows), fewer each step after, and the rows are not in length order wherever two rows' capped
// lengths can differ (B > 1, L > 1).
std::vector<int64_t> rising_lengths(const Shape &s) {
    std::vector<int64_t> v;
    for (int64_t b = 0; b < s.B; ++b) v.push_back(s.T == 0 ? 0 : s.T - (s.B - 1 - b) % s.T);
    return v;
}

// One op on `device` against the float64 reference; a CUDA run also against the CPU result on
// the same inputs (both within the tolerance of the reference, so within it of each other).
// caller_rows: the sequence op with rising_lengths, into outputs of NaN.
void run_use(const Use &u, DType dtype, const Shape &s, uint64_t seed, Device device, bool caller_rows) {
    Problem p = make_problem(seed, s, dtype, u.op == Op::cell || u.op == Op::cell_grad, u.peephole, u.layout);
    const bool cuda = device == Device::cuda;
    if (caller_rows) {
        ASSERT_TRUE(u.op == Op::seq || u.op == Op::seq_grad);
        const Lengths lengths(rising_lengths(s), s.L, false);
        p.fwd = ref_forward(p, lengths.capped);
        const Inputs in(p, device);
        if (u.op == Op::seq) return expect_fwd(run_forward(p, in, &lengths.tensor.view()), p.fwd, fwd_tol(dtype));
        return expect_seq_grad(run_grad(p, in, &lengths.tensor.view()),
                               ref::block_lstm_grad(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b,
                                                    p.fwd.i, p.fwd.cs, p.fwd.f, p.fwd.o, p.fwd.ci, p.fwd.co, p.fwd.h,
                                                    p.cs_grad, p.h_grad, p.peephole, p.layout, &lengths.capped),
                               grad_tol(dtype));
    }
    const Inputs in(p, device);
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

// A CUDA fault is sticky: it makes the context unusable for every later call. The first one is
// reported with the call that caused it (each CUDA use is synchronised at once), and the CUDA
// cases after it are not run, rather than failing in its name.
std::string cuda_context_lost_at;

// Runs one use on `device`; on CUDA also waits for its GPU work, so that a fault is named here.
void run_and_isolate(const Use &u, DType dtype, const Shape &s, uint64_t seed, Device device,
                     const std::string &what, bool caller_rows) {
    try {
        run_use(u, dtype, s, seed, device, caller_rows);
        if (device == Device::cuda) blocklstm::cuda_synchronize();
    } catch (const std::exception &e) {
        ADD_FAILURE() << "exception: " << e.what();
        if (device != Device::cuda) return;
        try {
            blocklstm::cuda_synchronize();
        } catch (const std::exception &lost) {
            cuda_context_lost_at = what + " (" + lost.what() + ")";
        }
    }
}

// One kernel through one op on one shape. On CUDA the batched products run on cuBLAS by default;
// the GEMM kernels' cases also run with cuBLAS off, so the Halide GEMM kernels run on the GPU too.
class VariantCase : public ::testing::Test {
public:
    VariantCase(Variant v, Use u, ShapeCase c, blocklstm::CudaGemm gemm)
        : v_(std::move(v)), u_(u), c_(std::move(c)), gemm_(gemm) {}

    void TestBody() override {
        const Device device = v_.backend == "cuda" ? Device::cuda : Device::cpu;
        if (device == Device::cuda && skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
        if (device == Device::cuda && !cuda_context_lost_at.empty())
            GTEST_SKIP() << "not run: the CUDA context was lost at " << cuda_context_lost_at;
        const DType dtype = blocklstm::dtype_named(v_.dtype);
        if (device == Device::cuda && dtype == DType::bf16 && !blocklstm::cuda_bfloat16())
            GTEST_SKIP() << "bfloat16 on CUDA is switched off (BLOCKLSTM_CUDA_BF16=1 runs it, as "
                            "scripts/gpu_check.sh does)";
        blocklstm::set_cuda_gemm(gemm_);
        // A split step's kernel runs with the split steps, every other kernel with the fused ones.
        const CudaSwitchesRestored restore;
        blocklstm::set_cuda_step(split_family(v_) ? blocklstm::CudaStep::split : blocklstm::CudaStep::fused);
        if (device == Device::cuda) {  // the plan in effect runs this kernel's family
            const auto plan = blocklstm::op_info(op_name(u_)).plan(device, dtype);
            EXPECT_TRUE(std::any_of(plan.begin(), plan.end(), [&](const auto &s) { return s.family == v_.family; }))
                << v_.family << " is not in the plan " << op_name(u_) << " runs: " << blocklstm::cuda_gemm_backend();
        }
        const uint64_t cublas_before = blocklstm::cublas_product_count();
        const std::string what = v_.name() + "." + case_name(u_, c_, gemm_);
        SCOPED_TRACE(describe(c_.shape));
        BLT_SEED(seed, what);
        run_and_isolate(u_, dtype, c_.shape, seed, device, what, caller_rows_family(v_));
        blocklstm::set_cuda_gemm(blocklstm::CudaGemm::cublas);
        if (device == Device::cuda && gemm_family(v_) && gemm_ == blocklstm::CudaGemm::cublas && cublas_expected(dtype))
            EXPECT_GT(blocklstm::cublas_product_count(), cublas_before)
                << "the cuBLAS pass ran no cuBLAS product: " << blocklstm::cuda_gemm_backend();
    }

    // Whether the cuBLAS pass must run a cuBLAS product: a forward op's input projection (both
    // dtypes) or a float32 grad op's products, when there are rows (L * B > 0) to multiply. A
    // float16 grad op's products mix float16 and float32 operands, which cublasGemmEx cannot take,
    // so they run on the Halide kernels.
    bool cublas_expected(DType dtype) const {
        const bool grad = u_.op == Op::cell_grad || u_.op == Op::seq_grad;
        const int64_t steps = u_.op == Op::cell || u_.op == Op::cell_grad ? 1 : c_.shape.L;
        return steps * c_.shape.B > 0 && (!grad || dtype == DType::f32);
    }

    static bool gemm_family(const Variant &v) { return v.family.rfind("gemm_", 0) == 0; }
    static bool split_family(const Variant &v) {
        return v.family == "seq_fwd_gates" || v.family == "seq_bwd_gates" || v.family == "seq_bwd_reduce_split";
    }
    static std::string case_name(const Use &u, const ShapeCase &c, blocklstm::CudaGemm gemm) {
        return std::string(op_name(u)) + (u.peephole ? "_peephole__" : "_plain__") + c.name +
               (gemm == blocklstm::CudaGemm::halide ? "__halide_gemms" : "");
    }

private:
    Variant v_;
    Use u_;
    ShapeCase c_;
    blocklstm::CudaGemm gemm_;
};

// The cases: every use of a kernel on every named shape; its first use on its tile-boundary
// shapes (a boundary is the kernel's, whichever op runs it).
const bool variant_cases_registered = [] {
    for (const Variant &v : table()) {
        const std::vector<Use> us = uses(v);
        if (us.empty()) {  // a kernel no op runs: one failing case that says so
            ::testing::RegisterTest(v.name().c_str(), "run_by_some_op", nullptr, nullptr, __FILE__, __LINE__,
                                    [family = v.family]() -> ::testing::Test * {
                                        struct NoOp : ::testing::Test {
                                            std::string family;
                                            void TestBody() override {
                                                FAIL() << "no op is known to run kernel family '" << family << "'";
                                            }
                                        };
                                        auto *t = new NoOp;
                                        t->family = family;
                                        return t;
                                    });
            continue;
        }
        std::vector<blocklstm::CudaGemm> gemms{blocklstm::CudaGemm::cublas};
        if (v.backend == "cuda" && VariantCase::gemm_family(v)) gemms.push_back(blocklstm::CudaGemm::halide);
        auto add = [&](const Use &u, const ShapeCase &c, blocklstm::CudaGemm gemm) {
            ::testing::RegisterTest(v.name().c_str(), VariantCase::case_name(u, c, gemm).c_str(), nullptr,
                                    nullptr, __FILE__, __LINE__,
                                    [=]() -> ::testing::Test * { return new VariantCase(v, u, c, gemm); });
        };
        for (blocklstm::CudaGemm gemm : gemms) {
            for (const Use &u : us)
                for (const ShapeCase &c : named_shapes()) add(u, c, gemm);
            // The tiles' edges through the kernel's first use, and through its first sequence op
            // too where that is another (the cell op runs one step: the recurrence at t > 0, with
            // its carried state, only a sequence op runs).
            const auto seq = std::find_if(us.begin(), us.end(), [](const Use &u) { return u.op == Op::seq || u.op == Op::seq_grad; });
            for (const ShapeCase &c : tile_boundary_shapes(v.products())) {
                add(us.front(), c, gemm);
                if (seq != us.end() && seq != us.begin()) add(*seq, c, gemm);
            }
        }
    }
    return true;
}();

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
    for (const Shape &s : variant_shapes()) {
        if (s.cell_clip < 0) {  // off: some |cs| must pass |cell_clip|, or a kernel clipping there would pass
            SCOPED_TRACE(describe(s));
            BLT_SEED(seed, std::string("VariantShapes/") + s.note);
            for (bool v2 : {false, true}) {
                const Problem p = make_problem(seed, s, DType::f32, false, true, v2 ? Layout::ifco : Layout::icfo);
                int past = 0;
                for (double c : p.fwd.cs.data) past += std::abs(c) > -s.cell_clip;
                EXPECT_GT(past, 3) << (v2 ? "IFCO" : "ICFO");
            }
            continue;
        }
        if (s.weight_scale <= 1 || s.cell_clip <= 0) continue;
        SCOPED_TRACE(describe(s));
        BLT_SEED(seed, std::string("VariantShapes/") + s.note);
        const Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
        int clipped = 0;
        for (double c : p.fwd.cs.data) clipped += std::abs(std::abs(c) - s.cell_clip) < 1e-6;
        EXPECT_GT(clipped, 0);
    }
}

// The knob rows (schedules/tuning.h): every candidate a search tries is in the knob's range, the
// descent's places are distinct, every knob the search tries is read by some product's schedule (one
// no kernel reads is the runtime's, never searched), every product kind that families.inc tiles
// reads some knob; and a knob with a fallback may be left out of a table.
template <typename Tuning>
void expect_rows_consistent(const std::vector<blocklstm::schedules::Knob<Tuning>> &knobs) {
    std::set<int> places;
    for (const auto &k : knobs) {
        SCOPED_TRACE(k.name);
        for (int v : k.candidates) EXPECT_TRUE(v >= k.min && v <= k.max) << v;
        if (k.priority > 0) EXPECT_TRUE(places.insert(k.priority).second) << "place " << k.priority << " twice";
        if (k.read_by.empty()) EXPECT_TRUE(k.priority == 0 && k.candidates.empty()) << "the runtime's, searched";
    }
    for (const auto &f : blocklstm::kernel::kFamilies) {
        if (f.products == Products::none) continue;
        EXPECT_TRUE(std::any_of(knobs.begin(), knobs.end(), [&](const auto &k) { return k.reads(f.products); }))
            << f.name << "'s products read no knob";
    }
}

TEST(KnobRows, ConsistentAndFallbacksTaken) {
    expect_rows_consistent(blocklstm::schedules::cpu_knobs());
    expect_rows_consistent(blocklstm::schedules::cuda_knobs());
    using blocklstm::schedules::CpuTuning;
    std::vector<blocklstm::schedules::Knob<CpuTuning>> knobs = blocklstm::schedules::cpu_knobs();
    const std::string all = blocklstm::schedules::knob_string(
        blocklstm::schedules::parse_cpu_tuning("x86-64-avx2", blocklstm::cpu_targets().at(0).tuning));
    std::string without_chunks;  // every knob but gemm_column_chunks
    for (size_t at = 0; at < all.size();) {
        const size_t end = std::min(all.find(',', at), all.size());
        const std::string item = all.substr(at, end - at);
        if (item.rfind("gemm_column_chunks:", 0) != 0) without_chunks += (without_chunks.empty() ? "" : ",") + item;
        at = end + 1;
    }
    auto none = [](const CpuTuning &) { return std::string(); };
    EXPECT_THROW(blocklstm::schedules::parse_knobs<CpuTuning>("t", without_chunks, knobs, +none), std::invalid_argument);
    for (auto &k : knobs)
        if (std::string(k.name) == "gemm_column_chunks") k.fallback = 3;
    EXPECT_EQ(blocklstm::schedules::parse_knobs<CpuTuning>("t", without_chunks, knobs, +none).gemm_column_chunks, 3);
}

// Tall step tiles (schedules/step_tiles.h): taller than the step tile and shorter than two of it,
// as many vectors as its accumulators fill; a table outside that is refused, naming the knob.
TEST(KnobRows, TallStepTilesBetweenOneAndTwoTiles) {
    namespace sch = blocklstm::schedules;
    auto with_tall = [](int rows) {  // the AVX2 table's knobs
        return "vector_floats:8,gemm_tile_rows:6,gemm_tile_vectors:2,gemm_step_tile_rows:4,gemm_step_tile_vectors:3,"
               "gemm_step_tall_tile_rows:" + std::to_string(rows) +
               ",gemm_k_block:512,gemm_projection_k_block:1024,gemm_step_k_block:2048,gemm_row_block_tiles:16,"
               "gemm_column_chunks:2,gemm_columns_inner:0,column_sum_vectors:8";
    };
    const sch::CpuTuning five = sch::parse_cpu_tuning("t", with_tall(5));
    EXPECT_EQ(five.gemm_step_tall_tile_vectors(5), 2) << "12 accumulators in 5 rows: 2 vectors";
    EXPECT_EQ(five.gemm_step_tall_tile_cols(5), 16);
    EXPECT_EQ(five.gemm_step_tall_tile_vectors(7), 1);
    EXPECT_NO_THROW(sch::parse_cpu_tuning("t", with_tall(0)));
    EXPECT_NO_THROW(sch::parse_cpu_tuning("t", with_tall(6))) << "5 and 6 rows both 2 vectors wide";
    // 7 rows: 5 and 6 rows 2 vectors wide, 7 one; 4, 3: not taller than the tile; 8, 12: two tiles or more
    for (const int rows : {7, 4, 3, 8, 12}) {
        try {
            sch::parse_cpu_tuning("t", with_tall(rows));
            ADD_FAILURE() << "tall tiles of " << rows << " rows beside 4-row tiles were accepted";
        } catch (const std::invalid_argument &e) {
            EXPECT_NE(std::string(e.what()).find("gemm_step_tall_tile_rows " + std::to_string(rows)), std::string::npos)
                << e.what();
        }
    }
}

// bfloat16's CUDA kernels: built wherever float16's are (one per float16 line), and switched on by
// BLOCKLSTM_CUDA_BF16=1 alone, read at every call of cuda_bfloat16().
TEST(VariantTable, BfloatSixteenCudaKernelsBesideFloatSixteensAndSwitched) {
    std::set<std::string> f16, bf16;
    for (const Variant &v : table()) {
        if (v.backend != "cuda") continue;
        const std::string rest = v.family + "_" + v.flags + "_" + v.layout;
        if (v.dtype == "f16") f16.insert(rest);
        if (v.dtype == "bf16") bf16.insert(rest);
    }
    EXPECT_FALSE(f16.empty());
    EXPECT_EQ(bf16, f16);
    const char *was = std::getenv("BLOCKLSTM_CUDA_BF16");
    const std::optional<std::string> saved = was ? std::optional<std::string>(was) : std::nullopt;
    ::unsetenv("BLOCKLSTM_CUDA_BF16");
    EXPECT_FALSE(blocklstm::cuda_bfloat16());
    ::setenv("BLOCKLSTM_CUDA_BF16", "0", 1);
    EXPECT_FALSE(blocklstm::cuda_bfloat16());
    ::setenv("BLOCKLSTM_CUDA_BF16", "1", 1);
    EXPECT_TRUE(blocklstm::cuda_bfloat16());
    if (saved) ::setenv("BLOCKLSTM_CUDA_BF16", saved->c_str(), 1);
    else ::unsetenv("BLOCKLSTM_CUDA_BF16");
}

// The library lists exactly the table's kernels.
TEST(VariantTable, LibraryListsEveryKernel) {
    std::set<std::string> want, have;
    for (const Variant &v : table())
        if (v.backend == "cpu" || blocklstm::cuda_built()) want.insert(v.name());  // BLOCKLSTM_CUDA
    for (const auto &k : blocklstm::kernels()) {
        have.insert(k.name);
        const std::string from_fields = k.family + "__" + blocklstm::to_string(k.backend) + "_" +
                                        blocklstm::short_name(k.dtype) + "_" +
                                        (k.peephole ? "peephole" : "plain") + "_" + k.layout;
        EXPECT_EQ(k.name, from_fields);
    }
    EXPECT_EQ(want, have);
}

// The CPU target in use is one that every CPU kernel was compiled for.
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

// ---- CPU targets -------------------------------------------------------------------------------

// Restores the process's CPU target pin (the one BLOCKLSTM_CPU_TARGET gave, or none) on scope exit.
struct RestorePin {
    ~RestorePin() {
        const char *env = std::getenv("BLOCKLSTM_CPU_TARGET");
        try {
            blocklstm::set_cpu_target(env ? env : "");
        } catch (const blocklstm::Error &e) {
            ADD_FAILURE() << e.what();
        }
    }
};

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// Every compiled CPU target and whether this CPU runs it. ctest runs each suite once per target
// ("cpu:<target>.<suite>"); the ones this CPU cannot run are skipped there, with the reason.
TEST(CpuTargets, ListedWithWhatThisCpuRuns) {
    const std::vector<blocklstm::CpuTarget> ts = blocklstm::cpu_targets();
    ASSERT_FALSE(ts.empty());
    std::set<std::string> names;
    for (const blocklstm::CpuTarget &t : ts) {
        std::cout << "[ cpu      ] " << t.name << " (" << t.halide_target << ", table " << t.tuning_table
                  << (t.check_only ? ", check target" : "") << "): "
                  << (t.runs_here ? "runs here" : "cannot run here, this CPU lacks " + t.missing) << std::endl;
        EXPECT_TRUE(names.insert(t.name).second) << "duplicate name " << t.name;
        EXPECT_EQ(t.runs_here, t.missing.empty()) << t.name;
        // Every table compiled in keeps the tables' rules (schedules/tuning.h).
        EXPECT_NO_THROW(blocklstm::schedules::parse_cpu_tuning(t.tuning_table, t.tuning)) << t.name;
        EXPECT_FALSE(t.tuned_on.empty()) << t.name;
        // "@<table>": a check target always; a production one only with a table for some CPUs
        // (otherwise it would take its instruction set's place everywhere).
        EXPECT_EQ(contains(t.name, "@"), t.check_only || !t.tuned_for.empty()) << t.name;
        if (t.tuned_for.empty()) EXPECT_TRUE(t.tuned_for_this_cpu) << t.name;
    }
}

// Every production target's table (with its bfloat16 and AMX product flags) runs on this CPU:
// natively, or as a check target's tiles on an instruction set it has. A test build leaves out the
// check targets whose table the configuring machine runs natively (CMakeLists.txt), so a build
// carried to a CPU with less would otherwise leave a table untested without a word.
TEST(CpuTargets, EveryTableRunsHere) {
    const std::vector<blocklstm::CpuTarget> ts = blocklstm::cpu_targets();
    auto same_tiles = [](const blocklstm::CpuTarget &a, const blocklstm::CpuTarget &b) {
        return a.tuning_table == b.tuning_table && a.bf16_dot_products == b.bf16_dot_products &&
               a.amx_products == b.amx_products;
    };
    for (const blocklstm::CpuTarget &t : ts) {
        if (t.check_only || t.runs_here) continue;
        bool checked = false;
        for (const blocklstm::CpuTarget &c : ts) checked |= c.check_only && c.runs_here && same_tiles(c, t);
        EXPECT_TRUE(checked) << t.name << " (table " << t.tuning_table << (t.bf16_dot_products ? ", bf16 pairs" : "")
                             << (t.amx_products ? ", AMX" : "") << ") cannot run here (" << t.missing
                             << ") and no check target of its table runs here: configure the build on this "
                                "machine, or name its check target in BLOCKLSTM_CPU_CHECK_TARGETS";
    }
}

// Unpinned, a call runs the first production target this CPU supports whose table is for it.
TEST(CpuTargets, AutomaticIsTheBestRunnableProductionTarget) {
    RestorePin restore;
    blocklstm::set_cpu_target("");
    EXPECT_FALSE(blocklstm::cpu_target_pinned());
    std::string best;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.runs_here && !t.check_only && t.tuned_for_this_cpu && best.empty()) best = t.name;
    }
    EXPECT_EQ(blocklstm::cpu_target_in_use(), best);
}

TEST(CpuTargets, PinnedByNameHalideTargetOrLeadingPart) {
    RestorePin restore;
    // "avx2-fma-f16c" is also "avx2"; "avx512_skylake" also "avx512"; "avx2-fma-f16c@avx512"
    // also "avx2@avx512".
    auto lead_of = [](const std::string &name) {
        const std::size_t at = name.find('@');
        const std::string isa = name.substr(0, at);
        return isa.substr(0, isa.find_first_of("-_")) + (at == std::string::npos ? "" : name.substr(at));
    };
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        SCOPED_TRACE(t.name);
        blocklstm::set_cpu_target(t.name);
        EXPECT_EQ(blocklstm::cpu_target_in_use(), t.name);
        EXPECT_TRUE(blocklstm::cpu_target_pinned());
        // The Halide target names the instruction set's own table.
        const std::string lead = lead_of(t.name);
        if (t.name.find('@') == std::string::npos) {
            blocklstm::set_cpu_target("");
            blocklstm::set_cpu_target(t.halide_target);
            EXPECT_EQ(blocklstm::cpu_target_in_use(), t.name);
        }
        blocklstm::set_cpu_target("");
        // A leading part two instruction sets share ("avx512": avx512_zen4 and avx512_skylake)
        // names neither: the error lists both.
        int sharing = 0;
        for (const blocklstm::CpuTarget &u : blocklstm::cpu_targets()) sharing += lead_of(u.name) == lead;
        if (sharing > 1) {
            try {
                blocklstm::set_cpu_target(lead);
                ADD_FAILURE() << "'" << lead << "' pinned " << blocklstm::cpu_target_in_use();
            } catch (const blocklstm::Error &e) {
                EXPECT_NE(std::string(e.what()).find("could be any of"), std::string::npos) << e.what();
            }
            continue;
        }
        blocklstm::set_cpu_target(lead);
        EXPECT_EQ(blocklstm::cpu_target_in_use(), t.name) << "pinned as '" << lead << "'";
    }
}

TEST(CpuTargets, UnknownTargetListsWhatThereIs) {
    RestorePin restore;
    const std::string before = blocklstm::cpu_target_in_use();
    for (const char *pin : {"avx9", "avx", "x86-64-linux-avx2", "avx2@avx1024"}) {
        SCOPED_TRACE(pin);
        try {
            blocklstm::set_cpu_target(pin);
            ADD_FAILURE() << "no error";
        } catch (const blocklstm::Error &e) {
            const std::string m = e.what();
            EXPECT_TRUE(contains(m, std::string("'") + pin + "'")) << m;
            EXPECT_TRUE(contains(m, "this CPU runs")) << m;
            for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) EXPECT_TRUE(contains(m, t.name)) << m;
        }
        EXPECT_EQ(blocklstm::cpu_target_in_use(), before);  // a failed pin changes nothing
    }
}

TEST(CpuTargets, TargetThisCpuCannotRunNamesWhatItLacks) {
    RestorePin restore;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.runs_here) continue;
        try {
            blocklstm::set_cpu_target(t.name);
            ADD_FAILURE() << t.name << ": no error";
        } catch (const blocklstm::Error &e) {
            EXPECT_TRUE(contains(e.what(), "needs " + t.missing + ", which this CPU lacks")) << e.what();
        }
        return;
    }
    GTEST_SKIP() << "this CPU runs every compiled CPU target";
}

// The runtime's own reading of cpuid and XCR0 (x86_features.h), on the register values of CPUs and
// systems this machine is not: each must lose exactly the targets whose code it cannot run.
TEST(CpuTargets, FeaturesDecodedFromCpuidAndXcr0) {
    using blocklstm::detail::X86State;
    using blocklstm::detail::x86_missing;
    const uint32_t sse = 1u << 0 | 1u << 9 | 1u << 19;                         // SSE3, SSSE3, SSE4.1
    const uint32_t avx_ecx = sse | 1u << 12 | 1u << 27 | 1u << 28 | 1u << 29;  // + FMA, OSXSAVE, AVX, F16C
    const uint32_t haswell_ebx = 1u << 3 | 1u << 5;                            // BMI1, AVX2
    const uint32_t skx_ebx = haswell_ebx | 1u << 16 | 1u << 17 | 1u << 28 | 1u << 30 | 1u << 31;
    auto lacks = [&](const X86State &s, const char *feature) {
        const auto missing = x86_missing(s, feature);
        std::string all;
        for (const std::string &m : missing.value()) all += (all.empty() ? "" : ", ") + m;
        return all;
    };
    const X86State skylake_x{avx_ecx, skx_ebx, 0xe7}, zen5_vm_hiding_avx512{avx_ecx, haswell_ebx, 0x7},
        zmm_not_enabled{avx_ecx, skx_ebx, 0x7}, knights_landing{avx_ecx, haswell_ebx | 1u << 16 | 1u << 28, 0xe7},
        no_xsave_os{avx_ecx & ~(1u << 27), skx_ebx, 0}, avx2_without_bmi1{avx_ecx, 1u << 5, 0x7},
        sse41_only{sse, 0, 0};
    for (const char *f : {"sse41", "avx2", "fma", "f16c", "avx512_skylake"}) EXPECT_EQ(lacks(skylake_x, f), "") << f;
    EXPECT_EQ(lacks(zen5_vm_hiding_avx512, "avx2"), "");
    EXPECT_EQ(lacks(zen5_vm_hiding_avx512, "avx512_skylake"),
              "OS support for AVX-512 state (XCR0 bits 1-2, 5-7), AVX-512F, AVX-512CD, AVX-512DQ, AVX-512BW, AVX-512VL");
    EXPECT_EQ(lacks(zmm_not_enabled, "avx512_skylake"), "OS support for AVX-512 state (XCR0 bits 1-2, 5-7)");
    EXPECT_EQ(lacks(zmm_not_enabled, "avx2"), "");
    EXPECT_EQ(lacks(knights_landing, "avx512_skylake"), "AVX-512DQ, AVX-512BW, AVX-512VL");
    EXPECT_EQ(lacks(no_xsave_os, "avx2"), "OSXSAVE, OS support for AVX state (XCR0 bits 1-2)");
    EXPECT_EQ(lacks(no_xsave_os, "sse41"), "");
    EXPECT_EQ(lacks(avx2_without_bmi1, "avx2"), "BMI1");  // the kernels' code holds `andn`
    EXPECT_EQ(lacks(sse41_only, "sse41"), "");
    EXPECT_EQ(lacks(sse41_only, "f16c"), "OSXSAVE, OS support for AVX state (XCR0 bits 1-2), F16C");
    EXPECT_FALSE(x86_missing(skylake_x, "avx512_zen5").has_value());  // not described: Halide's answer
    // avx512_zen4 (-mcpu=znver4): Zen 4's AVX-512 extensions in cpuid(7, 0).ebx/ecx and BF16 in
    // cpuid(7, 1).eax. Skylake-X has none of them; Ice Lake all but BF16; Zen 4 and 5 and Sapphire
    // Rapids all.
    const uint32_t icl_ecx = 1u << 1 | 1u << 6 | 1u << 8 | 1u << 11 | 1u << 12 | 1u << 14;
    X86State ice_lake{avx_ecx, skx_ebx | 1u << 21, 0xe7}, zen4_regs = ice_lake;
    ice_lake.leaf7_ecx = icl_ecx;
    zen4_regs.leaf7_ecx = icl_ecx, zen4_regs.leaf7_1_eax = 1u << 5;
    EXPECT_EQ(lacks(zen4_regs, "avx512_zen4"), "");
    EXPECT_EQ(lacks(ice_lake, "avx512_zen4"), "AVX-512BF16");
    EXPECT_EQ(lacks(skylake_x, "avx512_zen4"),
              "AVX-512IFMA, AVX-512VBMI, AVX-512VBMI2, GFNI, AVX-512VNNI, AVX-512BITALG, AVX-512VPOPCNTDQ, AVX-512BF16");
    EXPECT_EQ(lacks(skylake_x, "avx512_skylake"), "");
    // avx512_sapphirerapids (-mcpu=sapphirerapids): Zen 4's and AVX-512FP16 and AMX in cpuid(7,
    // 0).edx, AVX-VNNI in cpuid(7, 1).eax, and the OS's AMX state (XCR0 bits 17-18).
    X86State sapphire_rapids_regs = zen4_regs;
    sapphire_rapids_regs.leaf7_edx = 1u << 22 | 1u << 23 | 1u << 24 | 1u << 25;
    sapphire_rapids_regs.leaf7_1_eax |= 1u << 4;
    sapphire_rapids_regs.xcr0 = 0x600e7;
    X86State amx_state_not_enabled = sapphire_rapids_regs;
    amx_state_not_enabled.xcr0 = 0xe7;
    EXPECT_EQ(lacks(sapphire_rapids_regs, "avx512_sapphirerapids"), "");
    EXPECT_EQ(lacks(sapphire_rapids_regs, "avx512_zen4"), "");
    EXPECT_EQ(lacks(amx_state_not_enabled, "avx512_sapphirerapids"), "OS support for AMX state (XCR0 bits 17-18)");
    EXPECT_EQ(lacks(zen4_regs, "avx512_sapphirerapids"),
              "AVX-512FP16, AVX-VNNI, AMX-TILE, AMX-BF16, AMX-INT8, OS support for AMX state (XCR0 bits 17-18)");
    // The CPUs a table is for: vendor, family and model ranges (AMD's family 0x19 is Zen 3 and
    // Zen 4, told apart by the model; Zen 5 is 0x1a). The Zen 4 and Zen 5 targets' lists together,
    // as the runtime has them.
    using blocklstm::detail::x86_is_one_of;
    const std::vector<blocklstm::detail::X86Models> zen4_models = {
        {"AuthenticAMD", 0x19, 0x10, 0x1f}, {"AuthenticAMD", 0x19, 0x60, 0x7f}, {"AuthenticAMD", 0x19, 0xa0, 0xaf},
        {"AuthenticAMD", 0x1a, 0x00, 0x2f}, {"AuthenticAMD", 0x1a, 0x40, 0x4f}, {"AuthenticAMD", 0x1a, 0x60, 0x7f}};
    X86State genoa{avx_ecx, skx_ebx, 0xe7, "AuthenticAMD", 0x19, 0x11}, phoenix = genoa, milan = genoa,
        vermeer = genoa, zen5 = genoa, sapphire_rapids = genoa;
    phoenix.model = 0x74, milan.model = 0x01, vermeer.model = 0x21, zen5.family = 0x1a, zen5.model = 0x02;
    sapphire_rapids.vendor = "GenuineIntel", sapphire_rapids.family = 6, sapphire_rapids.model = 0x8f;
    EXPECT_TRUE(x86_is_one_of(genoa, zen4_models));
    EXPECT_TRUE(x86_is_one_of(phoenix, zen4_models));
    EXPECT_FALSE(x86_is_one_of(milan, zen4_models));    // Zen 3, same family
    EXPECT_FALSE(x86_is_one_of(vermeer, zen4_models));  // Zen 3, same family
    EXPECT_TRUE(x86_is_one_of(zen5, zen4_models));
    zen5.model = 0x30;  // not a Zen 5 model
    EXPECT_FALSE(x86_is_one_of(zen5, zen4_models));
    EXPECT_FALSE(x86_is_one_of(sapphire_rapids, zen4_models));
    EXPECT_TRUE(x86_is_one_of(sapphire_rapids, {}));  // a table for any CPU
    // (where the build compiles them: the sanitizer pass builds sse41 alone)
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.name == "avx512_zen4@avx512-zen4")
            EXPECT_EQ(t.tuned_for, "AuthenticAMD family 0x19 models 0x10-0x1f, 0x60-0x7f, 0xa0-0xaf");
        if (t.name == "avx512_zen4@avx512-zen5")
            EXPECT_EQ(t.tuned_for, "AuthenticAMD family 0x1a models 0x0-0x2f, 0x40-0x4f, 0x60-0x7f");
    }
}

// On this machine, the runtime's reading agrees with GCC's (libgcc reads cpuid and XCR0 itself), and
// every compiled target's runs_here with it.
TEST(CpuTargets, ThisCpuReadAsGccReadsIt) {
    __builtin_cpu_init();
    std::map<std::string, bool> gcc = {
        {"sse41", __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1")},
        {"avx2", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi")},
        {"fma", __builtin_cpu_supports("fma") != 0},
        {"f16c", __builtin_cpu_supports("f16c") != 0},
        {"avx512_skylake", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                               __builtin_cpu_supports("bmi")},
        {"avx512_zen4", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                            __builtin_cpu_supports("bmi") && __builtin_cpu_supports("avx512ifma") &&
                            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
                            __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512vnni") &&
                            __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("avx512vpopcntdq") &&
                            __builtin_cpu_supports("avx512bf16")}};
    gcc["avx512_sapphirerapids"] = gcc.at("avx512_zen4") && __builtin_cpu_supports("avx512fp16") &&
                                   __builtin_cpu_supports("avxvnni") && __builtin_cpu_supports("amx-tile") &&
                                   __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-int8");
    const blocklstm::detail::X86State here = blocklstm::detail::read_x86_state();
    for (const auto &[feature, supported] : gcc)
        EXPECT_EQ(blocklstm::detail::x86_missing(here, feature)->empty(), supported) << feature;
    // The vendor, family and model the tables' CPUs are told by: against libgcc's and the kernel's
    // reading (/proc/cpuinfo's "cpu family" and "model").
    EXPECT_EQ(here.vendor == "AuthenticAMD", __builtin_cpu_is("amd") != 0) << here.vendor;
    EXPECT_EQ(here.vendor == "GenuineIntel", __builtin_cpu_is("intel") != 0) << here.vendor;
    if (here.vendor == "AuthenticAMD") {
        EXPECT_EQ(here.family == 0x19, __builtin_cpu_is("amdfam19h") != 0) << here.family;
        EXPECT_EQ(here.family == 0x17, __builtin_cpu_is("amdfam17h") != 0) << here.family;
    }
    std::ifstream cpuinfo("/proc/cpuinfo");
    int linux_family = -1, linux_model = -1;
    for (std::string line; std::getline(cpuinfo, line) && (linux_family < 0 || linux_model < 0);) {
        if (line.rfind("cpu family", 0) == 0) linux_family = std::atoi(line.substr(line.find(':') + 1).c_str());
        if (line.rfind("model\t", 0) == 0) linux_model = std::atoi(line.substr(line.find(':') + 1).c_str());
    }
    if (linux_family >= 0) EXPECT_EQ(here.family, linux_family);
    if (linux_model >= 0) EXPECT_EQ(here.model, linux_model);
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.tuned_for.empty()) continue;
        // "<vendor> family 0x<f> models 0x<a>-0x<b>, 0x<c>-0x<d>, ...; <vendor> family ..."
        bool in_range = false;
        std::string groups = t.tuned_for;
        for (std::size_t start = 0; start < groups.size();) {
            const std::size_t end = std::min(groups.find("; ", start), groups.size());
            const std::string group = groups.substr(start, end - start);
            start = end + 2;
            char vendor[32] = {};
            unsigned family = 0;
            int used = 0;
            ASSERT_EQ(std::sscanf(group.c_str(), "%31s family 0x%x models %n", vendor, &family, &used), 2)
                << t.tuned_for;
            for (const char *p = group.c_str() + used; *p;) {
                unsigned first = 0, last = 0;
                int n = 0;
                ASSERT_EQ(std::sscanf(p, "0x%x-0x%x%n", &first, &last, &n), 2) << t.tuned_for;
                in_range |= here.vendor == vendor && here.family == int(family) && here.model >= int(first) &&
                            here.model <= int(last);
                p += n;
                while (*p == ',' || *p == ' ') ++p;
            }
        }
        EXPECT_EQ(t.tuned_for_this_cpu, in_range) << t.name;
    }
    // (AMX's targets also need Linux to hand out the tile state, which it does from 5.16 on.)
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        const std::string &h = t.halide_target;
        const bool expected = contains(h, "avx512_sapphirerapids") ? gcc.at("avx512_sapphirerapids")
                              : contains(h, "avx512_zen4")         ? gcc.at("avx512_zen4")
                              : contains(h, "avx512_skylake")      ? gcc.at("avx512_skylake")
                              : contains(h, "avx2")                ? gcc.at("avx2") && gcc.at("fma") && gcc.at("f16c")
                                                                   : gcc.at("sse41");
        EXPECT_EQ(t.runs_here, expected) << t.name << ": " << t.missing;
    }
}

// A pin changes the code that runs, not only the name cpu_target_in_use reports: targets that
// must round differently give BlockLSTMGrad's w_grad and x_grad (products over many rows and
// over 4H = 260) in bits of their own: fused multiply-adds against separate ones, or one
// instruction set with x_grad's depth in another number of k blocks (two blocks of 256 against
// one of 512; 512 and 1024 both take it in one, and give the same bits; w_grad's depth, L*B =
// 102, is one block in every table). Two instruction sets that both fuse
// may add each element in the same order whatever their widths: AVX-512 and AVX2 + FMA gave the
// same bits on a Xeon with AVX-512.
TEST(CpuTargets, EachPinRunsItsOwnCode) {
    RestorePin restore;
    const Shape s = *std::find_if(variant_shapes().begin(), variant_shapes().end(),
                                  [](const Shape &v) { return std::string(v.note) == "multi-block GEMMs"; });
    const Problem p = make_problem(seed_for("pins run their code"), s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p);
    struct Run {
        std::string name, halide_target;
        bool fma;
        int k_block;
        Tensor w_grad, x_grad;
    };
    std::vector<Run> runs;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        blocklstm::set_cpu_target(t.name);
        const auto tuning = blocklstm::schedules::parse_cpu_tuning(t.tuning_table, t.tuning);
        const bool fma = contains(t.halide_target, "fma") || contains(t.halide_target, "avx512");
        auto grads = run_seq_grad(p, in);
        runs.push_back({t.name, t.halide_target, fma, tuning.gemm_k_block, std::move(grads.w_grad),
                        std::move(grads.x_grad)});
    }
    int compared = 0;
    for (std::size_t a = 0; a < runs.size(); ++a)
        for (std::size_t b = a + 1; b < runs.size(); ++b) {
            const Run &x = runs[a], &y = runs[b];
            auto x_grad_blocks = [&](int k_block) { return k_block > 0 ? (4 * s.H + k_block - 1) / k_block : 1; };
            const bool must_differ = x.fma != y.fma || (x.halide_target == y.halide_target &&
                                                         x_grad_blocks(x.k_block) != x_grad_blocks(y.k_block));
            if (!must_differ) continue;
            ++compared;
            auto same = [](const Tensor &u, const Tensor &v) {
                return std::memcmp(u.view().data, v.view().data, u.view().num_bytes()) == 0;
            };
            EXPECT_FALSE(same(x.w_grad, y.w_grad) && same(x.x_grad, y.x_grad))
                << x.name << " and " << y.name << " gave the same bits: the same code ran";
        }
    if (compared == 0) GTEST_SKIP() << "this CPU runs no two targets that must round differently";
}

// Short tiles (schedules/step_tiles.h): a step of fewer than two tiles' rows in the fewest tiles of
// at most the table's rows, of even heights, the shortest half a tile and at least 3 rows; none
// for tiles of 3 rows or fewer; two rows in two-row tiles below taller ones. The tile-boundary
// cases run every table's heights.
TEST(StepTiles, ShortTilesSpreadTheRowsEvenly) {
    namespace st = blocklstm::step_tiles;
    EXPECT_EQ(st::shortest_tile_rows(8), 4);
    EXPECT_EQ(st::shortest_tile_rows(7), 4);
    EXPECT_EQ(st::shortest_tile_rows(6), 3);
    EXPECT_EQ(st::shortest_tile_rows(4), 3) << "AVX2's 4-row tiles";
    EXPECT_EQ(st::shortest_tile_rows(3), 0) << "none between two-row tiles and the table's";
    EXPECT_EQ(st::shortest_tile_rows(0), 0);
    // rows -> the height of their tiles in 8-row tiles (1: one-row tiles, 2: two-row tiles)
    const std::vector<std::pair<int64_t, int64_t>> heights{{1, 1},  {2, 2},  {3, 4},  {4, 4},  {5, 5},  {7, 7},
                                                           {8, 8},  {9, 5},  {10, 5}, {11, 6}, {12, 6}, {13, 7},
                                                           {14, 7}, {15, 8}, {16, 8}, {17, 8}, {57, 8}};
    for (const auto &[rows, height] : heights) EXPECT_EQ(st::step_tile_height(rows, 8), height) << rows << " rows";
    EXPECT_EQ(st::step_tile_height(5, 4), 3) << "4-row tiles: two of 3";
    EXPECT_EQ(st::step_tile_height(7, 4), 4);
    EXPECT_EQ(st::step_tile_height(5, 3), 3) << "no short tiles: the table's";
    EXPECT_EQ(st::step_tile_height(2, 3), 2) << "two rows in two-row tiles below taller ones";
    EXPECT_EQ(st::step_tile_height(2, 2), 2) << "the table's own";
    EXPECT_EQ(st::step_tile_height(5, 4, 5), 5) << "4-row tiles with tall ones of up to 5 rows";
    EXPECT_EQ(st::step_tile_height(6, 4, 5), 3) << "past the tall ones: two short tiles";
    EXPECT_EQ(st::step_tile_height(4, 4, 5), 4);
    EXPECT_EQ(st::step_tile_height(3, 4, 5), 3);
    EXPECT_EQ(st::step_tile_height(9, 8, 12), 9);
    EXPECT_EQ(st::step_tile_height(13, 8, 12), 7);
    // The ranges are the rows of each height, in order, none of the table's height: (first, last, height).
    auto triples = [](const std::vector<st::ShortTileRows> &ranges) {
        std::vector<std::tuple<int, int, int>> t;
        for (const st::ShortTileRows &r : ranges) t.emplace_back(r.first, r.last, r.height);
        return t;
    };
    const std::vector<st::ShortTileRows> ranges = st::short_tile_rows(8);
    EXPECT_EQ(triples(ranges), (std::vector<std::tuple<int, int, int>>{
                                   {2, 2, 2}, {3, 4, 4}, {5, 5, 5}, {6, 6, 6}, {7, 7, 7}, {9, 10, 5}, {11, 12, 6},
                                   {13, 14, 7}}));
    EXPECT_EQ(triples(st::short_tile_rows(4)), (std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {3, 3, 3}, {5, 6, 3}}));
    EXPECT_EQ(triples(st::short_tile_rows(4, 5)),
              (std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {3, 3, 3}, {5, 5, 5}, {6, 6, 3}}));
    EXPECT_EQ(triples(st::short_tile_rows(4, 6)),
              (std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {3, 3, 3}, {5, 5, 5}, {6, 6, 6}}));
    EXPECT_EQ(triples(st::short_tile_rows(3)), (std::vector<std::tuple<int, int, int>>{{2, 2, 2}}));
    EXPECT_TRUE(st::short_tile_rows(2).empty());
    for (int64_t rows = 1; rows <= 64; ++rows) {
        const int64_t h = st::step_tile_height(rows, 8);
        int in = 0;
        for (const st::ShortTileRows &r : ranges) {
            if (!st::in_range(rows, r)) continue;
            ++in;
            EXPECT_EQ(r.height, h) << rows << " rows";
        }
        EXPECT_EQ(in, h > 1 && h < 8 ? 1 : 0) << rows << " rows: in one range where short";
        if (h > 1) EXPECT_EQ((rows + h - 1) / h, (rows + 7) / 8) << rows << " rows: no more tiles than 8-row ones";
    }
}

// The rows past a step's whole tiles run alone (one-row or two-row tiles) only where they cost less than one
// more tile: one or two past 8-row tiles, one past AVX2's 4-row tiles (from two tiles on: below,
// short tiles take them), none past tiles of 3 or fewer.
TEST(StepTiles, RowsPastTheTilesRunAloneWhereCheaperThanATile) {
    namespace st = blocklstm::step_tiles;
    EXPECT_EQ(st::rows_past_alone_max(8), 2);
    EXPECT_EQ(st::rows_past_alone_max(4), 1);
    EXPECT_EQ(st::rows_past_alone_max(3), 0);
    EXPECT_EQ(st::rows_past_alone_max(16), 2) << "at most two rows (one-row and two-row tiles)";
    EXPECT_EQ(st::rows_past_alone_max(0), 0);
    EXPECT_EQ(st::rows_in_whole_tiles(17, 8), 16);
    EXPECT_EQ(st::rows_in_whole_tiles(10, 8), 10) << "two short tiles of 5";
    EXPECT_EQ(st::rows_in_whole_tiles(11, 8), 11);
    EXPECT_EQ(st::rows_in_whole_tiles(9, 4), 8);
    EXPECT_EQ(st::rows_in_whole_tiles(10, 4), 10) << "two rows past 4-row tiles take a tile";
    EXPECT_EQ(st::rows_in_whole_tiles(1, 4), 1) << "no whole tile: the call's own one-row tiles";
    EXPECT_EQ(st::rows_in_whole_tiles(5, 4), 5) << "two short tiles of 3";
    EXPECT_EQ(st::rows_in_whole_tiles(8, 4), 8);
    std::vector<std::pair<int64_t, int64_t>> calls;
    st::each_call(13, 4, [&](int64_t r0, int64_t n) { calls.emplace_back(r0, n); });
    EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 12}, {12, 1}}));
}

// Which calls run their steps on one thread beside the batched products (2 loop threads): at most
// 8 rows, up to the table's one_thread_forward_cells in the forward and 128 in the backward, and
// H <= 64 up to 4096 units a step (2048 in the backward) whatever the table says; a table that
// leaves the knob out gets 128.
TEST(StepsOnOneThread, TheTablesCellsBoundTheSmallForwardSteps) {
    using blocklstm::detail::steps_on_one_thread;
    EXPECT_TRUE(steps_on_one_thread(8, 128, false, 128));
    EXPECT_FALSE(steps_on_one_thread(9, 128, false, 128));
    EXPECT_FALSE(steps_on_one_thread(1, 128, false, 64)) << "B = 1, H = 128 split where the table says 64";
    EXPECT_FALSE(steps_on_one_thread(8, 96, false, 64));
    EXPECT_TRUE(steps_on_one_thread(8, 128, true, 64)) << "the backward's 128, whatever the table";
    EXPECT_FALSE(steps_on_one_thread(8, 192, true, 256));
    EXPECT_TRUE(steps_on_one_thread(64, 64, false, 0)) << "4096 units of H = 64, whatever the table";
    EXPECT_FALSE(steps_on_one_thread(64, 64, true, 0)) << "the backward's 2048";
    std::string without;  // the AVX2 table's knobs but one_thread_forward_cells
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (t.tuning_table != "x86-64-avx2") continue;
        std::stringstream items(t.tuning);
        for (std::string item; std::getline(items, item, ',');)
            if (item.rfind("one_thread_forward_cells:", 0) != 0) without += (without.empty() ? "" : ",") + item;
    }
    if (without.empty()) GTEST_SKIP() << "no CPU target of this build runs the table x86-64-avx2";
    EXPECT_EQ(blocklstm::schedules::parse_cpu_tuning("x86-64-avx2", without).one_thread_forward_cells, 128);
}

// In one process, every CPU target this CPU runs computes the sequence ops within the tolerance
// of the float64 reference (the multi-block shape: panels, tiles and k blocks past their edges).
TEST(CpuTargets, EveryRunnableTargetMatchesReference) {
    RestorePin restore;
    const Shape s = *std::find_if(variant_shapes().begin(), variant_shapes().end(),
                                  [](const Shape &v) { return std::string(v.note) == "multi-block GEMMs"; });
    int ran = 0;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        blocklstm::set_cpu_target(t.name);
        for (DType dtype : blocklstm::kFloatDTypes) {
            if (!t.other_dtypes_as.empty() && dtype != DType::bf16) continue;  // that target's code
            SCOPED_TRACE(t.name + " " + blocklstm::to_string(dtype));
            BLT_SEED(seed, "CpuTargets/" + t.name);
            run_use({Op::seq, true, Layout::ifco}, dtype, s, seed, Device::cpu, false);
            run_use({Op::seq_grad, true, Layout::icfo}, dtype, s, seed, Device::cpu, false);
        }
        ++ran;
    }
    EXPECT_GT(ran, 0);
}

// A bfloat16 call of an AMX target runs on the FMAs of the target it takes float32 and float16
// from where AMX's tiles do not pay (runtime/src/ops_sequence.cpp: amx_pays): counted by
// amx_call_count() on the tiles only, and bitwise that target's outputs off them. Each threshold
// is checked on both sides. The check target avx2-fma-f16c@avx512-amx runs it on any AVX2 CPU.
TEST(CpuTargets, Bfloat16CallsRunOffAmxWhereItDoesNotPay) {
    if (const char *env = std::getenv("BLOCKLSTM_AMX"); env && std::string(env) == "always")
        GTEST_SKIP() << "BLOCKLSTM_AMX=always keeps every call on AMX's tiles";
    RestorePin restore;
    struct Case {
        Op op;
        Shape shape;
        bool on_amx;
    };
    const std::vector<Case> cases = {
        // forward: on AMX where H >= 512, or B * H >= 768 over 3 steps or more, or B * H >= 2048
        {Op::seq, {3, 2, 5, 383, 3, 1.0, 0.0, 1.0, "B*H 766"}, false},
        {Op::seq, {3, 2, 5, 384, 3, 1.0, 0.0, 1.0, "B*H 768"}, true},
        {Op::seq, {2, 2, 5, 384, 2, 1.0, 0.0, 1.0, "B*H 768, L 2"}, false},
        {Op::seq, {2, 8, 5, 255, 2, 1.0, 0.0, 1.0, "B*H 2040, L 2"}, false},
        {Op::seq, {1, 8, 5, 256, 1, 1.0, 0.0, 1.0, "B*H 2048, L 1"}, true},
        {Op::seq, {3, 1, 5, 511, 3, 1.0, 0.0, 1.0, "H 511"}, false},
        {Op::seq, {3, 1, 5, 512, 3, 1.0, 0.0, 1.0, "H 512"}, true},
        // backward: on AMX from 8 rows and 256 rows of w_grad's product (L * B)
        {Op::seq_grad, {40, 7, 5, 9, 40, 1.0, 0.0, 1.0, "B 7"}, false},
        {Op::seq_grad, {32, 8, 5, 9, 32, 1.0, 0.0, 1.0, "B 8, L*B 256"}, true},
        {Op::seq_grad, {31, 8, 5, 9, 31, 1.0, 0.0, 1.0, "L*B 248"}, false},
    };
    int ran = 0;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here || !t.amx_products) continue;
        for (const Case &c : cases) {
            SCOPED_TRACE(t.name + " " + describe(c.shape));
            BLT_SEED(seed, "CpuTargets/off_amx/" + t.name);
            const Problem p = make_problem(seed, c.shape, DType::bf16, false, false, Layout::icfo);
            const Inputs in(p, Device::cpu);
            auto outputs = [&](const std::string &target) {
                blocklstm::set_cpu_target(target);
                std::vector<Tensor> all;
                if (c.op == Op::seq) {
                    blocklstm::LSTMOutputs<Tensor> o = run_fwd(p, in);
                    for (Tensor *x : {&o.i, &o.cs, &o.f, &o.o, &o.ci, &o.co, &o.h}) all.push_back(std::move(*x));
                } else {
                    blocklstm::BlockLSTMGradOutputs<Tensor> o = run_seq_grad(p, in);
                    for (Tensor *x : {&o.x_grad, &o.cs_prev_grad, &o.h_prev_grad, &o.w_grad, &o.b_grad})
                        all.push_back(std::move(*x));
                }
                return all;
            };
            const uint64_t before = blocklstm::amx_call_count();
            const std::vector<Tensor> amx = outputs(t.name);
            EXPECT_EQ(blocklstm::amx_call_count() - before, c.on_amx ? 1u : 0u) << "calls on AMX's tiles";
            if (c.on_amx) continue;
            const std::vector<Tensor> fma = outputs(t.other_dtypes_as);
            for (std::size_t k = 0; k < amx.size(); ++k)
                EXPECT_EQ(std::memcmp(amx[k].view().data, fma[k].view().data, amx[k].view().num_bytes()), 0)
                    << "output " << k << " on " << t.name << " and on " << t.other_dtypes_as;
        }
        ++ran;
    }
    if (ran == 0) GTEST_SKIP() << "no target with amx_products runs on this CPU (none compiled, or none runnable)";
}

// Non-finite inputs give what TF's kernels and the float64 reference give: a NaN in x reaches
// every output of its row from its step on (and the weight gradients that sum over it), +-inf and
// huge values saturate the gates to exactly 0, 1 or +-1. (Halide's exp gave 0 for +inf, for x past
// about 1.5e9 and for NaN, so a NaN came out finite and sigmoid(-inf) as 1: generators/lstm_math.h.)
// Every CPU target that runs here (the check targets' geometries too), each dtype, the cell and
// sequence ops and their gradients, with and without peepholes and the cell clip.
TEST(CpuTargets, NonFiniteInputsGiveTheReferencesNonFinites) {
    RestorePin restore;
    int ran = 0;
    for (const blocklstm::CpuTarget &t : blocklstm::cpu_targets()) {
        if (!t.runs_here) continue;
        blocklstm::set_cpu_target(t.name);
        for (DType dtype : {DType::f32, DType::f16, DType::bf16})
            for (bool cell : {false, true})
                for (bool peephole : {false, true})
                    for (double clip : {0.0, 3.0}) {
                        const Shape s{4, 4, 3, 8, 4, 1.0, clip, 1.0, "non-finite x"};
                        SCOPED_TRACE(t.name + " " + blocklstm::to_string(dtype) + (cell ? " cell" : " sequence") +
                                     (peephole ? " peephole" : "") + " clip " + std::to_string(clip));
                        BLT_SEED(seed, "CpuTargets/non_finite");
                        Problem p = make_problem(seed, s, dtype, cell, peephole, Layout::icfo);
                        // Row b's first input at step 1 (the cell: its only step): NaN, +inf, -inf, 1e12
                        // (+inf in float16).
                        const double values[] = {NAN, INFINITY, -INFINITY, 1e12};
                        for (int64_t b = 0; b < s.B; ++b) p.x.data[((cell ? 0 : s.B) + b) * s.I] = values[b];
                        p.x = rounded(p.x, dtype);
                        set_reference_forward(p);
                        ASSERT_TRUE(std::isnan(p.fwd.h.data[(cell ? 0 : s.B) * s.H])) << "the reference's NaN row";
                        const Inputs in(p);
                        expect_op_matches_reference(p, in, false);  // close(): NaN for NaN, inf for inf
                        expect_op_matches_reference(p, in, true);
                    }
        ++ran;
    }
    EXPECT_GT(ran, 0);
}

// cuda_release_memory gives back the cuBLAS handles, the kernels' cached intermediates and the
// pools' memory; the calls after it allocate again and give the same bits (the CUDA kernels and
// cuBLAS's default algorithm are deterministic on one GPU). Its name has "cuda" in it, so that it
// runs with the CUDA cases (variants.cuda_cases, scripts/gpu_check.sh).
TEST(CudaMemory, cuda_ReleaseThenRunAgain) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device: " << blocklstm::cuda_unavailable_reason();
    const Shape s = *std::find_if(variant_shapes().begin(), variant_shapes().end(),
                                  [](const Shape &v) { return std::string(v.note) == "multi-block GEMMs"; });
    BLT_SEED(seed, "CudaMemory/release");
    const Problem p = make_problem(seed, s, DType::f32, false, true, Layout::icfo);
    const Inputs in(p, Device::cuda);
    auto w_grad = [&] { return on_host(run_seq_grad(p, in).w_grad.view()); };
    const Tensor before = w_grad();
    blocklstm::cuda_release_memory();
    blocklstm::cuda_release_memory();  // twice: nothing left to give back
    const Tensor after = w_grad();
    EXPECT_EQ(std::memcmp(before.view().data, after.view().data, before.view().num_bytes()), 0);
    const uint64_t products = blocklstm::cublas_product_count();
    blocklstm::cuda_release_memory();
    (void)w_grad();
    EXPECT_GT(blocklstm::cublas_product_count(), products) << "cuBLAS not used again after its handle was destroyed";
}

// The split steps' time loops as CUDA graphs (set_cuda_graphs): a shape's first call runs direct
// launches, the second captures the loop and launches the graph, the third launches it again
// (same pointers), a call into other outputs captures again and updates the graph; every call's
// outputs (NaN before it) have the bits of the call with graphs off. float32: the forward and the
// gradient have split steps; float16: the forward (its gradient runs the fused steps, no graph).
TEST(CudaGraphs, cuda_GraphLaunchesEqualDirectLaunches) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device: " << blocklstm::cuda_unavailable_reason();
    const CudaSwitchesRestored restore;
    const Shape s = *std::find_if(variant_shapes().begin(), variant_shapes().end(),
                                  [](const Shape &v) { return std::string(v.note) == "multi-block GEMMs"; });
    auto nan_filled = [](const TensorView &like) {  // a device tensor of NaN (all bits set)
        Tensor host(like.dtype, like.shape);
        std::memset(host.data(), 0xff, host.num_bytes());
        return on_device(host, Device::cuda);
    };
    auto same_bits = [](const char *name, const TensorView &ours, const Tensor &want) {
        const Tensor h = on_host(ours);
        return std::memcmp(h.data(), want.data(), want.num_bytes()) == 0
                   ? ::testing::AssertionSuccess()
                   : ::testing::AssertionFailure() << name << " differs from the direct launches' bits";
    };
    for (DType dtype : {DType::f32, DType::f16})
        for (bool peephole : {false, true}) {
            SCOPED_TRACE(std::string(blocklstm::to_string(dtype)) + (peephole ? " peephole" : " plain"));
            BLT_SEED(seed, "CudaGraphs");
            const Problem p = make_problem(seed, s, dtype, false, peephole, Layout::icfo);
            const Inputs in(p, Device::cuda);
            blocklstm::set_cuda_step(blocklstm::CudaStep::split);
            blocklstm::set_cuda_graphs(false);
            const auto fwd = run_fwd(p, in);
            const Tensor h_want = on_host(fwd.h), cs_want = on_host(fwd.cs);
            const auto grad = run_seq_grad(p, in);
            const Tensor x_grad_want = on_host(grad.x_grad), w_grad_want = on_host(grad.w_grad);
            blocklstm::set_cuda_graphs(true);
            const bool grad_split = dtype == DType::f32;
            // Two sets of outputs: calls 1-3 into the first, 4 into the second, 5 into the first.
            std::vector<blocklstm::LSTMOutputs<Tensor>> fwd_outs;
            std::vector<blocklstm::BlockLSTMGradOutputs<Tensor>> grad_outs;
            for (int k = 0; k < 2; ++k) {
                fwd_outs.push_back({nan_filled(fwd.i), nan_filled(fwd.cs), nan_filled(fwd.f), nan_filled(fwd.o),
                                    nan_filled(fwd.ci), nan_filled(fwd.co), nan_filled(fwd.h)});
                grad_outs.push_back({nan_filled(grad.x_grad), nan_filled(grad.cs_prev_grad),
                                     nan_filled(grad.h_prev_grad), nan_filled(grad.w_grad), nan_filled(grad.wci_grad),
                                     nan_filled(grad.wcf_grad), nan_filled(grad.wco_grad), nan_filled(grad.b_grad)});
            }
            const blocklstm::CudaGraphStats before = blocklstm::cuda_graph_stats();
            const auto attrs = blocklstm::BlockLSTMAttrs{static_cast<float>(p.s.forget_bias),
                                                         static_cast<float>(p.s.cell_clip), peephole};
            for (int call = 1; call <= 5; ++call) {
                SCOPED_TRACE("call " + std::to_string(call));
                auto &fo = fwd_outs[call == 4 ? 1 : 0];
                auto &go = grad_outs[call == 4 ? 1 : 0];
                for (Tensor *t : {&fo.h, &fo.cs, &go.x_grad, &go.w_grad}) *t = nan_filled(*t);
                const blocklstm::LSTMOutputs<blocklstm::TV> fv{fo.i, fo.cs, fo.f, fo.o, fo.ci, fo.co, fo.h};
                blocklstm::BlockLSTM(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, fv, attrs);
                const blocklstm::BlockLSTMGradOutputs<blocklstm::TV> gv{go.x_grad,  go.cs_prev_grad, go.h_prev_grad,
                                                             go.w_grad,  go.wci_grad,     go.wcf_grad,
                                                             go.wco_grad, go.b_grad};
                blocklstm::BlockLSTMGrad(p.s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, in.i,
                                         in.cs, in.f, in.o, in.ci, in.co, in.h, in.cs_grad, in.h_grad, gv,
                                         blocklstm::GradAttrs{peephole});
                blocklstm::cuda_synchronize();
                EXPECT_TRUE(same_bits("h", fo.h, h_want));
                EXPECT_TRUE(same_bits("cs", fo.cs, cs_want));
                EXPECT_TRUE(same_bits("x_grad", go.x_grad, x_grad_want));
                EXPECT_TRUE(same_bits("w_grad", go.w_grad, w_grad_want));
            }
            const blocklstm::CudaGraphStats after = blocklstm::cuda_graph_stats();
            const uint64_t loops = grad_split ? 2 : 1;  // time loops with split steps per call pair
            std::printf("[  GRAPHS  ] %s: direct %llu, captures %llu (updates %llu), launches %llu, failures %llu\n",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                        static_cast<unsigned long long>(after.direct - before.direct),
                        static_cast<unsigned long long>(after.captures - before.captures),
                        static_cast<unsigned long long>(after.updates - before.updates),
                        static_cast<unsigned long long>(after.launches - before.launches),
                        static_cast<unsigned long long>(after.failures - before.failures));
            EXPECT_EQ(after.failures, before.failures) << "a capture failed (stderr says why)";
            // The first dtype and variant makes the shape's first call; every later call launches a graph.
            EXPECT_GE(after.launches - before.launches, 4 * loops);
            EXPECT_GE(after.updates - before.updates, loops) << "the call into other outputs updated no graph";
            // A call with the pointers of the cached graph launches it without a capture: the
            // workspaces come back at the same addresses from the stream's pool, except under
            // compute-sanitizer, which moves every allocation (scripts/gpu_check.sh sanitize says so).
            if (!std::getenv("BLOCKLSTM_TEST_ALLOCATIONS_MOVE"))
                EXPECT_LT(after.captures - before.captures, after.launches - before.launches)
                    << "every graph launch followed a capture: no call found its graph (its workspaces moved)";
        }
}

}  // namespace
}  // namespace blt
