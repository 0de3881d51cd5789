// Per-example lengths (seq_lengths, blocklstm's extension of the sequence ops): the four ops against
// the float64 reference that learns lengths too, the gradient against finite differences of that
// reference's forward, the same bits as the op without lengths where every row runs every step,
// validation that names the argument and writes nothing, and the call by name.
//
// Everything a row must not read past its length (x in the forward; the activations, cs_grad and
// h_grad in the gradient) is NaN here: reading any of it would show in some output.
#include <blocklstm/ops.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "test_env.h"
#include "test_util.h"

namespace blt {
namespace {

using blocklstm::Device;
using blocklstm::TensorView;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct LengthCase {
    const char *name;
    Shape shape;
    std::vector<int64_t> lengths;  // one per row, in [0, T]
};

// Rows out of length order, lengths 0 and T, seq_len_max below T; rows in length order; every row
// the same length below L; a batch that runs nothing; no input columns with the clip on; a larger
// batch whose packed rows (~640) make more than one chunk of the CPU's float32 w_grad (512 rows).
std::vector<LengthCase> length_cases() {
    std::vector<LengthCase> cases = {
        {"unsorted", {6, 7, 5, 8, 5, 1.5, 0.0, 0.7, ""}, {3, 0, 5, 6, 1, 5, 2}},
        {"sorted", {6, 7, 5, 8, 6, 1.5, 0.0, 0.7, ""}, {6, 5, 5, 3, 2, 1, 0}},
        {"equal_below_L", {5, 4, 3, 8, 5, 1.5, 0.0, 0.7, ""}, {3, 3, 3, 3}},
        {"all_zero", {4, 3, 3, 5, 4, 1.5, 0.0, 0.7, ""}, {0, 0, 0}},
        {"clip_and_I_0", {5, 6, 0, 8, 5, 1.5, 0.4, 0.7, ""}, {5, 1, 4, 0, 2, 5}},
    };
    LengthCase big{"chunks", {16, 80, 9, 12, 16, 1.5, 0.0, 0.7, ""}, {}};
    Rng rng(seed_for("seq_lengths/chunks"));
    for (int64_t b = 0; b < 80; ++b) big.lengths.push_back(static_cast<int64_t>(rng() % 17));
    cases.push_back(big);
    return cases;
}

struct Combo {
    LengthCase c;
    DType dtype;
    Layout layout;
    bool peephole;
    bool int64;
};

std::string combo_name(const ::testing::TestParamInfo<Combo> &info) {
    const Combo &c = info.param;
    return std::string(c.c.name) + "_" + blocklstm::short_name(c.dtype) +
           (c.layout == Layout::icfo ? "_icfo" : "_ifco") + (c.peephole ? "_peephole" : "_plain") +
           (c.int64 ? "_i64" : "_i32");
}

std::vector<Combo> combos() {
    std::vector<Combo> out;
    for (const LengthCase &c : length_cases())
        for (DType dt : blocklstm::kFloatDTypes)
            for (Layout layout : {Layout::icfo, Layout::ifco})
                for (bool peephole : {false, true}) out.push_back({c, dt, layout, peephole, out.size() % 2 == 0});
    return out;
}

// NaN in every row of a [T, B, width] array past its length.
void poison_past_lengths(Array &a, const std::vector<int64_t> &lengths) {
    const int64_t T = a.shape[0], B = a.shape[1], width = a.shape[2];
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b)
            if (t >= lengths[b])
                for (int64_t k = 0; k < width; ++k) a.data[(t * B + b) * width + k] = kNaN;
}

// A problem whose forward activations are the reference's with lengths.
Problem problem_with_lengths(const Combo &c, const std::vector<int64_t> &capped) {
    BLT_SEED(seed, "seq_lengths/" + std::string(c.c.name));
    Problem p = make_problem(seed, c.c.shape, c.dtype, false, c.peephole, c.layout);
    p.fwd = ref_forward(p, capped);
    return p;
}

// The same problem with NaN past the lengths in what the ops must not read there: x (the forward
// op), the activations, cs_grad and h_grad (the gradient op).
Problem poisoned(Problem p, const std::vector<int64_t> &capped) {
    for (Array *a : {&p.fwd.i, &p.fwd.cs, &p.fwd.f, &p.fwd.o, &p.fwd.ci, &p.fwd.co, &p.fwd.h, &p.cs_grad, &p.h_grad})
        poison_past_lengths(*a, capped);
    if (p.s.I > 0) poison_past_lengths(p.x, capped);
    return p;
}

class SeqLengths : public ::testing::TestWithParam<Combo> {};

TEST_P(SeqLengths, ForwardMatchesTheReference) {
    const Combo c = GetParam();
    const Lengths lengths(c.c.lengths, c.c.shape.L, c.int64);
    const Problem p = problem_with_lengths(c, lengths.capped);
    const Inputs in(poisoned(p, lengths.capped));
    expect_fwd(run_forward(p, in, &lengths.tensor.view()), p.fwd, fwd_tol(c.dtype));
}

TEST_P(SeqLengths, GradMatchesTheReference) {
    const Combo c = GetParam();
    const Lengths lengths(c.c.lengths, c.c.shape.L, c.int64);
    const Problem p = problem_with_lengths(c, lengths.capped);
    const ref::SeqGradOut want =
        ref::block_lstm_grad(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fwd.i, p.fwd.cs,
                             p.fwd.f, p.fwd.o, p.fwd.ci, p.fwd.co, p.fwd.h, p.cs_grad, p.h_grad, p.peephole,
                             p.layout, &lengths.capped);
    const Inputs in(poisoned(p, lengths.capped));
    expect_seq_grad(run_grad(p, in, &lengths.tensor.view()), want, grad_tol(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(Cases, SeqLengths, ::testing::ValuesIn(combos()), combo_name);

// On a CUDA device (with BLOCKLSTM_CUDA_SEQ_LENGTHS=1, as the GPU check runs it): the same cases,
// every tensor but seq_lengths on the device, against the same reference.
class SeqLengthsCuda : public ::testing::TestWithParam<Combo> {
protected:
    void SetUp() override {
        if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
        ::setenv("BLOCKLSTM_CUDA_SEQ_LENGTHS", "1", 1);
    }
};

TEST_P(SeqLengthsCuda, ForwardAndGradMatchTheReference) {
    const Combo c = GetParam();
    const Lengths lengths(c.c.lengths, c.c.shape.L, c.int64);
    const Problem p = problem_with_lengths(c, lengths.capped);
    const Inputs in(poisoned(p, lengths.capped), Device::cuda);
    if (!cuda_kernels_in(c.dtype)) {  // bfloat16: refused, naming the kernel
        EXPECT_TRUE(refused_for_lack_of_cuda_kernels([&] { run_forward(p, in, &lengths.tensor.view()); }));
        EXPECT_TRUE(refused_for_lack_of_cuda_kernels([&] { run_grad(p, in, &lengths.tensor.view()); }));
        return;
    }
    expect_fwd(run_forward(p, in, &lengths.tensor.view()), p.fwd, fwd_tol(c.dtype));  // close() copies to the host
    expect_seq_grad(run_grad(p, in, &lengths.tensor.view()),
                    ref::block_lstm_grad(p.s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fwd.i,
                                         p.fwd.cs, p.fwd.f, p.fwd.o, p.fwd.ci, p.fwd.co, p.fwd.h, p.cs_grad,
                                         p.h_grad, p.peephole, p.layout, &lengths.capped),
                    grad_tol(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(Cases, SeqLengthsCuda, ::testing::ValuesIn(combos()), combo_name);

// The reference's gradient with lengths is the derivative of its forward with lengths, and ours
// matches it: central differences (eps 1e-5, in double) of sum(cs . cs_grad + h . h_grad).
TEST(SeqLengthsFD, GradIsTheDerivativeOfTheForwardWithLengths) {
    for (Layout layout : {Layout::icfo, Layout::ifco})
        for (bool peephole : {false, true}) {
            SCOPED_TRACE(std::string(layout == Layout::icfo ? "icfo" : "ifco") + (peephole ? " peephole" : " plain"));
            const Shape s{5, 4, 3, 4, 4, 1.5, 0.0, 0.7, ""};
            BLT_SEED(seed, "seq_lengths/fd");
            Problem p = make_problem(seed, s, DType::f32, false, peephole, layout);
            const Lengths lengths({2, 5, 0, 3}, s.L, true);
            p.fwd = ref_forward(p, lengths.capped);
            const Inputs in(p);
            const auto ours = run_grad(p, in, &lengths.tensor.view());
            auto loss = [&] {
                const auto f = ref::block_lstm(s.L, p.x, p.cs_prev, p.h_prev, p.w, p.wci, p.wcf, p.wco, p.b, p.fb(),
                                               s.cell_clip, peephole, layout, &lengths.capped);
                return seq_loss(f.cs, f.h, p.cs_grad, p.h_grad);
            };
            const auto fd =
                finite_differences({&p.x, &p.cs_prev, &p.h_prev, &p.w, &p.wci, &p.wcf, &p.wco, &p.b}, loss, 1e-5);
            constexpr double tol = 1e-6;  // as finite_diff_test's float32 gradients against the reference
            expect_seq_grad_matches(ours, fd, tol);
            // A row of length 0 passes nothing back to its initial state.
            for (int64_t j = 0; j < s.H; ++j) {
                EXPECT_EQ(ours.h_prev_grad.data_as<float>()[2 * s.H + j], 0.0f);
                EXPECT_EQ(ours.cs_prev_grad.data_as<float>()[2 * s.H + j], 0.0f);
            }
        }
}

// Where every row runs every step (lengths T, capped at seq_len_max), the call is TF's op: the
// same bits as without seq_lengths.
TEST(SeqLengthsFull, SameBitsAsWithout) {
    for (DType dt : blocklstm::kFloatDTypes) {
        const Shape s{6, 5, 4, 8, 4, 1.5, 0.0, 0.7, ""};
        BLT_SEED(seed, "seq_lengths/full");
        const Problem p = make_problem(seed, s, dt, false, true, Layout::icfo);
        const Inputs in(p);
        const Lengths lengths(std::vector<int64_t>(s.B, s.T), s.L, false);
        const auto with = run_forward(p, in, &lengths.tensor.view()), without = run_forward(p, in, nullptr);
        EXPECT_TRUE(same_bits("h", with.h, without.h));
        EXPECT_TRUE(same_bits("cs", with.cs, without.cs));
        const auto g_with = run_grad(p, in, &lengths.tensor.view()), g_without = run_grad(p, in, nullptr);
        EXPECT_TRUE(same_bits("x_grad", g_with.x_grad, g_without.x_grad));
        EXPECT_TRUE(same_bits("w_grad", g_with.w_grad, g_without.w_grad));
        EXPECT_TRUE(same_bits("wci_grad", g_with.wci_grad, g_without.wci_grad));
        EXPECT_TRUE(same_bits("cs_prev_grad", g_with.cs_prev_grad, g_without.cs_prev_grad));
    }
}

// Bad seq_lengths: an error naming the argument with the expected and the actual value, and no
// output written.
TEST(SeqLengthsValidation, BadLengthsNameTheArgumentAndWriteNothing) {
    const Shape s{4, 3, 2, 4, 4, 1.5, 0.0, 0.7, ""};
    BLT_SEED(seed, "seq_lengths/validation");
    const Problem p = make_problem(seed, s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p);
    Tensor f32(DType::f32, {3}), long_shape(DType::i32, {4}), rank2(DType::i32, {3, 1}), negative(DType::i64, {3}),
        too_long(DType::i32, {3}), good(DType::i32, {3});
    negative.data_as<int64_t>()[1] = -1;
    too_long.data_as<int32_t>()[2] = 5;
    TensorView on_cuda = good.view(), null_data = good.view();
    on_cuda.device = Device::cuda;
    null_data.data = nullptr;
    const std::vector<std::pair<TensorView, std::string>> cases = {
        {f32.view(), "argument 'seq_lengths' has dtype float32: expected int32 or int64"},
        {long_shape.view(), "argument 'seq_lengths' has shape [4]: expected [3]"},
        {rank2.view(), "argument 'seq_lengths' has shape [3,1]: expected [3]"},
        {negative.view(), "argument 'seq_lengths' has -1 at [1]: expected a value in [0, 4]"},
        {too_long.view(), "argument 'seq_lengths' has 5 at [2]: expected a value in [0, 4]"},
        {on_cuda, "argument 'seq_lengths' is on device cuda: expected cpu"},
        {null_data, "argument 'seq_lengths' has null data: expected 3 values"},
    };
    for (const auto &[lengths, message] : cases) {
        SCOPED_TRACE(message);
        for (bool grad : {false, true}) {
            std::vector<Tensor> outs;
            auto output = [&](std::vector<int64_t> shape) {
                Array a = ref::zeros(std::move(shape));
                std::fill(a.data.begin(), a.data.end(), 777.0);
                outs.push_back(ref::to_tensor(a, DType::f32));
                return outs.back().view();
            };
            outs.reserve(8);
            try {
                if (!grad) {
                    const blocklstm::LSTMOutputs<TensorView> out{output({4, 3, 4}), output({4, 3, 4}), output({4, 3, 4}),
                                                                 output({4, 3, 4}), output({4, 3, 4}), output({4, 3, 4}),
                                                                 output({4, 3, 4})};
                    blocklstm::BlockLSTM(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, out, {},
                                         &lengths);
                } else {
                    const blocklstm::BlockLSTMGradOutputs<TensorView> out{
                        output({4, 3, 2}), output({3, 4}), output({3, 4}), output({6, 16}),
                        output({4}),       output({4}),    output({4}),    output({16})};
                    blocklstm::BlockLSTMGradV2(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                               in.i, in.cs, in.f, in.o, in.ci, in.co, in.h, in.cs_grad, in.h_grad, out,
                                               {}, &lengths);
                }
                ADD_FAILURE() << "no error";
            } catch (const blocklstm::Error &e) {
                EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find(grad ? "BlockLSTMGradV2" : "BlockLSTM"), std::string::npos);
            }
            for (const Tensor &t : outs)
                for (int64_t k = 0; k < t.num_elements(); ++k) ASSERT_EQ(t.data_as<float>()[k], 777.0f);
        }
    }
}

// Until a GPU run has shown them correct, seq_lengths with CUDA tensors are refused unless
// BLOCKLSTM_CUDA_SEQ_LENGTHS=1, read at every call.
class SwitchSaved : public ::testing::Test {
protected:
    void SetUp() override {
        const char *was = std::getenv("BLOCKLSTM_CUDA_SEQ_LENGTHS");
        saved_ = was ? std::optional<std::string>(was) : std::nullopt;
        ::unsetenv("BLOCKLSTM_CUDA_SEQ_LENGTHS");
    }
    void TearDown() override {
        if (saved_) ::setenv("BLOCKLSTM_CUDA_SEQ_LENGTHS", saved_->c_str(), 1);
        else ::unsetenv("BLOCKLSTM_CUDA_SEQ_LENGTHS");
    }
    std::optional<std::string> saved_;
};

TEST_F(SwitchSaved, CudaSeqLengthsFollowTheEnvironment) {
    EXPECT_FALSE(blocklstm::cuda_seq_lengths());
    ::setenv("BLOCKLSTM_CUDA_SEQ_LENGTHS", "0", 1);
    EXPECT_FALSE(blocklstm::cuda_seq_lengths());
    ::setenv("BLOCKLSTM_CUDA_SEQ_LENGTHS", "1", 1);
    EXPECT_TRUE(blocklstm::cuda_seq_lengths());
}

TEST_F(SwitchSaved, CudaTensorsWithoutTheSwitchAreRefused) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    const Shape s{4, 3, 2, 4, 4, 1.5, 0.0, 0.7, ""};
    BLT_SEED(seed, "seq_lengths/cuda_switch");
    const Problem p = make_problem(seed, s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p, Device::cuda);
    const Lengths lengths({1, 4, 2}, s.L, false);
    try {
        run_forward(p, in, &lengths.tensor.view());
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("argument 'seq_lengths' is given for CUDA tensors: expected none"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("BLOCKLSTM_CUDA_SEQ_LENGTHS=1"), std::string::npos) << e.what();
    }
}

// Through the registry: the sequence ops list seq_lengths as an optional input and invoke() passes
// it on; the cell ops have no such input.
TEST(SeqLengthsRegistry, InvokeByNamePassesTheLengths) {
    for (const blocklstm::OpInfo &op : blocklstm::ops()) {
        ASSERT_EQ(op.optional_inputs.size(), op.sequence ? 1u : 0u) << op.name;
        if (op.sequence) EXPECT_EQ(op.optional_inputs[0].name + op.optional_inputs[0].shape, "seq_lengths[B]");
    }
    const Shape s{5, 4, 3, 4, 5, 1.5, 0.0, 0.7, ""};
    BLT_SEED(seed, "seq_lengths/registry");
    const Problem p = make_problem(seed, s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p);
    const Lengths lengths({1, 5, 0, 3}, s.L, false);
    std::map<std::string, TensorView> named{{"x", in.x},     {"cs_prev", in.cs_prev}, {"h_prev", in.h_prev},
                                            {"w", in.w},     {"wci", in.wci},         {"wcf", in.wcf},
                                            {"wco", in.wco}, {"b", in.b},             {"seq_lengths", lengths.tensor}};
    blocklstm::OpAttrs attrs;
    attrs.forget_bias = static_cast<float>(s.forget_bias);
    attrs.cell_clip = static_cast<float>(s.cell_clip);
    const auto by_name = blocklstm::invoke("BlockLSTM", s.L, named, attrs);
    const auto typed = run_forward(p, in, &lengths.tensor.view());
    EXPECT_TRUE(same_bits("h", by_name.at("h"), typed.h));
    EXPECT_TRUE(same_bits("cs", by_name.at("cs"), typed.cs));
    const Tensor x_of_one_step(DType::f32, {s.B, s.I});
    named["x"] = x_of_one_step;
    try {
        blocklstm::invoke("LSTMBlockCell", 0, named);
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("unknown input 'seq_lengths'"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace blt

namespace blt {
namespace {

// ReverseSequence against a plain loop, bit for bit (it only moves values), both dtypes, lengths
// 0 and T, a width of 1 and an odd one; twice is the identity.
TEST(ReverseSequence, ReversesEachRowWithinItsLength) {
    for (DType dt : blocklstm::kFloatDTypes)
        for (int64_t W : {1, 13}) {
            SCOPED_TRACE(std::string(blocklstm::short_name(dt)) + " W=" + std::to_string(W));
            const int64_t T = 6, B = 5;
            BLT_SEED(seed, "reverse_sequence");
            Rng rng(seed);
            const Array a = rounded(uniform(rng, {T, B, W}, -1, 1), dt);
            const Tensor input = ref::to_tensor(a, dt);
            const Lengths lengths({4, 0, 6, 1, 3}, T, true);
            const Tensor out = blocklstm::ReverseSequence(input, lengths.tensor);
            Array want = a;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t b = 0; b < B; ++b) {
                    const int64_t len = lengths.capped[b], from = t < len ? len - 1 - t : t;
                    for (int64_t k = 0; k < W; ++k) want.data[(t * B + b) * W + k] = a.data[(from * B + b) * W + k];
                }
            EXPECT_TRUE(close("output", out, want, 0.0));
            const Tensor twice = blocklstm::ReverseSequence(out, lengths.tensor);
            EXPECT_TRUE(same_bits("twice", twice, input));
        }
}

TEST(ReverseSequence, BadInputNamesTheArgumentAndWritesNothing) {
    const Tensor input(DType::f32, {4, 3, 2}), lengths(DType::i32, {3}), bad_lengths(DType::i32, {2});
    Tensor out(DType::f32, {4, 3, 2});
    for (int64_t k = 0; k < out.num_elements(); ++k) out.data_as<float>()[k] = 777.0f;
    Tensor too_long(DType::i64, {3});
    too_long.data_as<int64_t>()[0] = 5;
    const std::vector<std::tuple<TensorView, TensorView, TensorView, std::string>> cases = {
        {input, bad_lengths, out, "argument 'seq_lengths' has shape [2]: expected [3]"},
        {input, too_long, out, "argument 'seq_lengths' has 5 at [0]: expected a value in [0, 4]"},
        {input, lengths, Tensor(DType::f32, {4, 3, 3}), "argument 'output' has shape [4,3,3]: expected [4,3,2]"},
        {input, lengths, input, "overlap"},
    };
    for (const auto &[in, len, o, message] : cases) {
        try {
            blocklstm::ReverseSequence(in, len, o);
            ADD_FAILURE() << "no error: " << message;
        } catch (const blocklstm::Error &e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("ReverseSequence"), std::string::npos) << e.what();
        }
        for (int64_t k = 0; k < out.num_elements(); ++k) ASSERT_EQ(out.data_as<float>()[k], 777.0f);
    }
}

TEST(ReverseSequenceCuda, MatchesTheCpu) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    ::setenv("BLOCKLSTM_CUDA_SEQ_LENGTHS", "1", 1);
    for (DType dt : blocklstm::kFloatDTypes) {
        BLT_SEED(seed, "reverse_sequence/cuda");
        Rng rng(seed);
        const Tensor input = ref::to_tensor(uniform(rng, {7, 4, 9}, -1, 1), dt);
        const Lengths lengths({7, 0, 3, 5}, 7, false);
        const Tensor on_cpu = blocklstm::ReverseSequence(input, lengths.tensor);
        if (!cuda_kernels_in(dt)) {  // bfloat16: refused, naming the kernel
            EXPECT_TRUE(refused_for_lack_of_cuda_kernels(
                [&] { blocklstm::ReverseSequence(on_device(input, Device::cuda), lengths.tensor); }));
            continue;
        }
        const Tensor on_gpu = blocklstm::ReverseSequence(on_device(input, Device::cuda), lengths.tensor);
        EXPECT_TRUE(same_bits("output", on_host(on_gpu), on_cpu));
    }
}

}  // namespace
}  // namespace blt

namespace blt {
namespace {

// BlockLSTMV2 with peepholes by name (invoke), writing cs and h alone.
void invoke_state_only(const Shape &s, const Inputs &in, const TensorView *len, const Tensor &cs, const Tensor &h) {
    std::map<std::string, TensorView> named{{"x", in.x},     {"cs_prev", in.cs_prev}, {"h_prev", in.h_prev},
                                            {"w", in.w},     {"wci", in.wci},         {"wcf", in.wcf},
                                            {"wco", in.wco}, {"b", in.b}};
    if (len) named["seq_lengths"] = *len;
    blocklstm::OpAttrs attrs;
    attrs.cell_clip = static_cast<float>(s.cell_clip);
    attrs.use_peephole = true;
    blocklstm::invoke("BlockLSTMV2", s.L, named, {{"cs", cs}, {"h", h}}, attrs);
}

// Inference: i, f, o, ci, co left out, only cs and h written — the same bits as the full call,
// without lengths, with lengths in length order and not; by name too; some left out is bad input.
TEST(ForwardWithActivationsLeftOut, WritesCsAndHAsTheFullCall) {
    const Shape s{6, 5, 4, 8, 6, 1.5, 0.0, 0.7, ""};
    for (DType dt : blocklstm::kFloatDTypes)
        for (const std::vector<int64_t> &lens : {std::vector<int64_t>{}, {6, 5, 3, 3, 0}, {2, 6, 0, 4, 5}}) {
            SCOPED_TRACE(std::string(blocklstm::short_name(dt)) + " lengths " + std::to_string(lens.size()));
            BLT_SEED(seed, "left_out");
            const Problem p = make_problem(seed, s, dt, false, true, Layout::ifco);
            const Inputs in(p);
            const Lengths lengths(lens.empty() ? std::vector<int64_t>(s.B, s.T) : lens, s.L, false);
            const TensorView *len = lens.empty() ? nullptr : &lengths.tensor.view();
            const auto full = run_forward(p, in, len);
            const Tensor cs(dt, {s.T, s.B, s.H}), h(dt, {s.T, s.B, s.H});
            blocklstm::BlockLSTMV2(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                   {{}, cs, {}, {}, {}, {}, h}, {static_cast<float>(s.cell_clip), true}, len);
            EXPECT_TRUE(same_bits("cs", cs, full.cs));
            EXPECT_TRUE(same_bits("h", h, full.h));
            const Tensor cs2(dt, {s.T, s.B, s.H}), h2(dt, {s.T, s.B, s.H});
            invoke_state_only(s, in, len, cs2, h2);
            EXPECT_TRUE(same_bits("cs by name", cs2, full.cs));
            EXPECT_TRUE(same_bits("h by name", h2, full.h));
        }
}

// Inference with cs [B, H]: each row's final cell state (cs at its last step; cs_prev where it
// runs none), the same bits as the full call's; h as the full call's. Without lengths, with
// seq_len_max below T, with lengths in length order and not (rows of length 0 among them), over
// whole and partial register tiles (B = 9: 8 + 1 on AVX-512), by name too; CPU only.
TEST(ForwardWithActivationsLeftOut, FinalCsIsEachRowsLastState) {
    for (DType dt : blocklstm::kFloatDTypes)
        for (const auto &[T, L, lens] : std::vector<std::tuple<int64_t, int64_t, std::vector<int64_t>>>{
                 {6, 6, {}},
                 {6, 4, {}},
                 {6, 0, {}},
                 {7, 7, {7, 7, 6, 5, 5, 3, 2, 1, 0}},
                 {7, 6, {2, 7, 0, 4, 5, 1, 7, 3, 6}},
                 {5, 5, {0, 0, 0, 0, 0, 0, 0, 0, 0}}}) {
            const Shape s{T, 9, 4, 8, L, 1.5, 0.0, 0.7, ""};
            SCOPED_TRACE(std::string(blocklstm::short_name(dt)) + " T=" + std::to_string(T) + " L=" +
                         std::to_string(L) + " lengths " + std::to_string(lens.size()));
            BLT_SEED(seed, "left_out/final_cs");
            const Problem p = make_problem(seed, s, dt, false, true, Layout::ifco);
            const Inputs in(p);
            const Lengths lengths(lens.empty() ? std::vector<int64_t>(s.B, s.T) : lens, s.L, false);
            const TensorView *len = lens.empty() ? nullptr : &lengths.tensor.view();
            const auto full = run_forward(p, in, len);
            const Tensor expected(dt, {s.B, s.H});
            const std::size_t row = static_cast<std::size_t>(s.H) * blocklstm::size_of(dt);
            for (int64_t b = 0; b < s.B; ++b) {
                const int64_t last = lengths.capped[b] - 1;
                const char *from = last < 0 ? in.cs_prev.data_as<char>() + b * row
                                            : full.cs.data_as<char>() + (last * s.B + b) * row;
                std::memcpy(expected.data_as<char>() + b * row, from, row);
            }
            const Tensor cs(dt, {s.B, s.H}), h(dt, {s.T, s.B, s.H});
            blocklstm::BlockLSTMV2(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                   {{}, cs, {}, {}, {}, {}, h}, {static_cast<float>(s.cell_clip), true}, len);
            EXPECT_TRUE(same_bits("final cs", cs, expected));
            EXPECT_TRUE(same_bits("h", h, full.h));
            const Tensor cs2(dt, {s.B, s.H}), h2(dt, {s.T, s.B, s.H});
            invoke_state_only(s, in, len, cs2, h2);
            EXPECT_TRUE(same_bits("final cs by name", cs2, expected));
            EXPECT_TRUE(same_bits("h by name", h2, full.h));
        }
}

// The cell too: one row, the rows past whole register tiles (9: 8 + 1 alone on AVX-512) and two
// tiles and more (17), with and without peepholes, every dtype: the same bits as the full call.
TEST(ForwardWithActivationsLeftOut, CellWritesCsAndHAsTheFullCall) {
    for (DType dt : blocklstm::kFloatDTypes)
        for (int64_t B : {1, 9, 17})
            for (bool peephole : {false, true}) {
                const Shape s{1, B, 5, 16, 1, 1.5, peephole ? 0.7 : 0.0, 1.0, ""};
                SCOPED_TRACE(std::string(blocklstm::short_name(dt)) + " B=" + std::to_string(B) +
                             (peephole ? " peephole" : ""));
                BLT_SEED(seed, "left_out/cell");
                const Problem p = make_problem(seed, s, dt, true, peephole, Layout::icfo);
                const Inputs in(p);
                const auto full = run_fwd(p, in);
                const blocklstm::LSTMBlockCellAttrs attrs{1.0f, static_cast<float>(s.cell_clip), peephole};
                const Tensor cs(dt, {B, s.H}), h(dt, {B, s.H});
                blocklstm::LSTMBlockCell(in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                         {{}, cs, {}, {}, {}, {}, h}, attrs);
                EXPECT_TRUE(same_bits("cs", cs, full.cs));
                EXPECT_TRUE(same_bits("h", h, full.h));
                const Tensor cs2(dt, {B, s.H}), h2(dt, {B, s.H});
                blocklstm::OpAttrs named_attrs{1.0f, static_cast<float>(s.cell_clip), peephole};
                blocklstm::invoke("LSTMBlockCell", 0,
                                  {{"x", in.x}, {"cs_prev", in.cs_prev}, {"h_prev", in.h_prev}, {"w", in.w},
                                   {"wci", in.wci}, {"wcf", in.wcf}, {"wco", in.wco}, {"b", in.b}},
                                  {{"cs", cs2}, {"h", h2}}, named_attrs);
                EXPECT_TRUE(same_bits("cs by name", cs2, full.cs));
                EXPECT_TRUE(same_bits("h by name", h2, full.h));
            }
}

// On a CUDA device (the GPU check runs *Cuda*): the cell and BlockLSTMV2 with the five left out
// write the bits of the full call on the device; a final-state cs [B, H] is refused there.
TEST(ForwardWithActivationsLeftOutCuda, CellAndSequenceWriteCsAndHAsTheFullCall) {
    if (skip_without_cuda()) GTEST_SKIP() << "no CUDA device";
    for (DType dt : blocklstm::kFloatDTypes) {
        if (!cuda_kernels_in(dt)) continue;  // bfloat16: refused (SeqLengthsCuda checks the refusal)
        for (bool cell : {true, false}) {
            const Shape s{cell ? 1 : 6, 9, 5, 16, cell ? 1 : 6, 1.5, 0.7, 1.0, ""};
            SCOPED_TRACE(std::string(blocklstm::short_name(dt)) + (cell ? " cell" : " sequence"));
            BLT_SEED(seed, "left_out/cuda");
            const Problem p = make_problem(seed, s, dt, cell, true, cell ? Layout::icfo : Layout::ifco);
            const Inputs in(p, Device::cuda);
            const auto full = run_fwd(p, in);
            const std::vector<int64_t> shape = cell ? std::vector<int64_t>{s.B, s.H} : std::vector<int64_t>{s.T, s.B, s.H};
            const Tensor cs(dt, shape, Device::cuda), h(dt, shape, Device::cuda);
            const blocklstm::LSTMOutputs<TensorView> out{{}, cs, {}, {}, {}, {}, h};
            if (cell)
                blocklstm::LSTMBlockCell(in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, out,
                                         {1.0f, static_cast<float>(s.cell_clip), true});
            else
                blocklstm::BlockLSTMV2(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b, out,
                                       {static_cast<float>(s.cell_clip), true});
            EXPECT_TRUE(same_bits("cs", on_host(cs), on_host(full.cs)));
            EXPECT_TRUE(same_bits("h", on_host(h), on_host(full.h)));
            if (cell) continue;
            try {  // cs as the final state [B, H]: the CPU's only, refused naming cs (nothing written)
                const Tensor final_cs(dt, {s.B, s.H}, Device::cuda), h2(dt, shape, Device::cuda);
                blocklstm::BlockLSTMV2(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                       {{}, final_cs, {}, {}, {}, {}, h2}, {static_cast<float>(s.cell_clip), true});
                ADD_FAILURE() << "no error";
            } catch (const blocklstm::Error &e) {
                EXPECT_NE(std::string(e.what()).find("argument 'cs'"), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find("CPU only"), std::string::npos) << e.what();
            }
        }
    }
}

TEST(ForwardWithActivationsLeftOut, SomeLeftOutIsBadInput) {
    const Shape s{3, 2, 2, 4, 3, 1.5, 0.0, 0.7, ""};
    BLT_SEED(seed, "left_out/bad");
    const Problem p = make_problem(seed, s, DType::f32, false, false, Layout::icfo);
    const Inputs in(p);
    const Tensor cs(DType::f32, {3, 2, 4}), h(DType::f32, {3, 2, 4}), f(DType::f32, {3, 2, 4});
    try {
        blocklstm::BlockLSTM(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                             {{}, cs, f, {}, {}, {}, h});
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("argument 'f' is given while 'i' is left out: expected all of i, f, o, "
                                             "ci, co given, or all left out"),
                  std::string::npos)
            << e.what();
    }
    try {  // cs and h are never left out
        blocklstm::BlockLSTM(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                             {{}, {}, {}, {}, {}, {}, h});
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("argument 'cs'"), std::string::npos) << e.what();
    }
    for (const std::vector<int64_t> &bad : {std::vector<int64_t>{3, 4}, {2, 5}, {4}}) {  // cs [B, H] = [2, 4] only
        const Tensor final_cs(DType::f32, bad);
        try {
            blocklstm::BlockLSTM(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                                 {{}, final_cs, {}, {}, {}, {}, h});
            ADD_FAILURE() << "no error";
        } catch (const blocklstm::Error &e) {
            EXPECT_NE(std::string(e.what()).find("argument 'cs'"), std::string::npos) << e.what();
        }
    }
    try {  // a final cs with the activations given
        const Tensor final_cs(DType::f32, {2, 4}), i(DType::f32, {3, 2, 4}), o(DType::f32, {3, 2, 4}),
            ci(DType::f32, {3, 2, 4}), co(DType::f32, {3, 2, 4});
        blocklstm::BlockLSTM(s.L, in.x, in.cs_prev, in.h_prev, in.w, in.wci, in.wcf, in.wco, in.b,
                             {i, final_cs, f, o, ci, co, h});
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("argument 'cs'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(max_abs(ref::to_array(h)), 0.0) << "an output written on bad input";
    const Problem pc = make_problem(seed, s, DType::f32, true, false, Layout::icfo);
    const Inputs ic(pc);
    const Tensor cell_cs(DType::f32, {2, 4}), cell_h(DType::f32, {2, 4}), cell_co(DType::f32, {2, 4});
    try {
        blocklstm::LSTMBlockCell(ic.x, ic.cs_prev, ic.h_prev, ic.w, ic.wci, ic.wcf, ic.wco, ic.b,
                                 {{}, cell_cs, {}, {}, {}, cell_co, cell_h});
        ADD_FAILURE() << "no error";
    } catch (const blocklstm::Error &e) {
        EXPECT_NE(std::string(e.what()).find("LSTMBlockCell: argument 'co' is given while 'i' is left out"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(max_abs(ref::to_array(cell_h)), 0.0) << "an output written on bad input";
}

}  // namespace
}  // namespace blt
