// `blocklstm bench <OpName>`: times one op on random inputs of a given shape.
//
// The grad ops are timed on activations that the matching forward op computed once beforehand
// (BlockLSTM -> BlockLSTMGrad, BlockLSTMV2 -> BlockLSTMGradV2, LSTMBlockCell -> LSTMBlockCellGrad),
// with random cs_grad / h_grad. Every input and output is allocated and filled before the clock
// starts; each timed call is one library call into caller-owned outputs (the allocation-free
// overload), measured with steady_clock around the call.
//
// FLOP model (docs/performance.md; GEMM FLOPs only, L = T for the sequence ops, L = 1 for the cell ops):
//   forward  (BlockLSTM, BlockLSTMV2, LSTMBlockCell)  2·L·B·4H·(I+H)          the gate GEMM
//   backward (BlockLSTMGrad, BlockLSTMGradV2)         2·L·B·4H·H               recurrent grad
//                                                   + 2·L·B·4H·I               input grad
//                                                   + 2·L·B·4H·(I+H)           weight grad
//   LSTMBlockCellGrad does no GEMM (TF's op stops at the gate gradients dicfo): 0 FLOPs, and the
//   tool reports gflops=0 for it.
//
// Output (stdout): a header, the warm-up, the median / min / max, and as the very last line
//   median_ms=<float> gflops=<float>
// Progress of long runs (expected to take more than 2 s) goes to stderr.
#include <blocklstm/blocklstm.h>
#include <blocklstm/ops.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "progress.h"

namespace blocklstm::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}


Tensor random_tensor(Rng &rng, DType dtype, std::vector<int64_t> shape, float scale) {
    Tensor t(dtype, std::move(shape));
    const int64_t n = t.num_elements();
    if (dtype == DType::f32) {
        float *p = t.data_as<float>();
        for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(rng.uniform(-scale, scale));
    } else {
        uint16_t *p = t.data_as<uint16_t>();
        for (int64_t k = 0; k < n; ++k) {
            const auto v = static_cast<float>(rng.uniform(-scale, scale));
            p[k] = dtype == DType::bf16 ? float_to_bfloat16(v) : float_to_half(v);
        }
    }
    return t;
}

bool is_cell_op(const std::string &op) { return op == "LSTMBlockCell" || op == "LSTMBlockCellGrad"; }
bool is_grad_op(const std::string &op) { return op.find("Grad") != std::string::npos; }

// --lengths: the seq_lengths of a call, int64 [B] in host memory.
Tensor seq_lengths_of(const BenchOptions &o) {
    Tensor t(DType::i64, {o.batch});
    Rng rng(o.seed ^ 0x5eedULL);
    const int64_t shortest = (o.time + 3) / 4;
    for (int64_t b = 0; b < o.batch; ++b)
        t.data_as<int64_t>()[b] = o.lengths == "full" ? o.time
                                                      : std::min(o.time, shortest + static_cast<int64_t>(rng.uniform() *
                                                                                     static_cast<double>(o.time - shortest + 1)));
    // sorted: the spread lengths longest first, the order a PackedSequence's rows come in (the
    // op then runs them where they are, with no reordering of its own)
    if (o.lengths == "sorted") std::sort(t.data_as<int64_t>(), t.data_as<int64_t>() + o.batch, std::greater<>());
    return t;
}

// The row-steps a call runs: T*B, or the sum of --lengths.
double row_steps(const BenchOptions &o) {
    if (o.lengths.empty() || is_cell_op(o.op)) return static_cast<double>(o.time) * static_cast<double>(o.batch);
    const Tensor t = seq_lengths_of(o);
    double n = 0;
    for (int64_t b = 0; b < o.batch; ++b) n += static_cast<double>(t.data_as<int64_t>()[b]);
    return n;
}

// The op's FLOPs per call under the docs/performance.md model (see the top of this file), with
// L*B the row-steps run.
double flops_of(const BenchOptions &o) {
    const double L = is_cell_op(o.op) ? 1.0 : row_steps(o) / static_cast<double>(o.batch);
    const double B = static_cast<double>(o.batch), I = static_cast<double>(o.input),
                 H = static_cast<double>(o.cell);
    if (o.op == "LSTMBlockCellGrad") return 0.0;
    const double gates = 2.0 * L * B * 4.0 * H;
    if (is_grad_op(o.op)) return gates * H + gates * I + gates * (I + H);
    return gates * (I + H);
}

