// The GPU schedules on any machine: every float32 kernel of the cuda lines of runtime/kernels.inc
// has an OpenCL twin, compiled from the same algorithm and the same GPU schedules
// (schedules/cuda.h), which PoCL runs on the CPU. Each twin runs here as the runtime runs its CUDA
// kernel — on device memory only, with no host copy, so a stage the schedule left on the host
// fails the call — on the CPU variants' shapes, against the float64 reference. This catches
// indexing, bounds, shared-memory, reduction and host/device bugs of the GPU schedules; it does
// not replace a run on a real GPU (the CUDA runtime, cuBLAS, timings).
#include <map>
#include <memory>
#include <set>

#include "HalideBuffer.h"
#include "HalideRuntimeOpenCL.h"
#include "generators/interface.h"
#include "test_util.h"

// The twins' functions (CMake: BLOCKLSTM_OPENCL_CHECK).
#define BLOCKLSTM_IF_cuda_f32(...) __VA_ARGS__
#define BLOCKLSTM_IF_cuda_f16(...)
#define BLOCKLSTM_IF_cuda_bf16(...)
#define BLOCKLSTM_IF_cpu_f32(...)
#define BLOCKLSTM_IF_cpu_f16(...)
#define BLOCKLSTM_IF_cpu_bf16(...)
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, ...)                          \
    BLOCKLSTM_IF_##backend##_##dtype(                                                         \
        extern "C" int family##__opencl_f32_##flags##_##layout##_argv(void **);               \
        extern "C" const halide_filter_metadata_t *family##__opencl_f32_##flags##_##layout##_metadata();)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL

namespace blt {
namespace {

struct Twin {
    std::string family, flags, layout;
    int (*argv)(void **);
    const halide_filter_metadata_t *(*metadata)();
    std::string name() const { return family + "__opencl_f32_" + flags + "_" + layout; }
    bool peephole() const { return flags == "peephole"; }
    Layout gate_layout() const { return layout == "ifco" ? Layout::ifco : Layout::icfo; }
};

void PrintTo(const Twin &t, std::ostream *os) { *os << t.name(); }

const std::vector<Twin> &twins() {
    static const std::vector<Twin> t = {
#define BLOCKLSTM_KERNEL(family, backend, dtype, flags, layout, ...)       \
    BLOCKLSTM_IF_##backend##_##dtype(Twin{#family, #flags, #layout,        \
                                          &family##__opencl_f32_##flags##_##layout##_argv, \
                                          &family##__opencl_f32_##flags##_##layout##_metadata},)
#include "runtime/kernels.inc"
#undef BLOCKLSTM_KERNEL
    };
    return t;
}

// Halide reports errors through a handler; keep the last message for the failure.
std::string last_halide_error;
void capture_halide_error(void *, const char *message) { last_halide_error = message ? message : ""; }

// One call of a twin, its buffers bound by the kernel's argument names. Arrays are row-major with
// TF's shapes (outermost first); the Halide buffers have the same memory, innermost dimension first.
class TwinCall {
public:
    explicit TwinCall(const Twin &twin) : twin_(twin) {}

    TwinCall &in(const std::string &name, const Array &a) {
        Slot &s = slot(name, a.shape);
        for (std::size_t k = 0; k < a.data.size(); ++k) s.host.data()[k] = static_cast<float>(a.data[k]);
        s.host.set_host_dirty();
        expect_ok(s.host.copy_to_device(halide_opencl_device_interface()), "copy " + name + " to the device");
        return *this;
    }
    // An int32 input (gather_rows' index), held in a float slot of the same size and passed as int32.
    TwinCall &in_int32(const std::string &name, const std::vector<int32_t> &values) {
        Slot &s = slot(name, {static_cast<int64_t>(values.size())});
        std::memcpy(s.host.data(), values.data(), values.size() * sizeof(int32_t));
        s.host.set_host_dirty();
        expect_ok(s.host.copy_to_device(halide_opencl_device_interface()), "copy " + name + " to the device");
        int32_.insert(name);
        return *this;
    }
    TwinCall &out(const std::string &name, const std::vector<int64_t> &shape) {
        Slot &s = slot(name, shape);
        expect_ok(s.host.device_malloc(halide_opencl_device_interface()), "allocate " + name);
        return *this;
    }
    TwinCall &scalar(const std::string &name, float value) {
        scalars_[name] = value;
        return *this;
    }

