// The op registry (blocklstm/ops.h): the table against the typed API, the call by name against the
// typed call, and the errors of a call by name; and the tuner's kernel replacements in the ops.
#include <blocklstm/ops.h>

#include <set>

#include "runtime/src/kernel_overrides.h"
#include "test_util.h"

namespace blt {
namespace {

using blocklstm::OpArg;
using blocklstm::OpAttrs;
using blocklstm::OpDims;
using blocklstm::OpInfo;

// The registry's shapes at odd sizes, so that no two letters coincide.
TEST(OpRegistry, ShapesAtGivenSizes) {
    const OpDims d{7, 5, 3, 2};
    EXPECT_EQ((OpArg{"x", "[T,B,I]"}.dims(d)), (std::vector<int64_t>{7, 5, 3}));
    EXPECT_EQ((OpArg{"w", "[I+H,4H]"}.dims(d)), (std::vector<int64_t>{5, 8}));
    EXPECT_EQ((OpArg{"b", "[4H]"}.dims(d)), (std::vector<int64_t>{8}));
    EXPECT_EQ((OpArg{"dicfo", "[B,4H]"}.dims(d)), (std::vector<int64_t>{5, 8}));
    EXPECT_EQ((OpArg{"w", "[I+H,4H]"}.rank()), 2);
}

TEST(OpRegistry, SixOpsInTfOrderWithTheirDefaults) {
    std::vector<std::string> names;
    for (const OpInfo &op : blocklstm::ops()) names.push_back(op.name);
    EXPECT_EQ(names, (std::vector<std::string>{"LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad",
                                               "BlockLSTMV2", "BlockLSTMGradV2"}));
    EXPECT_EQ(blocklstm::op_info("BlockLSTM").forget_bias, blocklstm::BlockLSTMAttrs{}.forget_bias);
    EXPECT_EQ(blocklstm::op_info("BlockLSTMV2").cell_clip, blocklstm::BlockLSTMV2Attrs{}.cell_clip);
    EXPECT_FALSE(blocklstm::op_info("BlockLSTMV2").forget_bias);
    EXPECT_FALSE(blocklstm::op_info("BlockLSTMGrad").cell_clip);
    EXPECT_EQ(blocklstm::op_info("BlockLSTMGradV2").forward_op, "BlockLSTMV2");
    EXPECT_EQ(blocklstm::op_info("BlockLSTMV2").layout, "ifco");
    try {
        blocklstm::op_info("BlockGRU");
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("unknown op 'BlockGRU'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("BlockLSTMGradV2"), std::string::npos) << e.what();
    }
}

// Every op by name gives bitwise what its typed function gives, in every float dtype (the names of the
// registry's outputs are the typed bundles' fields, in order).
TEST(OpRegistry, InvokeIsTheTypedCall) {
    const Shape s{3, 2, 5, 4, 2, 1, 0.5, 1.0, "ops"};
    for (DType dtype : blocklstm::kFloatDTypes) {
        for (const OpInfo &op : blocklstm::ops()) {
            SCOPED_TRACE(op.name + " " + blocklstm::to_string(dtype));
            BLT_SEED(seed, "OpRegistry/" + op.name);
            const Layout layout = op.layout == "ifco" ? Layout::ifco : Layout::icfo;
            const Problem p = make_problem(seed, s, dtype, !op.sequence, true, layout);
            const Inputs in(p);
            const std::map<std::string, TensorView> all{
                {"x", in.x},   {"cs_prev", in.cs_prev}, {"h_prev", in.h_prev}, {"w", in.w},   {"wci", in.wci},
                {"wcf", in.wcf}, {"wco", in.wco},       {"b", in.b},           {"i", in.i},   {"cs", in.cs},
                {"f", in.f},   {"o", in.o},             {"ci", in.ci},         {"co", in.co}, {"h", in.h},
                {"cs_grad", in.cs_grad}, {"h_grad", in.h_grad}};
            std::map<std::string, TensorView> args;
            for (const OpArg &a : op.inputs) args[a.name] = all.at(a.name);
            OpAttrs attrs;
            attrs.use_peephole = true;
            if (op.cell_clip) attrs.cell_clip = static_cast<float>(s.cell_clip);
            const std::map<std::string, Tensor> by_name = blocklstm::invoke(op.name, s.L, args, attrs);
            std::vector<Tensor> typed;
            if (op.gradient && !op.sequence) {
                const auto r = run_cell_grad(p, in);
                typed = {r.cs_prev_grad, r.dicfo, r.wci_grad, r.wcf_grad, r.wco_grad};
            } else if (op.gradient) {
                const auto r = run_seq_grad(p, in);
                typed = {r.x_grad, r.cs_prev_grad, r.h_prev_grad, r.w_grad, r.wci_grad, r.wcf_grad, r.wco_grad, r.b_grad};
            } else {
                const auto r = run_fwd(p, in);
                typed = {r.i, r.cs, r.f, r.o, r.ci, r.co, r.h};
            }
            ASSERT_EQ(by_name.size(), op.outputs.size());
            for (std::size_t k = 0; k < op.outputs.size(); ++k)
                EXPECT_TRUE(same_bits(op.outputs[k].name, by_name.at(op.outputs[k].name), typed[k]));
        }
    }
}

TEST(OpRegistry, CallByNameErrorsNameTheArgument) {
    const OpInfo &op = blocklstm::op_info("BlockLSTM");
    std::vector<Tensor> keep;
    std::map<std::string, TensorView> in, out;
    for (const OpArg &a : op.inputs) keep.emplace_back(DType::f32, a.dims({2, 1, 1, 1})), in[a.name] = keep.back();
    for (const OpArg &a : op.outputs) keep.emplace_back(DType::f32, a.dims({2, 1, 1, 1})), out[a.name] = keep.back();
    auto error_of = [](const std::function<void()> &call) {
        try {
            call();
        } catch (const blocklstm::Error &e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NO_THROW(blocklstm::invoke("BlockLSTM", 2, in, out));
    auto missing = in;
    missing.erase("wcf");
    EXPECT_EQ(error_of([&] { blocklstm::invoke("BlockLSTM", 2, missing, out); }), "BlockLSTM: missing input 'wcf'");
    auto extra = in;
    extra["cs_grad"] = in.at("x");
    EXPECT_EQ(error_of([&] { blocklstm::invoke("BlockLSTM", 2, extra, out); }), "BlockLSTM: unknown input 'cs_grad'");
    auto no_h = out;
    no_h.erase("h");
    EXPECT_EQ(error_of([&] { blocklstm::invoke("BlockLSTM", 2, in, no_h); }), "BlockLSTM: missing output 'h'");
    OpAttrs forget;
    forget.forget_bias = 0.5f;
    EXPECT_EQ(error_of([&] { blocklstm::invoke("BlockLSTMV2", 2, in, out, forget); }),
              "BlockLSTMV2: the op has no attr forget_bias");
    // Then the typed function's validation, writing nothing.
    EXPECT_NE(error_of([&] { blocklstm::invoke("BlockLSTM", 3, in, out); }).find("seq_len_max"), std::string::npos);
}

TEST(OpRegistry, EveryOpIsAvailableOnTheCpu) {
    for (const OpInfo &op : blocklstm::ops())
        for (DType dtype : blocklstm::kFloatDTypes)
            for (bool peephole : {false, true})
                EXPECT_TRUE(blocklstm::op_available(op.name, blocklstm::Device::cpu, dtype, peephole)) << op.name;
}

// `blocklstm tune` times a table in the ops with its kernels swapped in (runtime/src/kernel_overrides.h):
// the ops must run the replacement, with the buffers the compiled kernel gets, until it is cleared.
// A replaced input projection writing zeros gives the forward of x = 0 and b = 0 (xw = x W_x + b),
// which the library's own kernels compute from such inputs; cleared, the op is its own again.
TEST(TunerHooks, TheOpsRunAReplacedKernelUntilItIsCleared) {
    const Shape s{6, 3, 5, 4, 6, 1.0, -1.0, 1.0, "hooks"};
    BLT_SEED(seed, "TunerHooks");
    Problem p = make_problem(seed, s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p);
    const auto before = run_fwd(p, in);
    for (std::size_t k = 0; k < p.x.data.size(); ++k) p.x.data[k] = 0;
    for (std::size_t k = 0; k < p.b.data.size(); ++k) p.b.data[k] = 0;
    const auto without_input = run_fwd(p, Inputs(p));

    struct Clear {
        ~Clear() { blocklstm::detail::clear_overrides(); }
    } clear;
    int calls = 0;
    auto zeros = [&calls](void **args) {  // gemm_nn_bias(a, b, bias, c): c [rows, 4H] = 0
        ++calls;
        const auto *c = static_cast<const halide_buffer_t *>(args[3]);
        for (int r = 0; r < c->dim[1].extent; ++r)
            for (int k = 0; k < c->dim[0].extent; ++k)
                reinterpret_cast<float *>(c->host)[int64_t(r) * c->dim[1].stride + int64_t(k) * c->dim[0].stride] = 0;
        return 0;
    };
    try {
        blocklstm::detail::override_cpu_kernel("gemm_nn_bias", false, 5, zeros);
        ADD_FAILURE() << "a replacement of another argument count was taken";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("takes 4 arguments, the code 5"), std::string::npos) << e.what();
    }
    blocklstm::detail::override_cpu_kernel("gemm_nn_bias", false, 4, zeros);
    const auto replaced = run_fwd(p, in);
    EXPECT_GT(calls, 0);
    const std::pair<const char *, std::pair<const Tensor *, const Tensor *>> outputs[] = {
        {"i", {&replaced.i, &without_input.i}}, {"cs", {&replaced.cs, &without_input.cs}},
        {"f", {&replaced.f, &without_input.f}}, {"o", {&replaced.o, &without_input.o}},
        {"ci", {&replaced.ci, &without_input.ci}}, {"co", {&replaced.co, &without_input.co}},
        {"h", {&replaced.h, &without_input.h}}};
    for (const auto &[name, pair] : outputs) {
        SCOPED_TRACE(name);
        const float *got = pair.first->data_as<float>(), *want = pair.second->data_as<float>();
        for (int64_t k = 0; k < pair.first->num_elements(); ++k) ASSERT_EQ(got[k], want[k]) << "element " << k;
    }

    blocklstm::detail::clear_overrides();
    const int replaced_calls = calls;
    const auto after = run_fwd(p, in);
    EXPECT_EQ(calls, replaced_calls);
    EXPECT_TRUE(same_bits("h", after.h, before.h));
    EXPECT_TRUE(same_bits("cs", after.cs, before.cs));
}

}  // namespace
}  // namespace blt
