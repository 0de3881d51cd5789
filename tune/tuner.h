// blocklstm-tune (run as `blocklstm tune`): fits a tuning table to this machine, the CPU's or
// (--device cuda) the GPU schedules' on its NVIDIA GPU. It JIT-compiles the generators of generators/ through libHalide with candidate knob values
// (schedules/tuning.h), checks every candidate's outputs against the current table's kernel on
// the same random inputs, times the kernel families (tune/families.h) on the shapes given,
// and searches the knobs: a coarse grid over the register (or GPU thread) tile, then coordinate descent around
// the best, until the time budget is spent. A move whose estimate (its kernels' times) gains is
// kept only when the ops gain too, timed with each table's kernels swapped into the library
// (tune/ops_timing.cpp; on the GPU, its kernels side by side). Every candidate is logged to CSV; a run given the
// same log resumes where it stopped. The best table so far is written after every improvement.
// With --baseline autoschedulers it times Halide's own autoschedulers on the same algorithms
// instead. Only this tool links libHalide; the library and apps do not.
//
// The tool by job: main.cpp (its options, the target and table it tunes, the tuning run),
// search.{h,cpp} (the search, pure), measure.cpp (compiling, checking and timing the kernels, the
// CSV log), ops_timing.cpp (the verdicts in the ops), table.{h,cpp} (the table files),
// autoschedulers.cpp (--baseline autoschedulers),
// families.{h,cpp} (the kernel families it times). This header: what they share.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <blocklstm/ops.h>

#include "Halide.h"
#include "tune/families.h"
#include "tune/table.h"

namespace blocklstm::tune {

using Clock = std::chrono::steady_clock;

// Set by Ctrl-C: the search and the baselines stop at the next kernel, keeping what they have.
extern std::atomic<bool> interrupted;

struct Options {
    std::string shapes;  // default: the CPU peer benchmark's shapes, with --device cuda the GPU one's
    double minutes = 5;
    std::vector<std::string> families;
    std::string target = "host";
    std::string from, out, log;
    int threads = 0;
    std::string baseline;
    std::string autoscheduler;  // internal: time this one autoscheduler and print the result (a child)
    std::string schedule_file;  // internal: where that child writes the schedule it chose
    bool fresh = false;
    unsigned seed = 1;
    std::string device = "cpu";  // cpu | cuda | opencl (the GPU schedules on an OpenCL device)
    // What keeps a move: "ops" (the CPU's default), the ops timed with each table's kernels in
    // them (tune/ops_timing.cpp); "kernels", the kernels a move changes timed alone.
    std::string verdicts;
    std::string compare;  // a table file to time against the base instead of searching
};

// A candidate's output against the reference's, element by element: only the order of a sum
// changes between schedules (float32 rounding, ~1e-6 of the largest value for K = 2048); a wrong
// tile or bound is off by O(1).
struct OutputError {
    double worst = 0, scale = 1;  // the largest error, and the largest reference value (at least 1)
    bool finite = true;
    void add(double got, double want) {
        finite = finite && std::isfinite(got);
        scale = std::max(scale, std::fabs(want));
        worst = std::max(worst, std::fabs(got - want));
    }
    bool right() const { return finite && worst <= 1e-4 * scale; }
};

// The knobs a family reads, as a string: the key of its compiled kernels and timings.
std::string relevant(const Family &f, const Table &t);

// The JIT-compiled CPU kernels' parallel loops on the library's own pool (runtime/src/thread_pool.cpp,
// or Halide's with BLOCKLSTM_THREAD_POOL=halide, as the ops then run), so that a fork costs what it
// costs in an op (tune/ops_timing.cpp).
int ops_pool(Halide::JITUserContext *user_context, int (*task)(Halide::JITUserContext *, int, uint8_t *), int min,
             int size, uint8_t *closure);

// One family compiled with one set of knobs (or one autoscheduler).
struct Compiled {
    Halide::Internal::AbstractGeneratorPtr generator;
    Halide::Pipeline pipeline;
    std::vector<std::string> outputs;  // output buffer names in the pipeline's order
};

// The autoschedulers the halide wheel ships as plugins, by the device they schedule for.
extern const std::vector<std::string> kCpuAutoschedulers, kGpuAutoschedulers;

// What the kernels ran on, for the table's tuned_on: the CPU, or the GPU.
std::string device_name(const Halide::Target &t);

class Tuner {
public:
    Tuner(Options o, Halide::Target target, std::vector<Family> families, std::vector<LstmShape> shapes,
          Table base)
        : o_(std::move(o)), target_(target), families_(std::move(families)), shapes_(std::move(shapes)),
          base_(std::move(base)) {}