std::string flop_formula(const std::string &op) {
    if (op == "LSTMBlockCellGrad") return "no GEMM: counted as 0";
    const std::string L = is_cell_op(op) ? "1" : "T";
    if (is_grad_op(op))
        return "2*" + L + "*B*4H*H + 2*" + L + "*B*4H*I + 2*" + L + "*B*4H*(I+H)";
    return "2*" + L + "*B*4H*(I+H)";
}

// The op under test with all its tensors, ready to be called any number of times.
struct Bench {
    std::deque<Tensor> keep;  // owns everything the closure refers to (stable addresses)
    std::function<void()> call;
    OpCall args;  // the call's arguments (--side-by-side runs it through invoke_side_by_side)
};

Bench make_bench(const BenchOptions &o, Device dev) {
    const OpInfo &op = op_info(o.op);
    const OpInfo &forward_op = op.gradient ? op_info(op.forward_op) : op;
    const OpDims dims{o.time, o.batch, o.input, o.cell};
    Rng rng(o.seed);
    // Inputs ~ U(-scale, scale): weights scaled by 1/sqrt(I+H), the peephole weights, the bias
    // and the output gradients by 0.1, h_prev by 0.9.
    auto scale = [&](const std::string &name) {
        if (name == "w") return 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(o.input + o.cell, 1)));
        if (name == "wci" || name == "wcf" || name == "wco" || name == "b" || name == "cs_grad" || name == "h_grad")
            return 0.1f;
        return name == "h_prev" ? 0.9f : 1.0f;
    };

    Bench bench;
    // Every tensor on the benchmarked device (random data is made on the host and copied).
    auto add = [&bench, dev](Tensor t) -> TensorView {
        if (t.device() != dev) {
            Tensor d(t.dtype(), t.shape(), dev);
            copy(t, d);
            t = d;
        }
        bench.keep.push_back(std::move(t));
        return bench.keep.back().view();
    };
    OpAttrs attrs;
    attrs.use_peephole = o.use_peephole;
    std::map<std::string, TensorView> lengths;  // seq_lengths (host memory), or none
    if (!o.lengths.empty()) {
        bench.keep.push_back(seq_lengths_of(o));
        lengths["seq_lengths"] = bench.keep.back().view();
    }

    // The forward op's inputs and outputs: the op under test, or the activations a grad op takes.
    std::map<std::string, TensorView> tensors, outputs;
    for (const OpArg &a : forward_op.inputs) tensors[a.name] = add(random_tensor(rng, o.dtype, a.dims(dims), scale(a.name)));
    // --inference: cs and h alone, and on the CPU a sequence op's cs only each row's final state [B, H]
    const bool final_cs = o.inference && forward_op.sequence && o.device == "cpu";
    for (const OpArg &a : forward_op.outputs)
        if (final_cs && a.name == "cs") outputs[a.name] = add(Tensor(o.dtype, {o.batch, o.cell}));
        else if (!o.inference || a.name == "cs" || a.name == "h") outputs[a.name] = add(Tensor(o.dtype, a.dims(dims)));
    tensors.insert(lengths.begin(), lengths.end());
    const std::function<void()> forward = bind_op(forward_op.name, o.time, tensors, outputs, attrs);
    if (!op.gradient) {
        bench.call = forward;
        bench.args = {forward_op.name, o.time, tensors, outputs, attrs};
        return bench;
    }

    forward();  // the activations the grad op consumes
    tensors.insert(outputs.begin(), outputs.end());
    std::map<std::string, TensorView> inputs(lengths), grads;
    for (const OpArg &a : op.inputs) {
        if (!tensors.count(a.name)) tensors[a.name] = add(random_tensor(rng, o.dtype, a.dims(dims), scale(a.name)));
        inputs[a.name] = tensors.at(a.name);
    }
    for (const OpArg &a : op.outputs) grads[a.name] = add(Tensor(o.dtype, a.dims(dims)));
    bench.call = bind_op(op.name, o.time, inputs, grads, attrs);
    bench.args = {op.name, o.time, inputs, grads, attrs};
    return bench;
}