    // Runs the twin on device-only views of the buffers: the runtime hands its GPU kernels device
    // pointers and no host memory.
    void run() {
        const halide_filter_metadata_t *md = twin_.metadata();
        std::vector<halide_buffer_t> views;
        views.reserve(md->num_arguments);
        std::vector<void *> args;
        for (int i = 0; i < md->num_arguments; ++i) {
            const std::string name = md->arguments[i].name;
            if (md->arguments[i].kind == halide_argument_kind_input_scalar) {
                ASSERT_TRUE(scalars_.count(name)) << twin_.name() << ": scalar " << name << " not given";
                args.push_back(&scalars_[name]);
                continue;
            }
            ASSERT_TRUE(slots_.count(name)) << twin_.name() << ": buffer " << name << " not given";
            halide_buffer_t view = *slots_[name]->host.raw_buffer();
            view.host = nullptr;
            view.flags = 0;
            if (int32_.count(name)) view.type = halide_type_of<int32_t>();
            views.push_back(view);
            args.push_back(&views.back());
        }
        last_halide_error.clear();
        const int status = twin_.argv(args.data());
        ASSERT_EQ(status, 0) << twin_.name() << " failed: " << last_halide_error;
        ran_ = true;
    }

    // An output copied back to the host, as an array of `shape` (default: as allocated).
    Array result(const std::string &name, std::vector<int64_t> shape = {}) {
        Slot &s = *slots_.at(name);
        Array a = ref::zeros(shape.empty() ? s.shape : shape);
        if (!ran_) return a;
        s.host.set_device_dirty(true);
        expect_ok(s.host.copy_to_host(), "copy " + name + " to the host");
        for (std::size_t k = 0; k < a.data.size(); ++k) a.data[k] = s.host.data()[k];
        return a;
    }

private:
    struct Slot {
        std::vector<int64_t> shape;
        Halide::Runtime::Buffer<float> host;
    };
    Slot &slot(const std::string &name, const std::vector<int64_t> &shape) {
        std::vector<int> extents(shape.rbegin(), shape.rend());
        for (int &e : extents) e = std::max(e, 0);
        auto s = std::make_unique<Slot>(Slot{shape, Halide::Runtime::Buffer<float>(extents)});
        Slot &ref = *s;
        slots_[name] = std::move(s);
        return ref;
    }
    static void expect_ok(int status, const std::string &what) {
        EXPECT_EQ(status, 0) << what << ": " << last_halide_error;
    }

    const Twin &twin_;
    std::map<std::string, std::unique_ptr<Slot>> slots_;
    std::map<std::string, float> scalars_;
    std::set<std::string> int32_;
    bool ran_ = false;
};

// ---- Inputs and float64 answers -----------------------------------------------------------------

Array random(Rng &rng, std::vector<int64_t> shape, double scale = 1.0) {
    return rounded(uniform(rng, std::move(shape), -scale, scale), DType::f32);
}

Array reshaped(Array a, std::vector<int64_t> shape) {
    a.shape = std::move(shape);
    return a;
}

Array plus(Array a, const Array &b) {
    for (std::size_t k = 0; k < a.data.size(); ++k) a.data[k] += b.data[k];
    return a;
}

// Steps [0, L) of a [T, ...] array, flattened to [L * rows, cols].
Array first_steps(const Array &a, int64_t L) {
    const int64_t per_step = count(a.shape) / a.shape[0];
    Array r = ref::zeros({L * a.shape[1], a.shape[2]});
    std::copy_n(a.data.begin(), L * per_step, r.data.begin());
    return r;
}

// A recurrence the step kernels can be checked against with the op reference: the input size is
// 4H and W_x the identity, so the input projection is x itself (b = 0) and x_grad is the gate
// gradients: xw = x, dgates = x_grad.
struct IdentityInputLstm {
    Array x, w, w_h, b, cs_prev, h_prev, wci, wcf, wco;
    ref::LSTMOut fwd;
    double forget_bias;