    int run_search();
    // --compare: the base and another table of the same name, each kernel timed and checked, then
    // timed together as a search's final report does; no table written.
    int run_compare();
    int run_autoscheduler_baselines();
    // The child of run_autoscheduler_baselines: one autoscheduler, one family, one shape; ends
    // the process.
    [[noreturn]] void run_one_autoscheduler();

private:
    struct Key {
        std::string family, shape, knobs;
        bool operator<(const Key &k) const {
            return std::tie(family, shape, knobs) < std::tie(k.family, k.shape, k.knobs);
        }
    };
    struct Result {
        bool ok = false;
        double ms = 0;
        std::string why;  // a failed candidate: what went wrong
    };

    Compiled compile(const Family &f, const std::string &table, const std::string &knobs,
                     const std::string &autoscheduler = "");
    Call &call(const Family &f, const LstmShape &s);
    // What a kernel's first run does with its outputs: keeps them as the reference (the base
    // table), compares them with it (a candidate), or neither (a kernel checked before).
    enum class Outputs { store, compare, ignore };
    // Kernel times (ms) taken together, overriding the stored ones (results_).
    using Times = std::map<Key, double>;

    Compiled &kernel(const Family &f, const Table &t);
    Result measure(Compiled &c, const Family &f, const LstmShape &s, Outputs outputs);
    Result compile_and_measure(const Family &f, const LstmShape &s, const Table &t, Outputs outputs);
    // A kernel's time: from `fresh` where it has it, else the stored one.
    double time_ms(const Key &key, const Times &fresh) const {
        const auto it = fresh.find(key);
        return it != fresh.end() ? it->second : results_.at(key).ms;
    }
    Result family_time(const Family &f, const LstmShape &s, const Table &t);
    // An autoscheduler's kernel for f at s, checked and timed; the schedule it chose goes to `path`.
    Result autoscheduled_time(const Family &f, const LstmShape &s, const std::string &name, const std::string &path);
    Result autoscheduled_time_in_child(const Family &f, const LstmShape &s, const std::string &name);
    // Where the autoscheduler's schedule for f at s goes: beside the log.
    std::string schedule_path(const Family &f, const LstmShape &s, const std::string &name) const {
        return o_.log + ".schedules/" + f.name + "_" + s.text() + "_" + name + ".h";
    }
    std::optional<double> cost(const Table &t, const std::string &label);
    double op_ms(const Table &t, const LstmShape &s, int which, const Times &fresh = {});
    std::optional<Times> side_by_side(const Table &a, const Table &b);
    double relative(const Table &a, const Table &b, const Times &fresh);
    void load_log();
    std::ofstream &log_file();
    void log(const Key &k, const Result &r);
    void log_verdict(const std::pair<std::string, std::string> &pair, double ratio);
    // What a verdict depends on besides the two tables: the shapes, the families, the threads.
    std::string verdict_scope() const {
        // "ops": verdicts in the ops; before them the kernels' (a log of then is read as such)
        std::string scope = fmt::format("{}threads:{}", in_ops() ? "ops;" : "", o_.threads);
        // append, not ";" + text: GCC 12 warns (-Wrestrict) about inlined operator+ here.
        for (const LstmShape &s : shapes_) scope.append(";").append(s.text());
        for (const Family &f : families_) scope.append("|").append(f.name);
        return scope;
    }
    void write_table(const Table &t, int tried) const;
    std::optional<double> report(const Table &best);

