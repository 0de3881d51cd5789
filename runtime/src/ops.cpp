// The op registry: the one table of what each op takes, gives and runs (blocklstm/ops.h), and the
// call of an op by name. The typed functions' signatures are spelled here once more, in invoke's
// dispatch; everything else that handles the ops uniformly reads the table.
#include <blocklstm/ops.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "runtime/src/kernel_table.h"
#include "runtime/src/products.h"
#include "runtime/src/thread_pool.h"
#include "runtime/src/validate.h"

namespace blocklstm {
namespace detail {
namespace {

enum class OpId { cell, cell_grad, seq, seq_grad, seq_v2, seq_grad_v2 };

struct OpDef {
    OpId id;
    OpInfo info;
};

std::vector<OpArg> args(std::initializer_list<std::pair<const char *, const char *>> list) {
    std::vector<OpArg> out;
    for (const auto &[name, shape] : list) out.push_back({name, shape});
    return out;
}

const std::vector<OpDef> &defs() {
    static const std::vector<OpDef> table = [] {
        const auto weights = args({{"w", "[I+H,4H]"}, {"wci", "[H]"}, {"wcf", "[H]"}, {"wco", "[H]"}, {"b", "[4H]"}});
        auto join = [](std::vector<OpArg> a, const std::vector<OpArg> &b) {
            a.insert(a.end(), b.begin(), b.end());
            return a;
        };
        const auto cell_in = join(args({{"x", "[B,I]"}, {"cs_prev", "[B,H]"}, {"h_prev", "[B,H]"}}), weights);
        const auto seq_in = join(args({{"x", "[T,B,I]"}, {"cs_prev", "[B,H]"}, {"h_prev", "[B,H]"}}), weights);
        auto activations = [](const char *s, bool with_h) {
            std::vector<OpArg> a;
            for (const char *n : {"i", "cs", "f", "o", "ci", "co"}) a.push_back({n, s});
            if (with_h) a.push_back({"h", s});
            return a;
        };
        const auto cell_out = activations("[B,H]", true), seq_out = activations("[T,B,H]", true);
        const auto cell_grad_in = join(join(cell_in, activations("[B,H]", false)),
                                       args({{"cs_grad", "[B,H]"}, {"h_grad", "[B,H]"}}));
        const auto seq_grad_in = join(join(seq_in, activations("[T,B,H]", true)),
                                      args({{"cs_grad", "[T,B,H]"}, {"h_grad", "[T,B,H]"}}));
        const auto cell_grad_out = args({{"cs_prev_grad", "[B,H]"}, {"dicfo", "[B,4H]"}, {"wci_grad", "[H]"},
                                         {"wcf_grad", "[H]"}, {"wco_grad", "[H]"}});
        const auto seq_grad_out = args({{"x_grad", "[T,B,I]"}, {"cs_prev_grad", "[B,H]"}, {"h_prev_grad", "[B,H]"},
                                        {"w_grad", "[I+H,4H]"}, {"wci_grad", "[H]"}, {"wcf_grad", "[H]"},
                                        {"wco_grad", "[H]"}, {"b_grad", "[4H]"}});
        const LSTMBlockCellAttrs cell_attrs;
        const BlockLSTMAttrs seq_attrs;
        const BlockLSTMV2Attrs v2_attrs;
        auto op = [](OpId id, const char *name, const char *summary, bool sequence, const char *forward_op,
                     const char *layout, std::vector<OpArg> in, std::vector<OpArg> out,
                     std::optional<float> forget_bias, std::optional<float> cell_clip) {
            OpDef d{id, {name, summary, sequence, *forward_op != '\0', layout, std::move(in),
                         std::move(out), forget_bias, cell_clip, forward_op}};
            if (sequence) d.info.optional_inputs = args({{"seq_lengths", "[B]"}});
            return d;
        };
        return std::vector<OpDef>{
            op(OpId::cell, "LSTMBlockCell", "one LSTM step (ICFO gates)", false, "", "icfo", cell_in,
               cell_out, cell_attrs.forget_bias, cell_attrs.cell_clip),
            op(OpId::cell_grad, "LSTMBlockCellGrad", "the gate gradients of one step", false, "LSTMBlockCell", "icfo",
               cell_grad_in, cell_grad_out, std::nullopt, std::nullopt),
            op(OpId::seq, "BlockLSTM", "an LSTM over a sequence (ICFO gates)", true, "", "icfo", seq_in,
               seq_out, seq_attrs.forget_bias, seq_attrs.cell_clip),
            op(OpId::seq_grad, "BlockLSTMGrad", "the gradient of BlockLSTM", true, "BlockLSTM", "icfo", seq_grad_in,
               seq_grad_out, std::nullopt, std::nullopt),
            op(OpId::seq_v2, "BlockLSTMV2", "an LSTM over a sequence (IFCO gates, no forget bias)", true,
               "", "ifco", seq_in, seq_out, std::nullopt, v2_attrs.cell_clip),
            op(OpId::seq_grad_v2, "BlockLSTMGradV2", "the gradient of BlockLSTMV2", true, "BlockLSTMV2", "ifco",
               seq_grad_in, seq_grad_out, std::nullopt, std::nullopt),
        };
    }();
    return table;
}

const OpDef &def_of(const std::string &name) {
    for (const OpDef &d : defs()) {
        if (d.info.name == name) return d;
    }
    std::string known;
    for (const OpDef &d : defs()) known += (known.empty() ? "" : ", ") + d.info.name;
    throw Error("unknown op '" + name + "' (expected one of: " + known + ")");
}

// The tensors of a call in the table's order, from a map by name.
// The forward ops' outputs a call may leave out (only cs and h written then).
bool may_be_left_out(const OpInfo &op, const std::string &output) {
    return !op.gradient && output != "cs" && output != "h";
}

std::vector<TensorView> in_order(const OpInfo &op, const std::vector<OpArg> &expected,
                                 const std::map<std::string, TensorView> &given, const char *what,
                                 const std::vector<OpArg> &optional = {}) {
    std::vector<TensorView> out;
    const bool outputs = std::string_view(what) == "output";
    for (const OpArg &a : expected) {
        auto it = given.find(a.name);
        if (it == given.end() && outputs && may_be_left_out(op, a.name)) {
            out.emplace_back();  // left out: the op validates that all five are
            continue;
        }
        if (it == given.end()) throw Error(op.name + ": missing " + what + " '" + a.name + "'");
        out.push_back(it->second);
    }
    for (const auto &[name, t] : given) {
        (void)t;
        auto named = [&](const OpArg &a) { return a.name == name; };
        const bool known = std::any_of(expected.begin(), expected.end(), named) ||
                           std::any_of(optional.begin(), optional.end(), named);
        if (!known) throw Error(op.name + ": unknown " + what + " '" + name + "'");
    }
    return out;
}

// An output bundle from views in TF's order, and named tensors from an owning bundle.
template <typename Bundle>
Bundle bundle_of(const std::vector<TensorView> &views) {
    Bundle b;
    std::size_t k = 0;
    each_output(b, [&](const char *, TensorView &t) { t = views[k++]; });
    return b;
}
template <typename Bundle>
std::map<std::string, Tensor> named(Bundle &&owned) {
    std::map<std::string, Tensor> out;
    each_output(owned, [&](const char *name, Tensor &t) { out[name] = std::move(t); });
    return out;
}

template <typename Attrs>
Attrs fwd_attrs(const OpAttrs &a) {
    Attrs x;
    if constexpr (!std::is_same_v<Attrs, BlockLSTMV2Attrs>) {
        if (a.forget_bias) x.forget_bias = *a.forget_bias;
    }
    if (a.cell_clip) x.cell_clip = *a.cell_clip;
    x.use_peephole = a.use_peephole;
    return x;
}

// An op's typed call on inputs `a` in the table's order, bound to its outputs `out` (views in
// the table's order) and attrs once, to be run any number of times.
std::function<void()> bind_typed(OpId id, int64_t L, const std::vector<TensorView> &a, const OpAttrs &attrs,
                                 const std::vector<TensorView> &out, std::optional<TensorView> lengths) {
#define BLOCKLSTM_X8 a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
#define BLOCKLSTM_X16 BLOCKLSTM_X8, a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]
#define BLOCKLSTM_X17 BLOCKLSTM_X16, a[16]
    const GradAttrs grad{attrs.use_peephole};
    switch (id) {
    case OpId::cell:
        return [=, o = bundle_of<LSTMOutputs<TensorView>>(out), at = fwd_attrs<LSTMBlockCellAttrs>(attrs)] {
            LSTMBlockCell(BLOCKLSTM_X8, o, at);
        };
    case OpId::cell_grad:
        return [=, o = bundle_of<LSTMBlockCellGradOutputs<TensorView>>(out)] { LSTMBlockCellGrad(BLOCKLSTM_X16, o, grad); };
    case OpId::seq:
        return [=, o = bundle_of<LSTMOutputs<TensorView>>(out), at = fwd_attrs<BlockLSTMAttrs>(attrs)] {
            BlockLSTM(L, BLOCKLSTM_X8, o, at, lengths ? &*lengths : nullptr);
        };
    case OpId::seq_v2:
        return [=, o = bundle_of<LSTMOutputs<TensorView>>(out), at = fwd_attrs<BlockLSTMV2Attrs>(attrs)] {
            BlockLSTMV2(L, BLOCKLSTM_X8, o, at, lengths ? &*lengths : nullptr);
        };
    case OpId::seq_grad:
        return [=, o = bundle_of<BlockLSTMGradOutputs<TensorView>>(out)] {
            BlockLSTMGrad(L, BLOCKLSTM_X17, o, grad, lengths ? &*lengths : nullptr);
        };
    case OpId::seq_grad_v2:
        return [=, o = bundle_of<BlockLSTMGradOutputs<TensorView>>(out)] {
            BlockLSTMGradV2(L, BLOCKLSTM_X17, o, grad, lengths ? &*lengths : nullptr);
        };
    }
    throw Error("blocklstm internal error: op id out of range");
}

// The checks of that call, without the call.
void check_typed(OpId id, int64_t L, const std::vector<TensorView> &a, const std::vector<TensorView> &out,
                 std::optional<TensorView> lengths) {
    const TensorView *seq_lengths = lengths ? &*lengths : nullptr;
    const auto forward_out = [&] { return bundle_of<LSTMOutputs<TensorView>>(out); };
    const auto grad_out = [&] { return bundle_of<BlockLSTMGradOutputs<TensorView>>(out); };
    switch (id) {
    case OpId::cell: return check_cell_forward(a, forward_out());
    case OpId::cell_grad: return check_cell_grad(a, bundle_of<LSTMBlockCellGradOutputs<TensorView>>(out));
    case OpId::seq: return check_sequence_forward("BlockLSTM", L, a, forward_out(), seq_lengths);
    case OpId::seq_v2: return check_sequence_forward("BlockLSTMV2", L, a, forward_out(), seq_lengths);
    case OpId::seq_grad: return check_sequence_grad("BlockLSTMGrad", L, a, grad_out(), seq_lengths);
    case OpId::seq_grad_v2: return check_sequence_grad("BlockLSTMGradV2", L, a, grad_out(), seq_lengths);
    }
    throw Error("blocklstm internal error: op id out of range");
}

// The same call allocating its outputs, returned by name.
std::map<std::string, Tensor> run_allocating(OpId id, int64_t L, const std::vector<TensorView> &a,
                                             const OpAttrs &attrs, const TensorView *lengths) {
    const GradAttrs grad{attrs.use_peephole};
    switch (id) {
    case OpId::cell: return named(LSTMBlockCell(BLOCKLSTM_X8, fwd_attrs<LSTMBlockCellAttrs>(attrs)));
    case OpId::cell_grad: return named(LSTMBlockCellGrad(BLOCKLSTM_X16, grad));
    case OpId::seq: return named(BlockLSTM(L, BLOCKLSTM_X8, fwd_attrs<BlockLSTMAttrs>(attrs), lengths));
    case OpId::seq_v2: return named(BlockLSTMV2(L, BLOCKLSTM_X8, fwd_attrs<BlockLSTMV2Attrs>(attrs), lengths));
    case OpId::seq_grad: return named(BlockLSTMGrad(L, BLOCKLSTM_X17, grad, lengths));
    case OpId::seq_grad_v2: return named(BlockLSTMGradV2(L, BLOCKLSTM_X17, grad, lengths));
    }
#undef BLOCKLSTM_X8
#undef BLOCKLSTM_X16
#undef BLOCKLSTM_X17
    throw Error("blocklstm internal error: op id out of range");
}

// The optional seq_lengths of a call by name (the sequence ops'), or none.
std::optional<TensorView> seq_lengths_of(const OpInfo &op, const std::map<std::string, TensorView> &given) {
    auto it = given.find("seq_lengths");
    if (it == given.end() || op.optional_inputs.empty()) return std::nullopt;
    return it->second;
}

void check_attrs(const OpInfo &op, const OpAttrs &attrs) {
    if (attrs.forget_bias && !op.forget_bias) throw Error(op.name + ": the op has no attr forget_bias");
    if (attrs.cell_clip && !op.cell_clip) throw Error(op.name + ": the op has no attr cell_clip");
}

}  // namespace

plan::Kind plan_kind(const OpInfo &op) { return plan::kind_of(op.sequence, op.gradient); }

void preflight(const std::string &op, Device device, DType dtype, bool use_peephole) {
    const OpInfo &info = def_of(op).info;
    const plan::Kind kind = plan_kind(info);
    (void)PlanKernels(kind, device, dtype, {use_peephole, info.layout == "ifco" ? Layout::ifco : Layout::icfo},
                      steps_for(kind, device, dtype));
}

// The plans a call of `op` on a device in a dtype may run: its fused plan, and its split one where
// there is one (runtime/src/plans.h).
std::vector<std::span<const plan::Step>> plans_of(const OpInfo &op, Device device, DType dtype) {
    const plan::Kind kind = plan_kind(op);
    std::vector<std::span<const plan::Step>> plans{plan::plan_of(kind, device, dtype)};
    if (plan::has_split_steps(kind, device, dtype)) plans.push_back(plan::plan_of(kind, device, dtype, plan::Steps::split));
    return plans;
}

}  // namespace detail

// The kernels this library has, each with the ops whose plans run it (blocklstm list).
std::vector<KernelInfo> kernels() {
    std::string cpu_target_names;
    for (const CpuTarget &t : cpu_targets()) cpu_target_names += (cpu_target_names.empty() ? "" : ",") + t.name;
    std::vector<KernelInfo> out;
    for (const detail::KernelEntry &k : detail::kernel_entries()) {
        KernelInfo info;
        info.name = k.name;
        info.family = kernel::name(k.family);
        for (const OpInfo &op : ops()) {
            if (std::string_view(k.layout) != "any" && op.layout != k.layout) continue;
            bool runs = false;
            for (const auto &plan : detail::plans_of(op, k.backend, k.dtype))
                for (const plan::Step &s : plan) runs |= s.family == k.family;
            if (runs) info.ops += (info.ops.empty() ? "" : " ") + op.name;
        }
        info.backend = k.backend;
        info.dtype = k.dtype;
        info.peephole = k.peephole;
        info.layout = k.layout;
        info.targets = k.backend == Device::cuda ? BLOCKLSTM_CUDA_TARGET : cpu_target_names;
        out.push_back(std::move(info));
    }
    return out;
}

int OpArg::rank() const { return static_cast<int>(std::count(shape.begin(), shape.end(), ',')) + 1; }

// "[I+H,4H]" at I=3, H=5: {8, 20}. A dimension is a sum of terms, each a letter of OpDims with an
// optional integer factor before it, or an integer.
std::vector<int64_t> OpArg::dims(const OpDims &d) const {
    std::vector<int64_t> out(1, 0);
    int64_t factor = 0;
    bool have_factor = false;
    auto letter = [&](char c) -> int64_t {
        switch (c) {
        case 'T': return d.T;
        case 'B': return d.B;
        case 'I': return d.I;
        case 'H': return d.H;
        }
        throw Error("blocklstm internal error: shape " + shape + " of " + name);
    };
    for (char c : shape.substr(1, shape.size() - 2) + ",") {
        if (c >= '0' && c <= '9') {
            factor = factor * 10 + (c - '0');
            have_factor = true;
        } else if (c == '+' || c == ',') {
            if (have_factor) out.back() += factor;  // a plain integer term
            factor = 0, have_factor = false;
            if (c == ',') out.push_back(0);
        } else {
            out.back() += (have_factor ? factor : 1) * letter(c);
            factor = 0, have_factor = false;
        }
    }
    out.pop_back();
    return out;
}

std::vector<OpPlanStep> OpInfo::plan(Device device, DType dtype) const {
    const plan::Kind kind = detail::plan_kind(*this);
    std::vector<OpPlanStep> steps;
    for (const plan::Step &s : plan::plan_of(kind, device, dtype, detail::steps_for(kind, device, dtype)))
        steps.push_back({kernel::name(s.family), plan::to_string(s.times), s.does});
    return steps;
}

std::vector<std::string> OpInfo::kernel_families(Device device, DType dtype) const {
    std::vector<std::string> families;
    for (const auto &plan : detail::plans_of(*this, device, dtype))
        for (const plan::Step &s : plan)
            if (std::find(families.begin(), families.end(), kernel::name(s.family)) == families.end())
                families.push_back(kernel::name(s.family));
    return families;
}

const std::vector<OpInfo> &ops() {
    static const std::vector<OpInfo> infos = [] {
        std::vector<OpInfo> v;
        for (const detail::OpDef &d : detail::defs()) v.push_back(d.info);
        return v;
    }();
    return infos;
}

const OpInfo &op_info(const std::string &name) { return detail::def_of(name).info; }

bool op_available(const std::string &op, Device device, DType dtype, bool use_peephole) {
    try {
        detail::preflight(op, device, dtype, use_peephole);
        return true;
    } catch (const Error &) {
        return false;
    }
}

namespace {

// A call by name bound to its tensors and attrs, their names and the attrs checked, and with
// `check_tensors` every check the typed call makes when it runs (invoke_side_by_side).
std::function<void()> bind_by_name(const std::string &op, int64_t seq_len_max,
                                   const std::map<std::string, TensorView> &inputs,
                                   const std::map<std::string, TensorView> &outputs, const OpAttrs &attrs,
                                   bool check_tensors) {
    const detail::OpDef &d = detail::def_of(op);
    detail::check_attrs(d.info, attrs);
    const std::vector<TensorView> in = detail::in_order(d.info, d.info.inputs, inputs, "input", d.info.optional_inputs);
    const std::vector<TensorView> out = detail::in_order(d.info, d.info.outputs, outputs, "output");
    const std::optional<TensorView> lengths = detail::seq_lengths_of(d.info, inputs);
    if (check_tensors) detail::check_typed(d.id, seq_len_max, in, out, lengths);
    return detail::bind_typed(d.id, seq_len_max, in, attrs, out, lengths);
}

}  // namespace

std::function<void()> bind_op(const std::string &op, int64_t seq_len_max,
                           const std::map<std::string, TensorView> &inputs,
                           const std::map<std::string, TensorView> &outputs, const OpAttrs &attrs) {
    return bind_by_name(op, seq_len_max, inputs, outputs, attrs, false);
}

void invoke(const std::string &op, int64_t seq_len_max, const std::map<std::string, TensorView> &inputs,
            const std::map<std::string, TensorView> &outputs, const OpAttrs &attrs) {
    bind_op(op, seq_len_max, inputs, outputs, attrs)();
}

std::map<std::string, Tensor> invoke(const std::string &op, int64_t seq_len_max,
                                     const std::map<std::string, TensorView> &inputs, const OpAttrs &attrs) {
    const detail::OpDef &d = detail::def_of(op);
    detail::check_attrs(d.info, attrs);
    const std::optional<TensorView> lengths = detail::seq_lengths_of(d.info, inputs);
    return detail::run_allocating(d.id, seq_len_max,
                                  detail::in_order(d.info, d.info.inputs, inputs, "input", d.info.optional_inputs),
                                  attrs, lengths ? &*lengths : nullptr);
}

namespace {

// The largest state (B x H, cs_prev's elements) of a call that runs beside another: BlockLSTMV2
// and BlockLSTMGradV2 side by side took 0.68-0.98x the time of one after the other up to B x H =
// 4096 (T,B,I=H 500,1,128 to 200,16,256), 0.99x at 100,32,256 (and the module's two bidirectional
// layers there 1.01-1.03x), 1.00-1.02x at 100,64,512 (docs/performance.md).
constexpr int64_t kSideBySideMaxState = 4096;

// On the CPU (a CUDA call stays on this thread: its stream is this thread's, set_cuda_stream),
// and small enough to gain from a thread of its own.
bool beside_another(const OpCall &call) {
    for (const auto *tensors : {&call.inputs, &call.outputs})
        for (const auto &[name, t] : *tensors)
            if (t.device != Device::cpu) return false;
    return call.inputs.at("cs_prev").num_elements() <= kSideBySideMaxState;
}

// Throws where an output of `call` shares a byte with a tensor of `other` (the two run at once).
void check_independent(const OpCall &call, const char *which, const OpCall &other, const char *other_which) {
    auto bytes_of = [](const TensorView &t) {
        const auto *begin = static_cast<const std::byte *>(t.data);
        return std::pair{begin, begin + (t.data ? t.num_bytes() : 0)};
    };
    for (const auto &[name, out] : call.outputs) {
        const auto [begin, end] = bytes_of(out);
        for (const auto *tensors : {&other.inputs, &other.outputs})
            for (const auto &[other_name, t] : *tensors) {
                const auto [other_begin, other_end] = bytes_of(t);
                if (begin < end && other_begin < other_end && out.device == t.device && begin < other_end &&
                    other_begin < end)
                    throw Error("invoke_side_by_side: output '" + name + "' of the " + which + " call (" + call.op +
                                ") overlaps " + (tensors == &other.inputs ? "input '" : "output '") + other_name +
                                "' of the " + other_which + " call (" + other.op +
                                "): expected two independent calls (neither reads or writes what the other writes)");
            }
    }
}

}  // namespace

void invoke_side_by_side(const OpCall &first, const OpCall &second) {
    auto checked = [](const OpCall &c) {
        return bind_by_name(c.op, c.seq_len_max, c.inputs, c.outputs, c.attrs, /*check_tensors=*/true);
    };
    const std::function<void()> a = checked(first), b = checked(second);
    check_independent(first, "first", second, "second");
    check_independent(second, "second", first, "first");
    if (beside_another(first) && beside_another(second) && detail::loop_threads() == 2) {
        detail::run_side_by_side(a, b);
        return;
    }
    a();
    b();
}

}  // namespace blocklstm