// Bytes of every tensor make_bench allocates (a little over, for the cell ops).
double bytes_needed(const BenchOptions &o) {
    const double T = is_cell_op(o.op) ? 1.0 : static_cast<double>(o.time);
    const double B = static_cast<double>(o.batch), I = static_cast<double>(o.input),
                 H = static_cast<double>(o.cell);
    const double grad = is_grad_op(o.op) ? 1.0 : 0.0;
    const double elems = (1 + grad) * (T * B * I + 2 * B * H + (I + H) * 4 * H + 7 * H) +
                         7 * T * B * H + grad * (2 * T * B * H + 4 * B * H);
    return elems * static_cast<double>(size_of(o.dtype));
}

std::string gib(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}


// Progress of the timed loop on stderr: one updating line on a terminal, otherwise a line at most
// once a second. It shows from the start when the warm-up predicts a run over 2 s, and otherwise
// from the moment a run passes 2 s (the prediction misses when calls speed up after the warm-up).
class Progress {
public:
    Progress(int total, bool predicted_long)
        : total_(total), enabled_(predicted_long), start_(Clock::now()), line_(stderr, 100.0, 1000.0) {}

    void update(int done) {
        const double elapsed = ms_between(start_, Clock::now()) / 1000.0;
        if (!enabled_ && elapsed < 2.0) return;
        enabled_ = true;
        const double left = done > 0 ? elapsed * (total_ - done) / done : 0.0;
        char buf[160];
        std::snprintf(buf, sizeof buf, "bench: rep %d/%d  %3d%%  %.1f s elapsed, ~%.1f s left", done, total_,
                      done * 100 / total_, elapsed, left);
        line_.show(buf, false, done == total_);
    }

private:
    int total_;
    bool enabled_;
    Clock::time_point start_;
    ProgressLine line_;
};

}  // namespace