    IdentityInputLstm(Rng &rng, const Shape &s, bool peephole, Layout layout) {
        const int64_t T = s.T, B = s.B, H = s.H, G = 4 * H;
        x = random(rng, {T, B, G});
        w_h = random(rng, {H, G}, s.weight_scale / std::sqrt(static_cast<double>(G + H)));
        w = ref::zeros({G + H, G});
        for (int64_t k = 0; k < G; ++k) w.data[k * G + k] = 1.0;
        std::copy(w_h.data.begin(), w_h.data.end(), w.data.begin() + G * G);
        b = ref::zeros({G});
        cs_prev = random(rng, {B, H});
        h_prev = random(rng, {B, H});
        wci = random(rng, {H}), wcf = random(rng, {H}), wco = random(rng, {H});
        forget_bias = layout == Layout::ifco ? 0.0 : s.forget_bias;
        fwd = ref::block_lstm(s.L, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, s.cell_clip,
                              peephole, layout);
        for (Array *a : {&fwd.i, &fwd.cs, &fwd.f, &fwd.o, &fwd.ci, &fwd.co, &fwd.h}) *a = rounded(*a, DType::f32);
    }
};

constexpr double kTol = 1e-5;  // test_util.h: the float32 tolerance of the CPU variants

// One step (T = L = 1) of the identity-input recurrence in the twin's peephole flag and layout:
// the reference of the step kernels.
IdentityInputLstm one_step(Rng &rng, const Shape &s, const Twin &tw) {
    Shape one = s;
    one.T = one.L = 1;
    return IdentityInputLstm(rng, one, tw.peephole(), tw.gate_layout());
}

// ---- One check per kernel family ----------------------------------------------------------------

void check_gemm(const Twin &tw, const Shape &s, Rng &rng) {
    const int64_t rows = s.T * s.B, I = std::max<int64_t>(s.I, 1), G = 4 * s.H;
    TwinCall call(tw);
    Array want;
    if (tw.family == "gemm_nn_bias") {  // xw = x·W_x + b
        const Array a = random(rng, {rows, I}), b = random(rng, {I, G}), bias = random(rng, {G});
        call.in("a", a).in("b", b).in("bias", bias).out("c", {rows, G});
        want = matmul(a, b);
        for (std::size_t k = 0; k < want.data.size(); ++k) want.data[k] += bias.data[k % G];
    } else if (tw.family == "gemm_nn") {  // x_grad = dgates·W_xᵀ
        const Array a = random(rng, {rows, G}), b = random(rng, {G, I});
        call.in("a", a).in("b", b).out("c", {rows, I});
        want = matmul(a, b);
    } else {  // gemm_tn: w_grad = xᵀ·dgates
        const Array a = random(rng, {rows, I}), b = random(rng, {rows, G});
        call.in("a", a).in("b", b).out("c", {I, G});
        want = matmul(transposed(a), b);
    }
    call.run();
    EXPECT_TRUE(close("c", call.result("c"), want, kTol));
}

void check_transpose(const Twin &tw, const Shape &s, Rng &rng) {
    const Array w = random(rng, {s.I + s.H, 4 * s.H});
    TwinCall call(tw);
    call.in("in", w).out("out", {4 * s.H, s.I + s.H}).run();
    EXPECT_TRUE(close("out", call.result("out"), transposed(w), 0.0));
}

// Rows gathered by an index, -1 giving zeros: exact.
void check_gather_rows(const Twin &tw, const Shape &s, Rng &rng) {
    const int64_t rows_in = s.T * s.B, width = s.H;
    const Array in = random(rng, {rows_in, width});
    std::vector<int32_t> index;
    Array want = ref::zeros({rows_in + 1, width});
    for (int64_t r = 0; r <= rows_in; ++r) {
        const int32_t from = r % 3 == 2 ? -1 : static_cast<int32_t>((r * 7 + 1) % rows_in);
        index.push_back(from);
        for (int64_t c = 0; c < width && from >= 0; ++c) want.data[r * width + c] = in.data[from * width + c];
    }
    TwinCall call(tw);
    call.in("in", in).in_int32("index", index).out("out", {rows_in + 1, width}).run();
    EXPECT_TRUE(close("out", call.result("out"), want, 0.0));
}

// One forward step: step 0 of the identity-input recurrence.
void check_seq_fwd_step(const Twin &tw, const Shape &s, Rng &rng) {
    const int64_t B = s.B, H = s.H;
    const IdentityInputLstm r = one_step(rng, s, tw);
    const Array xw = reshaped(r.x, {B, 4 * H});
    TwinCall call(tw);
    call.in("xw", xw).in("h_prev", r.h_prev).in("w_h", r.w_h).in("cs_prev", r.cs_prev);
    call.in("wci", r.wci).in("wcf", r.wcf).in("wco", r.wco);
    call.scalar("forget_bias", static_cast<float>(r.forget_bias)).scalar("cell_clip", static_cast<float>(s.cell_clip));
    const char *names[] = {"i", "cs", "f", "o", "ci", "co", "h"};
    for (int k = 0; k < 7; ++k) call.out("lstm." + std::to_string(k), {B, H});
    call.out("gates", {B, 4 * H});
    call.run();
    const Array *want[] = {&r.fwd.i, &r.fwd.cs, &r.fwd.f, &r.fwd.o, &r.fwd.ci, &r.fwd.co, &r.fwd.h};
    for (int k = 0; k < 7; ++k)
        EXPECT_TRUE(close(names[k], call.result("lstm." + std::to_string(k)), reshaped(*want[k], {B, H}), kTol));
    EXPECT_TRUE(close("gates", call.result("gates"), plus(matmul(r.h_prev, r.w_h), xw), kTol));
}

// The split forward step's gate math (seq_fwd_gates): on the pre-activations xw + h_prev·W_h that
// cuBLAS leaves in place, the outputs of step 0 of the identity-input recurrence.
void check_seq_fwd_gates(const Twin &tw, const Shape &s, Rng &rng) {
    namespace a = blocklstm::kernel::args::seq_fwd_step;
    const int64_t B = s.B, H = s.H;
    const IdentityInputLstm r = one_step(rng, s, tw);
    TwinCall call(tw);
    call.in(a::pre_activations, plus(matmul(r.h_prev, r.w_h), reshaped(r.x, {B, 4 * H}))).in(a::cs_prev, r.cs_prev);
    call.in(a::wci, r.wci).in(a::wcf, r.wcf).in(a::wco, r.wco);
    call.scalar(a::forget_bias, static_cast<float>(r.forget_bias)).scalar(a::cell_clip, static_cast<float>(s.cell_clip));
    for (int k = 0; k < 7; ++k) call.out(blocklstm::kernel::tuple_element(a::lstm, k), {B, H});
    call.run();
    const char *names[] = {"i", "cs", "f", "o", "ci", "co", "h"};
    const Array *want[] = {&r.fwd.i, &r.fwd.cs, &r.fwd.f, &r.fwd.o, &r.fwd.ci, &r.fwd.co, &r.fwd.h};
    for (int k = 0; k < 7; ++k)
        EXPECT_TRUE(close(names[k], call.result(blocklstm::kernel::tuple_element(a::lstm, k)),
                          reshaped(*want[k], {B, H}), kTol));
}

// One backward step with a nonzero recurrent input: dh = h_grad + dgates_next·W_hᵀ and
// dcs = cs_grad + carry are the output gradients of a one-step op reference.
void check_seq_bwd_step(const Twin &tw, const Shape &s, Rng &rng) {
    const int64_t B = s.B, H = s.H;
    const IdentityInputLstm r = one_step(rng, s, tw);
    const Array dgates_next = random(rng, {B, 4 * H}), h_grad = random(rng, {B, H});
    const Array cs_grad = random(rng, {B, H}), carry = random(rng, {B, H});
    const Array dh = plus(times_wT(dgates_next, r.w_h), h_grad), dcs = plus(cs_grad, carry);
    const ref::SeqGradOut g = ref::block_lstm_grad(
        1, r.x, r.cs_prev, r.h_prev, r.w, r.wci, r.wcf, r.wco, r.b, r.fwd.i, r.fwd.cs, r.fwd.f, r.fwd.o,
        r.fwd.ci, r.fwd.co, r.fwd.h, reshaped(dcs, {1, B, H}), reshaped(dh, {1, B, H}), tw.peephole(),
        tw.gate_layout());
    auto step = [&](const Array &a) { return reshaped(a, {B, H}); };
    TwinCall call(tw);
    call.in("dgates_next", dgates_next).in("w_h_t", transposed(r.w_h)).in("h_grad", h_grad);
    call.in("cs_grad", cs_grad).in("dcs_carry", carry).in("i", step(r.fwd.i)).in("f", step(r.fwd.f));
    call.in("o", step(r.fwd.o)).in("ci", step(r.fwd.ci)).in("co", step(r.fwd.co)).in("cs_prev", r.cs_prev);
    call.in("wci", r.wci).in("wcf", r.wcf).in("wco", r.wco);
    call.out("dgates", {B, 4, H}).out("dcs_carry_out", {B, H}).out("dh", {B, H});
    call.run();
    EXPECT_TRUE(close("dh", call.result("dh"), dh, kTol));
    EXPECT_TRUE(close("dgates", call.result("dgates", {B, 4 * H}), reshaped(g.x_grad, {B, 4 * H}), kTol));
    EXPECT_TRUE(close("dcs_carry_out", call.result("dcs_carry_out"), g.cs_prev_grad, kTol));
}

// The split backward step's cell math (seq_bwd_gates): given cuBLAS's dgates_next·W_hᵀ, it adds
// h_grad and matches the one-step op reference as the fused step does.
void check_seq_bwd_gates(const Twin &tw, const Shape &s, Rng &rng) {
    namespace a = blocklstm::kernel::args::seq_bwd_step;
    const int64_t B = s.B, H = s.H;
    const IdentityInputLstm r = one_step(rng, s, tw);
    const Array dgates_next = random(rng, {B, 4 * H}), h_grad = random(rng, {B, H});
    const Array cs_grad = random(rng, {B, H}), carry = random(rng, {B, H});
    const Array product = times_wT(dgates_next, r.w_h), dcs = plus(cs_grad, carry);
    const ref::SeqGradOut g = ref::block_lstm_grad(
        1, r.x, r.cs_prev, r.h_prev, r.w, r.wci, r.wcf, r.wco, r.b, r.fwd.i, r.fwd.cs, r.fwd.f, r.fwd.o,
        r.fwd.ci, r.fwd.co, r.fwd.h, reshaped(dcs, {1, B, H}), reshaped(plus(product, h_grad), {1, B, H}),
        tw.peephole(), tw.gate_layout());
    auto step = [&](const Array &x) { return reshaped(x, {B, H}); };
    TwinCall call(tw);
    call.in(a::dh_product, rounded(product, DType::f32)).in(a::h_grad, h_grad).in(a::cs_grad, cs_grad);
    call.in(a::dcs_carry, carry).in(a::i, step(r.fwd.i)).in(a::f, step(r.fwd.f)).in(a::o, step(r.fwd.o));
    call.in(a::ci, step(r.fwd.ci)).in(a::co, step(r.fwd.co)).in(a::cs_prev, r.cs_prev);
    call.in(a::wci, r.wci).in(a::wcf, r.wcf).in(a::wco, r.wco);
    call.out(a::dgates, {B, 4, H}).out(a::dcs_carry_out, {B, H});
    call.run();
    EXPECT_TRUE(close("dgates", call.result(a::dgates, {B, 4 * H}), reshaped(g.x_grad, {B, 4 * H}), kTol));
    EXPECT_TRUE(close("dcs_carry_out", call.result(a::dcs_carry_out), g.cs_prev_grad, kTol));
}

// The sums after the backward loop, from the gate gradients of a whole identity-input recurrence.
void check_seq_bwd_reduce(const Twin &tw, const Shape &s, Rng &rng) {
    const int64_t B = s.B, H = s.H, L = s.L;
    if (L == 0) return;  // the runtime runs no reduction for an empty sequence
    const IdentityInputLstm r(rng, s, tw.peephole(), tw.gate_layout());
    const Array cs_grad = random(rng, {s.T, B, H}), h_grad = random(rng, {s.T, B, H});
    const ref::SeqGradOut g = ref::block_lstm_grad(L, r.x, r.cs_prev, r.h_prev, r.w, r.wci, r.wcf, r.wco,
                                                   r.b, r.fwd.i, r.fwd.cs, r.fwd.f, r.fwd.o, r.fwd.ci,
                                                   r.fwd.co, r.fwd.h, cs_grad, h_grad, tw.peephole(),
                                                   tw.gate_layout());
    const Array carry = random(rng, {B, H});
    Array cs = first_steps(r.fwd.cs, L);
    cs.shape = {L, B, H};
    TwinCall call(tw);
    call.in("dgates", rounded(first_steps(g.x_grad, L), DType::f32)).in("cs", cs).in("cs_prev", r.cs_prev);
    call.in("dcs_carry", carry).out("b_grad", {4 * H}).out("cs_prev_grad", {B, H});
    if (tw.peephole()) call.out("peephole_grads.0", {H}).out("peephole_grads.1", {H}).out("peephole_grads.2", {H});
    call.run();
    EXPECT_TRUE(close("b_grad", call.result("b_grad"), g.b_grad, kTol));
    EXPECT_TRUE(close("cs_prev_grad", call.result("cs_prev_grad"), carry, 0.0));
    if (!tw.peephole()) return;
    EXPECT_TRUE(close("wci_grad", call.result("peephole_grads.0"), g.wci_grad, kTol));
    EXPECT_TRUE(close("wcf_grad", call.result("peephole_grads.1"), g.wcf_grad, kTol));
    EXPECT_TRUE(close("wco_grad", call.result("peephole_grads.2"), g.wco_grad, kTol));
}

void check_cell_bwd(const Twin &tw, const Shape &s, uint64_t seed) {
    const int64_t B = s.B, H = s.H;
    const Problem p = make_problem(seed, s, DType::f32, /*cell=*/true, tw.peephole(), Layout::icfo);
    const ref::CellGradOut want = ref_cell_grad(p);
    TwinCall call(tw);
    call.in("cs_prev", p.cs_prev).in("i", p.fwd.i).in("cs", p.fwd.cs).in("f", p.fwd.f).in("o", p.fwd.o);
    call.in("ci", p.fwd.ci).in("co", p.fwd.co).in("cs_grad", p.cs_grad).in("h_grad", p.h_grad);
    call.in("wci", p.wci).in("wcf", p.wcf).in("wco", p.wco);
    call.out("cs_prev_grad", {B, H}).out("dicfo", {B, 4, H});
    if (tw.peephole()) call.out("peephole_grads.0", {H}).out("peephole_grads.1", {H}).out("peephole_grads.2", {H});
    call.run();
    EXPECT_TRUE(close("cs_prev_grad", call.result("cs_prev_grad"), want.cs_prev_grad, kTol));
    EXPECT_TRUE(close("dicfo", call.result("dicfo", {B, 4 * H}), want.dicfo, kTol));
    if (!tw.peephole()) return;
    EXPECT_TRUE(close("wci_grad", call.result("peephole_grads.0"), want.wci_grad, kTol));
    EXPECT_TRUE(close("wcf_grad", call.result("peephole_grads.1"), want.wcf_grad, kTol));
    EXPECT_TRUE(close("wco_grad", call.result("peephole_grads.2"), want.wco_grad, kTol));
}

// ---- Tests --------------------------------------------------------------------------------------

class OpenClTwins : public ::testing::TestWithParam<Twin> {
protected:
    static void SetUpTestSuite() { halide_set_error_handler(capture_halide_error); }
};

// PoCL is there (scripts/bootstrap.sh installs Debian's pocl-opencl-icd): without an OpenCL device
// every twin would fail for that reason alone.
TEST(OpenClDevice, Available) {
    halide_set_error_handler(capture_halide_error);
    Halide::Runtime::Buffer<float> probe(1);
    ASSERT_EQ(probe.device_malloc(halide_opencl_device_interface()), 0)
        << "no OpenCL device (install Debian's pocl-opencl-icd; scripts/bootstrap.sh does): " << last_halide_error;
}

TEST(OpenClDevice, Float16TwinsAreNotBuilt) {
    GTEST_SKIP() << "float16 GPU kernels have no OpenCL twin: PoCL has no cl_khr_fp16, which Halide "
                    "needs for float16 OpenCL kernels; they share the float32 kernels' schedules "
                    "and differ only in the types they load and store";
}

TEST_P(OpenClTwins, MatchesReference) {
    const Twin &tw = GetParam();
    for (std::size_t k = 0; k < variant_shapes().size(); ++k) {
        const Shape &s = variant_shapes()[k];
        SCOPED_TRACE(tw.name() + " " + describe(s));
        BLT_SEED(seed, tw.name() + "/shape" + std::to_string(k));
        Rng rng(seed);
        if (tw.family.rfind("gemm_", 0) == 0) check_gemm(tw, s, rng);
        else if (tw.family == "transpose") check_transpose(tw, s, rng);
        else if (tw.family == "gather_rows") check_gather_rows(tw, s, rng);
        else if (tw.family == "seq_fwd_step") check_seq_fwd_step(tw, s, rng);
        else if (tw.family == "seq_bwd_step") check_seq_bwd_step(tw, s, rng);
        else if (tw.family == "seq_fwd_gates") check_seq_fwd_gates(tw, s, rng);
        else if (tw.family == "seq_bwd_gates") check_seq_bwd_gates(tw, s, rng);
        else if (tw.family == "seq_bwd_reduce" || tw.family == "seq_bwd_reduce_split") check_seq_bwd_reduce(tw, s, rng);
        else if (tw.family == "cell_bwd") check_cell_bwd(tw, s, seed);
        else FAIL() << "no check for GPU kernel family " << tw.family;
        if (::testing::Test::HasFatalFailure()) break;
    }
}

INSTANTIATE_TEST_SUITE_P(KernelsInc, OpenClTwins, ::testing::ValuesIn(twins()),
                         [](const ::testing::TestParamInfo<Twin> &info) { return info.param.name(); });

// Every GPU kernel family has a twin, and a check above.
TEST(OpenClTwinTable, EveryGpuFamilyIsChecked) {
    std::set<std::string> families;
    for (const Twin &t : twins()) families.insert(t.family);
    EXPECT_EQ(families, (std::set<std::string>{"cell_bwd", "seq_fwd_step", "seq_bwd_step", "seq_bwd_reduce",
                                               "gemm_nn_bias", "gemm_nn", "gemm_tn", "transpose", "seq_fwd_gates",
                                               "seq_bwd_gates", "seq_bwd_reduce_split", "gather_rows"}));
}

}  // namespace
}  // namespace blt
