// The tuner's verdicts in the ops (tune/tuner.h): a table's kernels JIT-compiled and swapped into
// the library (runtime/src/kernel_overrides.h), its knobs with them, and BlockLSTM and
// BlockLSTMGrad timed as a user calls them, two tables alternated. A kernel timed alone finds its
// operands warm from its run before; in the ops a batched product finds what the kernel before it
// left in the caches, and neither timing every kernel warm nor with the caches evicted agreed
// with the ops on the moves that mattered (docs/tuning.md, 2026-11-25 and 2026-12-01).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/src/kernel_overrides.h"
#include "tune/tuner.h"

namespace blocklstm::tune {

int ops_pool(Halide::JITUserContext *user_context, int (*task)(Halide::JITUserContext *, int, uint8_t *), int min,
             int size, uint8_t *closure) {
    return detail::ops_do_par_for(user_context, reinterpret_cast<halide_task_t>(task), min, size, closure);
}

namespace {

// Uniform in [-scale, scale), float32 (the tuner tunes the float32 kernels).
Tensor random_tensor(std::mt19937 &rng, const std::vector<int64_t> &shape, float scale) {
    Tensor t(DType::f32, shape);
    std::uniform_real_distribution<float> u(-scale, scale);
    float *p = t.data_as<float>();
    for (int64_t k = 0; k < t.num_elements(); ++k) p[k] = u(rng);
    return t;
}

std::vector<float> values(const TensorView &v) {
    const float *p = static_cast<const float *>(v.data);
    return std::vector<float>(p, p + v.num_elements());
}

}  // namespace

Tuner::OpBench &Tuner::op_bench(const LstmShape &s) {
    auto it = op_benches_.find(s.text());
    if (it != op_benches_.end()) return it->second;
    OpBench &bench = op_benches_[s.text()];
    std::mt19937 rng(o_.seed);
    const OpDims dims{s.T, s.B, s.I, s.H};
    // As `blocklstm bench` draws them: weights ~ 1/sqrt(I+H), peepholes, bias and the output
    // gradients 0.1, h_prev 0.9, x 1.
    auto scale = [&](const std::string &name) {
        if (name == "w") return 1.0f / std::sqrt(static_cast<float>(s.I + s.H));
        if (name == "wci" || name == "wcf" || name == "wco" || name == "b" || name == "cs_grad" || name == "h_grad")
            return 0.1f;
        return name == "h_prev" ? 0.9f : 1.0f;
    };
    auto add = [&](Tensor t) -> TensorView {
        bench.keep.push_back(std::move(t));
        return bench.keep.back().view();
    };
    const OpInfo &forward = op_info("BlockLSTM"), &grad = op_info("BlockLSTMGrad");
    std::map<std::string, TensorView> tensors, activations;
    for (const OpArg &a : forward.inputs) tensors[a.name] = add(random_tensor(rng, a.dims(dims), scale(a.name)));
    for (const OpArg &a : forward.outputs) activations[a.name] = add(Tensor(DType::f32, a.dims(dims)));
    // Computed once with the library's own kernels: the activations BlockLSTMGrad reads.
    const std::function<void()> run_forward = bind_op(forward.name, s.T, tensors, activations);
    run_forward();
    std::map<std::string, TensorView> grad_inputs;
    for (const OpArg &a : grad.inputs)
        grad_inputs[a.name] = tensors.count(a.name)       ? tensors.at(a.name)
                              : activations.count(a.name) ? activations.at(a.name)
                                                          : add(random_tensor(rng, a.dims(dims), scale(a.name)));
    // The forward writes outputs of its own, so that the grad calls' activations stay as computed.
    std::map<std::string, TensorView> forward_outputs;
    for (const OpArg &a : forward.outputs) forward_outputs[a.name] = add(Tensor(DType::f32, a.dims(dims)));
    bench.ops[0] = {"BlockLSTM", bind_op(forward.name, s.T, tensors, forward_outputs), {}, {}};
    for (const auto &[name, v] : forward_outputs) bench.ops[0].outputs.push_back(v);
    for (int peephole = 0; peephole < 2; ++peephole) {
        OpAttrs attrs;
        attrs.use_peephole = peephole == 1;
        std::map<std::string, TensorView> grads;
        for (const OpArg &a : grad.outputs) grads[a.name] = add(Tensor(DType::f32, a.dims(dims)));
        OpBench::Op &op = bench.ops[1 + peephole];
        op = {peephole ? "BlockLSTMGrad peephole" : "BlockLSTMGrad", bind_op(grad.name, s.T, grad_inputs, grads, attrs),
              {}, {}};
        for (const auto &[name, v] : grads) op.outputs.push_back(v);
    }
    for (OpBench::Op &op : bench.ops) {  // what the library's own kernels write
        op.call();
        for (const TensorView &v : op.outputs) op.expected.push_back(values(v));
    }
    return bench;
}

void Tuner::install(const Table &t) {
    if (op_kernels_.empty()) op_kernels_ = cpu_op_kernels();
    for (const Family &f : op_kernels_) {
        const std::string key = f.name + "|" + relevant(f, t);
        auto it = replacements_.find(key);
        if (it == replacements_.end()) {
            Halide::GeneratorContext context(target_);
            auto generator = Halide::Internal::GeneratorRegistry::create(f.generator, context);
            if (!generator) throw std::runtime_error("no generator '" + f.generator + "' in this tool");
            Halide::GeneratorParamsMap params = f.params;
            params["tuning_table"] = t.table;
            params["tuning"] = knob_string(t);
            generator->set_generatorparam_values(params);
            Halide::JITHandlers handlers;
            handlers.custom_do_par_for = ops_pool;
            Halide::Callable callable = generator->compile_to_callable(&handlers);
            // The AOT kernel's arguments: every input's parameters, then every output's buffers.
            int arguments = 0;
            for (const auto &info : generator->arginfos())
                arguments += info.dir == Halide::Internal::ArgInfoDirection::Input
                                 ? static_cast<int>(generator->input_parameter(info.name).size())
                                 : static_cast<int>(info.types.size());
            // Called as the AOT argv function: the JIT one takes its user context first.
            constexpr int kMaxArguments = 63;  // the most a CPU kernel takes now: 19 (the step kernels)
            if (arguments > kMaxArguments)
                throw std::runtime_error(f.name + " takes " + std::to_string(arguments) + " arguments, more than " +
                                         std::to_string(kMaxArguments));
            auto code = [callable, arguments](void **args) {
                Halide::JITUserContext context;
                Halide::JITUserContext *user_context = &context;
                const void *argv[kMaxArguments + 1];
                argv[0] = &user_context;
                std::memcpy(&argv[1], args, sizeof(void *) * arguments);
                return callable.call_argv_fast(arguments + 1, argv);
            };
            it = replacements_.emplace(key, Replacement{arguments, code}).first;
        }
        detail::override_cpu_kernel(f.kernel, f.peephole, it->second.arguments, it->second.code);
    }
    detail::override_cpu_knobs(knob_string(t));
}

namespace {

// Whether outputs match the library's own (`expected`; OutputError). Says what is wrong where not.
bool outputs_right(const std::string &op, const std::string &shape, const std::vector<TensorView> &outputs,
                   const std::vector<std::vector<float>> &expected) {
    for (std::size_t v = 0; v < outputs.size(); ++v) {
        const std::vector<float> got = values(outputs[v]);
        OutputError error;
        for (std::size_t e = 0; e < got.size(); ++e) error.add(got[e], expected[v][e]);
        if (!error.right()) {
            fmt::print("        in the ops: {} at {} wrong (its output {}: max error {:.3g}, largest value {:.3g})\n",
                       op, shape, v, error.worst, error.scale);
            return false;
        }
    }
    return true;
}

}  // namespace

std::optional<Tuner::OpsVerdict> Tuner::ops_side_by_side(const Table &a, const Table &b) {
    // Calls in pairs, a b then b a, the kernels swapped between them: the VM's speed drifts by 5-15 %
    // over seconds, more than a move changes, while the two calls of a pair meet the same speed.
    // At least kPairs pairs and kSeconds of them per op and shape (a 2-vCPU VM: 6 pairs of
    // BlockLSTMGrad at 100,64,512, 150 at 50,8,128).
    constexpr int kPairs = 6;
    constexpr double kSeconds = 0.5;
    OpsVerdict verdict;
    struct Restore {
        ~Restore() { detail::clear_overrides(); }
    } restore;
    double log_sum = 0;
    for (const LstmShape &s : shapes_) {
        OpBench *bench = nullptr;
        try {
            bench = &op_bench(s);
        } catch (const std::exception &e) {
            fmt::print("        in the ops: the inputs at {} failed ({})\n", s.text(), e.what());
            return std::nullopt;
        }
        std::array<double, kOps> &a_ms = verdict.a_ms[s.text()], &b_ms = verdict.b_ms[s.text()],
                                 &ratio = verdict.ratio[s.text()];
        try {
            for (int k = 0; k < kOps; ++k) {
                OpBench::Op &op = bench->ops[k];
                for (const Table *t : {&a, &b}) {  // a warm-up each, whose outputs are checked once
                    install(*t);
                    op.call();
                    const std::string checked = knob_string(*t) + "@" + s.text() + "@" + op.label;
                    if (!op_checked_.count(checked)) {
                        if (!outputs_right(op.label, s.text(), op.outputs, op.expected)) return std::nullopt;
                        op_checked_[checked] = true;
                    }
                }
                a_ms[k] = b_ms[k] = std::numeric_limits<double>::infinity();
                // By the order of the pair (a first, b first): the second call of a pair runs at
                // another speed than the first (bench/builds_ab.cpp), so each order's median
                // ratio is taken apart and their geometric mean is the op's.
                std::vector<double> ratios[2];
                double spent = 0;
                for (int pair = 0; pair < kPairs || spent < kSeconds; ++pair) {
                    if (interrupted) return std::nullopt;
                    double ms[2];
                    for (int second = 0; second < 2; ++second) {
                        const int which = (pair + second) % 2;  // 0: a, 1: b
                        install(which == 0 ? a : b);
                        const auto t0 = Clock::now();
                        op.call();
                        ms[which] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                    }
                    a_ms[k] = std::min(a_ms[k], ms[0]);
                    b_ms[k] = std::min(b_ms[k], ms[1]);
                    ratios[pair % 2].push_back(ms[1] / ms[0]);
                    spent += (ms[0] + ms[1]) / 1e3;
                }
                auto median = [](std::vector<double> &v) {
                    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
                    return v[v.size() / 2];
                };
                ratio[k] = std::sqrt(median(ratios[0]) * median(ratios[1]));
            }
        } catch (const std::exception &e) {
            fmt::print("        in the ops at {} failed ({})\n", s.text(), e.what());
            return std::nullopt;
        }
        double ta = 0, tb = 0;
        for (int k = 0; k < kOps; ++k) {
            ta += a_ms[k];
            tb += a_ms[k] * ratio[k];
        }
        log_sum += std::log(tb / ta);
    }
    verdict.relative = std::exp(log_sum / static_cast<double>(shapes_.size()));
    return verdict;
}

std::optional<double> Tuner::verdict(const Table &a, const Table &b) {
    if (in_ops()) {
        // A gain is timed twice and the lesser counts: one move timed three times this way came out
        // 0.998-1.010x (2-vCPU VM), and a search kept a move at 0.990x that its final report timed
        // at 0.997x (docs/tuning.md, 2026-12-08).
        std::optional<OpsVerdict> v = ops_side_by_side(a, b);
        if (!v || !improves_by_margin(v->relative)) return v ? std::optional(v->relative) : std::nullopt;
        const double first = v->relative;
        v = ops_side_by_side(a, b);
        if (!v) return std::nullopt;
        return std::max(first, v->relative);
    }
    const std::optional<Times> fresh = side_by_side(a, b);
    if (!fresh) return std::nullopt;
    return relative(a, b, *fresh);
}

}  // namespace blocklstm::tune
