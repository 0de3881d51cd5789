// Compiling, checking and timing the kernels of a tuning run, and its CSV log (tune/tuner.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <regex>
#include <sstream>

#include "tune/tuner.h"

namespace blocklstm::tune {

std::string relevant(const Family &f, const Table &t) {
    std::string s;
    for (const auto &[k, v] : t.knobs) {
        if (std::find(f.knobs.begin(), f.knobs.end(), k) == f.knobs.end()) continue;
        s += (s.empty() ? "" : ",") + k + ":" + std::to_string(v);
    }
    return s;
}

namespace {

// The buffers of one call in the generator's order: inputs bound to its Parameters, outputs
// (a Tuple output's buffers named <output>.<k>) returned as a Realization's buffers.
std::vector<Halide::Buffer<>> bind(Compiled &c, Call &call) {
    std::vector<Halide::Buffer<>> outs;
    for (const auto &info : c.generator->arginfos()) {
        if (info.dir == Halide::Internal::ArgInfoDirection::Input) {
            Halide::Parameter p = c.generator->input_parameter(info.name).at(0);
            if (info.kind == Halide::Internal::ArgInfoKind::Buffer) p.set_buffer(call.buffers.at(info.name));
            else if (p.type() == Halide::Int(32)) p.set_scalar<int32_t>(static_cast<int32_t>(call.scalars.at(info.name)));
            else p.set_scalar<float>(call.scalars.at(info.name));
        } else {
            if (info.types.size() == 1) outs.push_back(call.buffers.at(info.name));
            else
                for (size_t k = 0; k < info.types.size(); ++k)
                    outs.push_back(call.buffers.at(info.name + "." + std::to_string(k)));
        }
    }
    return outs;
}

}  // namespace

Compiled Tuner::compile(const Family &f, const std::string &table, const std::string &knobs,
                        const std::string &autoscheduler) {
    Halide::GeneratorContext context(target_, Halide::AutoschedulerParams(autoscheduler));
    Compiled c;
    c.generator = Halide::Internal::GeneratorRegistry::create(f.generator, context);
    if (!c.generator) throw std::runtime_error("no generator '" + f.generator + "' in this tool");
    Halide::GeneratorParamsMap params = f.params;
    params["tuning_table"] = table;
    params["tuning"] = knobs;
    c.generator->set_generatorparam_values(params);
    c.pipeline = c.generator->build_pipeline();
    if (!target_.has_gpu_feature()) c.pipeline.jit_handlers().custom_do_par_for = ops_pool;
    for (const auto &info : c.generator->arginfos()) {
        if (info.dir != Halide::Internal::ArgInfoDirection::Output) continue;
        if (info.types.size() == 1) c.outputs.push_back(info.name);
        else
            for (size_t k = 0; k < info.types.size(); ++k) c.outputs.push_back(info.name + "." + std::to_string(k));
    }
    return c;
}

Call &Tuner::call(const Family &f, const LstmShape &s) {
    const std::string key = f.name + "@" + s.text();
    auto it = calls_.find(key);
    if (it != calls_.end()) return it->second;
    std::mt19937 rng(o_.seed);
    return calls_.emplace(key, f.make(s, rng)).first->second;
}

// Runs the kernel once (its outputs kept, compared or ignored: `outputs`), then times it:
// the best of at least 5 runs and 0.2 s (a small step kernel runs thousands of times: the best of
// 50 runs of identical kernels came out 20 % apart).
Tuner::Result Tuner::measure(Compiled &c, const Family &f, const LstmShape &s, Outputs outputs) {
    Call &inputs = call(f, s);
    const bool gpu = target_.has_gpu_feature();
    // On a GPU the buffers go to the device on their first call and stay there: only the
    // outputs come back, to be checked, and a time ends when the device is done.
    if (gpu)
        for (auto &[name, b] : inputs.buffers)
            if (!b.has_device_allocation()) b.set_host_dirty(true);
    std::vector<Halide::Buffer<>> outs = bind(c, inputs);
    Halide::Realization r(outs);
    // Every kernel's first run starts from NaN outputs, so an output it leaves unwritten (a call
    // Halide took for a bounds query, a tile that misses an edge) is caught rather than passing
    // on the values an earlier kernel left there. Ignored outputs: the first run only warms up.
    const bool check = outputs != Outputs::ignore;
    for (auto &b : outs) {
        if (!b.data() || !check) continue;
        if (gpu) b.set_device_dirty(false);  // the last timing's values: overwritten here
        Halide::Buffer<float>(b).fill(std::numeric_limits<float>::quiet_NaN());
        if (gpu) {
            b.set_host_dirty(true);
            if (b.copy_to_device(Halide::DeviceAPI::Default_GPU, target_) != 0)
                return {false, 0, "copying an output to the device failed"};
        }
    }
    c.pipeline.realize(r, target_);
    if (gpu && check)
        for (size_t k = 0; k < outs.size(); ++k)
            if (outs[k].data() && outs[k].copy_to_host() != 0)
                return {false, 0, fmt::format("copying output {} from the device failed", c.outputs[k])};
    const std::string key = f.name + "@" + s.text();
    if (outputs == Outputs::store) {
        std::vector<Halide::Buffer<>> copies;
        for (size_t k = 0; k < outs.size(); ++k) {
            bool written = true;
            if (outs[k].data())
                Halide::Buffer<float>(outs[k]).for_each_value([&](float v) { written &= std::isfinite(v); });
            if (!written) return {false, 0, fmt::format("output {} not written (or not finite)", c.outputs[k])};
            copies.push_back(outs[k].copy());
        }
        expected_[key] = std::move(copies);
    } else if (outputs == Outputs::compare) {
        const auto &want = expected_.at(key);
        for (size_t k = 0; k < outs.size(); ++k) {
            // An empty output (b_grad on the CPU) has no memory to compare.
            if (outs[k].number_of_elements() == 0 || !outs[k].data() || !want[k].data()) continue;
            Halide::Buffer<float> got(outs[k]), ref(want[k]);
            OutputError error;
            got.for_each_element([&](const int *pos) { error.add(got(pos), ref(pos)); });
            if (!error.right())
                return {false, 0, fmt::format("wrong output {} (max error {:.3g}, largest value {:.3g})",
                                              c.outputs[k], error.worst, error.scale)};
        }
    }
    double best = 1e30, total = 0;
    for (int rep = 0; rep < 100000 && (rep < 5 || total < 0.2); ++rep) {
        const auto t0 = Clock::now();
        c.pipeline.realize(r, target_);
        if (gpu && outs[0].device_sync() != 0) return {false, 0, "the device failed while timing"};
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::min(best, sec);
        total += sec;
    }
    return {true, best * 1e3, ""};
}

Tuner::Result Tuner::family_time(const Family &f, const LstmShape &s, const Table &t) {
    const Key key{f.name, s.text(), relevant(f, t)};
    const std::string at = f.name + "@" + s.text();
    // The base table's run gives the outputs every candidate is checked against, so it runs in
    // every process, also when the log has its time.
    const bool is_base = key.knobs == relevant(f, base_);
    if (!is_base && !expected_.count(at)) {
        const Result base = family_time(f, s, base_);
        if (!base.ok) return base;
    }
    if (auto it = results_.find(key); it != results_.end() && (!is_base || expected_.count(at))) return it->second;
    const Result r = compile_and_measure(f, s, t, is_base ? Outputs::store : Outputs::compare);
    results_[key] = r;
    log(key, r);
    return r;
}

// measure() of t's kernel for f, compiled on first use; a compile or run error is a failed result.
Tuner::Result Tuner::compile_and_measure(const Family &f, const LstmShape &s, const Table &t, Outputs outputs) {
    try {
        return measure(kernel(f, t), f, s, outputs);
    } catch (const Halide::Error &e) {
        return {false, 0, std::string("Halide: ") + e.what()};
    } catch (const std::exception &e) {
        return {false, 0, e.what()};
    }
}

Compiled &Tuner::kernel(const Family &f, const Table &t) {
    const std::string name = f.name + "|" + relevant(f, t);
    auto it = kernels_.find(name);
    if (it == kernels_.end()) it = kernels_.emplace(name, compile(f, t.table, knob_string(t))).first;
    return it->second;
}

// calls x time of every family at shape s: which 0 = BlockLSTM, 1 = BlockLSTMGrad, 2 = with
// peepholes (its peephole-only kernels added); a time in `fresh` replaces the stored one.
double Tuner::op_ms(const Table &t, const LstmShape &s, int which, const Times &fresh) {
    double ms = 0;
    for (const Family &f : families_) {
        const int n = which == 0 ? f.forward_calls(s) : which == 1 ? f.grad_calls(s) : f.grad_peephole_calls(s);
        if (n == 0) continue;
        ms += n * time_ms({f.name, s.text(), relevant(f, t)}, fresh);
    }
    return ms;
}

// The kernels in which two tables differ, timed side by side: for each such family and shape,
// three alternations of a's kernel and b's (the order swapped each time), the best of each.
// Times taken minutes apart drift with the machine's load by more than the 1 % a decision
// needs (on a shared 2-vCPU machine, candidates estimated 0.956x and 0.972x from such times came
// out 0.998x and 1.001x side by side), so a move is kept, and the final speedup reported, only
// from times taken together. nullopt when interrupted or a kernel failed (said why).
std::optional<Tuner::Times> Tuner::side_by_side(const Table &a, const Table &b) {
    constexpr int kRounds = 3;
    Times fresh;
    for (const Family &f : families_) {
        if (relevant(f, a) == relevant(f, b)) continue;  // the same kernel
        for (const LstmShape &s : shapes_) {
            for (int round = 0; round < 2 * kRounds; ++round) {
                if (interrupted) return std::nullopt;
                const Table &t = (round % 2 == round / 2 % 2) ? a : b;  // a b, b a, a b, ...
                const Key key{f.name, s.text(), relevant(f, t)};
                const Result r = compile_and_measure(f, s, t, Outputs::ignore);
                if (!r.ok) {
                    fmt::print("        side by side: {} at {} failed ({})\n", f.name, s.text(), r.why);
                    return std::nullopt;
                }
                const auto it = fresh.find(key);
                fresh[key] = it == fresh.end() ? r.ms : std::min(it->second, r.ms);
            }
        }
    }
    return fresh;
}

// b's time over a's (geometric mean over the shapes of BlockLSTM + BlockLSTMGrad + its peephole
// kernels), from the times in `fresh` where it has them.
double Tuner::relative(const Table &a, const Table &b, const Times &fresh) {
    double log_sum = 0;
    for (const LstmShape &s : shapes_) {
        const double ta = op_ms(a, s, 0, fresh) + op_ms(a, s, 1, fresh) + op_ms(a, s, 2, fresh);
        const double tb = op_ms(b, s, 0, fresh) + op_ms(b, s, 1, fresh) + op_ms(b, s, 2, fresh);
        log_sum += std::log(tb / ta);
    }
    return std::exp(log_sum / shapes_.size());
}

// The geometric mean over the shapes of (BlockLSTM + BlockLSTMGrad + its peephole kernels)
// estimated from the kernels, relative to the base table; nullopt if any kernel failed.
std::optional<double> Tuner::cost(const Table &t, const std::string &label) {
    if (const std::string broken = rule_broken(t); !broken.empty()) return std::nullopt;
    // A later pass of the descent meets tables it has costed: their cost again, not a new line.
    if (auto it = costs_.find(knob_string(t)); it != costs_.end()) return it->second;
    ++tried_;
    for (const Family &f : families_) {
        for (const LstmShape &s : shapes_) {
            if (interrupted) return std::nullopt;
            const Result r = family_time(f, s, t);
            if (!r.ok) {
                fmt::print("  {:<44} discarded: {} at {} ({})\n", label, f.name, s.text(), r.why);
                return std::nullopt;
            }
        }
    }
    const double c = relative(base_, t, {});
    costs_[knob_string(t)] = c;
    fmt::print("  [{:>3}] {:<44} {:.3f}x the base time   best {:.3f}x   {:.1f} min left\n", tried_, label, c,
               best_cost_, minutes_left());
    std::fflush(stdout);
    return c;
}

void Tuner::load_log() {
    if (o_.fresh) return;
    std::ifstream in(o_.log);
    std::string line;
    int loaded = 0, verdicts = 0, line_number = 0;
    bool threads_seen = false;
    // A time or ratio of the log: a positive finite number, or an error naming the file and line.
    auto number = [&](const std::string &text) {
        double v = 0;
        size_t used = 0;
        try {
            v = std::stod(text, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != text.size() || !std::isfinite(v) || v <= 0)
            throw std::invalid_argument(fmt::format("--log: {} line {}: '{}' is not a positive number (a damaged log: give "
                                                    "another --log, or --fresh)", o_.log, line_number, text));
        return v;
    };
    while (std::getline(in, line)) {
        ++line_number;
        // Times at another thread count are not this run's (the kernels' parallel loops).
        if (line.rfind("# threads=", 0) == 0) {
            threads_seen = true;
            if (line.substr(10) != std::to_string(o_.threads))
                throw std::invalid_argument(fmt::format("--log: {} holds times at --threads {}, not {} (give another "
                                                        "--log, or --fresh)", o_.log, line.substr(10), o_.threads));
            continue;
        }
        // Times from another target (a CUDA run resuming an OpenCL check's log) mean nothing here.
        if (line.rfind("# target=", 0) == 0 && line.substr(9) != target_.to_string())
            throw std::invalid_argument("--log: " + o_.log + " holds times for " + line.substr(9) + ", not " +
                                        target_.to_string() + " (give another --log, or --fresh)");
        // A side-by-side verdict: its scope, the best's and the candidate's knobs, the candidate's
        // time over the best's.
        std::smatch m;
        if (std::regex_match(line, m, std::regex("# side_by_side,\"([^\"]*)\",\"([a-z_0-9:,]+)\",\"([a-z_0-9:,]+)\",([0-9.eE+-]+)"))) {
            if (m[1] == verdict_scope()) {
                verdicts_[{m[2], m[3]}] = {number(m[4]), false};
                ++verdicts;
            }
            continue;
        }
        // family,shape,knobs,status,ms,why: the shape and knobs are quoted (they hold commas)
        if (!std::regex_match(line, m, std::regex("([a-z_0-9]+),\"([0-9,]+)\",\"([a-z_0-9:,]+)\",(ok|failed),([0-9.eE+-]+),(.*)")))
            continue;
        if (!threads_seen)
            throw std::invalid_argument("--log: " + o_.log + " does not say its thread count (written by an older "
                                        "blocklstm tune): give another --log, or --fresh");
        Result r{m[4] == "ok", m[4] == "ok" ? number(m[5]) : 0.0, m[4] == "ok" ? "" : m[6].str()};
        results_[{m[1], m[2], m[3]}] = r;
        ++loaded;
    }
    if (loaded) fmt::print("Resuming: {} measurements and {} side-by-side verdicts from {}\n", loaded, verdicts, o_.log);
}

std::ofstream &Tuner::log_file() {
    if (!log_.is_open()) {
        std::error_code ec;
        const bool existed = std::filesystem::file_size(o_.log, ec) > 0 && !ec && !o_.fresh;  // an empty file gets the header
        log_.open(o_.log, existed ? std::ios::app : std::ios::trunc);
        if (!log_) throw std::runtime_error("--log: cannot write " + o_.log + " (" + std::strerror(errno) + ")");
        if (!existed)
            log_ << "# target=" << target_.to_string() << "\n# threads=" << o_.threads
                 << "\nfamily,shape,knobs,status,ms,why\n";
    }
    return log_;
}

void Tuner::log(const Key &k, const Result &r) {
    if (!o_.autoscheduler.empty()) return;  // a child's results are its parent's to log
    std::string why = r.why;
    std::replace(why.begin(), why.end(), '\n', ' ');
    log_file() << k.family << ",\"" << k.shape << "\",\"" << k.knobs << "\"," << (r.ok ? "ok" : "failed") << ","
               << fmt::format("{:.6g}", r.ms) << "," << why << std::endl;
}

void Tuner::log_verdict(const std::pair<std::string, std::string> &pair, double ratio) {
    log_file() << "# side_by_side,\"" << verdict_scope() << "\",\"" << pair.first << "\",\"" << pair.second << "\"," << fmt::format("{:.6g}", ratio)
               << std::endl;
}

// Times the tuned table's kernels side by side with the base's and prints both per family and
// per op; returns the tuned table's time over the base's, so timed (nullopt when interrupted:
// the stored times are printed).
std::optional<double> Tuner::report(const Table &best) {
    Times fresh;
    const bool differs = std::any_of(families_.begin(), families_.end(),
                                     [&](const Family &f) { return relevant(f, base_) != relevant(f, best); });
    if (differs && !interrupted && !in_ops()) {
        fmt::print("\nTiming the tuned kernels side by side with the base ones ...\n");
        std::fflush(stdout);
        fresh = side_by_side(base_, best).value_or(Times{});
    }
    fmt::print("\nPer family, the tuned table against the base one (best of >= 5 runs{}, ms):\n",
               fresh.empty() ? "" : ", side by side");
    fmt::print("  {:<24} {:<16} {:>10} {:>10} {:>8}\n", "family", "T,B,I,H", "base", "tuned", "speedup");
    for (const Family &f : families_) {
        for (const LstmShape &s : shapes_) {
            const double b = time_ms({f.name, s.text(), relevant(f, base_)}, fresh);
            const double t = time_ms({f.name, s.text(), relevant(f, best)}, fresh);
            fmt::print("  {:<24} {:<16} {:>10.3f} {:>10.3f} {:>7.3f}x\n", f.name, s.text(), b, t, b / t);
        }
    }
    if (best.gpu)  // cuBLAS's products and the weights' transpose are not tuned, so not timed
        fmt::print("\nThe tuned kernels' part of each op (calls x time; cuBLAS's products and the transpose left out):\n");
    else
        fmt::print("\nEnd to end, estimated as the sum of the kernels each op runs (calls x time):\n");
    fmt::print("  {:<16} {:<30} {:<30} {}\n", "T,B,I,H", "BlockLSTM", "BlockLSTMGrad",
               "BlockLSTMGrad peephole");
    for (const LstmShape &s : shapes_) {
        std::string cols;
        for (int which = 0; which < 3; ++which) {
            const double b = op_ms(base_, s, which, fresh), t = op_ms(best, s, which, fresh);
            cols += fmt::format("{:<30} ", b > 0 ? fmt::format("{:.2f} -> {:.2f} ms {:.3f}x", b, t, b / t) : "-");
        }
        fmt::print("  {:<16} {}\n", s.text(), cols);
    }
    if (in_ops()) {  // the time loops read knobs too (one_thread_forward_cells): any knob that differs
        if (knob_string(base_) == knob_string(best) || interrupted) return std::nullopt;
        fmt::print("\nIn the ops, with the tuned table's kernels and knobs and with the base's in pairs of calls "
                   "(least times, ms; speedup: base / tuned from the pairs' medians) ...\n");
        std::fflush(stdout);
        const std::optional<OpsVerdict> v = ops_side_by_side(base_, best);
        if (!v) return std::nullopt;
        fmt::print("  {:<16} {:<30} {:<30} {}\n", "T,B,I,H", "BlockLSTM", "BlockLSTMGrad", "BlockLSTMGrad peephole");
        for (const LstmShape &s : shapes_) {
            std::string cols;
            for (int k = 0; k < kOps; ++k)
                cols += fmt::format("{:<30} ", fmt::format("{:.2f} -> {:.2f} ms {:.3f}x", v->a_ms.at(s.text())[k],
                                                           v->b_ms.at(s.text())[k], 1 / v->ratio.at(s.text())[k]));
            fmt::print("  {:<16} {}\n", s.text(), cols);
        }
        return v->relative;
    }
    if (fresh.empty()) return std::nullopt;
    return relative(base_, best, fresh);
}

}  // namespace blocklstm::tune