int bench(const BenchOptions &o) {
    const Device dev = check_device(o.device);  // the same check as `run`
    // The library's own limit, before gigabytes are filled with random numbers only to be refused.
    const OpInfo &op = op_info(o.op);
    const OpDims dims{o.time, o.batch, o.input, o.cell};
    for (const OpInfo *info : {&op, op.gradient ? &op_info(op.forward_op) : &op})
        for (const std::vector<OpArg> *args : {&info->inputs, &info->outputs})
            for (const OpArg &a : *args) {
                double elements = 1;
                for (int64_t d : a.dims(dims)) elements *= static_cast<double>(d);
                if (elements > INT32_MAX)
                    throw CliError(fmt::format("bench: {} '{}' of {} would have {:.0f} elements: expected at most {} "
                                               "(the kernels index with int32; lower --time, --batch, --input or --cell)",
                                               info->name, a.name, a.shape, elements, INT32_MAX));
            }
    const double need = bytes_needed(o) * (o.against_padded || o.side_by_side ? 2.0 : 1.0);
    const double have = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (have > 0 && need > have)
        throw CliError("bench: the tensors of this shape need " + gib(need) + " GiB, more than this machine's " +
                       gib(have) + " GiB of memory");
    const bool cell = is_cell_op(o.op);
    if (cell && !o.lengths.empty())
        throw CliError("bench: --lengths is " + o.lengths + ": expected none for " + o.op +
                       " (seq_lengths are the sequence ops')");
    if (o.against_padded && o.lengths.empty())
        throw CliError("bench: --against-padded is given without --lengths: expected --lengths full, spread or sorted "
                       "(the padded call is the one without them)");
    if (o.inference && is_grad_op(o.op))
        throw CliError("bench: --inference is for the forward ops: " + o.op + " needs all seven activations");
    if (o.side_by_side && dev != Device::cpu)
        throw CliError("bench: --side-by-side is given with --device " + o.device +
                       ": expected cpu (a CUDA call runs on its thread's stream, so two run one after the other)");
    if (o.side_by_side && o.against_padded)
        throw CliError("bench: --side-by-side is given with --against-padded: expected one of them (each alternates "
                       "the timed call with another)");
    const double flops = flops_of(o) * (o.side_by_side ? 2.0 : 1.0);

    std::string shape = cell ? "(one step) " : "T=" + std::to_string(o.time) + " ";
    shape += "B=" + std::to_string(o.batch) + " I=" + std::to_string(o.input) +
             " H=" + std::to_string(o.cell);
    const unsigned cores = std::thread::hardware_concurrency();
    const std::string threads = o.threads > 0 ? std::to_string(o.threads)
                                              : "one per core (" + std::to_string(cores) + ")";
    std::printf("blocklstm bench %s  %s  %s  use_peephole=%s\n", o.op.c_str(), to_string(o.dtype),
                shape.c_str(), o.use_peephole ? "true" : "false");
    if (!o.lengths.empty() && !cell)
        std::printf("  seq_lengths %s: %.0f of %lld row-steps run\n",
                    o.lengths == "full"     ? "full (every row T)"
                    : o.lengths == "spread" ? "spread uniformly over [ceil(T/4), T]"
                                            : "spread uniformly over [ceil(T/4), T], longest first",
                    row_steps(o),
                    static_cast<long long>(o.time * o.batch));
    if (o.against_padded)
        std::printf("  each timed call followed by the same call padded (no seq_lengths, every row T steps)\n");
    if (o.side_by_side)
        std::printf("  each timed call two calls side by side (invoke_side_by_side; inputs from seeds %llu and %llu), "
                    "followed by the same two one after the other\n",
                    static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed + 1));
    if (dev == Device::cuda)
        std::printf("  device cuda (%s; GEMMs: %s; steps: %s; graphs: %s), each call timed to the end of its GPU work\n",
                    cuda_device_name().c_str(),
                    cuda_gemm() == CudaGemm::cublas && cublas_available() ? "cuBLAS" : "Halide",
                    cuda_step() == CudaStep::split ? "split" : "fused", cuda_graphs() ? "on" : "off");
    else
        std::printf("  device %s (CPU target %s%s), threads %s\n", o.device.c_str(),
                    cpu_target_in_use().c_str(), cpu_target_pinned() ? ", pinned" : "", threads.c_str());
    if (is_grad_op(o.op))
        std::printf("  inputs: activations from one %s call, random cs_grad/h_grad (seed %llu)\n",
                    o.op == "LSTMBlockCellGrad" ? "LSTMBlockCell"
                    : o.op == "BlockLSTMGradV2" ? "BlockLSTMV2"
                                                : "BlockLSTM",
                    static_cast<unsigned long long>(o.seed));
    std::fflush(stdout);

    // other: the call each timed call alternates with: --against-padded's call without seq_lengths,
    // or --side-by-side's two calls one after the other.
    Bench b, other, second;
    try {
        b = make_bench(o, dev);
        if (o.against_padded) {
            BenchOptions without = o;
            without.lengths.clear();
            other = make_bench(without, dev);
        }
        if (o.side_by_side) {
            BenchOptions next = o;
            ++next.seed;
            second = make_bench(next, dev);
            other.call = [&b, &second] {
                invoke(b.args.op, b.args.seq_len_max, b.args.inputs, b.args.outputs, b.args.attrs);
                invoke(second.args.op, second.args.seq_len_max, second.args.inputs, second.args.outputs,
                       second.args.attrs);
            };
            b.call = [&b, &second] { invoke_side_by_side(b.args, second.args); };
        }
        for (Bench *each : {&b, &other}) {
            if (dev == Device::cuda && each->call) {  // a call ends when its GPU work does
                each->call = [call = each->call] {
                    call();
                    cuda_synchronize();
                };
            }
        }
    } catch (const std::bad_alloc &) {
        throw CliError("bench: cannot allocate the " + gib(need) + " GiB of tensors of this shape");
    }

    // Warm-up: --warmup calls, or by default calls until 0.2 s have passed (at least 1, at most 50).
    std::vector<double> warm;
    const auto warm_start = Clock::now();
    for (;;) {
        if (other.call) other.call();
        const auto t0 = Clock::now();
        b.call();
        warm.push_back(ms_between(t0, Clock::now()));
        const int n = static_cast<int>(warm.size());
        if (o.warmup > 0 ? n >= o.warmup : (ms_between(warm_start, Clock::now()) >= 200.0 || n >= 50))
            break;
    }
    const double estimate = warm.size() > 1 ? median({warm.begin() + 1, warm.end()}) : warm[0];
    // Timed calls: --reps, or by default about 1 s worth (at least 5, at most 1000).
    int reps = o.reps;
    if (reps <= 0)
        reps = static_cast<int>(std::clamp(std::ceil(1000.0 / std::max(estimate, 1e-3)), 5.0, 1000.0));
    std::printf("  warm-up: %zu call%s, %.3f ms (first call %.3f ms)\n", warm.size(),
                warm.size() == 1 ? "" : "s", ms_between(warm_start, Clock::now()), warm[0]);
    std::printf("  timing %d call%s...\n", reps, reps == 1 ? "" : "s");
    std::fflush(stdout);

    Progress progress(reps, estimate * reps > 2000.0);
    std::vector<double> times, other_times, ratios;
    times.reserve(static_cast<std::size_t>(reps));
    for (int k = 0; k < reps; ++k) {
        const auto t0 = Clock::now();
        b.call();
        times.push_back(ms_between(t0, Clock::now()));
        if (other.call) {
            const auto t1 = Clock::now();
            other.call();
            other_times.push_back(ms_between(t1, Clock::now()));
            ratios.push_back(times.back() / std::max(other_times.back(), 1e-9));
        }
        progress.update(k + 1);
    }

    const double med = median(times);
    const double lo = *std::min_element(times.begin(), times.end());
    const double hi = *std::max_element(times.begin(), times.end());
    const double gflops = med > 0.0 ? flops / (med * 1e6) : 0.0;
    if (o.print_reps) {
        for (const auto &[name, list] : {std::pair{"reps_ms", &times}, {o.side_by_side ? "apart_reps_ms" : "padded_reps_ms", &other_times}}) {
            if (list->empty()) continue;
            std::printf("  %s=", name);
            for (std::size_t k = 0; k < list->size(); ++k)
                std::printf("%s%.6f", k ? "," : "", (*list)[k]);
            std::printf("\n");
        }
    }
    std::printf("  median %12.6f ms\n  min    %12.6f ms\n  max    %12.6f ms\n", med, lo, hi);
    if (dev == Device::cuda && cuda_graphs()) {  // evidence of the path the time loops took
        const CudaGraphStats g = cuda_graph_stats();
        std::printf("  time loops: %llu direct, %llu captured (%llu updates), %llu graph launches, %llu failed captures\n",
                    static_cast<unsigned long long>(g.direct), static_cast<unsigned long long>(g.captures),
                    static_cast<unsigned long long>(g.updates), static_cast<unsigned long long>(g.launches),
                    static_cast<unsigned long long>(g.failures));
    }
    std::printf("  FLOPs per call %.6g (docs/performance.md: %s)\n", flops, flop_formula(o.op).c_str());
    if (other.call && o.side_by_side) {
        const double apart_med = median(other_times), ratio = median(ratios);
        std::printf("  one after the other, alternating: median %.6f ms; side by side / one after the other: %.3f\n",
                    apart_med, ratio);
        std::printf("median_ms=%.6f gflops=%.3f apart_median_ms=%.6f ratio=%.4f\n", med, gflops, apart_med, ratio);
        return 0;
    }
    if (other.call) {
        const double padded_med = median(other_times), ratio = median(ratios);
        std::printf("  padded (no seq_lengths), alternating: median %.6f ms; with / without lengths: %.3f\n",
                    padded_med, ratio);
        std::printf("median_ms=%.6f gflops=%.3f padded_median_ms=%.6f ratio=%.4f\n", med, gflops, padded_med, ratio);
        return 0;
    }
    std::printf("median_ms=%.6f gflops=%.3f\n", med, gflops);
    return 0;
}

}  // namespace blocklstm::cli