    // In-op timing (tune/ops_timing.cpp). The three ops a table is timed on at a shape, bound to
    // random inputs: BlockLSTM, BlockLSTMGrad, BlockLSTMGrad with peepholes.
    static constexpr int kOps = 3;
    struct OpBench {
        struct Op {
            std::string label;
            std::function<void()> call;
            std::vector<TensorView> outputs;
            std::vector<std::vector<float>> expected;  // the outputs with the library's own kernels
        };
        std::deque<Tensor> keep;  // owns every tensor the calls read and write
        std::array<Op, kOps> ops;
    };
    // Two tables timed in the ops: by shape, each op's least time (ms) with a's kernels and with
    // b's, and the median of b's time over a's in pairs of calls; `relative`: b's time over a's,
    // the geometric mean over the shapes of the three ops' total (each op's a time x its ratio).
    struct OpsVerdict {
        std::map<std::string, std::array<double, kOps>> a_ms, b_ms, ratio;
        double relative = 1;
    };
    OpBench &op_bench(const LstmShape &s);
    // The library's CPU kernels replaced by t's (compiled on first use) and its knobs in place.
    void install(const Table &t);
    // a's and b's ops in pairs of calls at every shape; nullopt when interrupted or a kernel
    // failed (said why): a wrong output, checked once per table and shape against the library's
    // own kernels.
    std::optional<OpsVerdict> ops_side_by_side(const Table &a, const Table &b);
    // The verdict of a move from a to b: timed in the ops or, with --verdicts kernels, its kernels
    // side by side; nullopt as side_by_side's.
    std::optional<double> verdict(const Table &a, const Table &b);
    bool in_ops() const { return o_.verdicts == "ops"; }
    // Whether a family being tuned reads the knob: the others leave every kernel unchanged, so
    // the search does not move them.
    bool read(const std::string &knob) const {
        return std::any_of(families_.begin(), families_.end(), [&](const Family &f) {
            return std::find(f.knobs.begin(), f.knobs.end(), knob) != f.knobs.end();
        });
    }
    // A candidate is kept when it beats the best by more than the timing noise (1 %): first by
    // its estimate (both estimates from the stored times, relative to the base), then timed side
    // by side with the best. The base (cost 1) is the first best.
    bool improves(double c) const { return improves_by_margin(c / best_cost_); }
    // A verdict's time over the best's that keeps a move.
    static bool improves_by_margin(double ratio) { return ratio < 0.99; }
    bool out_of_time() const { return interrupted || Clock::now() >= deadline_; }
    double minutes_left() const {
        return std::max(0.0, std::chrono::duration<double>(deadline_ - Clock::now()).count() / 60);
    }

    Options o_;
    Halide::Target target_;
    std::vector<Family> families_;
    std::vector<LstmShape> shapes_;
    Table base_;
    Clock::time_point deadline_;
    std::map<Key, Result> results_;                    // every measurement, also from the log
    std::map<std::string, Compiled> kernels_;          // family + knobs -> compiled
    std::map<std::string, Call> calls_;                // family + shape -> inputs
    std::map<std::string, std::vector<Halide::Buffer<>>> expected_;  // the base table's outputs
    std::ofstream log_;
    double best_cost_ = 1.0;  // the best table's estimate
    std::map<std::string, double> costs_;  // knob string -> cost, of every table costed
    // Side-by-side verdicts, (best, candidate) knob strings -> the candidate's time over the
    // best's: a later pass of the descent, or a resumed run (they are logged), meets them again.
    struct Verdict {
        double ratio;
        bool shown;  // printed in this run (one read from the log is printed when first used)
    };
    std::map<std::pair<std::string, std::string>, Verdict> verdicts_;
    int tried_ = 0;
    std::vector<Family> op_kernels_;                      // what install() replaces
    struct Replacement {
        int arguments;
        std::function<int(void **)> code;  // the JIT-compiled kernel called as the AOT one is
    };
    std::map<std::string, Replacement> replacements_;      // family + knobs -> its kernel
    std::map<std::string, OpBench> op_benches_;           // by shape
    std::map<std::string, bool> op_checked_;              // knob string @ shape -> outputs right
};

}  // namespace blocklstm::tune
